#include "backends/cuda/gemv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/group_reduce.cuh"

namespace reforge::cuda {

namespace {

constexpr int kWarps = 8;                 // per block
constexpr int kThreads = kWarps * 32;
constexpr int kCols = 256;                // columns per block: 32 lanes x 8
constexpr int kUnroll = 8;                // rows in flight per warp (the default; 4 and 8 are built)
constexpr int kRowStep = kWarps * 8;       // a block's slice is a multiple of it (of kWarps * U for every U)
constexpr int64_t kMaxSliceRows = 1024;   // A's slice is held in shared memory (float32)

// The products of one launch: B and C of each, its columns, its first column range (range[count]
// is every product's), and where its partial sums start.
struct Products {
  const void* b[kGemvMaxProducts] = {};
  void* c[kGemvMaxProducts] = {};
  int64_t n[kGemvMaxProducts] = {};
  int64_t range[kGemvMaxProducts + 1] = {};
  int64_t partial[kGemvMaxProducts] = {};
  const float* bias[kGemvMaxProducts] = {};  // added to the finished sums where given
  int count = 0;
};

// grid (column ranges of every product, slices); see gemv.h. `partial` ([slices][M][N] float32
// per product) and `counters` [column ranges] (zero between launches) are used only with more
// than one slice.
// TA: A's and C's type; TB: B's (a 16-bit type).
template <typename TA, typename TB, int M, int U>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const TA* __restrict__ a, const Products p,
                                                       float* __restrict__ partial_all,
                                                       unsigned* __restrict__ counters, int64_t K,
                                                       int64_t slice_rows) {
  __shared__ float xs[M][kMaxSliceRows];
  __shared__ float sum[M][kCols];
  __shared__ bool last;
  int q = 0;
  while (q + 1 < p.count && blockIdx.x >= p.range[q + 1]) ++q;
  const TB* __restrict__ b = static_cast<const TB*>(p.b[q]);
  TA* __restrict__ c = static_cast<TA*>(p.c[q]);
  const float* __restrict__ bias = p.bias[q];
  const int64_t N = p.n[q], range = blockIdx.x - p.range[q];
  float* __restrict__ partial = partial_all ? partial_all + p.partial[q] : nullptr;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t k0 = blockIdx.y * slice_rows;
  const int64_t rows = min(slice_rows, K - k0);
  for (int64_t i = threadIdx.x; i < int64_t{M} * rows; i += kThreads) {
    const int64_t m = i / rows, k = i - m * rows;
    xs[m][k] = load_c(a, m * K + k0 + k);
  }
  __syncthreads();
  const int64_t col = range * kCols + lane * 8;
  float acc[M][8];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[m][j] = 0.f;
  if (col < N) {
    const TB* bp = b + k0 * N + col;
    int64_t k = warp;
    for (; k + (U - 1) * kWarps < rows; k += kWarps * U) {
      uint4 v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = __ldcs(reinterpret_cast<const uint4*>(bp + (k + u * kWarps) * N));
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float w[8];
        unpack8<TB>(v[u], w);
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
      unpack8<TB>(v, w);
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
  const int64_t base = range * kCols;
  if (gridDim.y == 1) {
    for (int i = threadIdx.x; i < M * kCols; i += kThreads) {
      const int m = i / kCols, j = i % kCols;
      if (base + j < N) c[m * N + base + j] = store_c<TA>(bias ? sum[m][j] + bias[base + j] : sum[m][j]);
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
    // Eight slices' sums loaded at once (their latencies overlap), added in slice order.
    float s = 0.f;
    for (unsigned y0 = 0; y0 < gridDim.y; y0 += 8) {
      float v[8];
#pragma unroll
      for (unsigned u = 0; u < 8; ++u)
        if (y0 + u < gridDim.y) v[u] = __ldcg(&partial[(int64_t{y0 + u} * M + m) * N + base + j]);
#pragma unroll
      for (unsigned u = 0; u < 8; ++u)
        if (y0 + u < gridDim.y) s += v[u];
    }
    c[m * N + base + j] = store_c<TA>(bias ? s + bias[base + j] : s);
  }
  if (threadIdx.x == 0) counters[blockIdx.x] = 0;
}

constexpr int kBlocksPerSm = 2;                     // the split's default aim
constexpr int64_t kGroupMinWeights = int64_t{1} << 22;  // the weights of a group the kernel takes
constexpr int64_t kGroupMaxWeights = int64_t{1} << 24;

template <typename TA, typename TB, int M, int U>
void launch(const void* a, Products p, int64_t K, int per_sm) {
  const int64_t ranges = p.range[p.count];
  // Slices: enough blocks to keep every multiprocessor streaming (`per_sm` blocks each), each
  // slice a multiple of kRowStep rows and at most kMaxSliceRows.
  const int64_t want = std::max<int64_t>(1, (per_sm * multiprocessors() + ranges - 1) / ranges);
  int64_t slice = (K + want - 1) / want;
  slice = std::min<int64_t>(kMaxSliceRows, std::max<int64_t>(kRowStep, (slice + kRowStep - 1) / kRowStep * kRowStep));
  const int64_t slices = (K + slice - 1) / slice;
  int64_t floats = 0;
  for (int q = 0; q < p.count; ++q) {
    p.partial[q] = floats;
    floats += slices * M * p.n[q];
  }
  Tensor partial, counters;
  if (slices > 1) split_scratch(floats, ranges, partial, counters);
  const dim3 grid(static_cast<unsigned>(ranges), static_cast<unsigned>(slices));
  gemv_kernel<TA, TB, M, U><<<grid, kThreads, 0, stream()>>>(
      static_cast<const TA*>(a), p, slices > 1 ? static_cast<float*>(partial.mutable_raw()) : nullptr,
      slices > 1 ? static_cast<unsigned*>(counters.mutable_raw()) : nullptr, K, slice);
  check_launch("gemv_kernel");
}

template <typename TA, typename TB, int U>
void launch_rows(int64_t M, const void* a, const Products& p, int64_t K, int per_sm) {
  switch (M) {
    case 1: return launch<TA, TB, 1, U>(a, p, K, per_sm);
    case 2: return launch<TA, TB, 2, U>(a, p, K, per_sm);
    case 3: return launch<TA, TB, 3, U>(a, p, K, per_sm);
    case 4: return launch<TA, TB, 4, U>(a, p, K, per_sm);
    case 5: return launch<TA, TB, 5, U>(a, p, K, per_sm);
    case 6: return launch<TA, TB, 6, U>(a, p, K, per_sm);
    case 7: return launch<TA, TB, 7, U>(a, p, K, per_sm);
    default: return launch<TA, TB, 8, U>(a, p, K, per_sm);
  }
}

// Runs the products of `p` (ranges filled here) in one launch.
void run(DType dtype, int64_t M, const void* a, Products p, int64_t K, int per_sm, int unroll) {
  for (int q = 0; q < p.count; ++q) p.range[q + 1] = p.range[q] + (p.n[q] + kCols - 1) / kCols;
  const bool bf16 = dtype == DType::BFloat16;
  using B16 = __nv_bfloat16;
  if (unroll == 4)
    bf16 ? launch_rows<B16, B16, 4>(M, a, p, K, per_sm) : launch_rows<__half, __half, 4>(M, a, p, K, per_sm);
  else
    bf16 ? launch_rows<B16, B16, 8>(M, a, p, K, per_sm) : launch_rows<__half, __half, 8>(M, a, p, K, per_sm);
}

// ---- B stored transposed: Bt [N, K], K contiguous ------------------------------------------
// A warp owns R columns of C and one of S slices of K (the block's 8 warps: 8 / S column groups
// of R columns, S slices each); each lane reads 16 bytes (8 values) of each of its R rows of Bt
// per step, U steps at once (R * U loads in flight), A's matching 16 bytes from L1, and
// accumulates in float32. The lanes' sums are added by a butterfly of shuffles; the slices' sums
// in slice order through shared memory. Every order is fixed: the result does not depend on
// scheduling.
constexpr int kNtU = 4;

template <typename T, int M, int R>
__global__ void __launch_bounds__(kThreads) gemv_nt_kernel(const T* __restrict__ a, const Products p, int64_t K,
                                                          int S) {
  __shared__ float part[kWarps][M][R];
  int q = 0;
  while (q + 1 < p.count && blockIdx.x >= p.range[q + 1]) ++q;
  const T* __restrict__ bt = static_cast<const T*>(p.b[q]);
  T* __restrict__ c = static_cast<T*>(p.c[q]);
  const int64_t N = p.n[q];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / S, slice = warp % S;
  const int64_t n0 = ((int64_t{blockIdx.x} - p.range[q]) * (kWarps / S) + group) * R;
  const int64_t chunks = K / 8, per_slice = (chunks + S - 1) / S;
  const int64_t c0 = slice * per_slice, c1 = min(chunks, c0 + per_slice);
  float acc[M][R];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.f;
  const uint4* __restrict__ b4 = reinterpret_cast<const uint4*>(bt);
  const uint4* __restrict__ a4 = reinterpret_cast<const uint4*>(a);
  int64_t rowoff[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rowoff[r] = min(n0 + r, N - 1) * chunks;
  int64_t ch = c0 + lane;
  for (; ch + (kNtU - 1) * 32 < c1; ch += kNtU * 32) {
    uint4 v[kNtU][R];
#pragma unroll
    for (int u = 0; u < kNtU; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) v[u][r] = __ldcs(b4 + rowoff[r] + ch + u * 32);
#pragma unroll
    for (int u = 0; u < kNtU; ++u)
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float x[8];
        unpack8<T>(__ldg(a4 + m * chunks + ch + u * 32), x);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float w[8];
          unpack8<T>(v[u][r], w);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[m][r] = fmaf(x[j], w[j], acc[m][r]);
        }
      }
  }
  for (; ch < c1; ch += 32) {
    uint4 v[R];
#pragma unroll
    for (int r = 0; r < R; ++r) v[r] = __ldcs(b4 + rowoff[r] + ch);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float x[8];
      unpack8<T>(__ldg(a4 + m * chunks + ch), x);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float w[8];
        unpack8<T>(v[r], w);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[m][r] = fmaf(x[j], w[j], acc[m][r]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
  if (S == 1) {
    if (lane == 0)
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (n0 + r < N) c[m * N + n0 + r] = store_c<T>(acc[m][r]);
    return;
  }
  if (lane == 0)
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int r = 0; r < R; ++r) part[warp][m][r] = acc[m][r];
  __syncthreads();
  if (slice != 0 || lane >= M * R) return;
  const int m = lane / R, r = lane % R;
  float s = 0.f;
  for (int i = 0; i < S; ++i) s += part[warp + i][m][r];
  if (n0 + r < N) c[m * N + n0 + r] = store_c<T>(s);
}

template <typename T, int M, int R>
void launch_nt(const void* a, const Products& p, int64_t K, int S) {
  gemv_nt_kernel<T, M, R><<<static_cast<unsigned>(p.range[p.count]), kThreads, 0, stream()>>>(static_cast<const T*>(a),
                                                                                              p, K, S);
  check_launch("gemv_nt_kernel");
}

template <typename T, int R>
void launch_nt_rows(int64_t M, const void* a, const Products& p, int64_t K, int S) {
  switch (M) {
    case 1: return launch_nt<T, 1, R>(a, p, K, S);
    case 2: return launch_nt<T, 2, R>(a, p, K, S);
    case 3: return launch_nt<T, 3, R>(a, p, K, S);
    case 4: return launch_nt<T, 4, R>(a, p, K, S);
    default: return launch_nt<T, 8, R>(a, p, K, S);
  }
}

// Runs the products of `p` (B stored transposed; ranges filled here) in one launch: `rows_per_warp`
// and `slices` as gemv_product_nt takes them. False (nothing ran) for a shape it does not take.
bool run_nt(DType dtype, int64_t M, int64_t K, const void* a, Products p, int rows_per_warp, int slices) {
  if (dtype != DType::BFloat16 && dtype != DType::Float16) return false;
  if (M < 1 || M > kGemvMaxRows || (M > 4 && M != 8) || K <= 0 || K % 8 != 0 || !aligned16(a)) return false;
  int64_t total_n = 0;
  for (int q = 0; q < p.count; ++q) {
    if (p.n[q] <= 0 || !aligned16(p.b[q])) return false;
    total_n += p.n[q];
  }
  // One row per warp: on an H100 the fastest or within 3% of it on every one-row shape of the
  // Llama decoding steps timed (docs/benchmarks.md).
  const int R = rows_per_warp > 0 ? rows_per_warp : 1;
  if (R != 1 && R != 2 && R != 4) return false;
  int S = slices;
  if (S <= 0) {
    // Enough blocks for two per multiprocessor where the columns allow, each warp's slice at
    // least kNtU steps of its lanes.
    S = 1;
    while (S < kWarps && total_n / (int64_t{kWarps / S} * R) < 2 * multiprocessors() && K / 8 / (2 * S) >= 32 * kNtU)
      S *= 2;
  }
  if (S != 1 && S != 2 && S != 4 && S != 8) return false;
  const int64_t cols_per_block = int64_t{kWarps / S} * R;
  for (int q = 0; q < p.count; ++q) p.range[q + 1] = p.range[q] + (p.n[q] + cols_per_block - 1) / cols_per_block;
  const bool bf16 = dtype == DType::BFloat16;
  switch (R) {
    case 1:
      bf16 ? launch_nt_rows<__nv_bfloat16, 1>(M, a, p, K, S) : launch_nt_rows<__half, 1>(M, a, p, K, S);
      break;
    case 2:
      bf16 ? launch_nt_rows<__nv_bfloat16, 2>(M, a, p, K, S) : launch_nt_rows<__half, 2>(M, a, p, K, S);
      break;
    default:
      bf16 ? launch_nt_rows<__nv_bfloat16, 4>(M, a, p, K, S) : launch_nt_rows<__half, 4>(M, a, p, K, S);
      break;
  }
  return true;
}

}  // namespace

bool gemv_product(DType dtype, const ops::nn::MatmulDims& d, const void* a, const void* b, void* c,
                  int blocks_per_sm, int rows_in_flight) {
  if (dtype != DType::BFloat16 && dtype != DType::Float16) return false;
  if (d.trans_a || d.trans_b || d.alpha != 1.0f || d.beta != 0.0f || d.K <= 0 || d.N % 8 != 0) return false;
  // A batch of products sharing B is one product of batch * M rows.
  if (d.batch > 1 && (!d.b_broadcast || d.a_broadcast)) return false;
  const int64_t M = d.batch * d.M;
  if (M < 1 || M > kGemvMaxRows || !aligned16(b) || !aligned16(c)) return false;
  // One product alone runs on cuBLASLt: timed side by side on an H100 and an H200, cuBLASLt
  // streamed every decoding shape of one row and of eight faster than this kernel
  // (docs/benchmarks.md). The kernel runs one product only when asked (blocks_per_sm given).
  if (blocks_per_sm == 0) return false;
  Products p;
  p.b[0] = b;
  p.c[0] = c;
  p.n[0] = d.N;
  p.count = 1;
  run(dtype, M, a, p, d.K, blocks_per_sm > 0 ? blocks_per_sm : kBlocksPerSm,
      rows_in_flight > 0 ? rows_in_flight : kUnroll);
  return true;
}

bool gemv_products(DType dtype, int64_t M, int64_t K, const void* a, const std::vector<GemvOutput>& outputs) {
  if (dtype != DType::BFloat16 && dtype != DType::Float16) return false;
  // One row (a decoding step of one sequence): the kernel's launch replaces one per product. With
  // more rows cuBLASLt's products were faster (docs/benchmarks.md).
  if (M != 1 || K <= 0 || outputs.size() < 2 || outputs.size() > kGemvMaxProducts) return false;
  Products p;
  int64_t weights = 0;
  for (const GemvOutput& o : outputs) {
    if (o.n <= 0 || o.n % 8 != 0 || !aligned16(o.b) || !aligned16(o.c)) return false;
    p.b[p.count] = o.b;
    p.c[p.count] = o.c;
    p.n[p.count] = o.n;
    ++p.count;
    weights += K * o.n;
  }
  // Groups of 2^22 to 2^24 weights (a layer's query, key and value projections): larger ones run as
  // their products, each on cuBLASLt, which streams large weights faster.
  if (weights < kGroupMinWeights || weights >= kGroupMaxWeights) return false;
  run(dtype, M, a, p, K, kBlocksPerSm, kUnroll);
  return true;
}


bool gemv_matmul_add(int64_t M, int64_t K, int64_t N, const float* x, DType w_dtype, const void* w,
                     const float* bias, float* y) {
  if (w_dtype != DType::BFloat16 && w_dtype != DType::Float16) return false;
  if (M < 1 || M > kGemvMaxRows || K <= 0 || N % 8 != 0 || !aligned16(w)) return false;
  Products p;
  p.b[0] = w;
  p.c[0] = y;
  p.n[0] = N;
  p.bias[0] = bias;
  p.count = 1;
  p.range[1] = (N + kCols - 1) / kCols;
  if (w_dtype == DType::BFloat16)
    launch_rows<float, __nv_bfloat16, kUnroll>(M, x, p, K, kBlocksPerSm);
  else
    launch_rows<float, __half, kUnroll>(M, x, p, K, kBlocksPerSm);
  return true;
}

bool gemv_product_nt(DType dtype, int64_t M, int64_t K, int64_t N, const void* a, const void* bt, void* c,
                     int rows_per_warp, int slices) {
  Products p;
  p.b[0] = bt;
  p.c[0] = c;
  p.n[0] = N;
  p.count = 1;
  return run_nt(dtype, M, K, a, p, rows_per_warp, slices);
}

bool gemv_products_nt(DType dtype, int64_t M, int64_t K, const void* a, const std::vector<GemvOutput>& outputs) {
  // One row (a decoding step of one sequence): with 4 and 8 rows cuBLASLt was faster on an H100.
  if (M != 1 || outputs.empty() || outputs.size() > kGemvMaxProducts) return false;
  Products p;
  for (const GemvOutput& o : outputs) {
    p.b[p.count] = o.b;
    p.c[p.count] = o.c;
    p.n[p.count] = o.n;
    ++p.count;
  }
  return run_nt(dtype, M, K, a, p, 0, 0);
}

}  // namespace reforge::cuda
