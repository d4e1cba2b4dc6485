#include "runtime/arena.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace reforge::runtime::arena {

namespace {
size_t round_up(size_t n, size_t align = kHostAlign) { return (n + align - 1) / align * align; }
}  // namespace

size_t assign_offsets(const std::vector<Block>& blocks, std::vector<size_t>& offsets, size_t align) {
  offsets.assign(blocks.size(), 0);
  std::vector<size_t> order(blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return blocks[a].bytes > blocks[b].bytes; });
  std::vector<size_t> placed;
  size_t total = 0;
  std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of placed blocks alive at the same time
  for (size_t i : order) {
    const Block& b = blocks[i];
    size_t need = round_up(std::max<size_t>(b.bytes, 1), align);
    busy.clear();
    for (size_t j : placed) {
      const Block& o = blocks[j];
      if (o.first <= b.last && b.first <= o.last)
        busy.emplace_back(offsets[j], offsets[j] + round_up(std::max<size_t>(o.bytes, 1), align));
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

// ---- Aliases and planning ----

void Observed::add_alias(ValueRef alias, ValueRef holder) {
  std::lock_guard<std::mutex> lock(mu_);
  if (known_.aliases.emplace(alias, holder).second) ++known_.version;
}

void Observed::add_outside(ValueRef v) {
  std::lock_guard<std::mutex> lock(mu_);
  if (known_.outside.insert(v).second) ++known_.version;
}

Observed::Known Observed::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return known_;
}

uint64_t Observed::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return known_.version;
}

namespace {

size_t last_use_of(const LastUse& last_use, ValueRef v) {
  if (v.step >= last_use.size() || v.output >= last_use[v.step].size()) return v.step;
  return last_use[v.step][v.output];
}

}  // namespace

std::shared_ptr<const Plan> make_plan(const Sizes& sizes, const LastUse& last_use, const Observed::Known& observed,
                                      size_t align) {
  const std::map<ValueRef, ValueRef>& aliases = observed.aliases;
  // The value holding an alias's bytes (following aliases of aliases).
  auto holder_of = [&](ValueRef v) {
    for (int hops = 0; hops < 64; ++hops) {
      auto it = aliases.find(v);
      if (it == aliases.end() || it->second == v) break;
      v = it->second;
    }
    return v;
  };
  // A holder lives as long as its aliases are read, and leaves the run with them.
  std::map<ValueRef, size_t> extended;
  std::map<ValueRef, bool> leaves;
  for (const auto& [alias, direct] : aliases) {
    const ValueRef h = holder_of(direct);
    const size_t lu = last_use_of(last_use, alias);
    if (lu == kEscapes)
      leaves[h] = true;
    else
      extended[h] = std::max(extended[h], lu);
  }
  auto plan = std::make_shared<Plan>();
  plan->observed_version = observed.version;
  plan->align = align;
  plan->slot.resize(sizes.size());
  plan->expected.resize(sizes.size());
  std::vector<Block> blocks;
  for (size_t s = 0; s < sizes.size(); ++s) {
    plan->slot[s].assign(sizes[s].size(), Plan::kUnplanned);
    for (size_t o = 0; o < sizes[s].size(); ++o) {
      const ValueRef v{s, o};
      const size_t lu = last_use_of(last_use, v);
      int& slot = plan->slot[s][o];
      if (aliases.count(v))
        slot = Plan::kAlias;
      else if (lu == kEscapes || leaves.count(v))
        slot = Plan::kLeaves;
      else if (observed.outside.count(v))
        slot = Plan::kOutside;
      else if (sizes[s][o]) {
        slot = static_cast<int>(blocks.size());
        size_t last = std::max(s, lu);
        if (auto it = extended.find(v); it != extended.end()) last = std::max(last, it->second);
        blocks.push_back({*sizes[s][o], s, last});
        plan->value.push_back(v);
      }
    }
  }
  plan->total_bytes = assign_offsets(blocks, plan->offset, align);
  for (const Block& b : blocks) {
    plan->bytes.push_back(b.bytes);
    plan->first.push_back(b.first);
    plan->last.push_back(b.last);
  }
  for (size_t s = 0; s < sizes.size(); ++s) {
    plan->expected[s].assign(sizes[s].size(), -1);
    for (size_t o = 0; o < sizes[s].size(); ++o) {
      const int slot = plan->slot[s][o];
      if (slot >= 0) {
        plan->expected[s][o] = slot;
      } else if (slot == Plan::kAlias) {
        const ValueRef h = holder_of({s, o});
        if (h.step < plan->slot.size() && h.output < plan->slot[h.step].size())
          plan->expected[s][o] = std::max(plan->slot[h.step][h.output], -1);
      }
    }
  }
  return plan;
}

LastUse device_last_use(const LastUse& last_use, const std::vector<std::vector<bool>>& leaving) {
  LastUse out = last_use;
  for (size_t s = 0; s < out.size() && s < leaving.size(); ++s)
    for (size_t o = 0; o < out[s].size() && o < leaving[s].size(); ++o)
      if (leaving[s][o]) out[s][o] = kEscapes;
  return out;
}

// ---- Buffer and ArenaAllocator ----

Buffer::Buffer(size_t bytes, Memory where) : size(bytes), memory(where) {
  if (memory == Memory::Device) {
    // The backend's own allocation, so that its memory figures count the arena; `data` is its
    // first kDeviceAlign-aligned address.
    REFORGE_CHECK(device_memory().zero, "the device backend offers no zero fill for a device activation arena");
    const size_t reserve = round_up(std::max<size_t>(bytes, 1), kDeviceAlign) + kDeviceAlign;
    device_ = device_memory().allocate(DType::UInt8, {static_cast<int64_t>(reserve)});
    const auto at = reinterpret_cast<uintptr_t>(device_.mutable_raw());
    data = reinterpret_cast<void*>(round_up(at, kDeviceAlign));
    return;
  }
  data = std::aligned_alloc(kHostAlign, round_up(std::max<size_t>(bytes, 1)));
  if (!data) fail("out of memory allocating a ", bytes, "-byte activation arena");
  count_tensor_allocation();
}

Buffer::~Buffer() {
  if (memory == Memory::Host) std::free(data);
}

ArenaAllocator::ArenaAllocator(const Plan& plan, std::shared_ptr<Buffer> buffer, const LastUse& last_use,
                               Observed& observed, ops::OutputAllocator* fallback)
    : plan_(plan), buffer_(std::move(buffer)), last_use_(last_use), observed_(observed), fallback_(fallback) {}

void ArenaAllocator::begin_step(size_t step) {
  step_ = step;
  served_.assign(step < plan_.slot.size() ? plan_.slot[step].size() : 0, false);
}

Tensor ArenaAllocator::allocate(size_t output_index, DType dtype, Shape shape, bool zero) {
  const int e = output_index < served_.size() ? plan_.slot[step_][output_index] : Plan::kUnplanned;
  if (e >= 0 && !served_[output_index]) {
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    if (bytes <= plan_.bytes[static_cast<size_t>(e)]) {
      served_[output_index] = true;
      ++stats_.arena_allocations;
      char* p = static_cast<char*>(buffer_->data) + plan_.offset[static_cast<size_t>(e)];
      if (buffer_->memory == Memory::Device) {
        if (zero && bytes) device_memory().zero(p, bytes);
        return Tensor::wrap(dtype, std::move(shape), std::shared_ptr<const void>(buffer_, p), p, Memory::Device);
      }
      if (zero) std::memset(p, 0, bytes);
      return Tensor::wrap(dtype, std::move(shape), std::shared_ptr<const void>(buffer_, p), p);
    }
  }
  ++stats_.heap_allocations;
  if (e == Plan::kLeaves) ++stats_.leaving_allocations;
  if (e == Plan::kUnplanned) ++stats_.unplanned_allocations;
  if (fallback_) return fallback_->allocate(output_index, dtype, std::move(shape), zero);
  return zero ? Tensor::empty(dtype, std::move(shape)) : Tensor::uninitialized(dtype, std::move(shape));
}

bool ArenaAllocator::in_arena(const Tensor& t) const {
  auto p = reinterpret_cast<uintptr_t>(t.raw());
  auto b = reinterpret_cast<uintptr_t>(buffer_->data);
  return t.defined() && t.nbytes() > 0 && p >= b && p < b + std::max<size_t>(buffer_->size, 1);
}

void ArenaAllocator::placed(size_t step, std::vector<Tensor>& outputs) {
  const auto base = reinterpret_cast<uintptr_t>(buffer_->data);
  auto holds = [&](size_t e, uintptr_t p, size_t n) {
    const uintptr_t begin = base + plan_.offset[e];
    return p >= begin && p + n <= begin + plan_.bytes[e];
  };
  for (size_t o = 0; o < outputs.size(); ++o) {
    Tensor& t = outputs[o];
    if (!t.defined() || t.nbytes() == 0) continue;
    const ValueRef v{step, o};
    const auto p = reinterpret_cast<uintptr_t>(t.raw());
    if (!in_arena(t)) {
      // A view of a copy placed() made: an alias of what was copied.
      if (auto it = copies_.upper_bound(p); it != copies_.begin()) {
        --it;
        if (p + t.nbytes() <= it->second.end) {
          observed_.add_alias(v, it->second.holder);
          continue;
        }
      }
      // A slot the kernel did not take: it made the value elsewhere.
      if (o < served_.size() && plan_.slot[step][o] >= 0 && !served_[o]) observed_.add_outside(v);
      continue;
    }
    const int e = step < plan_.expected.size() && o < plan_.expected[step].size() ? plan_.expected[step][o] : -1;
    if (e >= 0 && holds(static_cast<size_t>(e), p, t.nbytes())) continue;
    // An alias the plan did not expect: the live planned value whose slot holds its bytes.
    int h = -1;
    for (size_t i = 0; i < plan_.value.size() && h < 0; ++i)
      if (plan_.first[i] <= step && step <= plan_.last[i] && holds(i, p, t.nbytes())) h = static_cast<int>(i);
    const size_t lu = last_use_of(last_use_, v);
    if (h >= 0) observed_.add_alias(v, plan_.value[static_cast<size_t>(h)]);
    if (h >= 0 && lu != kEscapes && plan_.last[static_cast<size_t>(h)] >= lu) continue;
    t = t.clone();
    ++stats_.copies;
    if (h >= 0) {
      const auto c = reinterpret_cast<uintptr_t>(t.raw());
      copies_[c] = Copy{c + t.nbytes(), plan_.value[static_cast<size_t>(h)], t};
    }
  }
}

// ---- PlanCache ----

std::shared_ptr<PlanCache::Entry> PlanCache::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  it->second.second = ++tick_;
  return it->second.first;
}

std::shared_ptr<PlanCache::Entry> PlanCache::insert(const std::string& key, Sizes sizes, Sizes device_sizes,
                                                    std::string error) {
  // Bounded: a server fed ever-changing shapes keeps at most kEntries layouts (and their pooled
  // buffers); entries in use stay alive through their shared_ptr.
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    it->second.second = ++tick_;
    return it->second.first;
  }
  if (entries_.size() >= kEntries) {
    auto oldest = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.second < oldest->second.second) oldest = it;
    entries_.erase(oldest);
    ++evicted_;
  }
  auto e = std::make_shared<Entry>();
  e->sizes = std::move(sizes);
  e->device_sizes = std::move(device_sizes);
  e->error = std::move(error);
  entries_[key] = {e, ++tick_};
  return e;
}

size_t PlanCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::shared_ptr<const Plan> PlanCache::plan(Entry& e, const LastUse& last_use, const Observed& observed,
                                            Memory memory) {
  const uint64_t version = observed.version();
  const bool device = memory == Memory::Device;
  std::lock_guard<std::mutex> lock(e.mu);
  std::shared_ptr<const Plan>& p = device ? e.device_plan : e.plan;
  if (p && p->observed_version == version) return p;
  p = make_plan(device ? e.device_sizes : e.sizes, last_use, observed.snapshot(), device ? kDeviceAlign : kHostAlign);
  ++plans_made_;
  return p;
}

std::shared_ptr<const PlanCache::Memo> PlanCache::memo(Entry& e, const std::string& signature, uint64_t generation) {
  std::lock_guard<std::mutex> lock(e.mu);
  auto it = e.memos.find(signature);
  return it != e.memos.end() && it->second->generation == generation ? it->second : nullptr;
}

void PlanCache::set_memo(Entry& e, const std::string& signature, std::shared_ptr<const Memo> memo) {
  std::lock_guard<std::mutex> lock(e.mu);
  // Bounded like the entries; a memo is a few small shape tensors, so dropping one costs a rerun
  // of the shape subgraphs, never an inference or a plan.
  if (e.memos.size() >= kMemosPerEntry && !e.memos.count(signature)) e.memos.erase(e.memos.begin());
  e.memos[signature] = std::move(memo);
}

bool PlanCache::seen_before(Entry& e, const std::string& signature) {
  std::lock_guard<std::mutex> lock(e.mu);
  if (e.seen.count(signature)) return true;
  if (e.seen_order.size() >= kSeenPerEntry) {
    e.seen.erase(e.seen_order.front());
    e.seen_order.pop_front();
  }
  e.seen.insert(signature);
  e.seen_order.push_back(signature);
  return false;
}

std::shared_ptr<Buffer> PlanCache::take(Entry& e, size_t bytes, Memory memory) {
  {
    std::lock_guard<std::mutex> lock(e.mu);
    auto& free = memory == Memory::Device ? e.device_free : e.free;
    // Buffers of an earlier plan of another size are dropped.
    while (!free.empty()) {
      auto b = std::move(free.back());
      free.pop_back();
      if (b->size == bytes) return b;
    }
  }
  return std::make_shared<Buffer>(bytes, memory);
}

void PlanCache::give_back(Entry& e, std::shared_ptr<Buffer> b) {
  if (b.use_count() != 1) return;  // a tensor still points into it: it goes when that tensor does
  std::lock_guard<std::mutex> lock(e.mu);
  (b->memory == Memory::Device ? e.device_free : e.free).push_back(std::move(b));
}

}  // namespace reforge::runtime::arena
