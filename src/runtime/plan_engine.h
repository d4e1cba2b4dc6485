// PlanEngine: an Engine made from a Plan, plus the refit state that belongs to its weights.
//
// It runs like an Engine, but knows the plan's sources: a stripped engine refuses to run and
// names the sources that are missing (the first ten and the count), and the engine remembers
// the current value of each source a later incremental refit may need, with the hash recorded
// when that value entered the engine.
//
// Its weights change only through one narrow transaction, WeightUpdate:
//
//   runtime::WeightUpdate u;
//   u.set_weight("linear.weight", new_weight);          // stage: nothing changes yet
//   u.record_source(3, new_source_value, xxh3_of_it);   // what the engine remembers of source 3
//   engine.validate(u);                                 // optional: commit() validates too
//   engine.commit(u);                                   // all at once, or not at all
//
// The refitter (refit/refitter.h) derives the staged weights from sources (recipes replayed,
// completeness and hashes checked); the engine itself checks only what keeps it consistent:
// names, kinds, dtypes and shapes.
//
// Concurrency. Everything a commit changes — the engine weight set (with what the kernels
// prepared from it), the value and hash recorded for each source, and the list of sources still
// missing — lives in one immutable State, published as a whole by swapping one shared_ptr.
// Readers (run, weight, missing_sources, current_plan, source_value, source_hash) take that
// pointer once and read only the State it points to (two separate calls may see two States:
// current_plan gives every weight from one). So:
//   - run() may be called from any number of threads, concurrently with commits. Each run sees
//     either the whole weight set before a commit or the whole set after it, never a mix; a run
//     that started before a commit finishes on the old weights (which it keeps alive).
//   - commit() may be called from any number of threads: commits are serialized (one mutex), and
//     each applies on top of the State the previous one published. Runs are not held up by a
//     commit re-packing weights; they wait only for the pointer copy.
//   - A stripped engine's run() refuses (naming the missing sources) for as long as the State it
//     takes has missing sources; from the first State without any, every run is valid, since a
//     commit never takes a value away.
//   - An update staged from what the engine held (an incremental refit reads source_value) is
//     applied to whatever State is current at commit; callers that stage concurrently against
//     the same engine get last-writer-wins per weight, so they should give every source.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "runtime/engine.h"

namespace reforge::runtime {

// A staged change of a PlanEngine's weight set: new values of derived engine weights, and what
// the engine records about sources (their current value, kept for a later incremental refit,
// and its hash). Building one changes nothing; PlanEngine::commit applies it.
class WeightUpdate {
 public:
  // Engine weight `name` (a derived weight of the plan) takes `value` at commit.
  void set_weight(const std::string& name, Tensor value) { weights_[name] = std::move(value); }
  // At commit the engine records `value` as source `id`'s current value (undefined: it keeps no
  // value) and `hash` as the XXH3-64 of the value it was given (0: unknown).
  void record_source(uint32_t id, Tensor value, uint64_t hash) { sources_[id] = {std::move(value), hash}; }

  struct SourceRecord {
    Tensor value;
    uint64_t hash = 0;
  };
  const std::map<std::string, Tensor>& weights() const { return weights_; }
  const std::map<uint32_t, SourceRecord>& sources() const { return sources_; }
  // The staged value of engine weight `name`, or nullptr when this update does not set it.
  const Tensor* weight(const std::string& name) const {
    auto it = weights_.find(name);
    return it == weights_.end() ? nullptr : &it->second;
  }
  bool empty() const { return weights_.empty() && sources_.empty(); }

 private:
  std::map<std::string, Tensor> weights_;
  std::map<uint32_t, SourceRecord> sources_;
};

class PlanEngine {
  struct State;  // below

 public:
  explicit PlanEngine(plan::Plan plan, EngineOptions options = {});
  PlanEngine(const PlanEngine&) = delete;
  PlanEngine& operator=(const PlanEngine&) = delete;

  // A weight version: one whole weight set with what the engine records of its sources. Several
  // may be resident at once, sharing every weight they do not change (copy on write); a version
  // lives while the engine (as its current version), a caller or a run holds it, and when it goes
  // the recordings made for it go too. Runs hold the version they started with to their end, so
  // making another version current takes effect at run boundaries.
  class Version {
   public:
    Version() = default;
    bool valid() const { return state_ != nullptr; }
    // What tells this version from every other of the process (RunOptions::weights_generation
    // gives a run's); 0 for an empty Version.
    uint64_t generation() const;

   private:
    friend class PlanEngine;
    explicit Version(std::shared_ptr<const State> s) : state_(std::move(s)) {}
    std::shared_ptr<const State> state_;
  };
  // The current version.
  Version current_version() const { return Version(state()); }
  // A new version: `update` validated (as validate) and applied on top of `base`, its weights
  // prepared for the kernels; nothing changes in the engine. Throws with nothing made when
  // `update` is invalid or preparing fails.
  Version derive_version(const Version& base, const WeightUpdate& update) const;
  // Makes `version` (of this engine) current: runs that start later use it, runs in flight keep theirs.
  void install_version(const Version& version);
  // Runs on `version` instead of the current one (the same checks as run()).
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs, const Version& version,
                          const RunOptions& options = {}) const;

  // Runs on the weight set current when it starts; throws naming the missing sources while the
  // engine is stripped. Thread-safe, also concurrently with commit().
  // Inputs may be device tensors and outputs may stay on the device (Engine::run, RunOptions).
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs, const RunOptions& options = {}) const;
  const std::vector<ir::ValueInfo>& inputs() const { return engine_.inputs(); }
  const std::vector<ir::ValueInfo>& outputs() const { return engine_.outputs(); }
  std::vector<NodeProfile> profile() const { return engine_.profile(); }
  std::vector<NodeProfile> steps() const { return engine_.steps(); }
  void rerun_step(size_t step, int times) const { engine_.rerun_step(step, times); }
  std::vector<TraceEvent> trace() const { return engine_.trace(); }
  ArenaStats arena_stats() const { return engine_.arena_stats(); }
  ReplayStats replay_stats() const { return engine_.replay_stats(); }
  EngineStats stats() const { return engine_.stats(); }
  // The engine it runs: what a runtime::State (runtime/state.h) is made for.
  const Engine& engine() const { return engine_; }

  // The plan's metadata (the weight data in it is the build-time data, not the current one).
  const plan::Plan& plan() const { return plan_; }
  // The current value of engine weight `name`, in host memory (a weight held on a device only is
  // copied back); undefined while stripped and not refit.
  Tensor weight(const std::string& name) const;
  // Whether engine weight `name` has a value now (no copy), and where the engine holds it
  // (Memory::Device: on the device only, EngineOptions::keep_host_weights).
  bool has_weight(const std::string& name) const;
  Memory weight_location(const std::string& name) const;
  // The device backend that holds engine weight `name` alone (Engine::held_on_device): a refit may
  // give its new value in that device's memory. Null when a host copy is kept or read.
  const backends::Backend* weight_device(const std::string& name) const { return engine_.held_on_device(name); }
  // The copy of engine weight `name` that the plan's device nodes read (Engine::device_constant),
  // from the current weight set: after a commit, the new weight's upload. Undefined when no device
  // node reads it or it has no value yet.
  Tensor device_weight(const std::string& name) const;
  // Refittable sources that have no value yet (keys), sorted by source id.
  std::vector<std::string> missing_sources() const;
  // A copy of the plan with the current engine weights in it (for saving a refit plan); all of
  // them from one weight set even while commits happen.
  plan::Plan current_plan(bool strip) const;

  // The value the engine keeps of source `id` (an identity weight's bytes, read from the engine
  // weight, in host memory: copied back when the weight lives on a device only; or a source of a
  // multi-source recipe kept after a refit); undefined when it keeps none.
  Tensor source_value(uint32_t id) const;
  // The XXH3-64 recorded for source `id`: of the value it was last given, or the plan's
  // build-time hash; 0 when unknown (a refit that kept no value and recorded no hash).
  uint64_t source_hash(uint32_t id) const;

  // Throws, naming the first problem, unless every staged weight is a derived engine weight of
  // the plan with a defined value of the plan's dtype and shape, and every recorded source is a
  // refittable source of the plan whose value (when defined) has its dtype and shape.
  void validate(const WeightUpdate& update) const;
  // Validates `update`, then swaps its weights in and records its sources, published together
  // as one State. Throws with the engine unchanged when validation (or preparing the new weights
  // for the kernels) fails. Thread-safe: concurrent commits are serialized.
  void commit(const WeightUpdate& update);

 private:
  // What a commit changes, immutable once published (see "Concurrency" above).
  struct State {
    std::shared_ptr<const Engine::Weights> weights;
    // Current value of each source when known, for sources of multi-source recipes kept after a
    // refit so that a later refit of only some of them can replay the recipe. Undefined for a
    // source with an identity weight (identity_weight_): the engine weight holds its bytes, so
    // that no second copy is kept (the weight may live on a device only).
    std::vector<Tensor> sources;
    // XXH3 of each known value above, recorded when it entered the engine (for an identity
    // weight loaded from the plan: the weight's hash), and of every source in a refit-identical
    // plan; an incremental refit re-hashes the known values against it. Otherwise the plan's
    // build-time hash, or 0 after a refit that kept no value.
    std::vector<uint64_t> hashes;
    // Keys of the refittable sources that an undefined engine weight needs and that have no
    // value, sorted by source id (computed when the State is made).
    std::vector<std::string> missing;
  };
  std::shared_ptr<const State> state() const;
  std::vector<std::string> missing_in(const State& s) const;
  // Whether `st` knows source `id`'s value (kept, or its identity weight's).
  bool knows_source(const State& st, uint32_t id) const;
  std::vector<Tensor> run_state(const std::map<std::string, Tensor>& inputs, const State& st,
                                const RunOptions& options) const;

  plan::Plan plan_;  // immutable after construction
  Engine engine_;
  std::map<std::string, size_t> weight_index_;  // plan weight name -> index
  std::vector<std::string> identity_weight_;    // source id -> the weight that is its bytes, or ""

  mutable std::mutex state_mutex_;  // guards state_ (the pointer only; readers copy it)
  std::shared_ptr<const State> state_;
  std::mutex commit_mutex_;  // serializes commits (derive + publish)
};

}  // namespace reforge::runtime
