// Attention on the GPU: the ONNX Attention op (opset 23+) and reforge::Attention (the pattern
// fuse-attention forms) on one fused kernel, with the CPU's semantics (ops/transformer/attention.cc
// and backends/cpu/attention.cc).
//
// The fused kernel runs one block per (batch, query head, block of kRows query rows), one warp per
// query row. It walks the keys in tiles held in shared memory: each lane scores one key of the
// tile, the warp keeps the row's running max and sum (online softmax in float32, float64 for
// float64 inputs) and lane e accumulates output features e, e + 32, ... in shared memory. A query
// head h reads key/value head h / group (grouped-query attention) or head 0 (broadcast heads).
//
// ONNX Attention rounds where the ONNX reference rounds (Q and K scaled by sqrt(scale), the QK
// product, softcap, the biased score). When the softmax precision is a 16-bit type (the default
// for 16-bit inputs; reforge::Attention on 16-bit inputs with precision 'rounded', whose CPU
// reference is the unfused Softmax) the kernel makes three passes over the keys instead of one: the row max, then the sum,
// then the weighted values, so that x - max, the exponentials, the sum (accumulated in float and
// rounded once; with the reference's rounding, ops/numerics.h, bfloat16 sums in key order,
// rounded after each addition) and every weight e / sum round exactly as on the CPU. A row whose
// every key is closed (attn_mask false or -inf, causal, window, padding) yields zeros; a NaN score
// makes the row NaN. reforge::Attention follows the CPU: a row whose scores are all -inf is NaN.
// reforge::Attention with precision 'float32' (fuse-attention's node of 16-bit inputs) makes one
// pass in float32, rounding nothing to the inputs' type before the output.
//
// present_key/present_value (past ++ new, 4-D) are written by a copy kernel; the attention kernel
// then reads keys and values from them. The optional qk_matmul_output comes from a second, simple
// kernel (one thread per query row, the CPU's sequence of operations).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/attention_decode.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_ops.h"
#include "backends/cuda/device_scalar.cuh"
#include "backends/cuda/group_reduce.cuh"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"
#include "backends/cuda/lt_gemm.h"
#include "backends/cuda/shape_facts.h"
#include "core/error.h"
#include "ops/numerics.h"
#include "ops/reforge/attention_setup.h"
#include "ops/transformer/attention_setup.h"

namespace reforge::cuda {

namespace {

constexpr int kRows = 8;  // query rows (warps) per block
constexpr int kThreads = kRows * 32;
constexpr int kMaxTile = 32;  // keys per tile (one per lane)
constexpr size_t kSharedLimit = 48 * 1024;

// Softmax precision: kNone computes in the compute type; kHalf / kBf16 round to that type where
// the ONNX reference does.
enum SoftmaxPrec : int { kNone = 0, kHalf = 1, kBf16 = 2 };

template <typename T, typename C>
__device__ __forceinline__ C round_t(C v) {
  if constexpr (std::is_same_v<T, C>) {
    return v;
  } else {
    const T t = store_c<T>(v);
    return static_cast<C>(load_c(&t, 0));
  }
}

template <typename C>
__device__ __forceinline__ C round_s(C v, int prec) {
  if (prec == kHalf) return static_cast<C>(__half2float(__double2half(static_cast<double>(v))));
  if (prec == kBf16) return static_cast<C>(__bfloat162float(__double2bfloat16(static_cast<double>(v))));
  return v;
}

// A double rounded once to T (16-bit: correctly rounded from double), in T's compute type.
template <typename T>
__device__ __forceinline__ compute_t<T> from_double(double d) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(__double2half(d));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(__double2bfloat16(d));
  else
    return static_cast<T>(d);
}

// The kernel's code of a scalar of type `t` (load_scalar), or -1 for a type it does not read.
int scalar_code(DType t) {
  switch (t) {
    case DType::Float32:
      return kF32;
    case DType::Float64:
      return kF64;
    case DType::Float16:
      return kF16;
    case DType::BFloat16:
      return kBF16;
    case DType::Int32:
      return kI32;
    case DType::Int64:
      return kI64;
    default:
      return -1;
  }
}

int scalar_type(const Tensor& t, const std::string& where, const char* what) {
  REFORGE_CHECK(t.numel() == 1, where, ": ", what, " must have one element, got ", t.describe());
  const int code = scalar_code(t.dtype());
  if (code < 0) fail(where, ": ", what, " of type ", dtype_name(t.dtype()), " is not supported on the CUDA backend");
  return code;
}

// Everything the fused kernel and the qk kernel read. Strides are in elements; Q, V and Y rows
// are contiguous in the feature dimension, K's stride there is k_sd (1, or the sequence stride of
// a transposed K).
template <typename T>
struct AttnParams {
  using C = compute_t<T>;
  const T* q = nullptr;
  int64_t q_sb = 0, q_sh = 0, q_ss = 0;
  const T* k = nullptr;
  int64_t k_sb = 0, k_sh = 0, k_ss = 0, k_sd = 1;
  const T* v = nullptr;
  int64_t v_sb = 0, v_sh = 0, v_ss = 0;
  T* y = nullptr;
  int64_t y_sb = 0, y_sh = 0, y_ss = 0;
  int64_t B = 0, Hq = 0, Sq = 0, L = 0, D = 0, Dv = 0;
  int64_t k_group = 1, v_group = 1;  // q head h reads kv head h / group (group = Hq: head 0)
  // Query heads a block serves (a divisor of kRows and of both groups): its warps take hpb heads
  // that read the same K/V head, kRows / hpb rows each, so a short query (a decoding step) keeps
  // every warp busy on one K/V tile.
  int hpb = 1;
  // Splits of the keys (flash decoding; single-pass softmax only): block s of a row's splits
  // walks keys [s * split_len, (s + 1) * split_len) and leaves its unnormalized sum, max and
  // exponential sum in `part` [row][split][Dv + 2] (row = (b * Hq + h) * Sq + i); combine_kernel
  // joins them.
  int splits = 1;
  int64_t split_len = 0;
  float* part = nullptr;
  // ONNX Attention.
  double sqrt_scale = 1;  // Q and K are each scaled by it (rounded to T)
  double softcap = 0;
  bool causal = false;
  int64_t left_window = -1, right_window = -1;
  int64_t past_len = 0;          // causal offset with an internal cache
  const void* nonpad = nullptr;  // [B] int32 or int64, or null
  bool nonpad_i64 = true;
  int prec = kNone;
  bool reference = false;  // bfloat16 sums rounded after each addition (ops/numerics.h)
  // The bias mask (ONNX: attn_mask as bias rounded to T, bool as 0 / -inf; reforge 'add': the
  // mask), in C, indexed b * m_sb + h * m_sh + i * m_sq + j * m_sk for j < m_len (-inf beyond).
  const C* mask = nullptr;
  int64_t m_sb = 0, m_sh = 0, m_sq = 0, m_sk = 1, m_len = 0;
  // reforge::Attention.
  int scale_op = 0;  // 0 none, 1 multiply by the scalar, 2 divide by it, 3 scale Q and K (mul_qk)
  const void* scale_p = nullptr;
  int scale_type = kF32;
  const void* k_scale_p = nullptr;  // mul_qk: K's factor
  int k_scale_type = kF32;
  bool nan_rows_zero = false;    // softmax_nan 'zero': a NaN softmax row gives zeros
  bool f32 = false;              // precision 'float32': nothing rounded to T before the output
  const bool* mask_b = nullptr;  // where modes: the score becomes `fill` where mask == fill_when
  bool fill_when = true;
  const void* fill_p = nullptr;
  int fill_type = kF32;
};

template <typename T>
struct RowState {
  int64_t offset = 0;  // causal / window frontier offset
  int64_t valid = 0;   // keys at or past it are padding (nonpad_kv_seqlen); else L
};

template <typename T>
__device__ __forceinline__ RowState<T> row_state(const AttnParams<T>& p, int64_t b) {
  RowState<T> r;
  r.offset = p.past_len;
  r.valid = p.L;
  if (p.nonpad) {
    int64_t n = p.nonpad_i64 ? static_cast<const int64_t*>(p.nonpad)[b] : static_cast<const int32_t*>(p.nonpad)[b];
    const int64_t lim = int64_t{1} << 40;
    n = n < -lim ? -lim : (n > lim ? lim : n);
    r.offset = n - p.Sq;
    r.valid = n;
  }
  return r;
}

// ONNX: the score's stages from the QK product `dot` (of Q and K already scaled and rounded):
// raw, capped and biased (each rounded to T); `open` is false when the bias is -inf.
template <typename T>
struct Score {
  compute_t<T> raw, capped, biased;
  bool open;
};

template <typename T>
__device__ __forceinline__ Score<T> onnx_score(const AttnParams<T>& p, const RowState<T>& rs, compute_t<T> dot,
                                               int64_t b, int64_t h, int64_t i, int64_t j) {
  using C = compute_t<T>;
  const C ninf = -std::numeric_limits<C>::infinity();
  Score<T> sc;
  C s = round_t<T>(dot);
  sc.raw = s;
  if (p.softcap > 0) {
    const C cap = round_t<T>(static_cast<C>(static_cast<float>(p.softcap)));
    s = round_t<T>(s / cap);
    s = round_t<T>(tanh(s));
    s = round_t<T>(s * cap);
  }
  sc.capped = s;
  C bias = 0;
  if (p.mask) bias = j >= p.m_len ? ninf : p.mask[b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk];
  bool allowed = true;
  const int64_t diff = i + rs.offset - j;
  if (p.causal && diff < 0) allowed = false;
  if (p.left_window >= 0 && diff > p.left_window) allowed = false;
  if (p.right_window >= 0 && -diff > p.right_window) allowed = false;
  if (p.nonpad && j >= rs.valid) allowed = false;
  if (!allowed) bias = bias + ninf;
  sc.open = !(isinf(bias) && bias < 0);
  sc.biased = round_t<T>(s + bias);
  return sc;
}

// reforge::Attention: the score after scale and mask.
template <typename T>
__device__ __forceinline__ compute_t<T> fused_score(const AttnParams<T>& p, compute_t<T> dot, compute_t<T> scale,
                                                    compute_t<T> fill, int64_t b, int64_t h, int64_t i, int64_t j) {
  using C = compute_t<T>;
  const auto r = [&](C v) { return p.f32 ? v : round_t<T>(v); };
  C s = r(dot);
  if (p.scale_op == 1 || p.scale_op == 2) s = r(p.scale_op == 2 && !std::is_same_v<T, C> ? s / scale : s * scale);
  if (p.mask) s = r(s + p.mask[b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk]);
  if (p.mask_b && p.mask_b[b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk] == p.fill_when) s = fill;
  return s;
}

// reforge::Attention's end of a row: output value r of a row whose softmax sum is l and max m. A
// row whose every score is -inf is NaN (exp(-inf - -inf), as the CPU computes it); under
// softmax_nan 'zero' a NaN row is zero.
template <typename T, typename C>
__device__ __forceinline__ C fused_row_end(const AttnParams<T>& p, C r, C l, C m) {
  if (p.L > 0 && m == -std::numeric_limits<C>::infinity()) r = std::numeric_limits<C>::quiet_NaN();
  if (p.nan_rows_zero && (isnan(r) || isnan(l))) r = 0;
  return r;
}

// The fused kernel (see the file comment). Shared memory: K tile [tile][D + 1], V tile
// [tile][Dv], per warp the scaled query row [D], the accumulator [Dv] and the tile's weights.
template <typename T, bool Onnx>
__global__ void __launch_bounds__(kThreads) attention_kernel(const AttnParams<T> p, int tile) {
  using C = compute_t<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  C* smem = reinterpret_cast<C*>(smem_raw);
  const int64_t D = p.D, Dv = p.Dv, L = p.L;
  const int64_t kstride = D + 1;
  C* ks = smem;
  C* vs = ks + tile * kstride;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  C* qrow = vs + tile * Dv + warp * D;
  C* acc = vs + tile * Dv + kRows * D + warp * Dv;
  C* wts = vs + tile * Dv + kRows * (D + Dv) + warp * tile;
  const C ninf = -std::numeric_limits<C>::infinity();
  const C scale_t = Onnx ? from_double<T>(p.sqrt_scale) : C(1);
  C scale_f = 1;
  // mul_qk: Q and K each multiplied by their factor and rounded to T before the product.
  const C q_mul = !Onnx && p.scale_op == 3 ? static_cast<C>(load_scalar(p.scale_p, p.scale_type)) : C(1);
  const C k_mul = !Onnx && p.scale_op == 3 ? static_cast<C>(load_scalar(p.k_scale_p, p.k_scale_type)) : C(1);
  if (!Onnx && (p.scale_op == 1 || p.scale_op == 2)) {
    const double c = load_scalar(p.scale_p, p.scale_type);
    // float32/float64 multiply by the inverse as the CPU's fused kernel; 16-bit types divide as
    // the unfused Div does.
    scale_f = static_cast<C>(p.scale_op == 2 && std::is_same_v<T, C> ? 1.0 / c : c);
  }
  const C fill = !Onnx && p.mask_b ? static_cast<C>(load_scalar(p.fill_p, p.fill_type)) : C(0);
  // Passes over the keys: 0 finds the row max, 1 sums exp(x - max), 2 accumulates the weighted
  // values. Softmax in the compute type runs pass 2 alone (online softmax). A 16-bit softmax
  // precision runs all three, to round x - max, the exponentials, the sum and each weight e / sum
  // to that precision (and the weight to T) as the CPU does.
  const bool exact_weights = p.prec != kNone;
  const int first_pass = p.prec == kNone ? 2 : 0;
  const int rpb = kRows / p.hpb;  // query rows per head in a block
  const int64_t qblocks = (p.Sq + rpb - 1) / rpb, hblocks = p.Hq / p.hpb;
  const int64_t nblocks = p.B * hblocks * qblocks * p.splits;
  for (int64_t blk_s = blockIdx.x; blk_s < nblocks; blk_s += gridDim.x) {
    const int64_t split = blk_s % p.splits, blk = blk_s / p.splits;
    const int64_t j_lo = p.splits > 1 ? split * p.split_len : 0;
    const int64_t j_hi = p.splits > 1 ? min(L, j_lo + p.split_len) : L;
    const int64_t qb = blk % qblocks, bh = blk / qblocks;
    const int64_t b = bh / hblocks, h = (bh % hblocks) * p.hpb + warp / rpb;
    const int64_t i = qb * rpb + warp % rpb;
    const bool live = i < p.Sq;
    const T* kbase = p.k + b * p.k_sb + (h / p.k_group) * p.k_sh;
    const T* vbase = p.v + b * p.v_sb + (h / p.v_group) * p.v_sh;
    const RowState<T> rs = Onnx ? row_state(p, b) : RowState<T>{0, L};
    if (live) {
      const T* q = p.q + b * p.q_sb + h * p.q_sh + i * p.q_ss;
      for (int64_t e = lane; e < D; e += 32)
        qrow[e] = Onnx ? round_t<T>(load_c(q, e) * scale_t)
                       : (p.scale_op == 3 ? (p.f32 ? load_c(q, e) * q_mul : round_t<T>(load_c(q, e) * q_mul))
                                          : load_c(q, e));
      for (int64_t e = lane; e < Dv; e += 32) acc[e] = 0;
    }
    C m = ninf, l = 0;
    bool open = false;
    for (int pass = first_pass; pass < 3; ++pass) {
      if (pass == 1 && !exact_weights) continue;
      // Pass 0 leaves the final max, pass 1 the final sum.
      if (pass == 2 && exact_weights) {
        l = round_s(l, p.prec);
        if (l == C(0)) l = 1;
      }
      for (int64_t j0 = j_lo; j0 < j_hi; j0 += tile) {
        const int nk = j_hi - j0 < tile ? static_cast<int>(j_hi - j0) : tile;
        __syncthreads();  // the previous tile is consumed
        for (int64_t x = threadIdx.x; x < int64_t{nk} * D; x += kThreads) {
          const int64_t jj = x / D, e = x - jj * D;
          const C kv = load_c(kbase, (j0 + jj) * p.k_ss + e * p.k_sd);
          ks[jj * kstride + e] = Onnx ? round_t<T>(kv * scale_t)
                                      : (p.scale_op == 3 ? (p.f32 ? kv * k_mul : round_t<T>(kv * k_mul)) : kv);
        }
        if (pass == 2)
          for (int64_t x = threadIdx.x; x < int64_t{nk} * Dv; x += kThreads) {
            const int64_t jj = x / Dv, e = x - jj * Dv;
            vs[jj * Dv + e] = load_c(vbase, (j0 + jj) * p.v_ss + e);
          }
        __syncthreads();
        if (!live) continue;
        // This lane's key.
        C xv = ninf;
        if (lane < nk) {
          const int64_t j = j0 + lane;
          const C* kr = ks + lane * kstride;
          C dot = 0;
          for (int64_t e = 0; e < D; ++e) dot += qrow[e] * kr[e];
          if constexpr (Onnx) {
            const Score<T> sc = onnx_score(p, rs, dot, b, h, i, j);
            open |= sc.open;
            xv = round_s(sc.biased, p.prec);
          } else {
            xv = round_s(fused_score(p, dot, scale_f, fill, b, h, i, j), p.prec);
          }
        }
        const C tmax = warp_max(xv);
        if (pass == 0) {
          m = tmax > m ? tmax : m;
          continue;
        }
        const C m_new = tmax > m ? tmax : m;
        const C ref = m_new == ninf ? C(0) : m_new;
        const C alpha = m == ninf ? C(0) : exp(m - ref);
        C pj = 0;
        if (lane < nk) {
          if (p.prec != kNone)
            pj = round_s(static_cast<C>(exp(round_s(xv - ref, p.prec))), p.prec);
          else
            pj = exp(xv - ref);
        }
        if (lane < nk) wts[lane] = pj;
        if (pass == 1 || !exact_weights) {
          if (p.prec == kBf16 && p.reference) {
            // The reference adds in key order, rounding after each addition.
            __syncwarp();
            if (lane == 0)
              for (int jj = 0; jj < nk; ++jj) l = round_s(l + wts[jj], kBf16);
            l = __shfl_sync(0xffffffffu, l, 0);
          } else {
            l = l * alpha + warp_sum(pj);
          }
        }
        m = m_new;
        if (pass == 1) {
          __syncwarp();
          continue;
        }
        if (exact_weights && lane < nk) wts[lane] = round_t<T>(round_s(pj / l, p.prec));
        __syncwarp();
        for (int64_t e = lane; e < Dv; e += 32) {
          C a = acc[e] * alpha;
          for (int jj = 0; jj < nk; ++jj) a += wts[jj] * vs[jj * Dv + e];
          acc[e] = a;
        }
        __syncwarp();
      }
    }
    if (live && p.splits > 1) {  // this split's share, joined by combine_kernel
      float* out = p.part + (((b * p.Hq + h) * p.Sq + i) * p.splits + split) * (Dv + 2);
      for (int64_t e = lane; e < Dv; e += 32) out[e] = static_cast<float>(acc[e]);
      if (lane == 0) {
        out[Dv] = static_cast<float>(m);
        out[Dv + 1] = static_cast<float>(l);
      }
    } else if (live) {
      if (Onnx) open = __any_sync(0xffffffffu, open);
      T* y = p.y + b * p.y_sb + h * p.y_sh + i * p.y_ss;
      for (int64_t e = lane; e < Dv; e += 32) {
        C r = exact_weights ? acc[e] : l == C(0) ? C(0) : acc[e] / l;  // ONNX: a zero sum counts as 1
        if (Onnx && !open) r = 0;
        if (!Onnx) r = fused_row_end(p, r, l, m);
        y[e] = store_c<T>(r);
      }
    }
  }
}

// Joins the key splits of reforge::Attention's single-pass kernel: one warp per query row; the
// splits' maxima give the row's, each split's sums are rescaled to it (exp(m_s - m)) and added in
// split order; then the row ends as the kernel ends it (a row of only -inf scores is NaN).
template <typename T>
__global__ void combine_kernel(const AttnParams<T> p) {
  const int64_t rows = p.B * p.Hq * p.Sq;
  const int lane = threadIdx.x % 32;
  const int64_t Dv = p.Dv;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; r < rows;
       r += int64_t{gridDim.x} * blockDim.x / 32) {
    const int64_t i = r % p.Sq, bh = r / p.Sq, h = bh % p.Hq, b = bh / p.Hq;
    const float* part = p.part + r * p.splits * (Dv + 2);
    float m = -INFINITY;
    for (int s = 0; s < p.splits; ++s) m = fmaxf(m, part[s * (Dv + 2) + Dv]);  // NaN never adopted
    float l = 0;
    for (int s = 0; s < p.splits; ++s) {
      const float ms = part[s * (Dv + 2) + Dv];
      l += ms == -INFINITY ? 0.f : part[s * (Dv + 2) + Dv + 1] * expf(ms - m);
    }
    T* y = p.y + b * p.y_sb + h * p.y_sh + i * p.y_ss;
    for (int64_t e = lane; e < Dv; e += 32) {
      float a = 0;
      for (int s = 0; s < p.splits; ++s) {
        const float ms = part[s * (Dv + 2) + Dv];
        if (ms != -INFINITY) a += part[s * (Dv + 2) + e] * expf(ms - m);
      }
      const float v = fused_row_end(p, l == 0.f ? 0.f : a / l, l, m);
      y[e] = store_c<T>(static_cast<compute_t<T>>(v));
    }
  }
}

// ONNX qk_matmul_output: one thread per (b, h, i) row, the CPU's computation step by step. Mode 3
// (the softmax output) stores the biased scores first and normalizes them in place.
template <typename T>
__global__ void qk_output_kernel(const AttnParams<T> p, int mode, T* out) {
  using C = compute_t<T>;
  const int64_t rows = p.B * p.Hq * p.Sq, L = p.L;
  const C ninf = -std::numeric_limits<C>::infinity();
  const C scale_t = from_double<T>(p.sqrt_scale);
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows; r += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = r % p.Sq, bh = r / p.Sq, h = bh % p.Hq, b = bh / p.Hq;
    const RowState<T> rs = row_state(p, b);
    const T* q = p.q + b * p.q_sb + h * p.q_sh + i * p.q_ss;
    const T* kb = p.k + b * p.k_sb + (h / p.k_group) * p.k_sh;
    T* o = out + r * L;
    bool open = false;
    for (int64_t j = 0; j < L; ++j) {
      C dot = 0;
      for (int64_t e = 0; e < p.D; ++e)
        dot += round_t<T>(load_c(q, e) * scale_t) * round_t<T>(load_c(kb, j * p.k_ss + e * p.k_sd) * scale_t);
      const Score<T> sc = onnx_score(p, rs, dot, b, h, i, j);
      open |= sc.open;
      o[j] = store_c<T>(mode == 0 ? sc.raw : mode == 1 ? sc.capped : sc.biased);
    }
    if (mode != 3 || L == 0) continue;
    // softmax_row of the CPU in precision prec (kNone: the compute type).
    C mx = ninf;
    bool nan = false;
    for (int64_t j = 0; j < L; ++j) {
      const C v = round_s(static_cast<C>(load_c(o, j)), p.prec);
      if (isnan(v))
        nan = true;
      else if (v > mx)
        mx = v;
    }
    if (nan) mx = std::numeric_limits<C>::quiet_NaN();
    const C safe = isinf(mx) && mx < 0 ? C(0) : mx;
    C sum = 0;
    for (int64_t j = 0; j < L; ++j) {
      const C v = round_s(static_cast<C>(load_c(o, j)), p.prec);
      const C e = round_s(static_cast<C>(exp(round_s(v - safe, p.prec))), p.prec);
      sum = p.prec == kBf16 && p.reference ? round_s(sum + e, kBf16) : sum + e;
    }
    sum = round_s(sum, p.prec);
    if (sum == C(0)) sum = 1;
    for (int64_t j = 0; j < L; ++j) {
      C prob = 0;
      if (open) {
        const C v = round_s(static_cast<C>(load_c(o, j)), p.prec);
        const C e = round_s(static_cast<C>(exp(round_s(v - safe, p.prec))), p.prec);
        prob = round_s(e / sum, p.prec);
      }
      o[j] = store_c<T>(prob);
    }
  }
}

// out[b, h, j, :] = j < P ? past[b, h, j, :] : cur(b, h, j - P, :) (cur through strides).
template <typename T>
__global__ void concat_cache_kernel(T* out, const T* past, const T* cur, int64_t H, int64_t P, int64_t L, int64_t D,
                                    int64_t c_sb, int64_t c_sh, int64_t c_ss, int64_t n) {
  for (int64_t x = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; x < n; x += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = x % D, row = x / D, j = row % L, bh = row / L, h = bh % H, b = bh / H;
    out[x] = j < P ? past[(bh * P + j) * D + e] : cur[b * c_sb + h * c_sh + (j - P) * c_ss + e];
  }
}

// The mask as C values: ONNX (round to T; bool: 0 / -inf), or a reforge 'add' mask as is.
template <typename M, typename T>
__global__ void mask_kernel(compute_t<T>* out, const M* in, int64_t n, bool onnx) {
  using C = compute_t<T>;
  for (int64_t x = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; x < n; x += int64_t{gridDim.x} * blockDim.x) {
    if constexpr (std::is_same_v<M, bool>) {
      out[x] = in[x] ? C(0) : -std::numeric_limits<C>::infinity();
    } else {
      const double v = static_cast<double>(load_c(in, x));
      out[x] = onnx ? from_double<T>(v) : static_cast<C>(load_c(in, x));
    }
  }
}

template <typename T>
Tensor convert_mask(const Tensor& m, bool onnx, const std::string& where) {
  Tensor out = device_tensor(std::is_same_v<compute_t<T>, double> ? DType::Float64 : DType::Float32, m.shape());
  const int64_t n = m.numel();
  if (n == 0) return out;
  auto* dst = out.mutable_data<compute_t<T>>();
  if (m.dtype() == DType::Bool) {
    mask_kernel<bool, T><<<grid_for(n, kMaxWideGrid), 256, 0, stream()>>>(dst, m.data<bool>(), n, onnx);
  } else {
    dispatch_device(
        m.dtype(), where.c_str(),
        [&](auto tag) {
          using M = typename decltype(tag)::type;
          if constexpr (std::is_floating_point_v<compute_t<M>>)
            mask_kernel<M, T><<<grid_for(n, kMaxWideGrid), 256, 0, stream()>>>(dst, m.data<M>(), n, onnx);
        },
        true);
  }
  check_launch("Attention mask");
  return out;
}

// The longest tile of keys whose shared memory (values of `csize` bytes) fits, or 0; `bytes` is
// what it takes.
int fitting_tile(int64_t D, int64_t Dv, size_t csize, size_t& bytes) {
  for (int tile = kMaxTile; tile >= 1; --tile) {
    bytes = csize * static_cast<size_t>(tile * (D + 1 + Dv) + kRows * (D + Dv + tile));
    if (bytes <= kSharedLimit) return tile;
  }
  return 0;
}

std::string head_sizes_exceed(int64_t D, int64_t Dv) {
  return str_cat("head sizes ", D, " (Q/K) and ", Dv, " (V) exceed the CUDA attention kernel's shared memory");
}

// The tile length whose shared memory fits, or a failure naming the sizes.
template <typename C>
int pick_tile(int64_t D, int64_t Dv, const std::string& where, size_t& bytes) {
  const int tile = fitting_tile(D, Dv, sizeof(C), bytes);
  if (tile == 0) fail(where, ": ", head_sizes_exceed(D, Dv));
  return tile;
}

// Build time: "" when head sizes D and Dv of values of `csize` bytes provably fit the kernel.
std::string head_sizes_fit(const ops::SymDim& D, const ops::SymDim& Dv, size_t csize) {
  if (!D.known() || !Dv.known())
    return "head sizes " + D.str() + " (Q/K) and " + Dv.str() +
           " (V) are not known at build time (the CUDA attention kernel's shared memory bounds them)";
  size_t bytes = 0;
  return fitting_tile(D.value(), Dv.value(), csize, bytes) ? "" : head_sizes_exceed(D.value(), Dv.value());
}

template <typename T, bool Onnx>
void launch_attention(const AttnParams<T>& p, const std::string& where) {
  if (p.B * p.Hq * p.Sq == 0 || p.Dv == 0) return;
  size_t bytes = 0;
  const int tile = pick_tile<compute_t<T>>(p.D, p.Dv, where, bytes);
  const int64_t rpb = kRows / p.hpb;
  const int64_t blocks = p.B * (p.Hq / p.hpb) * ((p.Sq + rpb - 1) / rpb);
  AttnParams<T> q = p;
  Tensor part;
  // Few blocks (a decoding step) over many keys: split the keys so that every multiprocessor
  // works, each split at least two tiles (single-pass softmax of reforge::Attention computed in
  // float32: the splits' sums are float32).
  if (!Onnx && std::is_same_v<compute_t<T>, float> && p.prec == kNone && p.L > 2 * tile) {
    const int64_t want = (2 * multiprocessors() + blocks - 1) / blocks;
    const int64_t most = (p.L + 2 * tile - 1) / (2 * tile);
    const int64_t splits = std::min<int64_t>({want, most, 64});
    if (splits > 1) {
      q.split_len = (p.L + splits - 1) / splits;
      q.split_len = (q.split_len + tile - 1) / tile * tile;
      q.splits = static_cast<int>((p.L + q.split_len - 1) / q.split_len);
      part = device_tensor(DType::Float32, {p.B * p.Hq * p.Sq * q.splits * (p.Dv + 2)});
      q.part = part.mutable_data<float>();
    }
  }
  const int64_t nblocks = blocks * q.splits;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(nblocks, 2147483647));
  attention_kernel<T, Onnx><<<grid, kThreads, bytes, stream()>>>(q, tile);
  check_launch("Attention");
  if (q.splits > 1) {
    const int64_t rows = p.B * p.Hq * p.Sq;
    combine_kernel<T><<<blocks_for(rows * 32), 256, 0, stream()>>>(q);
    check_launch("Attention (combine)");
  }
}

// ---------------------------------------------------------------------------------------------
// ONNX Attention.

// Build time: the forms the CUDA kernel refuses where the CPU's runs them: head sizes beyond its
// shared memory (or not known), a nonpad_kv_seqlen of an integer type other than int32/int64.
// Inputs the CPU refuses too are left to the run's error.
std::string onnx_attention_shapes(const ir::Node& node, const backends::InputFacts& f) {
  auto q = shape_of(f, 0), v = shape_of(f, 2);
  if (!q || !v) return "the ranks of Q and V are not known at build time (the head sizes bound the CUDA kernel)";
  ops::SymDim D, Dv;
  if (q->size() == 4 && v->size() == 4) {
    D = (*q)[3];
    Dv = (*v)[3];
  } else if (q->size() == 3 && v->size() == 3) {
    const int64_t qh = node.attr_int("q_num_heads", 0), kvh = node.attr_int("kv_num_heads", 0);
    if (qh <= 0 || kvh <= 0) return "";  // the run fails on every backend
    auto per_head = [](const ops::SymDim& hidden, int64_t heads) {
      return hidden.known() && hidden.value() % heads == 0
                 ? ops::SymDim(hidden.value() / heads)
                 : ops::SymDim::symbol(hidden.str() + "/" + std::to_string(heads));
    };
    D = per_head((*q)[2], qh);
    Dv = per_head((*v)[2], kvh);
  } else {
    return "";  // the run fails on every backend
  }
  if (std::string why = head_sizes_fit(D, Dv, f.type(0)->dtype == DType::Float64 ? 8 : 4); !why.empty()) return why;
  if (node.inputs.size() > 6 && !node.inputs[6].empty()) {
    const ops::ValueType* t = f.type(6);
    if (!t) return "the type of nonpad_kv_seqlen is not known at build time";
    if (is_integer(t->dtype) && t->dtype != DType::Int64 && t->dtype != DType::Int32)
      return str_cat("nonpad_kv_seqlen of type ", dtype_name(t->dtype),
                     " is not supported on the CUDA backend (int32, int64)");
  }
  return "";
}

using OnnxDims = ops::AttentionDims;
using View = ops::AttentionView;

View make_view(bool is_3d, int64_t heads, int64_t seq, int64_t size) {
  return ops::attention_view(is_3d, heads, seq, size);
}

int prec_of(DType t) {
  if (t == DType::Float16) return kHalf;
  if (t == DType::BFloat16) return kBf16;
  return kNone;  // float32; float64 (computed in the compute type)
}

template <typename T>
void run_onnx_attention(ops::KernelContext& ctx, const OnnxDims& d, double scale, const ops::AttentionMaskShape& ms,
                        const std::string& where) {
  using C = compute_t<T>;
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  const bool has_past = ctx.has_input(4);
  AttnParams<T> p;
  p.B = d.batch;
  p.Hq = d.q_heads;
  p.Sq = d.q_len;
  p.L = d.total_len;
  p.D = d.head_size;
  p.Dv = d.v_head_size;
  p.k_group = p.v_group = d.q_heads / d.kv_heads;
  const View qv = make_view(d.is_3d, d.q_heads, d.q_len, d.head_size);
  p.q = q.data<T>();
  p.q_sb = qv.sb;
  p.q_sh = qv.sh;
  p.q_ss = qv.ss;

  // Keys and values: the present tensors (past ++ new) when there is a past or they are wanted,
  // else the inputs through their strides.
  // Temporaries live until the launches below are queued (their memory is freed in stream order).
  Tensor k_tmp, v_tmp, mask_buf, nonpad_hold;
  auto cache = [&](const Tensor& cur, int past_i, int out_i, int64_t size, Tensor& hold, const T*& ptr, int64_t& sb,
                   int64_t& sh, int64_t& ss) {
    const View cv = make_view(d.is_3d, d.kv_heads, d.kv_len, size);
    if (!has_past && !ctx.output_wanted(out_i)) {
      ptr = cur.data<T>();
      sb = cv.sb;
      sh = cv.sh;
      ss = cv.ss;
      return;
    }
    Shape shape{d.batch, d.kv_heads, d.total_len, size};
    hold = ctx.output_wanted(out_i) ? ctx.allocate_output_uninit(out_i, q.dtype(), shape)
                                    : device_tensor(q.dtype(), shape);
    Tensor& t = hold;
    const int64_t n = t.numel();
    if (n > 0) {
      concat_cache_kernel<T><<<grid_for(n, kMaxWideGrid), 256, 0, stream()>>>(
          t.mutable_data<T>(), has_past ? ctx.input(past_i).data<T>() : nullptr, cur.data<T>(), d.kv_heads, d.past_len,
          d.total_len, size, cv.sb, cv.sh, cv.ss, n);
      check_launch("Attention present");
    }
    ptr = t.data<T>();
    sb = d.kv_heads * d.total_len * size;
    sh = d.total_len * size;
    ss = size;
  };
  cache(k, 4, 1, d.head_size, k_tmp, p.k, p.k_sb, p.k_sh, p.k_ss);
  cache(v, 5, 2, d.v_head_size, v_tmp, p.v, p.v_sb, p.v_sh, p.v_ss);

  if (ms.present) {
    const Tensor& t = ctx.input(3);
    mask_buf = convert_mask<T>(t, true, where);
    p.mask = mask_buf.data<C>();
    p.m_len = ms.len;
    p.m_sk = 1;
    p.m_sq = ms.sq;
    p.m_sh = ms.sh;
    p.m_sb = ms.sb;
  }
  if (ctx.has_input(6)) {
    const Tensor& t = ctx.input(6);
    REFORGE_CHECK(t.dtype() == DType::Int64 || t.dtype() == DType::Int32, where, ": nonpad_kv_seqlen of type ",
                  dtype_name(t.dtype()), " is not supported on the CUDA backend (int32, int64)");
    if (t.on_host()) nonpad_hold = to_device(t);
    p.nonpad = t.on_host() ? nonpad_hold.raw() : t.raw();
    p.nonpad_i64 = t.dtype() == DType::Int64;
  }
  p.past_len = d.past_len;

  p.sqrt_scale = std::sqrt(scale);
  p.softcap = ctx.attr_float("softcap", 0.0f);
  p.causal = ctx.attr_int("is_causal", 0) != 0;
  p.left_window = ctx.attr_int("left_window_size", -1);
  p.right_window = ctx.attr_int("right_window_size", -1);
  const DType softmax_type = ctx.node().has_attr("softmax_precision")
                                 ? dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("softmax_precision", 1)))
                                 : q.dtype();
  p.prec = prec_of(softmax_type);
  p.reference = ops::reference_rounding(ctx.node());

  const Shape y_shape =
      d.is_3d ? Shape{d.batch, d.q_len, d.q_heads * d.v_head_size} : Shape{d.batch, d.q_heads, d.q_len, d.v_head_size};
  Tensor& y = ctx.allocate_output_uninit(0, q.dtype(), y_shape);
  const View yv = make_view(d.is_3d, d.q_heads, d.q_len, d.v_head_size);
  p.y = y.mutable_data<T>();
  p.y_sb = yv.sb;
  p.y_sh = yv.sh;
  p.y_ss = yv.ss;
  launch_attention<T, true>(p, where);

  if (ctx.output_wanted(3)) {
    Tensor& qk = ctx.allocate_output_uninit(3, q.dtype(), {d.batch, d.q_heads, d.q_len, d.total_len});
    const int64_t rows = d.batch * d.q_heads * d.q_len;
    if (qk.numel() > 0) {
      qk_output_kernel<T><<<grid_for(rows, kMaxWideGrid), 256, 0, stream()>>>(
          p, static_cast<int>(ctx.attr_int("qk_matmul_output_mode", 0)), qk.mutable_data<T>());
      check_launch("Attention qk_matmul_output");
    }
  }
}

void onnx_attention(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  // The CPU's checks, in the CPU's order (ops/transformer/attention_setup.h).
  const OnnxDims d = ops::attention_dims(ctx);
  ops::check_nonpad_kv_seqlen(ctx, d);
  const double scale = ctx.node().has_attr("scale") ? static_cast<double>(ctx.attr_float("scale", 0))
                                                    : 1.0 / std::sqrt(static_cast<double>(d.head_size));
  REFORGE_CHECK(scale >= 0 && std::isfinite(scale), where, ": scale ", scale, " must be nonnegative and finite");
  const ops::AttentionMaskShape ms = ops::attention_mask_shape(ctx, d);
  dispatch_device(
      ctx.input(0).dtype(), where.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_floating_point_v<compute_t<T>>) run_onnx_attention<T>(ctx, d, scale, ms, where);
      },
      true);
}

// ---------------------------------------------------------------------------------------------
// reforge::Attention (inputs Q, K, V, scale?, mask?, fill?, k_expand?, k_reshape?, v_expand?,
// v_reshape?; attributes as backends/cpu/attention.cc). The fused kernel runs the inputs of its
// form (try_fused_attention); any other inputs run the unfused ops on the device
// (ops/reforge/unfused.h), as the CPU's kernel runs them on the host, so the node takes every
// input the graph before the fusion took, and fails where that graph fails, with its errors.

using Layout = ops::AttnLayout;

Layout parse_layout(const ir::Node& n, const char* attr, bool allow_bhds) {
  return ops::parse_attn_layout(n, attr, allow_bhds);
}

// A device pointer to `t`'s data: `t` itself, or a copy held by `hold` when it is on the host.
const void* device_data(const Tensor& t, Tensor& hold) {
  if (!t.on_host()) return t.raw();
  hold = to_device(t);
  return hold.raw();
}

// A 4-D tensor seen as [batch, heads, seq, dim] through strides (in elements).
struct View4 {
  int64_t b = 0, h = 0, s = 0, d = 0;
  int64_t sb = 0, sh = 0, ss = 0, sd = 1;
};

// Ranks 2 and 3 (bhsd / bhds only) are [S, D] and [H, S, D] with the missing leading
// dimensions 1; a size-1 batch or head dimension gets stride 0 (it broadcasts).
View4 view_of(const Tensor& t, Layout l) {
  const int64_t r = t.rank();
  auto dim = [&](int64_t i) { return i - (4 - r) >= 0 ? t.dim(i - (4 - r)) : int64_t{1}; };
  const int64_t d0 = dim(0), d1 = dim(1), d2 = dim(2), d3 = dim(3);
  View4 v;
  switch (l) {
    case Layout::BHSD:
      v = {d0, d1, d2, d3, d1 * d2 * d3, d2 * d3, d3, 1};
      break;
    case Layout::BSHD:
      v = {d0, d2, d1, d3, d1 * d2 * d3, d3, d2 * d3, 1};
      break;
    case Layout::BHDS:
      v = {d0, d1, d3, d2, d1 * d2 * d3, d2 * d3, 1, d3};
      break;
  }
  if (v.b == 1) v.sb = 0;
  if (v.h == 1) v.sh = 0;
  return v;
}

// The integers of a shape input, wherever it lives.
std::vector<int64_t> ints_of(const Tensor& t) {
  return t.on_host() ? t.to_int64_vector() : download(t).to_int64_vector();
}

// ops::repeat_group of a [B, H, S, D] view.
int64_t repeat_group(const View4& kv, const std::vector<int64_t>& es, const std::vector<int64_t>& rs, bool allowzero) {
  return ops::repeat_group(kv.b, kv.h, kv.s, kv.d, es, rs, allowzero);
}

// The fast path of reforge::Attention: false, before any work, when the inputs are not of its
// form (then the unfused ops run instead, and compute or fail exactly as the graph before the
// fusion would). Its form: Q, K and V of one float type, 4-D (2-D and 3-D too in layouts
// bhsd/bhds, as MatMul operands); their and the mask's leading (batch, head) dimensions
// broadcasting together (numpy rules), or K/V heads repeated through the four shape inputs;
// K's head size Q's and V's sequence K's; a mask that broadcasts to the scores (a single query
// row broadcasts up to the mask's rows); one-element scale and fill of a type the kernel reads;
// head sizes whose tiles fit in shared memory.
// ---- reforge::Attention's prompt form in float32 through cuBLASLt ----------------------------
// A 16-bit attention of precision 'float32' over a long query (a prompt) has the products of a
// dense layer: S = Q K^T (16-bit operands, float32 result) per head, a float32 softmax of S (the
// scale, the mask, the NaN rules of the fused kernel), and P V in float32 (V widened; no TF32),
// rounded once to the output. The tensor cores take the first product; the fused kernel (a warp
// per row on CUDA cores) would take several times longer.

constexpr int64_t kPromptRows = 16;                  // queries from which the prompt form runs
constexpr int64_t kPromptScores = int64_t{64} << 20;  // float32 scores it may hold (256 MB)

// Rows of S [B * Hq * Sq, L] in place: scaled, masked, softmax (float32).
template <typename T>
__global__ void prompt_softmax_kernel(const AttnParams<T> p, float* S) {
  const int64_t rows = p.B * p.Hq * p.Sq, L = p.L;
  const int lane = threadIdx.x % 32;
  float scale = 1;
  if (p.scale_op == 1) scale = static_cast<float>(load_scalar(p.scale_p, p.scale_type));
  if (p.scale_op == 3)
    scale = static_cast<float>(load_scalar(p.scale_p, p.scale_type) * load_scalar(p.k_scale_p, p.k_scale_type));
  const float divisor = p.scale_op == 2 ? static_cast<float>(load_scalar(p.scale_p, p.scale_type)) : 1.f;
  const float fill = p.mask_b ? static_cast<float>(load_scalar(p.fill_p, p.fill_type)) : 0.f;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; r < rows;
       r += int64_t{gridDim.x} * blockDim.x / 32) {
    const int64_t i = r % p.Sq, bh = r / p.Sq, h = bh % p.Hq, b = bh / p.Hq;
    float* row = S + r * L;
    float mx = -INFINITY;
    for (int64_t j = lane; j < L; j += 32) {
      float x = row[j];
      x = p.scale_op == 2 ? x / divisor : x * scale;
      const int64_t mi = b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk;
      if (p.mask) x += static_cast<float>(p.mask[mi]);
      if (p.mask_b && p.mask_b[mi] == p.fill_when) x = fill;
      row[j] = x;
      mx = fmaxf(mx, x);  // NaN never adopted
    }
    mx = warp_max(mx);
    const float ref = mx == -INFINITY ? 0.f : mx;
    float sum = 0;
    for (int64_t j = lane; j < L; j += 32) sum += row[j] = expf(row[j] - ref);
    sum = warp_sum(sum);
    const bool closed = L > 0 && mx == -INFINITY;  // exp(-inf - -inf): the row is NaN
    for (int64_t j = lane; j < L; j += 32) row[j] = closed ? NAN : row[j] / sum;
  }
}

// V (any strides, 16-bit) as float32 [B * Hkv, L, Dv].
template <typename T>
__global__ void widen_v_kernel(const AttnParams<T> p, int64_t Hkv, float* out) {
  const int64_t n = p.B * Hkv * p.L * p.Dv;
  for (int64_t x = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; x < n; x += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = x % p.Dv, j = (x / p.Dv) % p.L, t = x / (p.Dv * p.L), kvh = t % Hkv, b = t / Hkv;
    out[x] = static_cast<float>(load_c(p.v + b * p.v_sb + kvh * p.v_sh + j * p.v_ss, e));
  }
}

// Y32 [B, Hq, Sq, Dv] rounded once into y (its strides); NaN rows zero under softmax_nan 'zero'.
template <typename T>
__global__ void store_y_kernel(const AttnParams<T> p, const float* y32) {
  const int64_t n = p.B * p.Hq * p.Sq * p.Dv;
  for (int64_t x = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; x < n; x += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = x % p.Dv, i = (x / p.Dv) % p.Sq, h = (x / (p.Dv * p.Sq)) % p.Hq, b = x / (p.Dv * p.Sq * p.Hq);
    float v = y32[x];
    if (p.nan_rows_zero && isnan(v)) v = 0;
    p.y[b * p.y_sb + h * p.y_sh + i * p.y_ss + e] = store_c<T>(static_cast<compute_t<T>>(v));
  }
}

// Runs the prompt form when `p` has it (see above; batch strides that one stride walks) and
// returns true.
template <typename T>
bool prompt_attention(const AttnParams<T>& p) {
  if constexpr (std::is_same_v<T, compute_t<T>>) {
    return false;
  } else {
    if (!p.f32 || p.Sq < kPromptRows || p.L == 0 || p.q_ss == 0 || p.k_group != p.v_group || p.Hq % p.k_group)
      return false;
    if (p.B * p.Hq * p.Sq * p.L > kPromptScores) return false;
    const int64_t group = p.k_group, Hkv = p.Hq / group;
    // One batch index t = b * Hkv + kvh per product of head g of each group: its strides.
    const bool one = p.B == 1;
    if (!one && !(p.q_sb == p.Hq * p.q_sh)) return false;
    if (!one && Hkv > 1 && !(p.k_sb == Hkv * p.k_sh && p.v_sb == Hkv * p.v_sh)) return false;
    if (!(p.k_sd == 1 || p.k_ss == 1)) return false;
    const DType in = std::is_same_v<T, __half> ? DType::Float16 : DType::BFloat16;
    const int64_t q_st = Hkv == 1 ? p.q_sb : group * p.q_sh;
    const int64_t k_st = Hkv == 1 ? p.k_sb : p.k_sh;
    const int64_t batch = p.B * Hkv;
    Tensor S = device_tensor(DType::Float32, {p.B * p.Hq * p.Sq * p.L});
    Tensor v32 = device_tensor(DType::Float32, {batch * p.L * p.Dv});
    Tensor y32 = device_tensor(DType::Float32, {p.B * p.Hq * p.Sq * p.Dv});
    float* s = S.mutable_data<float>();
    for (int64_t g = 0; g < group; ++g) {
      LtGemm qk;
      qk.in = in;
      qk.out = DType::Float32;
      qk.M = p.Sq;
      qk.N = p.L;
      qk.K = p.D;
      qk.batch = batch;
      qk.a = p.q + g * p.q_sh;
      qk.lda = p.q_ss;
      qk.stride_a = q_st;
      qk.b = p.k;
      qk.trans_b = p.k_sd == 1;  // K rows [L, D]; else K^T stored [D, L]
      qk.ldb = p.k_sd == 1 ? p.k_ss : p.k_sd;
      qk.stride_b = k_st;
      qk.c = s + g * p.Sq * p.L;
      qk.ldc = p.L;
      qk.stride_c = group * p.Sq * p.L;
      lt_gemm(qk);
    }
    const int64_t rows = p.B * p.Hq * p.Sq;
    prompt_softmax_kernel<T><<<blocks_for(rows * 32), 256, 0, stream()>>>(p, s);
    check_launch("Attention (prompt softmax)");
    widen_v_kernel<T><<<blocks_for(batch * p.L * p.Dv), 256, 0, stream()>>>(p, Hkv, v32.mutable_data<float>());
    check_launch("Attention (widen V)");
    for (int64_t g = 0; g < group; ++g) {
      LtGemm pv;
      pv.in = DType::Float32;
      pv.out = DType::Float32;
      pv.M = p.Sq;
      pv.N = p.Dv;
      pv.K = p.L;
      pv.batch = batch;
      pv.a = s + g * p.Sq * p.L;
      pv.lda = p.L;
      pv.stride_a = group * p.Sq * p.L;
      pv.b = v32.data<float>();
      pv.ldb = p.Dv;
      pv.stride_b = p.L * p.Dv;
      pv.c = y32.mutable_data<float>() + g * p.Sq * p.Dv;
      pv.ldc = p.Dv;
      pv.stride_c = group * p.Sq * p.Dv;
      lt_gemm(pv);
    }
    store_y_kernel<T><<<blocks_for(rows * p.Dv), 256, 0, stream()>>>(p, y32.data<float>());
    check_launch("Attention (store)");
    return true;
  }
}

template <typename T>
bool try_fused_attention(ops::KernelContext& ctx, const std::string& where) {
  using C = compute_t<T>;
  const ir::Node& node = ctx.node();
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  const Layout ql = parse_layout(node, "q_layout", false), kl = parse_layout(node, "k_layout", true),
               vl = parse_layout(node, "v_layout", false), out_layout = parse_layout(node, "out_layout", false);
  const Tensor* operands[3] = {&q, &k, &v};
  const Layout layouts[3] = {ql, kl, vl};
  for (int x = 0; x < 3; ++x) {
    const int64_t r = operands[x]->rank();
    if (!(r == 4 || (r >= 2 && r <= 3 && layouts[x] != Layout::BSHD))) return false;
  }
  const View4 qv = view_of(q, ql), kv = view_of(k, kl), vv = view_of(v, vl);
  // The output's leading dimensions: Q's, K's, V's and the mask's broadcast (numpy rules, as the
  // unfused MatMul/Add/Where/MatMul).
  int64_t out_rank = std::max({q.rank(), k.rank(), v.rank()});
  int64_t lead[2] = {1, 1};
  bool joined = true;
  auto join = [&](int64_t& dst, int64_t n) {
    if (!(dst == 1 || n == 1 || dst == n)) joined = false;
    if (n != 1) dst = n;
  };
  const View4* views[3] = {&qv, &kv, &vv};
  for (int x = 0; x < 3; ++x) {
    join(lead[0], views[x]->b);
    if (x == 0 || !ctx.has_input(6)) join(lead[1], views[x]->h);  // repeated K/V heads: below
  }
  const std::string mask_mode = ctx.attr_string("mask_mode", "none");
  const std::string scale_op = ctx.attr_string("scale_op", "none");
  const bool masked = mask_mode != "none" && ctx.has_input(4);
  if (masked) {
    const Tensor& m = ctx.input(4);
    if (m.rank() > 4) return false;
    out_rank = std::max<int64_t>(out_rank, m.rank());
    for (int64_t x = 0; x < 2 && x < m.rank() - 2; ++x) join(lead[1 - x], m.dim(m.rank() - 3 - x));
  }
  for (size_t idx : {size_t{3}, size_t{5}, size_t{10}}) {  // scale, fill, K scale: one element
    const bool used = (idx == 3 && scale_op != "none") || (idx == 5 && mask_mode.rfind("where", 0) == 0) ||
                      (idx == 10 && scale_op == "mul_qk");
    if (!used) continue;
    if (!ctx.has_input(idx)) return false;
    const Tensor& t = ctx.input(idx);
    if (t.numel() != 1 || t.rank() > 4 || scalar_code(t.dtype()) < 0) return false;
    out_rank = std::max<int64_t>(out_rank, t.rank());
  }
  if (!joined) return false;
  AttnParams<T> p;
  p.B = lead[0];
  p.Hq = lead[1];
  p.Sq = qv.s;
  p.D = qv.d;
  p.L = kv.s;
  p.Dv = vv.d;
  if (kv.d != p.D || vv.s != p.L) return false;
  size_t smem = 0;
  if (!fitting_tile(p.D, p.Dv, sizeof(C), smem)) return false;
  if (ctx.has_input(6)) {
    if (!(ctx.has_input(7) && ctx.has_input(8) && ctx.has_input(9)) || k.rank() != 4 || v.rank() != 4) return false;
    const bool allowzero = ctx.attr_int("kv_allowzero", 0) != 0;
    const int64_t kg = repeat_group(kv, ints_of(ctx.input(6)), ints_of(ctx.input(7)), allowzero);
    const int64_t vg = repeat_group(vv, ints_of(ctx.input(8)), ints_of(ctx.input(9)), allowzero);
    if (!(kg != 0 && vg != 0 && kv.h * kg == p.Hq && vv.h * vg == p.Hq)) return false;
    p.k_group = kg;
    p.v_group = vg;
  }
  int64_t mdims[4] = {1, 1, 1, 1};
  if (masked) {
    const Tensor& m = ctx.input(4);
    for (int64_t x = 0; x < m.rank(); ++x) mdims[4 - m.rank() + x] = m.dim(x);
    // The scores' rows broadcast with the mask's as the unfused Add/Where would: one query row
    // against a mask of many is that row repeated (Q's row stride 0, below).
    const int64_t rows = p.Sq == 1 ? mdims[2] : p.Sq;
    const int64_t target[4] = {p.B, p.Hq, rows, p.L};
    for (int x = 0; x < 4; ++x)
      if (!(mdims[x] == 1 || mdims[x] == target[x])) return false;
    if (mask_mode == "add" ? !is_float(m.dtype()) : m.dtype() != DType::Bool) return false;
    if (mask_mode != "add" && !ctx.has_input(5)) return false;
  }
  if (out_layout != Layout::BHSD && out_rank != 4) return false;
  // The fast path's form holds: from here on, the kernel runs.
  p.q = q.data<T>();
  p.q_sb = qv.sb;
  p.q_sh = qv.sh;
  p.q_ss = qv.ss;
  if (masked && p.Sq == 1 && mdims[2] != 1) {
    p.Sq = mdims[2];
    p.q_ss = 0;
  }
  p.k = k.data<T>();
  p.k_sb = kv.sb;
  p.k_sh = kv.sh;
  p.k_ss = kv.ss;
  p.k_sd = kv.sd;
  p.v = v.data<T>();
  p.v_sb = vv.sb;
  p.v_sh = vv.sh;
  p.v_ss = vv.ss;
  Tensor scale_hold, k_scale_hold, fill_hold;  // host scalars copied to the device, alive until the launch
  if (scale_op != "none") {
    p.scale_op = scale_op == "mul" ? 1 : scale_op == "div" ? 2 : 3;
    p.scale_type = scalar_type(ctx.input(3), where, "scale");
    p.scale_p = device_data(ctx.input(3), scale_hold);
    if (p.scale_op == 3) {
      p.k_scale_type = scalar_type(ctx.input(10), where, "K scale");
      p.k_scale_p = device_data(ctx.input(10), k_scale_hold);
    }
  }
  p.nan_rows_zero = ctx.attr_string("softmax_nan", "keep") == "zero";
  p.f32 = ctx.attr_string("precision", "rounded") == "float32";
  // One query row per head of 16-bit inputs in float32 (a decoding step): the decoding kernel
  // (attention_decode.h), which reads an additive mask in its own type.
  DecodeAttention da;
  bool decode = p.f32 && p.Sq == 1 && !std::is_same_v<T, C> && p.k_group == p.v_group && p.k_sd == 1 &&
                p.D == p.Dv;
  Tensor mask_buf;
  if (masked) {
    const Tensor& m = ctx.input(4);
    p.m_sk = mdims[3] == 1 ? 0 : 1;
    p.m_sq = mdims[2] == 1 ? 0 : mdims[3];
    p.m_sh = mdims[1] == 1 ? 0 : mdims[2] * mdims[3];
    p.m_sb = mdims[0] == 1 ? 0 : mdims[1] * mdims[2] * mdims[3];
    p.m_len = p.L;
    if (mask_mode == "add") {
      decode = decode && (m.dtype() == q.dtype() || m.dtype() == DType::Float32);
      if (decode) {
        da.mask = m.raw();
        da.mask_dtype = m.dtype();
      } else {
        mask_buf = convert_mask<T>(m, false, where);
        p.mask = mask_buf.data<C>();
      }
    } else {
      p.mask_b = m.data<bool>();
      p.fill_when = mask_mode == "where_fill_true";
      p.fill_type = scalar_type(ctx.input(5), where, "fill value");
      p.fill_p = device_data(ctx.input(5), fill_hold);
    }
  }
  // A short query under grouped heads: a block's warps take several heads of one K/V head.
  int rows = 1;
  while (rows < p.Sq && rows < kRows) rows *= 2;
  p.hpb = kRows / rows;
  while (p.hpb > 1 && (p.k_group % p.hpb || p.v_group % p.hpb || p.Hq % p.hpb)) p.hpb /= 2;
  p.prec = p.f32 ? kNone : prec_of(q.dtype());
  p.reference = ops::reference_rounding(ctx.node());
  Shape y_shape = out_layout == Layout::BHSD ? Shape{p.B, p.Hq, p.Sq, p.Dv} : Shape{p.B, p.Sq, p.Hq, p.Dv};
  y_shape.erase(y_shape.begin(), y_shape.begin() + (4 - out_rank));  // ranks 2, 3: the leading 1s go
  Tensor& y = ctx.allocate_output_uninit(0, q.dtype(), y_shape);
  p.y = y.mutable_data<T>();
  if (out_layout == Layout::BHSD) {
    p.y_sb = p.Hq * p.Sq * p.Dv;
    p.y_sh = p.Sq * p.Dv;
    p.y_ss = p.Dv;
  } else {
    p.y_sb = p.Sq * p.Hq * p.Dv;
    p.y_sh = p.Dv;
    p.y_ss = p.Hq * p.Dv;
  }
  if (decode) {
    da.dtype = q.dtype();
    da.q = p.q;
    da.q_sb = p.q_sb;
    da.q_sh = p.q_sh;
    da.k = p.k;
    da.k_sb = p.k_sb;
    da.k_sh = p.k_sh;
    da.k_ss = p.k_ss;
    da.v = p.v;
    da.v_sb = p.v_sb;
    da.v_sh = p.v_sh;
    da.v_ss = p.v_ss;
    da.y = p.y;
    da.y_sb = p.y_sb;
    da.y_sh = p.y_sh;
    da.B = p.B;
    da.Hq = p.Hq;
    da.L = p.L;
    da.D = p.D;
    da.group = p.k_group;
    da.scale_op = p.scale_op;
    da.scale_p = p.scale_p;
    da.scale_type = p.scale_type;
    da.k_scale_p = p.k_scale_p;
    da.k_scale_type = p.k_scale_type;
    da.mask_b = p.mask_b;
    da.fill_when = p.fill_when;
    da.fill_p = p.fill_p;
    da.fill_type = p.fill_type;
    da.m_sb = p.m_sb;
    da.m_sh = p.m_sh;
    da.m_sk = p.m_sk;
    da.nan_rows_zero = p.nan_rows_zero;
    if (decode_attention_fits(da)) {
      decode_attention(da);
      return true;
    }
    if (da.mask) {  // the mask as the fused kernel reads it
      mask_buf = convert_mask<T>(ctx.input(4), false, where);
      p.mask = mask_buf.data<C>();
    }
  }
  if (!prompt_attention(p)) launch_attention<T, false>(p, where);
  return true;
}

void fused_attention(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  std::string err = ops::fused_attention_check(ctx.node());
  REFORGE_CHECK(err.empty(), where, ": ", err);
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  bool done = false;
  if (is_float(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype())
    dispatch_device(
        q.dtype(), where.c_str(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          if constexpr (std::is_floating_point_v<compute_t<T>>) done = try_fused_attention<T>(ctx, where);
        },
        true);
  if (!done) ctx.set_output(0, ops::attention_unfused(ctx, device_ops(ctx)));
}

}  // namespace

void register_attention_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "Attention", onnx_attention, ops::attention_check, nullptr, onnx_attention_shapes);
  add_kernel(r, "reforge", "Attention", fused_attention, ops::fused_attention_check);
}

}  // namespace reforge::cuda
