// Refitter: gives a PlanEngine new weights, as one transaction.
//
//   Refitter r(engine);
//   r.set("model.layers.0.mlp.up_proj.weight", view);   // validated at once: name, dtype, shape
//   r.commit();                                          // all or nothing
//
// commit() first validates everything: completeness (every refittable source has a value,
// either set now or already in the engine — for a stripped engine that means all of them),
// for refit-identical plans that each value hashes to the build-time hash, and optionally that
// all values are finite. Then it replays only the recipes whose sources changed, with the same
// kernels the builder used, and swaps the new engine weights in at once. Any failure leaves
// the engine exactly as it was.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/plan_engine.h"

namespace reforge::refit {

struct SourceDesc {
  uint32_t id;
  std::string key;                 // "<initializer>@<node position>:<slot>"
  std::vector<std::string> names;  // initializer name(s)
  std::string consumer, op_type;
  DType dtype;
  Shape shape;
  bool refittable;
  bool has_value;  // the engine has a value for it, or one is set in this transaction
};

struct CommitOptions {
  bool check_finite = false;  // refuse NaN/Inf in float sources
};

struct CommitReport {
  size_t sources_set = 0;
  size_t weights_replayed = 0;
  size_t bytes_in = 0;   // bytes of sources read
  size_t bytes_out = 0;  // bytes of engine weights written
  double validate_ms = 0, replay_ms = 0, commit_ms = 0;
};

class Refitter {
 public:
  explicit Refitter(runtime::PlanEngine& engine);

  std::vector<SourceDesc> all_sources() const;
  // Keys of refittable sources that have no value (in the engine or set here).
  std::vector<std::string> missing() const;
  // Sets every use the plan knows under `name` (an initializer name or a source key). Throws
  // on an unknown or non-refittable name, or a dtype/shape that differs from the plan's.
  void set(const std::string& name, const Tensor& value);
  void set_source(uint32_t id, const Tensor& value);
  size_t pending() const { return pending_.size(); }
  void clear() { pending_.clear(); }
  // Validates, replays, swaps. Throws (engine unchanged) on any problem; clears the pending
  // values on success.
  CommitReport commit(const CommitOptions& options = {});
  // Slow path: swaps in the derived engine weights of `fresh`, a new build of the same
  // structure (same weight table). For refit-identical plans every source hash must match.
  // Pending values are ignored and cleared.
  CommitReport commit_rebuilt(const plan::Plan& fresh);

 private:
  runtime::PlanEngine& engine_;
  std::map<uint32_t, Tensor> pending_;
};

}  // namespace reforge::refit
