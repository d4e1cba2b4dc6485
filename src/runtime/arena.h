// Activation arena: one buffer per run, laid out from a recorded run, so that a steady stream of
// runs with the same input shapes allocates no activation memory.
//
// Kernels compute their output shapes from their actual inputs, so the sizes of the
// intermediates are only known by running. The first run with a given input signature is a
// *recording* run: outputs are heap allocations, and the Recorder notes every allocation request
// (step, order within the step, bytes) and which allocation each produced value's data lies in
// (its own, or an earlier one it aliases: Reshape, Identity, a Slice view). From the recording and
// the values' last uses, plan() gives every allocation a lifetime (its step up to the last use of
// any value living in it) and an offset, so that allocations whose lifetimes overlap never share
// bytes. Values that leave the run (graph outputs and what they alias) stay on the heap.
//
// Later runs with the same signature hand out slices of an arena buffer (ArenaAllocator).
// Nothing is assumed that is not checked: a request larger than recorded (data-dependent
// shapes) goes to the heap, and after each step the executor calls placed(): a value whose data
// lies in the arena anywhere but where the plan expects it is copied out to the heap at once,
// before any later allocation can reuse its bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::runtime::arena {

// An allocation with a lifetime [first, last] in steps; plan() places it at `offset`.
struct Block {
  size_t bytes = 0;
  size_t first = 0, last = 0;
};

// Assigns offsets (64-byte aligned) so that blocks with overlapping lifetimes are disjoint;
// returns the arena size. Greedy by size, largest first, each at the lowest offset that fits.
size_t assign_offsets(const std::vector<Block>& blocks, std::vector<size_t>& offsets);

struct Plan {
  size_t total_bytes = 0;
  std::vector<size_t> offset, bytes;            // per entry (allocation request)
  std::vector<std::vector<int>> entry_of_call;  // [step][k-th request in the step] -> entry
  std::vector<std::vector<int>> expected_root;  // [step][output] -> entry holding the value, or -1
};

// Records allocations during a run (the heap serves them) and builds the Plan.
class Recorder : public ops::OutputAllocator {
 public:
  Recorder(size_t num_steps);
  void begin_step(size_t step);
  Tensor allocate(size_t output_index, DType dtype, Shape shape, bool zero) override;
  // After step `step`: where each produced output's data lives (outputs may be undefined).
  void produced(size_t step, const std::vector<Tensor>& outputs);
  // last_use[step][output]: last step reading that value; kEscapes for graph outputs.
  static constexpr size_t kEscapes = SIZE_MAX;
  std::shared_ptr<const Plan> plan(const std::vector<std::vector<size_t>>& last_use) const;

 private:
  struct Request {
    size_t step, bytes;
    uintptr_t begin;
  };
  struct Live;  // shared with the allocations' deleters
  size_t step_ = 0;
  std::vector<Request> requests_;
  std::vector<std::vector<int>> calls_;  // [step] -> request ids in order
  std::vector<std::vector<int>> root_;   // [step][output] -> request id or -1
  std::shared_ptr<Live> live_;
};

// One run's arena buffer; buffers go back to their plan's pool when no tensor uses them.
struct Buffer {
  void* data = nullptr;
  size_t size = 0;
  explicit Buffer(size_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// Serves a run from a plan and a buffer.
class ArenaAllocator : public ops::OutputAllocator {
 public:
  ArenaAllocator(const Plan& plan, std::shared_ptr<Buffer> buffer);
  void begin_step(size_t step);
  Tensor allocate(size_t output_index, DType dtype, Shape shape, bool zero) override;
  // After step `step`: copies to the heap any output whose data is in the arena where the plan
  // does not expect it (a data-dependent alias), so no later allocation can overwrite it.
  void placed(size_t step, std::vector<Tensor>& outputs) const;
  // True when `t`'s data lies in this run's arena.
  bool in_arena(const Tensor& t) const;

 private:
  const Plan& plan_;
  std::shared_ptr<Buffer> buffer_;
  size_t step_ = 0, call_ = 0;
};

// Plans per input signature, and a pool of buffers per plan; thread-safe.
class PlanCache {
 public:
  // Outputs of the steps that depend only on input shapes and constants (the engine's shape
  // subgraphs), for the constant set of `generation`.
  struct Memo {
    uint64_t generation = 0;
    std::vector<std::vector<Tensor>> outputs;  // per step; empty for steps not memoized
  };
  struct Entry {
    std::shared_ptr<const Plan> plan;
    std::mutex mu;
    std::vector<std::shared_ptr<Buffer>> free;
    std::shared_ptr<const Memo> memo;
  };
  std::shared_ptr<Entry> find(const std::string& signature) const;
  void insert(const std::string& signature, std::shared_ptr<const Plan> plan, std::shared_ptr<const Memo> memo);
  // The memo of `e` if it was made for constants of `generation`.
  static std::shared_ptr<const Memo> memo(Entry& e, uint64_t generation);
  static void set_memo(Entry& e, std::shared_ptr<const Memo> memo);
  // A buffer for one run, from the pool or new.
  static std::shared_ptr<Buffer> take(Entry& e);
  // Returns `b` to the pool unless a tensor still uses it (then it is freed with that tensor).
  static void give_back(Entry& e, std::shared_ptr<Buffer> b);

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;
};

}  // namespace reforge::runtime::arena
