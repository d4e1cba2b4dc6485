#include "core/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "core/dispatch.h"
#include "core/narrow.h"

namespace reforge {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    REFORGE_CHECK(d >= 0, "negative dimension ", d, " in shape ", shape_str(shape));
    if (d != 0 && n > (int64_t{1} << 62) / d) fail("shape ", shape_str(shape), " has too many elements");
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {

// Storage of at least this size comes from its own 2 MiB-aligned anonymous mapping, advised as
// transparent huge pages (see allocate_storage).
constexpr size_t kHugePage = size_t{2} << 20;

// `bytes` rounded up to whole pages: the length of a mapping that holds them.
size_t mapping_length(size_t bytes) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
  return (bytes + page - 1) / page * page;
}

// Maps `len` bytes (a mapping_length) of zeroed memory starting on a 2 MiB boundary and advises
// it as huge pages; null when the kernel refuses the mapping. The mapping ends at the 4 KiB page
// after the last byte, not at the next 2 MiB: the tail that does not fill a whole huge page gets
// ordinary pages, so a tensor costs no more resident memory than its bytes need.
void* map_huge(size_t len) {
  const size_t reserve = len + kHugePage;
  void* p = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(p);
  const uintptr_t start = (base + kHugePage - 1) / kHugePage * kHugePage;
  if (start > base) ::munmap(p, start - base);
  if (base + reserve > start + len) ::munmap(reinterpret_cast<void*>(start + len), base + reserve - (start + len));
  // Advisory: with THP disabled (or "never") madvise fails and the memory is simply 4 KiB pages.
  ::madvise(reinterpret_cast<void*>(start), len, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(start);
}

// Freed huge-page mappings kept for the next allocation of about the same size.
//
// Why: on a virtual machine a fresh page is expensive; the guest clears it and the host must back
// it. Measured on the KVM guest of docs/benchmarks.md: clearing the 131 MB logits of the Llama
// prompt model at batch 8 took ~0.39 s of a 3.4 s run (clear_page_erms under the GEMM's first
// store), about 340 MB/s. Outputs leave the activation arena, so without this every run paid it;
// ONNX Runtime's arena keeps such buffers. The same reuse serves repeated refits (the replaced
// weights' buffers take the next refit's weights). It does little for the build: the weights an
// import reads are the parsed protobuf's own strings, not such mappings.
//
// Policy: a mapping released by a tensor is kept (newest last) while the cache holds at most
// its limit, evicting the oldest beyond it; an allocation takes the smallest kept mapping at
// least as long as it needs and at most 1/8 longer (the slack is resident), else it first
// unmaps kept mappings, oldest first, of at least the length it is about to map, then maps fresh
// memory. So kept memory turns into new memory instead of adding to it, and the peak resident
// memory stays that of the tensors alive (measured: without this, buffers of the recording run
// that the arena run never asks for again raised BERT b8's peak from 474 to 510 MB). Reused
// memory is not zero: empty() fills it.
class MappingCache {
 public:
  static MappingCache& get() {
    static MappingCache* cache = new MappingCache();  // never destroyed: tensors may die at exit
    return *cache;
  }

  // A kept mapping for `len` bytes, or null; `got` is its length.
  void* take(size_t len, size_t& got) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t best = entries_.size();
    for (size_t i = 0; i < entries_.size(); ++i) {
      const size_t l = entries_[i].len;
      if (l >= len && l - len <= len / 8 && (best == entries_.size() || l < entries_[best].len)) best = i;
    }
    if (best == entries_.size()) return nullptr;
    void* p = entries_[best].p;
    got = entries_[best].len;
    total_ -= got;
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(best));
    return p;
  }

  // Unmaps kept mappings, oldest first, until `len` bytes are unmapped or none is left.
  void make_room(size_t len) {
    std::vector<Entry> evicted;
    {
      std::lock_guard<std::mutex> lock(mu_);
      size_t freed = 0;
      while (freed < len && !entries_.empty()) {
        freed += entries_.front().len;
        evict_front(evicted);
      }
    }
    for (const Entry& e : evicted) ::munmap(e.p, e.len);
  }

  void give(void* p, size_t len) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (len <= limit_) {
        entries_.push_back({p, len});
        total_ += len;
        p = nullptr;
      }
    }
    if (p) ::munmap(p, len);
    evict_beyond_limit();
  }

  void set_limit(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      limit_ = bytes;
    }
    evict_beyond_limit();
  }

  size_t limit() {
    std::lock_guard<std::mutex> lock(mu_);
    return limit_;
  }

  size_t held() {
    std::lock_guard<std::mutex> lock(mu_);
    return total_;
  }

 private:
  struct Entry {
    void* p;
    size_t len;
  };

  MappingCache() {
    const size_t phys = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
    limit_ = std::min(phys / 8, size_t{2} << 30);
  }

  // Unmaps the oldest kept mappings until the cache holds at most its limit.
  void evict_beyond_limit() {
    std::vector<Entry> evicted;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (total_ > limit_) evict_front(evicted);
    }
    for (const Entry& e : evicted) ::munmap(e.p, e.len);
  }

  // Moves the oldest entry to `evicted` (to be unmapped outside the lock). Holds mu_.
  void evict_front(std::vector<Entry>& evicted) {
    evicted.push_back(entries_.front());
    total_ -= entries_.front().len;
    entries_.erase(entries_.begin());
  }

  std::mutex mu_;
  std::vector<Entry> entries_;  // oldest first
  size_t total_ = 0;
  size_t limit_ = 0;
};

// Allocates 64-byte aligned storage of `bytes` (> 0, a multiple of 64). Sets `zeroed` when the
// memory is known to be all zeros (fresh anonymous pages), so empty() can skip its fill.
//
// Why huge pages: a weight buffer or activation of a few hundred MB written once costs more in
// 4 KiB page faults (one kernel entry and one zeroed page per 4 KiB) than in the copy itself; a
// refit that re-packs 1 GB of weights into new buffers spent three quarters of its time there.
// One fault per 2 MiB removes most of that. Small tensors stay on the heap.
std::shared_ptr<const void> allocate_storage(size_t bytes, bool& zeroed) {
  zeroed = false;
  if (bytes >= kHugePage) {
    size_t len = mapping_length(bytes);
    MappingCache& cache = MappingCache::get();
    void* p = cache.take(len, len);
    if (!p) {
      cache.make_room(len);
      if ((p = map_huge(len))) zeroed = true;
    }
    if (p)
      return std::shared_ptr<const void>(p,
                                         [len](const void* q) { MappingCache::get().give(const_cast<void*>(q), len); });
  }
  void* p = std::aligned_alloc(64, bytes);
  if (!p) return nullptr;
  return std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
}

}  // namespace

namespace {
thread_local uint64_t t_tensor_allocations = 0;
}  // namespace

uint64_t thread_tensor_allocations() { return t_tensor_allocations; }
void count_tensor_allocation() { ++t_tensor_allocations; }

void set_storage_cache_limit(size_t bytes) { MappingCache::get().set_limit(bytes); }
size_t storage_cache_limit() { return MappingCache::get().limit(); }
size_t storage_cache_held() { return MappingCache::get().held(); }

Tensor Tensor::empty(DType dtype, Shape shape) {
  bool zeroed = false;
  Tensor t = allocate(dtype, std::move(shape), zeroed);
  if (!zeroed) std::memset(t.mutable_raw(), 0, ((t.nbytes() + 63) / 64) * 64);
  return t;
}

Tensor Tensor::uninitialized(DType dtype, Shape shape) {
  bool zeroed = false;
  return allocate(dtype, std::move(shape), zeroed);
}

Tensor Tensor::allocate(DType dtype, Shape shape, bool& zeroed) {
  REFORGE_CHECK(has_storage(dtype), "tensors of type ", dtype_name(dtype), " are not supported");
  Tensor t;
  t.dtype_ = dtype;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  size_t bytes = t.nbytes();
  // Refuse sizes beyond physical memory up front: with overcommit a huge allocation "succeeds"
  // and the process is killed later, which hostile model files must not be able to cause.
  static const size_t phys = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
  if (bytes > phys)
    fail("tensor ", dtype_name(dtype), shape_str(t.shape_), " needs ", bytes,
         " bytes, more than this machine's memory");
  size_t alloc = ((bytes + 63) / 64) * 64;
  if (alloc == 0) alloc = 64;
  t.owner_ = allocate_storage(alloc, zeroed);
  count_tensor_allocation();
  if (!t.owner_) fail("out of memory allocating ", bytes, " bytes for tensor ", shape_str(t.shape_));
  t.data_ = t.owner_.get();
  return t;
}

Tensor Tensor::wrap(DType dtype, Shape shape, std::shared_ptr<const void> owner, const void* data, Memory memory) {
  Tensor t;
  t.dtype_ = dtype;
  t.memory_ = memory;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  t.owner_ = std::move(owner);
  t.data_ = data;
  return t;
}

Tensor Tensor::copy_of(DType dtype, Shape shape, const void* data) {
  Tensor t = empty(dtype, std::move(shape));
  if (t.nbytes()) std::memcpy(t.mutable_raw(), data, t.nbytes());
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  int64_t n = shape_numel(shape);
  REFORGE_CHECK(n == numel_, "cannot reshape ", describe(), " to ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  if (on_host()) return copy_of(dtype_, shape_, data_);
  const DeviceMemory& d = device_memory();
  Tensor t = d.allocate(dtype_, shape_);
  if (nbytes()) d.copy(t.mutable_raw(), Memory::Device, data_, Memory::Device, nbytes());
  return t;
}

const char* memory_name(Memory m) {
  switch (m) {
    case Memory::Host:
      return "host";
    case Memory::Pinned:
      return "pinned";
    case Memory::Device:
      return "device";
  }
  return "?";
}

namespace {
std::atomic<const DeviceMemory*> g_device_memory{nullptr};
}  // namespace

void set_device_memory(const DeviceMemory* ops) { g_device_memory.store(ops); }

const DeviceMemory& device_memory() {
  const DeviceMemory* d = g_device_memory.load();
  REFORGE_CHECK(d != nullptr, "device memory is used, but this build of reforge has no device backend");
  return *d;
}

Tensor to_memory(const Tensor& t, Memory memory) {
  if (t.memory() == memory || !t.defined()) return t;
  if (memory == Memory::Host && t.on_host()) return Tensor::copy_of(t.dtype(), t.shape(), t.raw());
  const DeviceMemory& d = device_memory();
  Tensor out = memory == Memory::Host     ? Tensor::uninitialized(t.dtype(), t.shape())
               : memory == Memory::Pinned ? d.allocate_pinned(t.dtype(), t.shape())
                                          : d.allocate(t.dtype(), t.shape());
  if (t.nbytes()) {
    if (out.on_host() && t.on_host())
      std::memcpy(out.mutable_raw(), t.raw(), t.nbytes());
    else
      d.copy(out.mutable_raw(), memory, t.raw(), t.memory(), t.nbytes());
  }
  return out;
}

Tensor to_host(const Tensor& t) { return t.on_host() ? t : to_memory(t, Memory::Host); }

double Tensor::as_double(int64_t i) const {
  REFORGE_CHECK(on_host(), describe(), " is in device memory: read it on the host after a copy");
  REFORGE_CHECK(i >= 0 && i < numel_, "index ", i, " out of range for ", describe());
  if (is_narrow(dtype_)) return narrow_to_double(dtype_, data<uint8_t>()[i]);
  return dispatch_all(dtype_, [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    return static_cast<double>(to_compute(data<T>()[i]));
  });
}

int64_t Tensor::as_int64(int64_t i) const {
  REFORGE_CHECK(on_host(), describe(), " is in device memory: read it on the host after a copy");
  REFORGE_CHECK(i >= 0 && i < numel_, "index ", i, " out of range for ", describe());
  if (is_narrow(dtype_)) return static_cast<int64_t>(narrow_to_double(dtype_, data<uint8_t>()[i]));
  return dispatch_all(dtype_, [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
      return static_cast<int64_t>(static_cast<float>(data<T>()[i]));
    else
      return static_cast<int64_t>(data<T>()[i]);
  });
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[static_cast<size_t>(i)] = as_int64(i);
  return v;
}

std::string Tensor::describe() const { return dtype_name(dtype_) + shape_str(shape_); }

namespace {
// double -> float rounded to odd: truncate toward zero and set the lowest mantissa bit when the
// conversion was inexact. A later float -> float16/bfloat16 round-to-nearest-even then equals a
// single correct rounding of the double (float keeps > 2 extra bits), so Cast(double -> float16)
// matches numpy's direct conversion instead of suffering double rounding.
float double_to_float_round_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || std::isinf(d) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return bits_to_float(float_to_bits(f) | 1u);
}

// Float -> integer: truncates toward zero; NaN gives 0 and out-of-range values saturate (ONNX
// leaves both implementation-defined; a plain C++ conversion would be undefined behaviour).
template <typename To, typename C>
To float_to_int(C c) {
  if (std::isnan(c)) return To(0);
  const long double x = std::trunc(static_cast<long double>(c));
  if (x <= static_cast<long double>(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
  if (x >= static_cast<long double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
  return static_cast<To>(x);
}

template <typename To, typename From>
To convert_one(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    auto c = to_compute(v);
    return c != decltype(c)(0);  // NaN != 0: true, as in numpy
  } else if constexpr (std::is_same_v<To, float16> || std::is_same_v<To, bfloat16>) {
    if constexpr (std::is_same_v<From, double>)
      return To(double_to_float_round_odd(v));
    else if constexpr (std::is_same_v<From, int64_t> || std::is_same_v<From, uint64_t>)
      return To(double_to_float_round_odd(static_cast<double>(v)));
    else
      return To(static_cast<float>(to_compute(v)));
  } else if constexpr (std::is_integral_v<To>) {
    auto c = to_compute(v);
    if constexpr (std::is_floating_point_v<decltype(c)>)
      return float_to_int<To>(c);
    else
      return static_cast<To>(c);  // integer narrowing wraps (two's complement, as numpy)
  } else {
    return static_cast<To>(to_compute(v));
  }
}
}  // namespace

Tensor cast_tensor(const Tensor& src, DType to) { return cast_tensor(src, to, NarrowCastOptions{}); }

namespace {
// Casts from or to a narrow type (core/narrow.h): integers and bool go through int64 (exact,
// so that 4- and 2-bit targets keep the low bits of the integer), floats and narrow sources
// through double (exact for every float source), then the target's conversion.
Tensor cast_narrow(const Tensor& src, DType to, const NarrowCastOptions& o) {
  const int64_t n = src.numel();
  const DType from = src.dtype();
  if (!is_narrow(to)) {
    // Narrow -> standard: every narrow value is exact in double (and integral for the integer
    // types), so decoding to double and casting that rounds once.
    Tensor wide = Tensor::empty(DType::Float64, src.shape());
    const uint8_t* s = src.data<uint8_t>();
    double* d = wide.mutable_data<double>();
    for (int64_t i = 0; i < n; ++i) d[i] = narrow_to_double(from, s[i]);
    return cast_tensor(wide, to);
  }
  Tensor out = Tensor::empty(to, src.shape());
  uint8_t* d = out.mutable_data<uint8_t>();
  if (is_narrow(from)) {
    const uint8_t* s = src.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) d[i] = narrow_from_double(to, narrow_to_double(from, s[i]), o);
  } else if (from == DType::Bool) {
    const uint8_t* s = src.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) d[i] = narrow_from_int64(to, s[i] != 0 ? 1 : 0, o);
  } else {
    dispatch_numeric(from, [&](auto tag) {
      using From = typename decltype(tag)::type;
      const From* s = src.data<From>();
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_integral_v<From>) {
          if constexpr (std::is_same_v<From, uint64_t>)
            d[i] = !is_narrow_integer(to) ? narrow_from_double(to, static_cast<double>(s[i]), o)
                                          : narrow_from_int64(to, static_cast<int64_t>(s[i]), o);
          else
            d[i] = narrow_from_int64(to, static_cast<int64_t>(s[i]), o);
        } else {
          d[i] = narrow_from_double(to, static_cast<double>(to_compute(s[i])), o);
        }
      }
    });
  }
  return out;
}
}  // namespace

Tensor cast_tensor(const Tensor& src, DType to, const NarrowCastOptions& narrow) {
  if (src.dtype() == to) return src;
  REFORGE_CHECK(src.on_host(), "cannot cast ", src.describe(), " in device memory on the host");
  if (is_narrow(src.dtype()) || is_narrow(to)) {
    REFORGE_CHECK(has_storage(src.dtype()) && has_storage(to), "cannot cast ", src.describe(), " to ", dtype_name(to),
                  ": only numeric, bool, float8, float4 and 4-/2-bit integer types are supported");
    return cast_narrow(src, to, narrow);
  }
  Tensor out = Tensor::uninitialized(to, src.shape());
  cast_into(src, out);  // checks the types
  return out;
}

void cast_into(const Tensor& src, Tensor& out) {
  const DType to = out.dtype();
  REFORGE_CHECK(src.on_host() && out.on_host() && out.shape() == src.shape(), "cannot cast ", src.describe(), " into ",
                out.describe());
  REFORGE_CHECK(is_supported(src.dtype()) && is_supported(to), "cannot cast ", src.describe(), " to ", dtype_name(to),
                ": only standard numeric and bool types are supported");
  const int64_t n = src.numel();
  auto from_type = [&](auto f) {
    // Bool is read as bytes (!= 0): loading a byte other than 0/1 as C++ bool is undefined.
    if (src.dtype() == DType::Bool) return f(TypeTag<uint8_t>{}, true);
    return dispatch_numeric(src.dtype(), [&](auto tag) { return f(tag, false); });
  };
  from_type([&](auto from_tag, bool from_bool) {
    using From = typename decltype(from_tag)::type;
    dispatch_all(to, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      const From* s = src.data<From>();
      To* d = out.mutable_data<To>();
      if (from_bool) {
        for (int64_t i = 0; i < n; ++i) d[i] = convert_one<To>(s[i] != 0);
      } else {
#pragma omp parallel for if (n > (int64_t{1} << 16))
        for (int64_t i = 0; i < n; ++i) d[i] = convert_one<To>(s[i]);
      }
    });
  });
}

}  // namespace reforge
