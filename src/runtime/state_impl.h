// What a State holds and what a run does with it (internal to src/runtime; the contract is in
// runtime/state.h).
#pragma once

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "runtime/schedule.h"
#include "runtime/shape_bucket.h"
#include "runtime/state.h"

namespace reforge::runtime {

// One pair's buffers: the current one holds the input of the next run (shape `shape`); the other,
// made only when an output cannot be written in place, receives the next output.
struct StateSlot {
  size_t input_index = 0, output_index = 0;  // graph input and output
  int input_slot = -1, output_slot = -1;
  int producer = -1;           // the step that makes the output, or -1
  size_t producer_output = 0;  // which of its outputs
  bool in_place = false;       // the producer writes the output over the input (state.cc: in_place_allowed)
  bool device = false;         // the buffers are in device memory (state.cc: on_device)
  int axis = -1;               // the length axis, or -1 (same shape every run)
  DType dtype = DType::Undefined;
  Shape capacity;  // the buffers' shape
  Shape shape;     // the current value's
  Tensor buffers[2];
  int current = 0;

  Tensor current_value() const;
};

// Where a step's output goes in a run with a State: nowhere special, a pair's buffer (k >= 0),
// or the State's buffer of graph output o.
struct StateImplTarget {
  static constexpr int kNone = -1;
  static constexpr int output(size_t o) { return -2 - static_cast<int>(o); }
  static constexpr int output_index(int target) { return -2 - target; }
};

struct State::Impl {
  const Engine* engine = nullptr;
  std::vector<StatePair> pairs;
  std::vector<StateSlot> slots;  // per pair
  int64_t max_length = 0;
  std::vector<std::vector<int>> step_target;  // [step][output] -> StateImplTarget
  std::vector<Tensor> outputs;                // per graph output: its buffer (undefined until needed)
  std::vector<bool> device_output;            // per graph output: a device pair's, returned from the device
  std::vector<bool> skip_step;                // per step: the ToHost copy of a device pair's output
  KnownBounds bounds;                         // the growing inputs' length axes at max_length (shape buckets)
  std::atomic<bool> busy{false};
  bool broken = false;
  bool written = false;  // this run wrote a pair's current buffer
  int64_t allocations = 0;
  int64_t window = 0;  // State::window()
  int64_t filled = 0;  // State::filled() in a window
  // Set by set_window: the window's buffers (a recording reads and writes them at their
  // addresses, so a recording of this State names it: replay_key).
  uint64_t id = 0, window_epoch = 0;

  // Takes the State for a run of `engine`: adds the pairs' inputs to `inputs`.
  void begin(const Engine& engine, std::map<std::string, Tensor>& inputs);
  // Memory for a step output whose target is `target` (>= 0: a pair; <= -2: a graph output).
  Tensor allocate(int target, DType dtype, const Shape& shape, bool zero);
  // A copy of host tensor `t` (graph output o) in the State's buffer of that output.
  Tensor output_copy(size_t o, const Tensor& t);
  // After the run's steps: each pair's output becomes its current value (in a window: its last
  // `window` positions are copied into the current buffer).
  void finish(const std::vector<Tensor>& values);
  // In a window: true when every pair lives in device memory, so that a run can be recorded and
  // replayed (runtime/replay_run.cc) with the pairs read and written at their buffers' addresses.
  bool replayable() const;
  // What names the buffers a recording of a run with this State reads and writes (its id and
  // window); "" when it has none.
  std::string replay_key() const;
  // Whether graph input i is a device pair's input (read where it is, never staged for a recording).
  bool device_input(size_t i) const;
  // In a recording: copies each pair's output (in `values`) back into its current buffer, as
  // finish() does in a window, with device work that the recording takes in.
  void record_window_copies(const std::vector<Tensor>& values) const;
  // After a replay of such a recording: what finish() counts.
  void replayed();
  // Drops the recordings of the current window (its buffers are about to be re-laid or freed).
  void drop_recordings() const;
  // The output of the pair whose output is graph output o, after a run in a window: a view of
  // its second buffer (window + 1 long).
  Tensor window_output(size_t o) const;
  // Gives the State back; a run that failed after writing state in place leaves it needing reset.
  void end(bool failed);
};

}  // namespace reforge::runtime
