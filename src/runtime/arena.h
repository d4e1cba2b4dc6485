// Activation arena: one buffer per run, laid out before the run from inferred shapes, so that
// runs allocate no activation memory.
//
// For an input signature (the inputs' dtypes and shapes) the executor infers the graph again
// with those shapes (ops/infer_graph.h): every value whose size does not depend on data comes out
// with a number of bytes. make_plan() gives each such value a lifetime (its producing step up to
// its last use) and an offset (assign_offsets), so that values whose lifetimes overlap never share
// bytes. Values that leave the run (graph outputs) and values of unknown size (data-dependent
// shapes: NonZero, what follows from it) are not planned: their allocations go to the heap.
//
// A run hands kernels slices of an arena buffer (ArenaAllocator): output k of step s gets the
// slot planned for that value when the request fits, else a heap allocation. Nothing is assumed
// that is not checked: after each step the executor calls placed(); a value whose data lies in
// the arena anywhere but where the plan expects it is copied out to the heap at once, before any
// later allocation can reuse its bytes, unless the slot it lies in stays reserved for as long as
// the value is read.
//
// What inference does not say: some kernels return a view of an input instead of new memory
// (Reshape, Identity, Squeeze; a convolution that writes over its residual input), and some make
// their outputs without the allocator (Constant, a Cast that converts into a fresh tensor, a
// view of a weight). placed() reports both into the engine's Observed: each alias (value -> the
// planned value whose slot holds its bytes; a view of a copy made earlier in the run counts as a
// view of what was copied, so chains of views are found in one run) and each value made outside
// the arena. Plans made after that extend a holder's lifetime to its aliases' last use (and keep
// the holder off the arena when an alias leaves the run), and give aliases and values made
// outside no slot. A cached plan made before something was observed is re-made from the same
// sizes on its next use: from the second run on, runs copy nothing and the arena holds only what
// kernels take from it.
//
// Device steps (nodes on a device backend) get an arena of their own, planned the same way from the
// same inference: a second plan over the device steps' outputs, served from one buffer of device
// memory per run (DeviceMemory::allocate, so the backend's memory figures count it), with the
// backend's allocator in place of the heap for what the plan does not serve. Only the memory
// differs: zero-filled requests are cleared by the backend on the device (DeviceMemory::zero, core/tensor.h),
// values found where the plan does not expect them are copied out device to device (Tensor::clone),
// and slots are 256-byte aligned like the backend's own allocations, so that libraries that choose
// their algorithm by pointer alignment (cuBLASLt) choose as they would without the arena. Values
// that leave the run on the device (outputs returned in device memory) stay off it, as graph
// outputs do on the host.
//
// The device arena serves eager runs only. A run that records device work for replay
// (backends/device_replay.h) takes its values from the backend: what a recording allocates becomes
// the recording's own memory, at addresses its replays reuse for as long as it lives, whereas an
// arena buffer goes back to the pool when its run ends and serves the next run, which would then
// write the recording's memory. A replay executes no step, so it asks no allocator.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::runtime::arena {

// An allocation with a lifetime [first, last] in steps; make_plan() places it at `offset`.
struct Block {
  size_t bytes = 0;
  size_t first = 0, last = 0;
};

// Slot alignment of the host arena and of the device arena.
inline constexpr size_t kHostAlign = 64;
inline constexpr size_t kDeviceAlign = 256;

// Assigns offsets (multiples of `align`, a power of two) so that blocks with overlapping lifetimes
// are disjoint; returns the arena size. Greedy by size, largest first, each at the lowest offset
// that fits.
size_t assign_offsets(const std::vector<Block>& blocks, std::vector<size_t>& offsets, size_t align = kHostAlign);

// A value of the run: output `output` of step `step`.
struct ValueRef {
  size_t step = 0, output = 0;
  bool operator<(const ValueRef& o) const { return step != o.step ? step < o.step : output < o.output; }
  bool operator==(const ValueRef&) const = default;
};

// Last use of each value: [step][output] -> the last step reading it, or kEscapes for values
// that leave the run (graph outputs).
inline constexpr size_t kEscapes = SIZE_MAX;
using LastUse = std::vector<std::vector<size_t>>;
// Inferred size of each value for one input signature: [step][output] -> bytes, or nullopt when
// the size is not known before the run (or the step is not served from the arena).
using Sizes = std::vector<std::vector<std::optional<size_t>>>;

// What runs observed of where kernels put their outputs, for every signature's plan. Thread-safe;
// the version changes whenever something new is observed.
class Observed {
 public:
  struct Known {
    std::map<ValueRef, ValueRef> aliases;  // value -> the value whose storage holds its bytes
    std::set<ValueRef> outside;            // values their kernels made outside the arena
    uint64_t version = 0;
  };
  void add_alias(ValueRef alias, ValueRef holder);
  void add_outside(ValueRef v);
  Known snapshot() const;
  uint64_t version() const;

 private:
  mutable std::mutex mu_;
  Known known_;
};

struct Plan {
  uint64_t observed_version = 0;  // the Observed version it was made with
  size_t align = kHostAlign;      // of every offset, and of every slot's reserved bytes
  size_t total_bytes = 0;
  // Per entry (a planned value).
  std::vector<size_t> offset, bytes, first, last;
  std::vector<ValueRef> value;
  // [step][output] -> the entry allocate(output) is served from, or a negative status.
  static constexpr int kUnplanned = -1;  // size unknown before the run, or the step is not served
  static constexpr int kLeaves = -2;     // the value (or an alias of it) leaves the run
  static constexpr int kAlias = -3;      // a known alias: its bytes are another value's
  static constexpr int kOutside = -4;    // its kernel makes it outside the arena
  std::vector<std::vector<int>> slot;
  // [step][output] -> the entry expected to hold the value's bytes (its own, or its holder's
  // for an alias), or -1.
  std::vector<std::vector<int>> expected;
};

// The plan for values of `sizes` with `last_use`, given what runs observed so far, its slots
// aligned to `align`.
std::shared_ptr<const Plan> make_plan(const Sizes& sizes, const LastUse& last_use, const Observed::Known& observed,
                                      size_t align = kHostAlign);

// The lifetimes the device arena is planned with: `last_use`, except that the values `leaving`
// marks ([step][output], true: handed out in device memory as a graph output) leave the run.
LastUse device_last_use(const LastUse& last_use, const std::vector<std::vector<bool>>& leaving);

// One run's arena buffer, in host memory or in the device backend's (DeviceMemory::allocate);
// buffers go back to their plan's pool when no tensor uses them.
struct Buffer {
  void* data = nullptr;
  size_t size = 0;
  Memory memory = Memory::Host;
  explicit Buffer(size_t bytes, Memory where = Memory::Host);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

 private:
  Tensor device_;  // device memory: the allocation (released as the backend releases it)
};

// What a run's allocations did (Engine::arena_stats). For the device arena, "heap" is the device
// backend's allocator.
struct RunStats {
  size_t arena_allocations = 0;      // served from the arena
  size_t heap_allocations = 0;       // served from the heap, of which:
  size_t leaving_allocations = 0;    // values that leave the run (never in the arena)
  size_t unplanned_allocations = 0;  // values whose size inference did not know
  size_t copies = 0;                 // values found in the arena where the plan did not expect them, copied out
};

// Serves a run from a plan and a buffer. A device buffer's allocator hands what the plan does not
// serve to `fallback` (the device backend's allocator); a host buffer's, to the heap.
class ArenaAllocator : public ops::OutputAllocator {
 public:
  ArenaAllocator(const Plan& plan, std::shared_ptr<Buffer> buffer, const LastUse& last_use, Observed& observed,
                 ops::OutputAllocator* fallback = nullptr);
  void begin_step(size_t step);
  Tensor allocate(size_t output_index, DType dtype, Shape shape, bool zero) override;
  // After step `step`: finds outputs whose data is in the arena where the plan does not expect it
  // (an alias of a planned value), records them as aliases, and copies out those whose slot is
  // not reserved for as long as they are read (to the heap, or device to device); records outputs
  // made outside the arena.
  void placed(size_t step, std::vector<Tensor>& outputs);
  // True when `t`'s data lies in this run's arena.
  bool in_arena(const Tensor& t) const;
  const RunStats& stats() const { return stats_; }

 private:
  const Plan& plan_;
  std::shared_ptr<Buffer> buffer_;
  const LastUse& last_use_;
  Observed& observed_;
  ops::OutputAllocator* fallback_;
  size_t step_ = 0;
  std::vector<bool> served_;  // outputs of the current step already given a slot
  RunStats stats_;
  // Copies made by placed() in this run, by address: a later view of one is a view of `holder`.
  // The copy is kept alive to the end of the run, so its address is not reused meanwhile.
  struct Copy {
    uintptr_t end;
    ValueRef holder;
    Tensor keep;
  };
  std::map<uintptr_t, Copy> copies_;
};

// Per shape bucket (runtime/shape_bucket.h): the inferred sizes, the current plan and a pool of
// buffers, for the host arena and for the device arena, and per exact input signature the shape
// subgraphs' memo; thread-safe. Entries are evicted least-recently-used when the cache is full
// (never all at once); a run holding an entry keeps it alive to its end.
class PlanCache {
 public:
  // Outputs of the steps that depend only on input shapes and constants (the engine's shape
  // subgraphs), for one input signature and the constant set of `generation`.
  struct Memo {
    uint64_t generation = 0;
    std::vector<std::vector<Tensor>> outputs;  // per step; empty for steps not memoized
  };
  struct Entry {
    Sizes sizes;         // host steps' outputs
    Sizes device_sizes;  // device steps' outputs
    std::string error;   // why the sizes are unknown (inference failed), or ""
    std::mutex mu;
    std::shared_ptr<const Plan> plan, device_plan;
    std::vector<std::shared_ptr<Buffer>> free, device_free;
    std::map<std::string, std::shared_ptr<const Memo>> memos;  // per exact input signature
    std::set<std::string> seen;                                // signatures run here (seen_before)
    std::deque<std::string> seen_order;                        //   oldest first
  };
  // Shape buckets kept, and memos kept per bucket.
  static constexpr size_t kEntries = 64;
  static constexpr size_t kMemosPerEntry = 64;
  static constexpr size_t kSeenPerEntry = 256;

  // The entry of `key`, marked most recently used; null when there is none.
  std::shared_ptr<Entry> find(const std::string& key);
  // The entry of `key`: the one there, or a new one with these sizes (evicting the least recently
  // used entry when the cache is full).
  std::shared_ptr<Entry> insert(const std::string& key, Sizes sizes, Sizes device_sizes, std::string error);
  // The plan of `e`'s host arena (or device arena) for what is observed now (re-made when
  // something was observed since).
  std::shared_ptr<const Plan> plan(Entry& e, const LastUse& last_use, const Observed& observed,
                                   Memory memory = Memory::Host);
  // The memo of input signature `signature` in `e` if it was made for constants of `generation`.
  static std::shared_ptr<const Memo> memo(Entry& e, const std::string& signature, uint64_t generation);
  static void set_memo(Entry& e, const std::string& signature, std::shared_ptr<const Memo> memo);
  // True when `signature` (with its weight generation) ran in `e` before (among its last
  // kSeenPerEntry); marks it.
  // A signature's shape subgraphs are kept in a memo from its second run on: its first run
  // computes them in the arena, so that sizes seen once (a length of text generation) allocate
  // nothing.
  static bool seen_before(Entry& e, const std::string& signature);
  // A buffer of `bytes` in `memory` for one run, from the pool or new.
  static std::shared_ptr<Buffer> take(Entry& e, size_t bytes, Memory memory = Memory::Host);
  // Returns `b` to the pool unless a tensor still uses it (then it is freed with that tensor).
  static void give_back(Entry& e, std::shared_ptr<Buffer> b);

  // Counters over the cache's life: arena plans made (host and device), entries evicted.
  int64_t plans_made() const { return plans_made_.load(); }
  int64_t evicted() const { return evicted_.load(); }
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::pair<std::shared_ptr<Entry>, uint64_t>> entries_;  // key -> (entry, last use tick)
  uint64_t tick_ = 0;
  std::atomic<int64_t> plans_made_{0}, evicted_{0};
};

}  // namespace reforge::runtime::arena
