// Tensor: a dtype, a shape and a view into reference-counted storage.
//
// Storage lives in host memory, in pinned host memory (Memory::Pinned: page-locked, so that a device
// copies from it directly and asynchronously; host code reads it as any host memory), or in the
// memory of a device backend (Memory::Device, e.g. a CUDA GPU's): a device tensor's data() is a
// device address that only that backend's kernels read. Host-side accessors (as_double,
// to_int64_vector, cast_tensor) refuse device tensors; clone() and to_memory() copy through the
// device backend's functions (set_device_memory).
//
// Storage is shared, never copied implicitly: a Tensor taken from a memory-mapped file, from an
// ONNX initializer or from a caller's buffer keeps that memory alive through `owner`. Tensors are
// always dense and C-ordered (row major); `offset` lets several tensors share one buffer (a
// weight section, a Split's views). Mutation goes through mutable_data(), which the executor
// only calls on freshly allocated outputs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"

namespace reforge {

using Shape = std::vector<int64_t>;

// Where a tensor's bytes live.
enum class Memory : uint8_t { Host, Pinned, Device };
const char* memory_name(Memory m);  // "host", "pinned", "device"

// Number of elements; throws on negative dims or overflow past 2^62.
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2,3,4]"

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-initialized, 64-byte aligned storage. Storage of 2 MiB or more is its own
  // anonymous mapping, 2 MiB-aligned and advised as transparent huge pages (fresh, hence
  // already zero: no fill pass; or a released one reused, see set_storage_cache_limit);
  // smaller storage comes from the heap.
  static Tensor empty(DType dtype, Shape shape);
  // Allocates 64-byte aligned storage whose contents are undefined (the caller writes every
  // element): for kernel outputs, where zero-filling first would cost a pass over memory.
  // Same placement as empty().
  static Tensor uninitialized(DType dtype, Shape shape);
  // Wraps memory owned by `owner` (which must keep `data` alive); no copy.
  static Tensor wrap(DType dtype, Shape shape, std::shared_ptr<const void> owner, const void* data,
                     Memory memory = Memory::Host);
  // Copies `nbytes` from data.
  static Tensor copy_of(DType dtype, Shape shape, const void* data);
  template <typename T>
  static Tensor scalar(DType dtype, T value) {
    Tensor t = empty(dtype, {});
    *t.mutable_data<T>() = value;
    return t;
  }

  bool defined() const { return dtype_ != DType::Undefined || owner_ != nullptr; }
  DType dtype() const { return dtype_; }
  Memory memory() const { return memory_; }
  bool on_host() const { return memory_ != Memory::Device; }  // host or pinned host memory
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_.at(static_cast<size_t>(i)); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  const void* raw() const { return data_; }
  void* mutable_raw() { return const_cast<void*>(data_); }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  template <typename T>
  T* mutable_data() {
    return static_cast<T*>(const_cast<void*>(data_));
  }

  // What keeps the storage alive (to wrap a view of it: Tensor::wrap).
  const std::shared_ptr<const void>& storage() const { return owner_; }

  // Same storage, new shape with the same element count.
  Tensor reshaped(Shape shape) const;
  // Deep copy into fresh storage in the same memory.
  Tensor clone() const;
  // Reads element i converted to double / int64 (any supported dtype); for scalars and shape
  // tensors, not for hot loops.
  double as_double(int64_t i = 0) const;
  int64_t as_int64(int64_t i = 0) const;
  std::vector<int64_t> to_int64_vector() const;
  // Human description: "float32[2,3]".
  std::string describe() const;

 private:
  // uninitialized(); `zeroed` tells whether the storage is known to be all zeros.
  static Tensor allocate(DType dtype, Shape shape, bool& zeroed);

  DType dtype_ = DType::Undefined;
  Shape shape_;
  int64_t numel_ = 0;
  Memory memory_ = Memory::Host;
  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
};

// Tensor storage allocations made on the calling thread so far (host: Tensor::empty and friends;
// device: the device backend's allocations, which call count_tensor_allocation). A run reads it
// before and after to count what it allocated (runtime::EngineStats::last_run_allocations).
uint64_t thread_tensor_allocations();
void count_tensor_allocation();

// Storage of 2 MiB or more, once released, is kept for reuse by the next allocation of about
// its size (up to 1/8 longer) instead of being unmapped at once: fresh pages cost a fault and a
// clear each (see tensor.cc). The cache holds at most a limit, by default an eighth of physical
// memory and at most 2 GiB, unmapping the oldest beyond it. set_storage_cache_limit(0) unmaps
// everything kept and disables the cache; storage_cache_held() is the number of bytes it keeps.
void set_storage_cache_limit(size_t bytes);
size_t storage_cache_limit();
size_t storage_cache_held();

// What a device backend provides for device memory: an uninitialized tensor of device memory, an
// uninitialized tensor of pinned host memory, a
// copy of `bytes` between any two memories that has finished when it returns, and a zero fill of
// `bytes` at device address `dst`, on the device in order with the calling thread's device work
// and not waited for (whoever hands out device memory that was not just allocated zero-filled,
// such as the engine's device activation arena, clears it with this, never from the host), and a
// copy of `rows` rows of `row_bytes` within device memory, the rows `src_pitch` and `dst_pitch`
// bytes apart, in order with the calling thread's device work and not waited for (recorded when
// the thread records: backends/device_replay.h). Set once by the backend that owns device memory
// (backends/cuda); null until then.
struct DeviceMemory {
  Tensor (*allocate)(DType dtype, Shape shape) = nullptr;
  Tensor (*allocate_pinned)(DType dtype, Shape shape) = nullptr;
  void (*copy)(void* dst, Memory dst_memory, const void* src, Memory src_memory, size_t bytes) = nullptr;
  void (*zero)(void* dst, size_t bytes) = nullptr;
  void (*copy_rows)(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                    size_t rows) = nullptr;
};
void set_device_memory(const DeviceMemory* ops);
// The device backend's functions; throws when no device backend is present.
const DeviceMemory& device_memory();
// `t` itself when it is in `memory`, else a copy there.
Tensor to_memory(const Tensor& t, Memory memory);
// `t` itself when its bytes can be read on the host (host or pinned memory), else a copy there.
Tensor to_host(const Tensor& t);

// Converts any supported dtype to another, elementwise (Cast semantics for float/int/bool).
Tensor cast_tensor(const Tensor& src, DType to);
// The same into `out` (host memory, src's shape, the target type): standard numeric and bool
// types only (narrow types go through cast_tensor).
void cast_into(const Tensor& src, Tensor& out);

}  // namespace reforge
