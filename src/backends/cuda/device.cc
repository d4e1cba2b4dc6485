#include <algorithm>
#include <atomic>
#include <mutex>

#include "backends/cuda/cuda_common.h"

namespace reforge::cuda {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();  // clears a sticky launch error so that the next call can report its own
  fail("CUDA error in ", what, ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

void check_launch(const char* kernel) {
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    fail("CUDA kernel ", kernel, " failed to launch: ", cudaGetErrorName(status), " (", cudaGetErrorString(status),
         ")");
}

std::string unavailable_reason() {
  static std::once_flag once;
  static std::string why;
  std::call_once(once, [] {
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      why = std::string("no usable CUDA device (") + cudaGetErrorString(status) + ")";
      (void)cudaGetLastError();
      return;
    }
    if (count == 0) {
      why = "no CUDA device";
      return;
    }
    // Keep freed activations in the device's pool for the next run instead of handing them back
    // to the driver at every synchronization.
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess) {
      uint64_t keep = UINT64_MAX;
      (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
  });
  return why;
}

namespace {

void require_device() {
  if (std::string why = unavailable_reason(); !why.empty()) fail("the CUDA backend cannot run here: ", why);
}

size_t storage_bytes(DType dtype, const Shape& shape, int64_t& numel) {
  numel = shape_numel(shape);
  REFORGE_CHECK(dtype != DType::String && dtype_size(dtype) > 0, "tensors of type ", dtype_name(dtype),
                " cannot live in device memory");
  return aligned_device_bytes(static_cast<size_t>(numel) * dtype_size(dtype));
}

}  // namespace

Tensor device_tensor(DType dtype, Shape shape) {
  require_device();
  int64_t numel = 0;
  const size_t bytes = storage_bytes(dtype, shape, numel);
  void* p = nullptr;
  cudaError_t status = cudaMallocAsync(&p, bytes, stream());
  count_tensor_allocation();
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    fail("out of device memory allocating ", bytes, " bytes for ", dtype_name(dtype), shape_str(shape), " (",
         cudaGetErrorString(status), ")");
  }
  std::shared_ptr<const void> owner(p, [](const void* q) { (void)cudaFreeAsync(const_cast<void*>(q), stream()); });
  return Tensor::wrap(dtype, std::move(shape), std::move(owner), p, Memory::Device);
}

namespace {

struct SplitScratch {
  Tensor partial, counters;
};

void make_split_scratch(Tensor& partial, Tensor& counters, int64_t floats, int64_t n) {
  partial = device_tensor(DType::Float32, {floats});
  counters = device_tensor(DType::Int32, {n});
  REFORGE_CUDA_CHECK(cudaMemsetAsync(counters.mutable_raw(), 0, static_cast<size_t>(n) * 4, stream()));
}

}  // namespace

void split_scratch(int64_t floats, int64_t n, Tensor& partial, Tensor& counters) {
  if (recording()) {
    make_split_scratch(partial, counters, floats, n);
    return;
  }
  thread_local SplitScratch s;
  if (!s.partial.defined() || s.partial.numel() < floats || s.counters.numel() < n)
    make_split_scratch(s.partial, s.counters, std::max<int64_t>(floats, s.partial.defined() ? s.partial.numel() : 0),
                       std::max<int64_t>(n, s.counters.defined() ? s.counters.numel() : 0));
  partial = s.partial;
  counters = s.counters;
}

namespace {

// Engine weights and workspaces resident in device memory, in bytes.
std::atomic<int64_t> weights_now{0}, weights_peak{0}, workspace_now{0};

}  // namespace

void note_weights(int64_t bytes) {
  const int64_t now = weights_now.fetch_add(bytes) + bytes;
  int64_t peak = weights_peak.load();
  while (now > peak && !weights_peak.compare_exchange_weak(peak, now)) {
  }
}

void note_workspace(int64_t bytes) { workspace_now.fetch_add(bytes); }

backends::DeviceMemoryStats memory_stats() {
  backends::DeviceMemoryStats s;
  s.weights_bytes = static_cast<size_t>(weights_now.load());
  s.weights_peak_bytes = static_cast<size_t>(weights_peak.load());
  s.workspace_bytes = static_cast<size_t>(workspace_now.load());
  cudaMemPool_t pool;
  if (unavailable_reason().empty() && cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess) {
    uint64_t used = 0, reserved = 0;
    if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used) == cudaSuccess)
      s.activations_peak_bytes = static_cast<size_t>(used);
    if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reserved) == cudaSuccess)
      s.activations_reserved_peak_bytes = static_cast<size_t>(reserved);
  }
  (void)cudaGetLastError();
  if (unavailable_reason().empty()) replay_memory(s.replay_bytes, s.replay_peak_bytes);
  return s;
}

Tensor to_device(const Tensor& t) {
  REFORGE_CHECK(t.on_host(), "to_device: ", t.describe(), " is already in device memory");
  // A recorded copy would read the host memory again at every replay, long after `t` is gone.
  REFORGE_CHECK(!recording(), "a copy of ", t.describe(), " from host memory cannot be part of a recorded run");
  Tensor d = device_tensor(t.dtype(), t.shape());
  // From pageable memory the call returns once the bytes are staged, so `t` may go at once; from
  // pinned memory it returns at once, and `t` (a run's input: held to the run's end, when the
  // stream is waited for) must live until the stream's work is done.
  if (t.nbytes())
    REFORGE_CUDA_CHECK(cudaMemcpyAsync(d.mutable_raw(), t.raw(), t.nbytes(), cudaMemcpyHostToDevice, stream()));
  return d;
}

Tensor download(const Tensor& t) {
  REFORGE_CHECK(!t.on_host(), "download: ", t.describe(), " is in host memory");
  REFORGE_CHECK(!recording(), "reading ", t.describe(), " on the host cannot be part of a recorded run");
  Tensor h = Tensor::uninitialized(t.dtype(), t.shape());
  if (t.nbytes()) {
    REFORGE_CUDA_CHECK(cudaMemcpyAsync(h.mutable_raw(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost, stream()));
    REFORGE_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  return h;
}

void add_kernel(backends::KernelRegistry& r, const std::string& domain, const std::string& op_type,
                ops::KernelFn kernel, ops::CheckFn check, ops::PrepareFn prepare, backends::ShapeCheckFn shape_check) {
  bool any = false;
  for (const ops::OpDef* def : ops::OpRegistry::global().entries()) {
    if (def->domain != domain || def->op_type != op_type) continue;
    r.add({"cuda", domain, op_type, def->since_version, def->end_version, kernel, check, prepare, shape_check});
    any = true;
  }
  REFORGE_CHECK(any, "internal error: CUDA kernel for unregistered op ", domain.empty() ? "" : domain + "::", op_type);
}

int multiprocessors() {
  static const int n = [] {
    int device = 0, count = 0;
    REFORGE_CUDA_CHECK(cudaGetDevice(&device));
    REFORGE_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count > 0 ? count : 1;
  }();
  return n;
}

}  // namespace reforge::cuda
