// State: the buffers an engine carries from one run to the next for one sequence (a KV cache),
// owned by the engine's side, allocated once and updated in place.
//
// A state pair joins a graph input and a graph output: the output of one run is the input of the
// next. They must have the same dtype and rank and declared shapes that agree except along at
// most one axis, the length axis: there the output is the input grown (a Concat of past and new
// key-values, as Hugging Face exports make `present` from `past`). A pair with no such axis
// replaces its input at the same shape (TensorScatter into a fixed-size cache, a convolution's
// carried state). Pairs are the user's word (StateOptions::pairs, checked) or proven by structure
// (state_pairs: an output made by a Concat or TensorScatter whose first input is a graph input, or
// the present_key/present_value of a com.microsoft GroupQueryAttention whose past_key/past_value
// is a graph input).
//
// The contract: who may touch state, and when.
//   - A State belongs to one engine and one sequence. Its buffers are allocated when it is made:
//     each pair's input shape with the length axis at max_length, zero-filled. Nothing else of a
//     pair is ever allocated, except a second buffer for a pair whose output cannot be made in
//     place (below), made at the first run that needs it.
//   - One run at a time uses a State (a second concurrent run throws); runs on other States and
//     runs without one go on beside it. The caller gives only the inputs that are not state.
//   - A run reads each pair's input from the State and leaves the output there: written in place
//     when the output's kernel declares Sharing::kInPlace on that input (ops/registry.h), runs on
//     the host and is the input's last reader; otherwise into the pair's second buffer (or copied
//     there, for an output a kernel made elsewhere, e.g. on a device), which then becomes current.
//   - On a device plan a pair lives in device memory when its output is made on the device and no
//     host step reads its input's data (a Shape of it is no read): the run hands the device buffer
//     to the kernels and keeps the output there (no copy to the host; the run returns it as a
//     device view). The output goes into the pair's second buffer, and the two swap each run.
//   - The run's other graph outputs made on the host are written into buffers the State owns,
//     grown only when a run needs more; the run returns views of them and of the state buffers,
//     valid until the State's next run or reset (clone() to keep one).
//   - Between runs the caller may read a pair's current value (value(): a view, valid as above)
//     and reset() the State for a new sequence (lengths to 0, fixed-size state zero-filled; no
//     memory is freed or allocated).
//   - Decoding in a window (set_window): each growing pair's input keeps one length, `window`
//     positions holding the sequence at its end and zeros before it (padding the caller masks
//     out: attention_mask 0 there, the positions given by position_ids). A run then adds exactly
//     one position and the State drops the window's first one, a padding position, so the next
//     run has the same input shapes (what lets a device plan record a decode step once and
//     replay it: runtime/engine.h, EngineOptions::device_replay). The pair's input buffer stays
//     the same; the output goes into the second buffer and its last `window` positions are copied
//     back into the first. reset() ends the window.
//   - An output that would grow past max_length fails the run. A run that fails after a kernel
//     wrote state in place leaves the State needing reset: runs refuse it until reset(), so a
//     half-updated cache is never read as state. A run that fails before that leaves it as it was.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace reforge::runtime {

class Engine;

// Graph output `output` carries graph input `input` to the next run.
struct StatePair {
  std::string input, output;
};

struct StateOptions {
  // The pairs; empty: those state_pairs() proves from the graph (none proven is an error).
  std::vector<StatePair> pairs;
  // Capacity along each growing pair's length axis (needed, > 0, when a pair grows).
  int64_t max_length = 0;
  // Values of the symbolic dimensions of the state inputs other than a length axis (a batch
  // size, a fixed cache's length), by symbol name; a symbol with no value here is an error.
  std::map<std::string, int64_t> dims;
};

// The pairs the graph's structure proves: each graph output made by a Concat (opset >= 4) or a
// TensorScatter whose first input is a graph input, or that is the present_key (present_value) of
// a com.microsoft GroupQueryAttention whose past_key (past_value) is a graph input, with that
// input (through the transfers a
// device plan's placement inserts: the output a ToHost copy of the Concat, its input a ToDevice
// copy of the graph input).
std::vector<StatePair> state_pairs(const ir::Graph& graph);

class State {
 public:
  // Checks the pairs against the engine's graph (names, dtypes, shapes, the length axis) and
  // allocates the buffers. Errors name the pair and what is wrong.
  State(const Engine& engine, StateOptions options);
  ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  const std::vector<StatePair>& pairs() const;
  // Positions held along the length axis (0 after reset; 0 when no pair grows; in a window, the
  // window).
  int64_t length() const;
  // Positions holding the sequence: length() while the pairs grow; in a window, the positions at
  // its end that are not padding.
  int64_t filled() const;
  // Moves to a window of `window` positions (see the contract): the current value is re-laid at
  // the window's end with zeros before it. Needs filled() < window (each run drops a padding
  // position) and window < max_length (the output is window + 1 long), a pair that grows, and no
  // run using the State. A later call moves to another window (a longer one when it is full).
  void set_window(int64_t window);
  // The window, or 0 while the pairs grow.
  int64_t window() const;
  int64_t max_length() const;
  // The current value of a pair's input `input` (a view: see the contract above).
  Tensor value(const std::string& input) const;
  // Starts a new sequence (see the contract).
  void reset();
  // True after a run failed having written state in place.
  bool needs_reset() const;
  // Tensor allocations the State made since it was made (its buffers included).
  int64_t allocations() const;

  struct Impl;  // runtime/state.cc: what the executor reads and writes
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace reforge::runtime
