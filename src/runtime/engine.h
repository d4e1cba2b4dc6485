// Engine: runs a lowered graph.
//
// An Engine owns an immutable graph (each node resolved once, at construction, to the kernel of
// the backend its placement names: backends/backend.h) and runs it for any input sizes its
// symbolic dimensions allow. It is made only from a LoweredGraph (runtime/lowered_graph.h), so
// every node is known to run; construction checks that the graph is acyclic. run() validates
// the inputs (names, dtypes, ranks, fixed dimensions, consistent symbolic dimensions) before any
// kernel runs, and frees each intermediate value after its last use.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "runtime/lowered_graph.h"

namespace reforge::backends {
struct Backend;
}

namespace reforge::runtime {

struct EngineOptions {
  int threads = 0;       // 0 = all cores
  bool profile = false;  // time every node (see Engine::profile)
  bool arena = true;     // serve intermediates from activation arenas planned from inferred shapes
                         // (runtime/arena.h): one in host memory, one in device memory for device steps
  // For a benchmark of device work (backends/device_trace.h): while a device backend's tracer
  // records, the work of each of its steps is tagged with the step's index, and the run keeps the
  // inputs of those steps for rerun_step (until the next such run: their device memory). The
  // device arena then reuses no slot within a run, so that those inputs keep their values.
  bool device_trace = false;
  // Recorded replay of device work (backends/device_replay.h): an engine whose every step runs on
  // one device backend that can record (or is a shape computation the memo serves), whose inputs
  // are read only on the device and whose outputs are all made there, records a run per input
  // signature and weight set once that signature has run eagerly, and replays it from then on
  // (runs with host inputs and outputs; at most kReplaySignatures recordings, the least recently
  // used dropped first, and those of a weight version dropped when the version goes; a run that
  // finds the recording in use on another thread runs eagerly). Off with profile or device_trace.
  // Asked for, not on by default: each recording keeps its activation memory while it is kept.
  bool device_replay = false;
  // Plan the activation arenas per shape bucket (runtime/shape_bucket.h: every dimension the model
  // does not fix rounded up to a power of two) rather than per input signature, so that a new
  // size inside a bucket costs no shape inference and no arena plan. Off: one plan per signature.
  bool shape_buckets = true;
  // Keep the host copy of every weight that lives on a device. Off (the default): a weight whose
  // only reader is its upload to a device (reforge::ToDevice into the backend's weight memory)
  // is held in device memory only, and reading it on the host (Engine::constant, writing the
  // plan) copies it back.
  bool keep_host_weights = false;
};

// How many recordings (one per input signature and weight version) an engine keeps
// (EngineOptions::device_replay); beyond that the least recently used is dropped.
inline constexpr size_t kReplaySignatures = 16;

// What an engine's runtime caches did over its life (Engine::stats): what a new input size or a
// new weight version cost, for a caller to check from outside.
struct EngineStats {
  int64_t runs = 0;
  int64_t inference_passes = 0;       // shape inferences made to plan arenas (per shape bucket, or per signature)
  int64_t arena_plans = 0;            // arena layouts made (host and device)
  int64_t shape_buckets = 0;          // arena plan cache entries now (shape buckets and exact signatures)
  int64_t shape_buckets_evicted = 0;  // entries dropped, least recently used first
  int64_t recordings_made = 0;        // recorded replay (EngineOptions::device_replay): recordings made,
  int64_t replays = 0;                //   runs served by a replay,
  int64_t recordings_evicted = 0;     //   recordings dropped for room,
  int64_t recordings_retired = 0;     //   recordings dropped because their weight version was gone,
  int64_t live_recordings = 0;        //   recordings held now
  int64_t eager_runs = 0;             // runs that executed step by step
  int64_t last_run_allocations = 0;   // tensor allocations of the most recent eager run (host and device, outputs
                                      // included): what its arenas, memo and State did not serve
  int64_t live_weight_versions = 0;   // weight versions alive (current, or held by a run or a caller)
  int64_t weight_allocations = 0;     // device allocations made for weight versions (one per version made)
  int64_t weight_bytes_uploaded = 0;  // bytes of weights uploaded to a device
};

// What recorded replay did (EngineOptions::device_replay), over all runs since the engine was made.
struct ReplayStats {
  std::string declined;      // why the engine's runs are never recorded, or "" when they can be
  size_t recordings = 0;     // signatures with a recording now
  int64_t recorded = 0;      // recordings made (a refit's new weights need a new one)
  int64_t replays = 0;       // runs served by replaying a recording
  int64_t eager_runs = 0;    // runs that executed step by step
  int64_t failed = 0;        // recordings that failed (their signatures run eagerly from then on)
  std::string last_failure;  // the error of the last failed recording
};

class State;  // runtime/state.h

// How one run delivers its results.
struct RunOptions {
  // Where the graph outputs are returned. Host (the default): every output in host memory (a
  // device plan's outputs come back through their reforge::ToHost copies). Device: every output
  // in the memory of the engine's device backend: outputs made on the device are returned as they
  // are, without the copy to the host, and outputs made on the host are copied to the device, so
  // that a caller can feed them to a later run (inputs may be device tensors: see Engine::run).
  // An engine with no node on a device backend refuses Device; Pinned is refused.
  Memory outputs = Memory::Host;
  // The sequence state the run reads and updates (runtime/state.h: a State of this engine). The
  // caller then gives only the inputs that are not state, and the outputs are views into the
  // State's buffers, valid until its next run or reset. Runs with a state run eagerly (no replay).
  State* state = nullptr;
  // Set: the run stores there the generation of the weight set it ran on (every weight version
  // has its own; PlanEngine::Version::generation), before it starts; a generated token can so be
  // told which version made it.
  uint64_t* weights_generation = nullptr;
};

// Time spent in one node over all runs since the engine was made (EngineOptions::profile).
struct NodeProfile {
  std::string node;     // node name or "#index"
  std::string op_type;  // "Domain::Op" outside the ONNX domain
  int64_t calls = 0;
  double total_ms = 0;
};

// One node's execution in one run (EngineOptions::profile): when it started, in microseconds since
// the engine was made, and how long it took (device work included: the node waits for it).
struct TraceEvent {
  size_t step = 0;  // index into Engine::profile()
  int64_t run = 0;  // the run's number since the engine was made, from 0
  int thread = 0;   // the calling thread, numbered from 0 in the order threads first ran
  double start_us = 0, dur_us = 0;
};

// How many runs Engine::trace() keeps.
inline constexpr size_t kTraceRuns = 64;

// The device arena's part (runtime/arena.h): device steps' outputs, in eager runs of an engine
// whose device steps run on one device backend; all zero when the run had none (a run that
// records device work, EngineOptions::arena off, no device step).
struct DeviceArenaStats {
  size_t arena_bytes = 0;     // the run's device arena buffer (counted in the backend's memory_stats)
  size_t planned_bytes = 0;   // the plan's total
  size_t planned_values = 0;  // values given a device arena slot
  size_t arena_allocations = 0;
  size_t backend_allocations = 0;    // all requests the backend's allocator served, of which
  size_t leaving_allocations = 0;    //   values that leave the run (returned in device memory)
  size_t unplanned_allocations = 0;  //   values whose size inference did not know before the run
  size_t copies = 0;                 // device arena values found where the plan did not expect them, copied out
};

// What the activation arena did in the most recent run (EngineOptions::arena): the plan of its
// input signature and where its kernels' allocations went.
struct ArenaStats {
  std::string signature;      // the inputs' dtypes and shapes
  size_t arena_bytes = 0;     // the run's arena buffer
  size_t planned_bytes = 0;   // the plan's total (from inferred sizes and lifetimes)
  size_t planned_values = 0;  // values given an arena slot
  size_t arena_allocations = 0;
  size_t heap_allocations = 0;       // all requests the heap served, of which
  size_t leaving_allocations = 0;    //   values that leave the run (graph outputs)
  size_t unplanned_allocations = 0;  //   values whose size inference did not know before the run
  size_t copies = 0;                 // arena values found where the plan did not expect them, copied out
  std::string inference_error;       // why no size is known for this signature, or ""
  DeviceArenaStats device;           // the device steps' arena
};

class Engine {
 public:
  explicit Engine(LoweredGraph lowered, EngineOptions options = {});
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  const std::vector<ir::ValueInfo>& inputs() const;
  const std::vector<ir::ValueInfo>& outputs() const;
  const ir::Graph& graph() const;

  // An immutable weight set of this engine: its constants and what the kernels prepared from
  // them (packed layouts). A run holds the set it started with to its end, so a run sees one set
  // whole, never parts of two.
  struct Weights;

  // Runs the graph. `inputs` must name every required graph input exactly once. Returns the
  // graph outputs in declaration order. Thread-safe: concurrent calls share only immutable state.
  //
  // An input may be in host memory or, for an engine with nodes on a device backend, in that
  // device's memory (a caller's device buffer, or an output of an earlier run with
  // RunOptions::outputs = Device): the reforge::ToDevice steps that move it to the device pass
  // it through without a copy, and where a node reads the input on the host (shape computation,
  // a node placed on the host, a structure input) the run reads a host copy made once.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) const;
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs, const RunOptions& options) const;
  // Runs the graph on `weights` (a set of this engine) instead of the current set.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs, const Weights& weights,
                          const RunOptions& options = {}) const;

  // Constants (engine weights). A graph initializer may be undefined (a stripped weight): the
  // engine then refuses to run until it is supplied.
  std::vector<std::string> missing_constants() const;
  // In host memory: a weight held on the device only (EngineOptions::keep_host_weights) is copied
  // back. Undefined if not a constant or not set.
  Tensor constant(const std::string& name) const;
  Tensor constant(const Weights& weights, const std::string& name) const;  // the same, in `weights`
  bool has_constant(const std::string& name) const;
  // Whether constant `name` has a value in `weights` (without copying it anywhere), and where
  // `weights` holds it (Device: on the device only; Host when it has no value).
  bool has_weight_value(const Weights& weights, const std::string& name) const;
  Memory constant_location(const Weights& weights, const std::string& name) const;
  // The device backend that holds constant `name` alone: its one reader is its upload into that
  // backend's weight memory (a version keeps the device copy only, EngineOptions::keep_host_weights
  // off), so a new value of it may as well be given in that device's memory (a refit replaying its
  // recipe there). Null otherwise.
  const backends::Backend* held_on_device(const std::string& name) const;
  // The copy of constant `name` that nodes on a device backend read: the output of the
  // reforge::ToDevice step that reads it, as that step's prepare step made it when the weight
  // set was made (uploaded once per weight set into the set's device allocation, replaced by a
  // refit). Undefined when no
  // ToDevice step reads the constant or the constant has no value (a stripped weight).
  Tensor device_constant(const std::string& name) const;
  Tensor device_constant(const Weights& weights, const std::string& name) const;
  // Replaces constants all at once: runs that already started keep the old set, later runs see
  // only the new one. Every name must be a constant of the engine with the same dtype and shape
  // (checked before anything changes).
  void replace_constants(const std::map<std::string, Tensor>& values);

  // The two halves of replace_constants, for an owner that publishes the weight set together
  // with state of its own (PlanEngine). weights() is the current set; derive_weights makes a new
  // set from `base` with `values` replaced (checked and prepared as above) and changes nothing;
  // install_weights makes a set of this engine current. Callers serialize derive + install.
  std::shared_ptr<const Weights> weights() const;
  std::shared_ptr<const Weights> derive_weights(const Weights& base, const std::map<std::string, Tensor>& values) const;
  void install_weights(std::shared_ptr<const Weights> weights);

  // The activation arena's account of the most recent run (zeros before any run with the arena).
  ArenaStats arena_stats() const;
  // What recorded replay of device work did (EngineOptions::device_replay).
  ReplayStats replay_stats() const;
  // The runtime caches' counters (EngineStats).
  EngineStats stats() const;

  // Every step's node (name and op type; no timings), in execution order: what the step index of
  // a device trace's tag and of rerun_step refers to.
  std::vector<NodeProfile> steps() const;
  // Runs device step `step` `times` times more on the inputs (and weights) it had in the most
  // recent run recorded by its device tracer, its work tagged as in a run, then waits for the
  // device; the outputs are dropped.
  // For timing one node alone (EngineOptions::device_trace, which keeps those inputs).
  void rerun_step(size_t step, int times) const;

  // Per-node timings in execution order (empty unless EngineOptions::profile).
  std::vector<NodeProfile> profile() const;
  // Every node's start and duration in each of the last kTraceRuns runs, oldest first (empty
  // unless EngineOptions::profile): a timeline with the real gaps between nodes and runs.
  std::vector<TraceEvent> trace() const;

 private:
  std::vector<Tensor> run_with_state(const std::map<std::string, Tensor>& inputs, const Weights& weights,
                                     const RunOptions& options) const;
  friend class State;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Throws, naming the input, unless `inputs` gives every input of `declared` exactly (no unknown
// name, none missing) with its dtype, rank and fixed dimensions, and the same size wherever two
// inputs share a symbolic dimension. Engine::run checks this before any kernel runs; a caller
// may check first to tell bad inputs from failures of the run itself.
void check_inputs(const std::vector<ir::ValueInfo>& declared, const std::map<std::string, Tensor>& inputs);

}  // namespace reforge::runtime
