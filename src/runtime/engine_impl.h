// The parts of an Engine (internal to src/runtime): the schedule (what is known before any run),
// the weight store (versions), the arena plan cache (per shape bucket), the replay cache (per
// signature and version) and the run trace, and the executor that runs the steps with them.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/arena.h"
#include "runtime/engine.h"
#include "runtime/replay_cache.h"
#include "runtime/run_trace.h"
#include "runtime/schedule.h"
#include "runtime/shape_bucket.h"
#include "runtime/state_impl.h"
#include "runtime/weight_store.h"

namespace reforge::runtime {

// One run's activation memory: the host arena and the device arena of its shape bucket, and the
// shape memo of its signature.
struct RunArenas {
  std::shared_ptr<arena::PlanCache::Entry> entry;
  std::shared_ptr<const arena::Plan> plan, device_plan;
  std::shared_ptr<arena::Buffer> buffer, device_buffer;
  std::optional<arena::ArenaAllocator> host, device;
  std::shared_ptr<const arena::PlanCache::Memo> memo;  // of this signature and weight version, or null
  std::shared_ptr<arena::PlanCache::Memo> new_memo;    // made by this run when there was none

  bool in_arena(const Tensor& t) const { return (host && host->in_arena(t)) || (device && device->in_arena(t)); }
};

struct Engine::Impl {
  Impl(ir::Graph graph, const std::vector<std::string>& placement, EngineOptions options);

  EngineOptions options;
  int threads = 1;
  std::vector<Tensor> initial_weights;  // consumed by `weights`
  Schedule schedule;
  // Before the weight store: a version that goes drops its recordings (while the cache lives).
  std::shared_ptr<ReplayCache> replays = std::make_shared<ReplayCache>(kReplaySignatures);
  WeightStore weights;
  mutable RunTrace run_trace;

  // The activation arenas (arena.h): plans per shape bucket, and what runs observed of where
  // kernels put their outputs, for the host and the device arena.
  mutable arena::PlanCache arenas;
  mutable arena::Observed observed, device_observed;
  mutable std::atomic<int64_t> inference_passes{0}, runs{0}, last_run_allocations{0};
  mutable std::mutex stats_mutex;
  mutable ArenaStats last_stats;  // of the most recent run

  // The arena entry for `inputs` (with their exact `signature`), made on first use of its bucket.
  // With `known`, those dimensions are bucketed at their known bounds (ShapeBucket).
  std::shared_ptr<arena::PlanCache::Entry> arena_entry(const std::map<std::string, Tensor>& inputs,
                                                       const std::string& signature, const std::vector<Tensor>& values,
                                                       const KnownBounds* known = nullptr) const;
  // The size of every host step output (and, in `device_sizes`, of every device step output that
  // the device arena may serve) for inputs of `shapes` with the constants in `values`, by shape
  // inference; `error` says why none is known when inference fails.
  arena::Sizes infer_sizes(const std::map<std::string, Shape>& shapes, const std::vector<Tensor>& values,
                           arena::Sizes& device_sizes, std::string& error) const;

  // The arenas and shape memo of a run of `inputs` (exact signature `signature`) on `weights`;
  // clears `record` when the run cannot record yet (the shape memo is not there).
  RunArenas take_arenas(const std::map<std::string, Tensor>& inputs, const std::string& signature,
                        const std::vector<Tensor>& values, const Weights& weights, Recording*& record,
                        const KnownBounds* known = nullptr) const;
  // Runs the graph step by step on inputs Engine::run has checked, whose exact input signature
  // is `signature`. With `record`, the run's device work is recorded into it instead (the inputs
  // go through its staging buffers, the outputs into its result buffers), and nothing is
  // returned: the caller replays the recording. Throws when the recording fails.
  // With `state`, the run reads and updates it (runtime/state.h); its inputs are among `inputs`.
  // A recording with a state (in a window: State::Impl::replayable) reads and writes the pairs'
  // device buffers where they are instead of staging them, and copies the window back itself.
  std::vector<Tensor> execute(const std::map<std::string, Tensor>& inputs, const std::string& signature,
                              const Weights& weights, const RunOptions& options, Recording* record,
                              State::Impl* state = nullptr) const;
  // Runs with recorded replay: replays the recording of (signature, version), records one, or
  // runs eagerly.
  // With a `state` in a window, the recordings are this state's (State::Impl::replay_key).
  std::vector<Tensor> run_replaying(const std::map<std::string, Tensor>& inputs, const std::string& signature,
                                    const Weights& weights, const RunOptions& options,
                                    State::Impl* state = nullptr) const;
  // Copies the inputs into `r`'s staging buffers, replays it and returns the outputs (copies of
  // its result buffers, in the memory the options ask for; a state pair's output as the State's
  // view of it).
  std::vector<Tensor> replay(const std::map<std::string, Tensor>& inputs, Recording& r, const RunOptions& options,
                             State::Impl* state = nullptr) const;
  // Waits for every device backend's work; errors name the backend.
  void synchronize_devices() const;
};

}  // namespace reforge::runtime
