// Schedule: what an Engine knows of its graph before any run, computed once at construction.
//
// A lowered graph becomes a list of steps in execution order, each a node resolved to the kernel
// of the backend its placement names, reading and writing numbered value slots (graph inputs,
// engine weights, then node outputs). Around the steps the schedule records what the parts of the
// runtime decide from structure alone:
//   - lifetimes: each computed value is freed after its last reader (graph inputs and outputs are
//     kept), and the activation arena plans with the same last uses (runtime/arena.h);
//   - shape subgraphs: steps whose outputs depend only on input shapes and constants (Shape, Size
//     and what is computed from them and constants alone), which the executor serves from a memo;
//   - device I/O: which graph inputs a host step reads (a device tensor given for one is copied to
//     the host once per run), and which graph outputs are reforge::ToHost copies of a device value
//     that a run asked to keep outputs on the device skips;
//   - the device arena's lifetimes and whether a run can be recorded for replay (and why not).
// The schedule is immutable after make_schedule(); runs on any thread read it without locks.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "runtime/arena.h"
#include "runtime/engine.h"

namespace reforge::runtime {

// One node ready to execute: its kernel and value slots.
struct Step {
  size_t node_index = 0;
  const ops::KernelFn* kernel = nullptr;    // the kernel its backend runs it with
  const ops::PrepareFn* prepare = nullptr;  // null: nothing to prepare
  std::vector<int> inputs;                  // value slot or -1 for an absent optional input
  std::vector<int> outputs;                 // value slot or -1 for an unwanted output
  std::vector<int> free_after;              // slots whose last use is this step
  // The device backend the node runs on, whose allocator its outputs come from; null on the
  // host, whose outputs come from the activation arena or the heap.
  const backends::Backend* device = nullptr;
  // A reforge::ToDevice of a graph input: given a device tensor, it reads the caller's tensor even
  // where the run also made a host copy for host readers.
  int device_input = -1;  // graph input index, or -1
  // How its kernel's outputs may share its inputs' memory (ops::Sharing), or null.
  const std::vector<ops::Sharing>* sharing = nullptr;
  // Where the prepared weights of its backend live (Backend::weight_memory): its prepare step
  // gets that memory's upload as its context. Null: a host context.
  backends::WeightMemory* weight_memory = nullptr;
};

struct Schedule {
  ir::Graph graph;  // structure only: the engine weights live in the weight store
  std::vector<Step> steps;
  size_t num_slots = 0;
  std::vector<int> input_slots;   // per graph input
  std::vector<int> output_slots;  // per graph output
  std::vector<bool> is_const;     // per slot: holds an engine weight
  std::unordered_map<std::string, int> const_slot;
  std::unordered_map<std::string, std::pair<DType, Shape>> const_desc;  // declared dtype/shape when known
  std::vector<size_t> preparing_steps;  // steps whose op has a prepare step and a constant input
  // The reforge::ToDevice steps that upload a weight into a backend's weight memory (their
  // prepared state is the device copy, a `const Tensor`), and per slot the one among them that is
  // the weight's only reader, or -1. Such a weight lives on the device only (the version keeps the
  // device copy in the slot) unless EngineOptions::keep_host_weights.
  std::vector<size_t> upload_steps;
  std::vector<int> upload_step;
  std::vector<bool> is_upload_step;  // per step: one of upload_steps (a run takes its prepared copy)
  std::vector<NodeProfile> step_nodes;  // per step: its node's name and op type (no timings)

  // Per step and output: the last step that reads the value (arena::kEscapes for graph outputs).
  arena::LastUse value_last_use;
  // Shape subgraphs (served from the memo) and, per slot, whether a memoized step produced it.
  std::vector<bool> memoized;
  std::vector<bool> memo_value;
  bool any_memoized = false;

  // Device backends that nodes run on: each run ends by waiting for their work.
  std::vector<const backends::Backend*> devices;
  std::vector<bool> input_read_on_host;   // per graph input
  std::vector<int> output_device_slot;    // per graph output: the device value its ToHost copies, or -1
  std::vector<bool> output_copy_step;     // per step: such a ToHost, read by no other step
  std::vector<bool> device_output_value;  // per slot: the input of such a ToHost (kept to the end)
  // The device arena (arena.h): null when there is none (arena off, no device step, several
  // devices, device tracing); device_last_use is value_last_use as that arena plans it.
  const backends::Backend* arena_device = nullptr;
  arena::LastUse device_last_use;

  // Recorded replay: the recorder, or null with the reason in replay_declined.
  backends::DeviceRecorder* recorder = nullptr;
  std::string replay_declined;
  std::vector<int> staged_input;  // per step: the graph input its ToDevice reads, or -1

  // Per slot: the step that makes it and its output there, or -1 (graph inputs, weights).
  std::vector<int> producer;
  std::vector<int> producer_output;
  // What the kernels' Sharing::kView declarations tell the host arena before any run
  // (arena::Observed): views of a step's output (alias -> holder), and views of graph inputs or
  // weights (made outside the arena).
  std::vector<std::pair<arena::ValueRef, arena::ValueRef>> declared_views;
  std::vector<arena::ValueRef> declared_outside;
};

// The schedule of `graph` placed as `placement` says, for an engine with `options`. The graph's
// initializers are moved into `initial_weights` (per slot; undefined for slots that are not
// constants, and for stripped weights).
Schedule make_schedule(ir::Graph graph, const std::vector<std::string>& placement, const EngineOptions& options,
                       std::vector<Tensor>& initial_weights);

// The inputs' dtypes and shapes ("float32[1,7];int64[1,7];"): what exact-shape caches are keyed by.
std::string input_signature(const std::vector<ir::ValueInfo>& declared, const std::map<std::string, Tensor>& inputs);

}  // namespace reforge::runtime
