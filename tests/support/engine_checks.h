// Small checks shared by the refit tests: the message of the Error a call throws, and an
// engine's derived weights as hashes (to prove that a refused refit changed nothing).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "core/error.h"
#include "runtime/plan_engine.h"
#include "transforms/recipe.h"

namespace reforge::test_support {

// The message of the reforge::Error `f` throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Derived engine weights by name -> XXH3 of their current bytes.
inline std::map<std::string, uint64_t> derived_weight_hashes(const runtime::PlanEngine& e) {
  std::map<std::string, uint64_t> h;
  for (const auto& w : e.plan().weights)
    if (w.kind == plan::WeightKind::Derived) h[w.name] = transforms::hash_tensor(e.weight(w.name));
  return h;
}

}  // namespace reforge::test_support
