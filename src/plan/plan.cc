#include "plan/plan.h"

namespace reforge::plan {

const char* build_mode_name(BuildMode m) {
  switch (m) {
    case BuildMode::Baked: return "baked";
    case BuildMode::Refit: return "refit";
    case BuildMode::RefitIdentical: return "refit-identical";
    case BuildMode::RefitIndividual: return "refit-individual";
  }
  return "unknown";
}

const char* weight_kind_name(WeightKind k) {
  switch (k) {
    case WeightKind::Literal: return "literal";
    case WeightKind::Derived: return "derived";
    case WeightKind::Baked: return "baked";
  }
  return "unknown";
}

}  // namespace reforge::plan
