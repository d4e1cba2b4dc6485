#include "runtime/arena.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace reforge::runtime::arena {

namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

size_t assign_offsets(const std::vector<Block>& blocks, std::vector<size_t>& offsets) {
  offsets.assign(blocks.size(), 0);
  std::vector<size_t> order(blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return blocks[a].bytes > blocks[b].bytes; });
  std::vector<size_t> placed;
  size_t total = 0;
  std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of placed blocks alive at the same time
  for (size_t i : order) {
    const Block& b = blocks[i];
    size_t need = round_up(std::max<size_t>(b.bytes, 1));
    busy.clear();
    for (size_t j : placed) {
      const Block& o = blocks[j];
      if (o.first <= b.last && b.first <= o.last)
        busy.emplace_back(offsets[j], offsets[j] + round_up(std::max<size_t>(o.bytes, 1)));
    }
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    for (const auto& [begin, end] : busy) {
      if (begin >= at + need) break;  // fits in the gap before this one
      at = std::max(at, end);
    }
    offsets[i] = at;
    total = std::max(total, at + need);
    placed.push_back(i);
  }
  return total;
}

// ---- Recorder ----

struct Recorder::Live {
  std::mutex mu;
  std::map<uintptr_t, std::pair<uintptr_t, int>> ranges;  // begin -> (end, request id), live only
};

Recorder::Recorder(size_t num_steps) : calls_(num_steps), root_(num_steps), live_(std::make_shared<Live>()) {}

void Recorder::begin_step(size_t step) { step_ = step; }

Tensor Recorder::allocate(size_t output_index, DType dtype, Shape shape, bool zero) {
  Tensor t = zero ? Tensor::empty(dtype, std::move(shape)) : Tensor::uninitialized(dtype, std::move(shape));
  int id = static_cast<int>(requests_.size());
  auto begin = reinterpret_cast<uintptr_t>(t.raw());
  requests_.push_back({step_, t.nbytes(), begin});
  calls_[step_].push_back(id);
  // Track the allocation while the tensor's storage lives: a value's data that falls inside a
  // live allocation is an alias of it. The guard dies with the last tensor sharing the storage.
  auto live = live_;
  {
    std::lock_guard<std::mutex> lock(live->mu);
    live->ranges[begin] = {begin + std::max<size_t>(t.nbytes(), 1), id};
  }
  auto guard = std::shared_ptr<const void>(t.raw(), [live, begin, keep = t](const void*) {
    std::lock_guard<std::mutex> lock(live->mu);
    live->ranges.erase(begin);
  });
  return Tensor::wrap(t.dtype(), t.shape(), std::move(guard), t.raw());
}

void Recorder::produced(size_t step, const std::vector<Tensor>& outputs) {
  auto& roots = root_[step];
  roots.assign(outputs.size(), -1);
  std::lock_guard<std::mutex> lock(live_->mu);
  for (size_t o = 0; o < outputs.size(); ++o) {
    const Tensor& t = outputs[o];
    if (!t.defined() || t.nbytes() == 0) continue;
    auto p = reinterpret_cast<uintptr_t>(t.raw());
    auto it = live_->ranges.upper_bound(p);
    if (it == live_->ranges.begin()) continue;
    --it;
    if (p < it->second.first) roots[o] = it->second.second;
  }
}

std::shared_ptr<const Plan> Recorder::plan(const std::vector<std::vector<size_t>>& last_use) const {
  std::vector<Block> blocks(requests_.size());
  std::vector<bool> escapes(requests_.size(), false);
  for (size_t id = 0; id < requests_.size(); ++id)
    blocks[id] = {requests_[id].bytes, requests_[id].step, requests_[id].step};
  for (size_t s = 0; s < root_.size(); ++s)
    for (size_t o = 0; o < root_[s].size(); ++o) {
      int r = root_[s][o];
      if (r < 0) continue;
      size_t last = o < last_use[s].size() ? last_use[s][o] : s;
      if (last == kEscapes)
        escapes[static_cast<size_t>(r)] = true;
      else
        blocks[static_cast<size_t>(r)].last = std::max(blocks[static_cast<size_t>(r)].last, std::max(last, s));
    }
  // Escaping allocations are not planned: their requests go to the heap.
  std::vector<int> entry(requests_.size(), -1);
  std::vector<Block> planned;
  for (size_t id = 0; id < requests_.size(); ++id)
    if (!escapes[id]) {
      entry[id] = static_cast<int>(planned.size());
      planned.push_back(blocks[id]);
    }
  auto plan = std::make_shared<Plan>();
  plan->total_bytes = assign_offsets(planned, plan->offset);
  for (const Block& b : planned) plan->bytes.push_back(b.bytes);
  plan->entry_of_call.resize(calls_.size());
  for (size_t s = 0; s < calls_.size(); ++s)
    for (int id : calls_[s]) plan->entry_of_call[s].push_back(entry[static_cast<size_t>(id)]);
  plan->expected_root.resize(root_.size());
  for (size_t s = 0; s < root_.size(); ++s)
    for (int r : root_[s]) plan->expected_root[s].push_back(r < 0 ? -1 : entry[static_cast<size_t>(r)]);
  return plan;
}

// ---- Buffer and ArenaAllocator ----

Buffer::Buffer(size_t bytes) : size(bytes) {
  data = std::aligned_alloc(kAlign, round_up(std::max<size_t>(bytes, 1)));
  if (!data) fail("out of memory allocating a ", bytes, "-byte activation arena");
}

Buffer::~Buffer() { std::free(data); }

ArenaAllocator::ArenaAllocator(const Plan& plan, std::shared_ptr<Buffer> buffer)
    : plan_(plan), buffer_(std::move(buffer)) {}

void ArenaAllocator::begin_step(size_t step) {
  step_ = step;
  call_ = 0;
}

Tensor ArenaAllocator::allocate(size_t output_index, DType dtype, Shape shape, bool zero) {
  size_t k = call_++;
  const auto& calls = plan_.entry_of_call[step_];
  int e = k < calls.size() ? calls[k] : -1;
  if (e >= 0) {
    size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    if (bytes <= plan_.bytes[static_cast<size_t>(e)]) {
      char* p = static_cast<char*>(buffer_->data) + plan_.offset[static_cast<size_t>(e)];
      if (zero) std::memset(p, 0, bytes);
      return Tensor::wrap(dtype, std::move(shape), std::shared_ptr<const void>(buffer_, p), p);
    }
  }
  return zero ? Tensor::empty(dtype, std::move(shape)) : Tensor::uninitialized(dtype, std::move(shape));
}

bool ArenaAllocator::in_arena(const Tensor& t) const {
  auto p = reinterpret_cast<uintptr_t>(t.raw());
  auto b = reinterpret_cast<uintptr_t>(buffer_->data);
  return t.defined() && t.nbytes() > 0 && p >= b && p < b + std::max<size_t>(plan_.total_bytes, 1);
}

void ArenaAllocator::placed(size_t step, std::vector<Tensor>& outputs) const {
  const auto& expected = plan_.expected_root[step];
  auto base = reinterpret_cast<uintptr_t>(buffer_->data);
  for (size_t o = 0; o < outputs.size(); ++o) {
    Tensor& t = outputs[o];
    if (!in_arena(t)) continue;
    int e = o < expected.size() ? expected[o] : -1;
    auto p = reinterpret_cast<uintptr_t>(t.raw());
    bool as_planned = false;
    if (e >= 0) {
      uintptr_t begin = base + plan_.offset[static_cast<size_t>(e)];
      as_planned = p >= begin && p + t.nbytes() <= begin + plan_.bytes[static_cast<size_t>(e)];
    }
    if (!as_planned) t = t.clone();
  }
}

// ---- PlanCache ----

std::shared_ptr<PlanCache::Entry> PlanCache::find(const std::string& signature) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(signature);
  return it == entries_.end() ? nullptr : it->second;
}

void PlanCache::insert(const std::string& signature, std::shared_ptr<const Plan> plan,
                       std::shared_ptr<const Memo> memo) {
  // Bounded: a server fed ever-changing shapes keeps at most this many layouts (and their
  // pooled buffers); entries in use stay alive through their shared_ptr.
  constexpr size_t kMaxSignatures = 16;
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.size() >= kMaxSignatures) entries_.clear();
  auto& slot = entries_[signature];
  if (!slot) {
    slot = std::make_shared<Entry>();
    slot->plan = std::move(plan);
    slot->memo = std::move(memo);
  }
}

std::shared_ptr<const PlanCache::Memo> PlanCache::memo(Entry& e, uint64_t generation) {
  std::lock_guard<std::mutex> lock(e.mu);
  return e.memo && e.memo->generation == generation ? e.memo : nullptr;
}

void PlanCache::set_memo(Entry& e, std::shared_ptr<const Memo> memo) {
  std::lock_guard<std::mutex> lock(e.mu);
  e.memo = std::move(memo);
}

std::shared_ptr<Buffer> PlanCache::take(Entry& e) {
  {
    std::lock_guard<std::mutex> lock(e.mu);
    if (!e.free.empty()) {
      auto b = std::move(e.free.back());
      e.free.pop_back();
      return b;
    }
  }
  return std::make_shared<Buffer>(e.plan->total_bytes);
}

void PlanCache::give_back(Entry& e, std::shared_ptr<Buffer> b) {
  if (b.use_count() != 1) return;  // a tensor still points into it: it goes when that tensor does
  std::lock_guard<std::mutex> lock(e.mu);
  e.free.push_back(std::move(b));
}

}  // namespace reforge::runtime::arena
