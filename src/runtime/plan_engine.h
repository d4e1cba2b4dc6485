// PlanEngine: an Engine made from a Plan, plus the refit state that the Refitter works on.
//
// It runs like an Engine, but knows the plan's sources: a stripped engine refuses to run and
// names the sources that are missing (the first ten and the count), and the engine remembers
// the current value of each source a later incremental refit may need.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "runtime/engine.h"

namespace reforge::refit {
class Refitter;
}

namespace reforge::runtime {

class PlanEngine {
 public:
  explicit PlanEngine(plan::Plan plan, EngineOptions options = {});

  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) const;
  const std::vector<ir::ValueInfo>& inputs() const { return engine_.inputs(); }
  const std::vector<ir::ValueInfo>& outputs() const { return engine_.outputs(); }
  std::vector<NodeProfile> profile() const { return engine_.profile(); }

  // The plan's metadata (the weight data in it is the build-time data, not the current one).
  const plan::Plan& plan() const { return plan_; }
  // The current value of engine weight `name` (undefined while stripped and not refit).
  Tensor weight(const std::string& name) const { return engine_.constant(name); }
  // Refittable sources that have no value yet (keys), sorted by source id.
  std::vector<std::string> missing_sources() const;
  // A copy of the plan with the current engine weights in it (for saving a refit plan).
  plan::Plan current_plan(bool strip) const;

 private:
  friend class refit::Refitter;
  plan::Plan plan_;
  Engine engine_;
  // Current value of each source when known: for identity recipes it aliases the engine
  // weight; for sources of multi-source recipes it is kept after a refit so that a later
  // refit of only some of them can replay the recipe.
  std::vector<Tensor> known_sources_;
  // XXH3 of each known value above, recorded when it entered the engine (for an identity
  // weight loaded from the plan: the weight's hash), and of every source in a refit-identical
  // plan; an incremental refit re-hashes the known values against it. Otherwise the plan's
  // build-time hash, or 0 after a refit that kept no value.
  std::vector<uint64_t> source_hashes_;
  std::vector<bool> weight_present_;  // per plan weight
};

}  // namespace reforge::runtime
