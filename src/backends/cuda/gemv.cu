#include "backends/cuda/gemv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"

namespace reforge::cuda {

namespace {

constexpr int kWarps = 8;                 // per block
constexpr int kThreads = kWarps * 32;
constexpr int kCols = 256;                // columns per block: 32 lanes x 8
constexpr int kUnroll = 4;                // rows in flight per warp
constexpr int kRowStep = kWarps * kUnroll;  // a block's slice is a multiple of it
constexpr int64_t kMaxSliceRows = 1024;   // A's slice is held in shared memory (float32)

template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    } else {
      __half2 h;
      memcpy(&h, &w[i], sizeof(h));
      const float2 g = __half22float2(h);
      f[2 * i] = g.x;
      f[2 * i + 1] = g.y;
    }
  }
}

// grid (column ranges, slices); see gemv.h. `partial` [slices][M][N] float32 and `counters`
// [column ranges] (zero between products) are used only with more than one slice.
template <typename T, int M>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                                       T* __restrict__ c, float* __restrict__ partial,
                                                       unsigned* __restrict__ counters, int64_t N, int64_t K,
                                                       int64_t slice_rows) {
  __shared__ float xs[M][kMaxSliceRows];
  __shared__ float sum[M][kCols];
  __shared__ bool last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t k0 = blockIdx.y * slice_rows;
  const int64_t rows = min(slice_rows, K - k0);
  for (int64_t i = threadIdx.x; i < int64_t{M} * rows; i += kThreads) {
    const int64_t m = i / rows, k = i - m * rows;
    xs[m][k] = load_c(a, m * K + k0 + k);
  }
  __syncthreads();
  const int64_t col = int64_t{blockIdx.x} * kCols + lane * 8;
  float acc[M][8];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[m][j] = 0.f;
  if (col < N) {
    const T* bp = b + k0 * N + col;
    int64_t k = warp;
    for (; k + (kUnroll - 1) * kWarps < rows; k += kRowStep) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = __ldcs(reinterpret_cast<const uint4*>(bp + (k + u * kWarps) * N));
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float w[8];
        unpack8<T>(v[u], w);
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const float x = xs[m][k + u * kWarps];
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[m][j] = fmaf(x, w[j], acc[m][j]);
        }
      }
    }
    for (; k < rows; k += kWarps) {
      const uint4 v = __ldcs(reinterpret_cast<const uint4*>(bp + k * N));
      float w[8];
      unpack8<T>(v, w);
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[m][j] = fmaf(xs[m][k], w[j], acc[m][j]);
    }
  }
  // The warps' sums, added in warp order.
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w)
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int j = 0; j < 8; ++j) sum[m][lane * 8 + j] = w == 0 ? acc[m][j] : sum[m][lane * 8 + j] + acc[m][j];
    __syncthreads();
  }
  const int64_t base = int64_t{blockIdx.x} * kCols;
  if (gridDim.y == 1) {
    for (int i = threadIdx.x; i < M * kCols; i += kThreads) {
      const int m = i / kCols, j = i % kCols;
      if (base + j < N) c[m * N + base + j] = store_c<T>(sum[m][j]);
    }
    return;
  }
  for (int i = threadIdx.x; i < M * kCols; i += kThreads) {
    const int m = i / kCols, j = i % kCols;
    if (base + j < N) partial[(int64_t{blockIdx.y} * M + m) * N + base + j] = sum[m][j];
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&counters[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = threadIdx.x; i < M * kCols; i += kThreads) {
    const int m = i / kCols, j = i % kCols;
    if (base + j >= N) continue;
    float s = 0.f;
    for (unsigned y = 0; y < gridDim.y; ++y) s += __ldcg(&partial[(int64_t{y} * M + m) * N + base + j]);
    c[m * N + base + j] = store_c<T>(s);
  }
  if (threadIdx.x == 0) counters[blockIdx.x] = 0;
}

// The calling thread's partial sums and counters (grown as needed; counters zero between
// products, as every product leaves them); a recording gets its own.
struct Scratch {
  Tensor partial, counters;
};

void scratch_for(int64_t partial_floats, int64_t ranges, Tensor& partial, Tensor& counters) {
  auto make = [](Tensor& p, Tensor& cnt, int64_t floats, int64_t n) {
    p = device_tensor(DType::Float32, {floats});
    cnt = device_tensor(DType::Int32, {n});
    REFORGE_CUDA_CHECK(cudaMemsetAsync(cnt.mutable_raw(), 0, static_cast<size_t>(n) * 4, stream()));
  };
  if (recording()) {
    make(partial, counters, partial_floats, ranges);
    return;
  }
  thread_local Scratch s;
  if (!s.partial.defined() || s.partial.numel() < partial_floats || s.counters.numel() < ranges)
    make(s.partial, s.counters, std::max<int64_t>(partial_floats, s.partial.defined() ? s.partial.numel() : 0),
         std::max<int64_t>(ranges, s.counters.defined() ? s.counters.numel() : 0));
  partial = s.partial;
  counters = s.counters;
}

constexpr int kBlocksPerSm = 2;                     // the split's default aim
constexpr int64_t kGemvMinWeights = int64_t{1} << 24;  // weights from which the kernel runs

template <typename T, int M>
void launch(const void* a, const void* b, void* c, int64_t N, int64_t K, int per_sm) {
  const int64_t ranges = (N + kCols - 1) / kCols;
  // Slices: enough blocks to keep every multiprocessor streaming (`per_sm` blocks each), each
  // slice a multiple of kRowStep rows and at most kMaxSliceRows.
  const int64_t want = std::max<int64_t>(1, (per_sm * multiprocessors() + ranges - 1) / ranges);
  int64_t slice = (K + want - 1) / want;
  slice = std::min<int64_t>(kMaxSliceRows, std::max<int64_t>(kRowStep, (slice + kRowStep - 1) / kRowStep * kRowStep));
  const int64_t slices = (K + slice - 1) / slice;
  Tensor partial, counters;
  if (slices > 1) scratch_for(slices * M * N, ranges, partial, counters);
  const dim3 grid(static_cast<unsigned>(ranges), static_cast<unsigned>(slices));
  gemv_kernel<T, M><<<grid, kThreads, 0, stream()>>>(
      static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(c),
      slices > 1 ? static_cast<float*>(partial.mutable_raw()) : nullptr,
      slices > 1 ? static_cast<unsigned*>(counters.mutable_raw()) : nullptr, N, K, slice);
  check_launch("gemv_kernel");
}

template <typename T>
void launch_rows(int64_t M, const void* a, const void* b, void* c, int64_t N, int64_t K, int per_sm) {
  switch (M) {
    case 1: return launch<T, 1>(a, b, c, N, K, per_sm);
    case 2: return launch<T, 2>(a, b, c, N, K, per_sm);
    case 3: return launch<T, 3>(a, b, c, N, K, per_sm);
    case 4: return launch<T, 4>(a, b, c, N, K, per_sm);
    case 5: return launch<T, 5>(a, b, c, N, K, per_sm);
    case 6: return launch<T, 6>(a, b, c, N, K, per_sm);
    case 7: return launch<T, 7>(a, b, c, N, K, per_sm);
    default: return launch<T, 8>(a, b, c, N, K, per_sm);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_product(DType dtype, const ops::nn::MatmulDims& d, const void* a, const void* b, void* c,
                  int blocks_per_sm) {
  if (dtype != DType::BFloat16 && dtype != DType::Float16) return false;
  if (d.trans_a || d.trans_b || d.alpha != 1.0f || d.beta != 0.0f || d.K <= 0 || d.N % 8 != 0) return false;
  // A batch of products sharing B is one product of batch * M rows.
  if (d.batch > 1 && (!d.b_broadcast || d.a_broadcast)) return false;
  const int64_t M = d.batch * d.M;
  if (M < 1 || M > kGemvMaxRows || !aligned16(b) || !aligned16(c)) return false;
  // Smaller weights: cuBLASLt's kernels were faster (8 MB: 5.3 against 10.1 us on an H100; the
  // 131 MB vocabulary projection 69 against 49 us): the kernel takes the large ones only.
  if (blocks_per_sm == 0 && d.K * d.N < kGemvMinWeights) return false;
  const int per_sm = blocks_per_sm > 0 ? blocks_per_sm : kBlocksPerSm;
  if (dtype == DType::BFloat16)
    launch_rows<__nv_bfloat16>(M, a, b, c, d.N, d.K, per_sm);
  else
    launch_rows<__half>(M, a, b, c, d.N, d.K, per_sm);
  return true;
}

}  // namespace reforge::cuda
