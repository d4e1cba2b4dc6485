// CumSum, CumProd and TopK on the GPU, with the CPU's semantics (ops/reduce/cumsum.cc, topk.cc).
//
// CumSum / CumProd view X as [outer, n, inner] (axis a host input) and accumulate floats in their
// compute type (float32 for 16-bit floats) and integers in uint64, so overflow wraps as in the
// element type; `exclusive` and `reverse` as the CPU. Rows along the last axis (inner = 1) of
// more than a warp's length are scanned by one block each, a tile of 256 elements at a time
// (loads coalesced, a scan in shared memory, the tile's total carried to the next); otherwise
// each thread walks one column (adjacent threads read adjacent elements).
//
// TopK sorts each slice along the axis in the CPU's total order: by value (largest or smallest
// first, NaN larger than any number), equal values by lower index; the first k give the values
// (the input's elements, bit for bit) and their int64 indices, always sorted. Slices of up to
// S = 4096 elements (2048 for 8-byte compute types) are sorted by one block each, a bitonic sort
// in shared memory. Longer ones, with k <= S / 2, are selected in rounds: blocks sort chunks of S
// and keep each chunk's best k (the best k of a slice are among them, the order being total)
// until at most S entries are left, which are sorted whole. Longer slices with a larger k are
// sorted by a bitonic sort in global memory, one launch per merge step over every slice.
#include <type_traits>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"
#include "core/error.h"
#include "ops/reduce/scan_setup.h"

namespace reforge::cuda {

namespace {

constexpr int kThreads = 256;

#define REFORGE_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)

unsigned block_grid(int64_t blocks) {
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

// ---- CumSum / CumProd -----------------------------------------------------------------------

template <typename T>
using cum_acc_t = std::conditional_t<std::is_integral_v<T>, uint64_t, compute_t<T>>;

template <bool kProd, typename A>
__device__ __forceinline__ A cum_step(A a, A b) {
  if constexpr (kProd)
    return a * b;
  else
    return a + b;
}

// One thread per (outer, inner) column, walking the n rows in order.
template <bool kProd, typename T>
__global__ void cum_columns(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse) {
  using A = cum_acc_t<T>;
  const int64_t cols = outer * inner;
  REFORGE_GRID_LOOP(c, cols) {
    const int64_t o = c / inner, j = c - o * inner;
    const int64_t base = o * n * inner + j;
    A acc = static_cast<A>(kProd ? 1 : 0);
    for (int64_t s = 0; s < n; ++s) {
      const int64_t r = reverse ? n - 1 - s : s;
      const int64_t at = base + r * inner;
      const A v = static_cast<A>(load_c(x, at));
      if (exclusive) {
        y[at] = store_c<T>(acc);
        acc = cum_step<kProd>(acc, v);
      } else {
        acc = cum_step<kProd>(acc, v);
        y[at] = store_c<T>(acc);
      }
    }
  }
}

// One block per contiguous row of n elements, scanned a tile of kThreads at a time.
template <bool kProd, typename T>
__global__ void cum_rows(const T* x, T* y, int64_t rows, int64_t n, bool exclusive, bool reverse) {
  using A = cum_acc_t<T>;
  __shared__ A tile[kThreads];
  const A identity = static_cast<A>(kProd ? 1 : 0);
  const int t = threadIdx.x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    A carry = identity;
    for (int64_t k0 = 0; k0 < n; k0 += kThreads) {
      const int64_t k = k0 + t;
      const int64_t r = reverse ? n - 1 - k : k;
      const bool live = k < n;
      const A v = live ? static_cast<A>(load_c(xr, r)) : identity;
      tile[t] = v;
      __syncthreads();
      // Inclusive scan of the tile (Hillis-Steele).
      for (int s = 1; s < kThreads; s <<= 1) {
        const A other = t >= s ? tile[t - s] : identity;
        __syncthreads();
        if (t >= s) tile[t] = cum_step<kProd>(other, tile[t]);
        __syncthreads();
      }
      if (live) {
        const A before = t == 0 ? carry : cum_step<kProd>(carry, tile[t - 1]);
        yr[r] = store_c<T>(exclusive ? before : cum_step<kProd>(carry, tile[t]));
      }
      const A total = tile[kThreads - 1];
      __syncthreads();
      carry = cum_step<kProd>(carry, total);
    }
  }
}

template <bool kProd>
void cumulate_kernel(ops::KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const ops::AxisSplit sp = ops::cumulate_setup(ctx);
  const int64_t outer = sp.outer, n = sp.n, inner = sp.inner;
  const bool exclusive = ctx.attr_int("exclusive", 0) != 0;
  const bool reverse = ctx.attr_int("reverse", 0) != 0;
  REFORGE_CHECK(x.dtype() != DType::Bool, label, ": element type bool is not supported");
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  if (y.numel() == 0) return;
  dispatch_device(x.dtype(), label.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      if (inner == 1 && n > 32)
        cum_rows<kProd, T><<<block_grid(outer), kThreads, 0, stream()>>>(x.data<T>(), y.mutable_data<T>(), outer, n,
                                                                         exclusive, reverse);
      else
        cum_columns<kProd, T><<<grid_for(outer * inner), kThreads, 0, stream()>>>(x.data<T>(), y.mutable_data<T>(),
                                                                                  outer, n, inner, exclusive, reverse);
    }
  });
  check_launch(kProd ? "CumProd" : "CumSum");
}

// ---- TopK -----------------------------------------------------------------------------------

template <typename C>
__device__ __forceinline__ bool greater(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (isnan(a)) return !isnan(b);
    if (isnan(b)) return false;
  }
  return a > b;
}

// Whether entry (va, ia) sorts before (vb, ib): the better value first, ties by lower index;
// padding (index -1) after everything.
template <typename C, typename I>
__device__ __forceinline__ bool sorts_before(C va, I ia, C vb, I ib, bool largest) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  if (largest ? greater(va, vb) : greater(vb, va)) return true;
  if (largest ? greater(vb, va) : greater(va, vb)) return false;
  return ia < ib;
}

// Compare-exchange of pair `t` (of P / 2) at merge step (size, stride) of a bitonic sort into
// ascending `sorts_before` order.
template <typename C, typename I>
__device__ __forceinline__ void bitonic_step(C* key, I* idx, int64_t t, int64_t size, int64_t stride, bool largest) {
  const int64_t i = 2 * stride * (t / stride) + (t % stride), l = i + stride;
  const bool ascending = (i & size) == 0;
  const bool swap = ascending ? sorts_before(key[l], idx[l], key[i], idx[i], largest)
                              : sorts_before(key[i], idx[i], key[l], idx[l], largest);
  if (swap) {
    const C kv = key[i];
    key[i] = key[l];
    key[l] = kv;
    const I iv = idx[i];
    idx[i] = idx[l];
    idx[l] = iv;
  }
}

// Shared memory of the in-block sort: P int32 indices, then P keys at a 16-byte boundary.
__host__ __device__ __forceinline__ size_t shared_key_offset(int P) {
  return (static_cast<size_t>(P) * sizeof(int32_t) + 15) / 16 * 16;
}

// One block per slice of n (<= P, a power of two) elements, sorted in shared memory.
template <typename T>
__global__ void topk_shared(const T* x, T* vals, int64_t* inds, int64_t slices, int64_t n, int64_t inner, int64_t k,
                            int P, bool largest) {
  using C = compute_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* idx = reinterpret_cast<int32_t*>(smem);
  C* key = reinterpret_cast<C*>(smem + shared_key_offset(P));
  for (int64_t s = blockIdx.x; s < slices; s += gridDim.x) {
    const int64_t o = s / inner, i = s - o * inner;
    const T* src = x + o * n * inner + i;
    for (int r = threadIdx.x; r < P; r += blockDim.x) {
      key[r] = r < n ? load_c(src, r * inner) : C(0);
      idx[r] = r < n ? r : -1;
    }
    __syncthreads();
    for (int size = 2; size <= P; size <<= 1)
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        for (int t = threadIdx.x; t < P / 2; t += blockDim.x) bitonic_step(key, idx, t, size, stride, largest);
        __syncthreads();
      }
    T* vo = vals + o * k * inner + i;
    int64_t* io = inds + o * k * inner + i;
    for (int64_t r = threadIdx.x; r < k; r += blockDim.x) {
      const int64_t j = idx[r];
      vo[r * inner] = src[j * inner];
      io[r * inner] = j;
    }
    __syncthreads();
  }
}

// Selection in rounds for long slices with k <= S / 2: each block sorts a chunk of S entries
// (key, index) in shared memory and keeps its best k, so a slice of m entries leaves ceil(m / S) * k
// (at most half) for the next round; chunks shorter than k pad with index -1, which sorts last.
template <typename C>
__global__ void topk_chunks(const C* key, const int32_t* idx, int64_t slices, int64_t m, int64_t chunks, int S,
                            int64_t k, bool largest, C* key_out, int32_t* idx_out) {
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* sidx = reinterpret_cast<int32_t*>(smem);
  C* skey = reinterpret_cast<C*>(smem + shared_key_offset(S));
  for (int64_t b = blockIdx.x; b < slices * chunks; b += gridDim.x) {
    const int64_t s = b / chunks, begin = (b - s * chunks) * S;
    const int64_t len = m - begin < S ? m - begin : S;
    const C* kp = key + s * m + begin;
    const int32_t* ip = idx + s * m + begin;
    for (int r = threadIdx.x; r < S; r += blockDim.x) {
      skey[r] = r < len ? kp[r] : C(0);
      sidx[r] = r < len ? ip[r] : -1;
    }
    __syncthreads();
    for (int size = 2; size <= S; size <<= 1)
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        for (int t = threadIdx.x; t < S / 2; t += blockDim.x) bitonic_step(skey, sidx, t, size, stride, largest);
        __syncthreads();
      }
    for (int64_t r = threadIdx.x; r < k; r += blockDim.x) {
      key_out[b * k + r] = skey[r];
      idx_out[b * k + r] = sidx[r];
    }
    __syncthreads();
  }
}

// Every slice's n elements as (key, index) entries, slice-major.
template <typename T>
__global__ void topk_gather(const T* x, compute_t<T>* key, int32_t* idx, int64_t slices, int64_t n, int64_t inner) {
  REFORGE_GRID_LOOP(e, slices * n) {
    const int64_t s = e / n, r = e - s * n;
    const int64_t o = s / inner, i = s - o * inner;
    key[e] = load_c(x, o * n * inner + i + r * inner);
    idx[e] = static_cast<int32_t>(r);
  }
}

// The global-memory sort of long slices: load, one merge step, and the first k written out.
template <typename T>
__global__ void topk_load(const T* x, compute_t<T>* key, int64_t* idx, int64_t slices, int64_t n, int64_t inner,
                          int64_t P) {
  REFORGE_GRID_LOOP(e, slices * P) {
    const int64_t s = e / P, r = e - s * P;
    const int64_t o = s / inner, i = s - o * inner;
    key[e] = r < n ? load_c(x, o * n * inner + i + r * inner) : compute_t<T>(0);
    idx[e] = r < n ? r : -1;
  }
}

template <typename C>
__global__ void topk_merge_step(C* key, int64_t* idx, int64_t slices, int64_t P, int64_t size, int64_t stride,
                                bool largest) {
  const int64_t half = P / 2;
  REFORGE_GRID_LOOP(e, slices * half) {
    const int64_t s = e / half, t = e - s * half;
    bitonic_step(key + s * P, idx + s * P, t, size, stride, largest);
  }
}

template <typename T, typename I>
__global__ void topk_write(const T* x, const I* idx, T* vals, int64_t* inds, int64_t slices, int64_t n, int64_t inner,
                           int64_t k, int64_t P) {
  REFORGE_GRID_LOOP(e, slices * k) {
    const int64_t s = e / k, r = e - s * k;
    const int64_t o = s / inner, i = s - o * inner;
    const int64_t j = idx[s * P + r];
    vals[o * k * inner + r * inner + i] = x[o * n * inner + i + j * inner];
    inds[o * k * inner + r * inner + i] = j;
  }
}

int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

void topk_kernel(ops::KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const ops::TopKSetup ts = ops::topk_setup(ctx);
  const int64_t k = ts.k, n = ts.split.n, outer = ts.split.outer, inner = ts.split.inner;
  const bool largest = ts.largest;
  REFORGE_CHECK(x.dtype() != DType::Bool, label, ": element type bool is not supported");
  const Shape& out_shape = ts.out_shape;
  Tensor& vals = ctx.allocate_output_uninit(0, x.dtype(), out_shape);
  // Indices are computed anyway; a node that does not declare the output gets a scratch tensor.
  Tensor scratch;
  Tensor& inds = ctx.num_outputs() > 1 ? ctx.allocate_output_uninit(1, DType::Int64, out_shape)
                                       : (scratch = device_tensor(DType::Int64, out_shape));
  if (vals.numel() == 0) return;
  const int64_t slices = outer * inner;
  const int64_t P = pow2_at_least(n);
  dispatch_device(x.dtype(), label.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      using C = compute_t<T>;
      const int64_t shared_max = sizeof(C) >= 8 ? 2048 : 4096;  // keys and int32 indices in 32 KiB
      if (P <= shared_max) {
        const size_t bytes = shared_key_offset(static_cast<int>(P)) + static_cast<size_t>(P) * sizeof(C);
        topk_shared<T><<<block_grid(slices), kThreads, bytes, stream()>>>(x.data<T>(), vals.mutable_data<T>(),
                                                                          inds.mutable_data<int64_t>(), slices, n,
                                                                          inner, k, static_cast<int>(P), largest);
        check_launch("TopK");
        return;
      }
      if (k <= shared_max / 2 && n <= INT32_MAX) {
        // Rounds of chunk selection, then the last (at most shared_max entries) sorted whole.
        const int S = static_cast<int>(shared_max);
        int64_t m = n;
        Tensor key = device_tensor(DType::UInt8, {slices * m * static_cast<int64_t>(sizeof(C))});
        Tensor idx = device_tensor(DType::Int32, {slices * m});
        topk_gather<T><<<grid_for(slices * m), kThreads, 0, stream()>>>(x.data<T>(), static_cast<C*>(key.mutable_raw()),
                                                                        idx.mutable_data<int32_t>(), slices, n, inner);
        check_launch("TopK gather");
        for (bool last = false; !last;) {
          last = m <= S;
          const int width = last ? static_cast<int>(pow2_at_least(m)) : S;
          const int64_t chunks = last ? 1 : (m + S - 1) / S;
          Tensor key2 = device_tensor(DType::UInt8, {slices * chunks * k * static_cast<int64_t>(sizeof(C))});
          Tensor idx2 = device_tensor(DType::Int32, {slices * chunks * k});
          const size_t bytes = shared_key_offset(width) + static_cast<size_t>(width) * sizeof(C);
          topk_chunks<C><<<block_grid(slices * chunks), kThreads, bytes, stream()>>>(
              static_cast<const C*>(key.raw()), idx.data<int32_t>(), slices, m, chunks, width, k, largest,
              static_cast<C*>(key2.mutable_raw()), idx2.mutable_data<int32_t>());
          check_launch("TopK chunk selection");
          key = std::move(key2);
          idx = std::move(idx2);
          m = chunks * k;
        }
        topk_write<T>
            <<<grid_for(slices * k), kThreads, 0, stream()>>>(x.data<T>(), idx.data<int32_t>(), vals.mutable_data<T>(),
                                                              inds.mutable_data<int64_t>(), slices, n, inner, k, k);
        check_launch("TopK");
        return;
      }
      Tensor key = device_tensor(DType::UInt8, {slices * P * static_cast<int64_t>(sizeof(C))});
      Tensor idx = device_tensor(DType::Int64, {slices * P});
      C* kp = static_cast<C*>(key.mutable_raw());
      int64_t* ip = idx.mutable_data<int64_t>();
      topk_load<T><<<grid_for(slices * P), kThreads, 0, stream()>>>(x.data<T>(), kp, ip, slices, n, inner, P);
      check_launch("TopK load");
      for (int64_t size = 2; size <= P; size <<= 1)
        for (int64_t stride = size >> 1; stride > 0; stride >>= 1) {
          topk_merge_step<C>
              <<<grid_for(slices * P / 2), kThreads, 0, stream()>>>(kp, ip, slices, P, size, stride, largest);
          check_launch("TopK merge step");
        }
      topk_write<T><<<grid_for(slices * k), kThreads, 0, stream()>>>(
          x.data<T>(), ip, vals.mutable_data<T>(), inds.mutable_data<int64_t>(), slices, n, inner, k, P);
      check_launch("TopK");
    }
  });
}

}  // namespace

void register_cumsum_topk_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "CumSum", cumulate_kernel<false>);
  add_kernel(r, "", "CumProd", cumulate_kernel<true>);
  add_kernel(r, "", "TopK", topk_kernel);
}

}  // namespace reforge::cuda
