#include "plan/plan.h"

namespace reforge::plan {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32:
      return "fp32";
    case Precision::Bf16:
      return "bf16";
    case Precision::Fp16:
      return "fp16";
    case Precision::Int8:
      return "int8";
    case Precision::Int4:
      return "int4";
  }
  return "unknown";
}

bool activations_allowed(Precision precision, Precision activations) {
  return activations == Precision::Fp32 || (activations == Precision::Bf16 && precision == Precision::Bf16);
}

const char* build_mode_name(BuildMode m) {
  switch (m) {
    case BuildMode::Baked:
      return "baked";
    case BuildMode::Refit:
      return "refit";
    case BuildMode::RefitIdentical:
      return "refit-identical";
    case BuildMode::RefitIndividual:
      return "refit-individual";
  }
  return "unknown";
}

const char* weight_kind_name(WeightKind k) {
  switch (k) {
    case WeightKind::Literal:
      return "literal";
    case WeightKind::Derived:
      return "derived";
    case WeightKind::Baked:
      return "baked";
  }
  return "unknown";
}

const char* weight_packing_name(WeightPacking w) {
  switch (w) {
    case WeightPacking::Auto:
      return "auto";
    case WeightPacking::Panels:
      return "panels";
    case WeightPacking::Plain:
      return "plain";
  }
  return "unknown";
}

const char* binding_status_name(Binding::Status s) {
  switch (s) {
    case Binding::Status::None:
      return "none";
    case Binding::Status::Bound:
      return "bound";
    case Binding::Status::Unbound:
      return "unbound";
    case Binding::Status::Constant:
      return "constant";
  }
  return "unknown";
}

const char* binding_reason_name(Binding::Reason r) {
  switch (r) {
    case Binding::Reason::None:
      return "";
    case Binding::Reason::Structural:
      return "structural";
    case Binding::Reason::Proven:
      return "proven";
    case Binding::Reason::User:
      return "user";
  }
  return "unknown";
}

std::string backend_of(const Plan& p) { return p.build ? p.build->backend : std::string("cpu"); }

std::vector<std::string> node_backends(const Plan& p) {
  if (p.placement.empty()) return std::vector<std::string>(p.graph.nodes.size(), backend_of(p));
  REFORGE_CHECK(p.placement.size() == p.graph.nodes.size(), "plan: placement has ", p.placement.size(), " entries for ",
                p.graph.nodes.size(), " nodes");
  return p.placement;
}

uint32_t written_format_version(const Plan& p) {
  auto has_graph = [](const std::map<std::string, ir::Attribute>& attrs) {
    for (const auto& [key, a] : attrs)
      if (a.type == ir::AttrType::Graph || a.type == ir::AttrType::Graphs) return true;
    return false;
  };
  for (const auto& n : p.graph.nodes)
    if (has_graph(n.attrs)) return 2;
  for (const auto& w : p.weights)
    for (const auto& step : w.recipe.steps)
      if (has_graph(step.attrs)) return 2;
  for (const auto& s : p.sources)
    for (const auto& step : s.binding.steps)
      if (has_graph(step.attrs)) return 2;
  return 1;
}

}  // namespace reforge::plan
