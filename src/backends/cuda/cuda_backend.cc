#include "backends/cuda/cuda_backend.h"

#include <algorithm>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cudnn_common.h"
#include "backends/cuda/device_ops.h"

namespace reforge::cuda {

namespace {

Tensor allocate_device(DType dtype, Shape shape) { return device_tensor(dtype, std::move(shape)); }

// Copies between any two memories, finished when it returns.
void copy_memory(void* dst, Memory dst_memory, const void* src, Memory src_memory, size_t bytes) {
  REFORGE_CHECK(!recording() || (dst_memory == Memory::Device && src_memory == Memory::Device),
                "a copy between host and device memory cannot be part of a recorded run");
  REFORGE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()));
  REFORGE_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

// Zeros on the device, in order with the calling thread's work.
void zero_memory(void* dst, size_t bytes) { REFORGE_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream())); }

// Rows within device memory, in order with the calling thread's work (recorded when it records).
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows) {
  if (!row_bytes || !rows) return;
  REFORGE_CUDA_CHECK(
      cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice, stream()));
}

void synchronize() { REFORGE_CUDA_CHECK(cudaStreamSynchronize(stream())); }

// Twice the device's L2 cache, written with a memset: whatever the cache held is evicted. The
// buffer is made once per process and kept (each thread's stream writes it in turn).
void flush_caches() {
  static Tensor buffer = [] {
    int device = 0, l2 = 0;
    REFORGE_CUDA_CHECK(cudaGetDevice(&device));
    REFORGE_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    return device_tensor(DType::UInt8, {std::max<int64_t>(2 * static_cast<int64_t>(l2), int64_t{1} << 20)});
  }();
  REFORGE_CUDA_CHECK(cudaMemsetAsync(buffer.mutable_raw(), 0, buffer.nbytes(), stream()));
}

// The backend's capabilities (backends/capabilities.h).
class Streams final : public backends::DeviceStreams {
 public:
  ops::OutputAllocator& allocator() override { return device_outputs(); }
  void synchronize() override { cuda::synchronize(); }
  backends::DeviceMemoryStats memory_stats() const override { return cuda::memory_stats(); }
  void flush_caches() override { cuda::flush_caches(); }
};

class CudnnTimingCache final : public backends::TimingCache {
 public:
  std::string save() const override { return save_timing_cache(); }
  void load(const std::string& text, const std::string& where) override { load_timing_cache(text, where); }
};

// The weight layouts a CUDA build wants: 16-bit products' matrices stored transposed, which the
// decoding products read as whole rows (gemv.h); no panels (a CPU layout).
class Layouts final : public backends::WeightLayoutPolicy {
 public:
  backends::LayoutChoice choose(const backends::LayoutRequest&) const override {
    backends::LayoutChoice c;
    c.linear_transposed = true;
    return c;
  }
};

}  // namespace

backends::Backend backend() {
  static const DeviceMemory memory{allocate_device, pinned_tensor, copy_memory, zero_memory, copy_rows};
  set_device_memory(&memory);
  backends::Backend b;
  b.name = "cuda";
  b.memory = Memory::Device;
  b.runs_reference_kernels = false;
  static Streams streams;
  static CudnnTimingCache timing_cache;
  b.streams = &streams;
  b.timing_cache = &timing_cache;
  static Layouts layouts;
  b.layouts = &layouts;
  b.weight_memory = weight_memory();
  b.unavailable = unavailable_reason;
  b.tracer = tracer();
  b.recorder = recorder();
  b.register_kernels = [](backends::KernelRegistry& r) {
    register_transfer_kernels(r);
    register_view_kernels(r);
    register_elementwise_kernels(r);
    register_matmul_kernels(r);
    register_conv_kernels(r);
    register_pool_kernels(r);
    register_unary_kernels(r);
    register_fused_unary_kernels(r);
    register_select_kernels(r);
    register_cast_kernels(r);
    register_layout_kernels(r);
    register_gather_kernels(r);
    register_tensor_misc_kernels(r);
    register_pad_kernels(r);
    register_nonzero_kernels(r);
    register_reduce_kernels(r);
    register_softmax_kernels(r);
    register_norm_kernels(r);
    register_batch_norm_kernels(r);
    register_cumsum_topk_kernels(r);
    register_attention_kernels(r);
    register_rotary_kernels(r);
    register_resize_kernels(r);
    register_conv_transpose_kernels(r);
    register_einsum_kernels(r);
  };
  return b;
}

}  // namespace reforge::cuda
