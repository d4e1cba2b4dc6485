#include "backends/cpu/dnnl_context.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "core/error.h"

namespace reforge::cpu::dnnl_util {

namespace {

struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const void>> map;
};

Cache& cache() {
  static Cache* c = new Cache();  // leaked on purpose: primitives may outlive static destruction order
  return *c;
}

// The cache is bounded so that a server fed ever-changing shapes does not grow without limit;
// when full it is simply emptied (entries in use stay alive through their shared_ptr).
constexpr size_t kMaxCacheEntries = 4096;

}  // namespace

const dnnl::engine& engine() {
  static const dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

std::shared_ptr<const void> cached(const std::string& key, const std::function<std::shared_ptr<const void>()>& make) {
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.map.find(key);
    if (it != c.map.end()) return it->second;
  }
  std::shared_ptr<const void> made = make();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.map.size() >= kMaxCacheEntries) c.map.clear();
  auto [it, inserted] = c.map.emplace(key, std::move(made));
  return it->second;
}

dnnl::memory::desc plain_md(const std::vector<int64_t>& dims, dnnl::memory::data_type dt) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * std::max<int64_t>(dims[i], 1);
  return strided_md(dims, strides, dt);
}

dnnl::memory::desc strided_md(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                              dnnl::memory::data_type dt) {
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), dt,
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

namespace {

struct AlignedBuffer {
  void* data = nullptr;
  size_t size = 0;
  ~AlignedBuffer() { std::free(data); }
  void* reserve(size_t bytes) {
    if (bytes > size) {
      std::free(data);
      size = (bytes + 63) / 64 * 64;
      data = std::aligned_alloc(64, size);
      if (!data) {
        size = 0;
        fail("out of memory allocating a ", bytes, "-byte per-thread kernel buffer");
      }
    }
    return data;
  }
};

constexpr int kSlots = kThreadSlots;
constexpr int kScratchSlot = kSlots;  // the scratchpad's own buffer, after the callers' slots

AlignedBuffer& buffer(int slot) {
  thread_local AlignedBuffer buffers[kSlots + 1];
  return buffers[slot];
}

}  // namespace

void* thread_buffer(int slot, size_t bytes) {
  REFORGE_ASSERT(slot >= 0 && slot < kSlots);
  return buffer(slot).reserve(bytes);
}

SerialIfSmall::SerialIfSmall(double work) {
  constexpr double kParallelWork = 1 << 20;
  if (work < kParallelWork && omp_get_max_threads() > 1) {
    saved_ = omp_get_max_threads();
    omp_set_num_threads(1);
  }
}

SerialIfSmall::~SerialIfSmall() {
  if (saved_) omp_set_num_threads(saved_);
}

void execute(const CachedPrimitive& p, std::unordered_map<int, dnnl::memory> args, const char* what) {
  try {
    if (p.scratchpad_bytes > 0) {
      void* scratch = buffer(kScratchSlot).reserve(p.scratchpad_bytes);
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratchpad_md, engine(), scratch));
    }
    dnnl::stream& s = stream();
    p.prim.execute(s, args);
    s.wait();
  } catch (const dnnl::error& e) {
    fail(what, ": oneDNN execution failed: ", e.what());
  }
}

std::string dims_key(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(dims[i]);
  }
  return s;
}

}  // namespace reforge::cpu::dnnl_util
