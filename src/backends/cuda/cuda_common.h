// The CUDA backend's shared host-side pieces: error checks, the calling thread's stream, device
// tensors, and the registration of each kernel family.
//
// Every kernel runs on the calling thread's default stream (cudaStreamPerThread): an engine run
// stays on one thread, so its kernels are ordered among themselves, and runs on other threads
// overlap with it. Activations come from CUDA's stream-ordered pool (cudaMallocAsync on that
// stream, kept by the pool for reuse rather than returned to the driver); engine weights are one
// cudaMalloc allocation per weight version (weights.cc), filled by reforge::ToDevice's prepare
// steps through the backend's WeightMemory. The engine waits
// for the stream at the end of each run (Backend::synchronize), which is also where errors of
// asynchronous work surface.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "backends/backend.h"
#include "core/tensor.h"

namespace reforge::cuda {

// Throws an Error with `what` and CUDA's message unless `status` is cudaSuccess.
void check(cudaError_t status, const char* what);
#define REFORGE_CUDA_CHECK(expr) ::reforge::cuda::check((expr), #expr)
// Throws when the last kernel launch failed, naming `kernel`.
void check_launch(const char* kernel);

// The calling thread's stream.
inline cudaStream_t stream() { return cudaStreamPerThread; }

// The bytes a device buffer of `bytes` takes: at least 256 and a multiple of 256, as the
// stream-ordered pool aligns them (cuBLASLt chooses kernels by pointer alignment).
inline size_t aligned_device_bytes(size_t bytes) { return bytes < 256 ? 256 : (bytes + 255) / 256 * 256; }
// Uninitialized device memory of `dtype` and `shape`, from the stream-ordered pool.
Tensor device_tensor(DType dtype, Shape shape);
// Uninitialized pinned host memory (cudaHostAlloc) of `dtype` and `shape` (Memory::Pinned).
Tensor pinned_tensor(DType dtype, Shape shape);
// Where weight versions' device weights live (weights.cc: one allocation per version).
backends::WeightMemory* weight_memory();
// Records `bytes` more (or, negative, fewer) of engine weights in device memory.
void note_weights(int64_t bytes);
// Scratch of kernels that split a sum over blocks, the block that finishes last adding the parts
// (gemv, decoding attention): `partial` of at least `floats` float32 and `counters` of at least
// `n` int32 zeros, which every such kernel leaves zero. The calling thread's buffers, grown as
// needed (its stream orders their uses); a recording gets its own.
void split_scratch(int64_t floats, int64_t n, Tensor& partial, Tensor& counters);
// A copy of host tensor `t` in stream-ordered device memory (for values of a run).
Tensor to_device(const Tensor& t);
// A host copy of device tensor `t` (waits for the stream).
Tensor download(const Tensor& t);

// The device's profiler (trace.cc: CUPTI, loaded when a trace starts).
backends::DeviceTracer* tracer();
// What the device's memory holds for this process (weights, workspaces, the pool's peaks).
backends::DeviceMemoryStats memory_stats();
// Recorded replay of device work as CUDA graphs (replay.cc).
backends::DeviceRecorder* recorder();
// True while the calling thread's work is being recorded (kernels then take scratch memory from
// device_tensor, which the recording owns, never from per-thread buffers).
bool recording();
// While recording (only then): `bytes` of device memory where a kernel flags a failure that its
// eager form would raise after waiting for the device (an index out of range). The recording
// copies them to the host after every replay and calls `check` with them, which throws the same
// Error the eager kernel throws. The kernel must clear the flag as part of its recorded work.
void* deferred_check(size_t bytes, std::function<void(const void*)> check);
// Device memory that recordings hold for their values (CUDA's graph memory), now and at peak.
void replay_memory(size_t& now, size_t& peak);
// Records `bytes` more (or, negative, fewer) of library workspace in device memory.
void note_workspace(int64_t bytes);

// "" when a CUDA device can be used, else why not (no driver, no device).
std::string unavailable_reason();

// The device's multiprocessors (asked once).
int multiprocessors();
// Launch shape for `n` independent elements, 256 threads a block.
inline unsigned blocks_for(int64_t n, int threads = 256) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 2147483647 ? 2147483647 : b));
}

// Registers `kernel` on "cuda" for every opset range of (domain, op_type) in the op registry,
// with its checker of the node, its prepare step and its check of the input shapes the build
// infers (backends/backend.h: ShapeCheckFn), each optional.
void add_kernel(backends::KernelRegistry& r, const std::string& domain, const std::string& op_type,
                ops::KernelFn kernel, ops::CheckFn check = nullptr, ops::PrepareFn prepare = nullptr,
                backends::ShapeCheckFn shape_check = nullptr);

// The backend descriptor ("cuda").
backends::Backend backend();

// Kernel families (one file each).
void register_transfer_kernels(backends::KernelRegistry& r);     // transfer.cc: ToDevice, ToHost
void register_view_kernels(backends::KernelRegistry& r);         // views.cc: Reshape, Squeeze, ..., Shape, Size
void register_elementwise_kernels(backends::KernelRegistry& r);  // elementwise.cu: binary arithmetic, compare
void register_matmul_kernels(backends::KernelRegistry& r);       // matmul.cu: MatMul, Gemm, MatMulAdd (cuBLASLt)
void register_conv_kernels(backends::KernelRegistry& r);         // conv.cu: Conv (cuDNN)
void register_pool_kernels(backends::KernelRegistry& r);         // pool.cu: Max/Average/Global pools
void register_unary_kernels(backends::KernelRegistry& r);        // unary.cu: math, activations, Clip, Not
void register_fused_unary_kernels(backends::KernelRegistry& r);  // fused_unary.cu: reforge::Gelu, Silu, SiluMul
void register_select_kernels(backends::KernelRegistry& r);       // select.cu: Where, Min/Max/Sum/Mean, Mod, PRelu
void register_cast_kernels(backends::KernelRegistry& r);         // cast.cu: Cast, CastLike
void register_layout_kernels(backends::KernelRegistry& r);  // layout.cu: Transpose, Concat, Split, Slice, Tile, ...
void register_gather_kernels(backends::KernelRegistry& r);  // gather.cu: Gather*, Scatter*
void register_tensor_misc_kernels(backends::KernelRegistry& r);  // tensor_misc.cu: Expand, ConstantOfShape, Range
void register_pad_kernels(backends::KernelRegistry& r);          // pad.cu: Pad
void register_nonzero_kernels(backends::KernelRegistry& r);      // nonzero.cu: NonZero
void register_reduce_kernels(backends::KernelRegistry& r);       // reduce.cu: Reduce*, ArgMax, ArgMin
void register_softmax_kernels(backends::KernelRegistry& r);      // softmax.cu: Softmax, LogSoftmax
void register_norm_kernels(backends::KernelRegistry& r);         // norm.cu: Layer/RMSNormalization, RmsNorm
void register_batch_norm_kernels(backends::KernelRegistry& r);   // norm2.cu: Batch/Instance/GroupNormalization, Dropout
void register_cumsum_topk_kernels(backends::KernelRegistry& r);  // cumsum_topk.cu: CumSum, CumProd, TopK
void register_attention_kernels(backends::KernelRegistry& r);    // attention.cu: Attention, reforge::Attention
void register_rotary_kernels(backends::KernelRegistry& r);       // rotary.cu: RotaryEmbedding, reforge::Rotary

void register_resize_kernels(backends::KernelRegistry& r);          // resize.cu: Resize
void register_conv_transpose_kernels(backends::KernelRegistry& r);  // conv_transpose.cu: ConvTranspose (cuDNN)
void register_einsum_kernels(backends::KernelRegistry& r);          // einsum.cu: Einsum

}  // namespace reforge::cuda
