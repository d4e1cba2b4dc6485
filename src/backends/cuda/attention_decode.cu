#include "backends/cuda/attention_decode.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_scalar.cuh"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/group_reduce.cuh"
#include "backends/cuda/launch.h"

namespace reforge::cuda {

namespace {

constexpr int kThreads = 128;  // a block's threads, and the keys of a chunk (one a thread)
constexpr int kWarps = kThreads / 32;
constexpr int kMaxGroup = 8;
constexpr int kMaxD = 128;
constexpr int kVec = 8;                                // elements of a 16-byte piece
constexpr int kMaxPieces = kMaxD / kVec;               // 16-byte pieces of a key row
constexpr int kMaxOut = kMaxGroup * kMaxD / kThreads;  // output features a thread accumulates
constexpr int kMinSplit = 32;                          // keys a split takes at least

// The fused kernel's end of a row (attention.cu fused_row_end): sum r of a row whose exponential
// sum is l and max m.
__device__ __forceinline__ float row_end(const DecodeAttention& a, float r, float l, float m) {
  if (m == -INFINITY) r = NAN;
  if (a.nan_rows_zero && (isnan(r) || isnan(l))) r = 0.f;
  return r;
}

// Shared memory: the group's query rows [G][D] (float), the chunk's scores and then weights
// [G][kThreads], per head its max, sum and rescale factor [kMaxGroup][4], and the chunk's values
// [kThreads][D] in T.
size_t shared_bytes(int64_t G, int64_t D, size_t tsize) {
  return sizeof(float) * static_cast<size_t>(G * D + G * kThreads + kMaxGroup * 4) + tsize * kThreads * D;
}

// M: the additive mask's type (T or float), or bool where there is none (a boolean mask is read
// through mask_b either way).
template <typename T, typename M>
__global__ void __launch_bounds__(kThreads) decode_kernel(const DecodeAttention a, int splits, int64_t split_len,
                                                         float* __restrict__ part, unsigned* __restrict__ counters) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ bool last;
  const int G = static_cast<int>(a.group), D = static_cast<int>(a.D), pieces = D / kVec;
  float* qs = reinterpret_cast<float*>(smem_raw);
  float* sc = qs + G * D;
  float* stat = sc + G * kThreads;
  uint4* vs = reinterpret_cast<uint4*>(stat + kMaxGroup * 4);
  const T* vt = reinterpret_cast<const T*>(vs);
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int64_t hkv = a.Hq / G;
  const int64_t split = blockIdx.x % splits, bk = blockIdx.x / splits;
  const int64_t b = bk / hkv, kvh = bk % hkv, h0 = kvh * G;
  const int64_t j_lo = split * split_len, j_hi = min(a.L, j_lo + split_len);
  const T* kbase = static_cast<const T*>(a.k) + b * a.k_sb + kvh * a.k_sh;
  const T* vbase = static_cast<const T*>(a.v) + b * a.v_sb + kvh * a.v_sh;
  const float scale = a.scale_op ? static_cast<float>(load_scalar(a.scale_p, a.scale_type)) : 1.f;
  const float k_mul = a.scale_op == 3 ? static_cast<float>(load_scalar(a.k_scale_p, a.k_scale_type)) : 1.f;
  const float fill = a.mask_b ? static_cast<float>(load_scalar(a.fill_p, a.fill_type)) : 0.f;
  for (int x = t; x < G * D; x += kThreads) {
    const int g = x / D, e = x - g * D;
    const float qv = load_c(static_cast<const T*>(a.q) + b * a.q_sb + (h0 + g) * a.q_sh, e);
    qs[x] = a.scale_op == 3 ? qv * scale : qv;
  }
  if (t < G) {
    stat[t * 4] = -INFINITY;
    stat[t * 4 + 1] = 0.f;
  }
  const int outs = G * D;
  float acc[kMaxOut];
#pragma unroll
  for (int r = 0; r < kMaxOut; ++r) acc[r] = 0.f;
  __syncthreads();
  for (int64_t c0 = j_lo; c0 < j_hi; c0 += kThreads) {
    const int nk = static_cast<int>(min(int64_t{kThreads}, j_hi - c0));
    for (int x = t; x < nk * pieces; x += kThreads) {
      const int jj = x / pieces, c = x - jj * pieces;
      vs[x] = __ldg(reinterpret_cast<const uint4*>(vbase + (c0 + jj) * a.v_ss) + c);
    }
    if (t < nk) {
      const int64_t j = c0 + t;
      const uint4* kp = reinterpret_cast<const uint4*>(kbase + j * a.k_ss);
      uint4 kv[kMaxPieces];
#pragma unroll
      for (int c = 0; c < kMaxPieces; ++c)
        if (c < pieces) kv[c] = __ldg(kp + c);
      float dot[kMaxGroup];
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) dot[g] = 0.f;
#pragma unroll
      for (int c = 0; c < kMaxPieces; ++c) {
        if (c < pieces) {
          float kf[kVec];
          unpack8<T>(kv[c], kf);
          if (a.scale_op == 3)
#pragma unroll
            for (int e = 0; e < kVec; ++e) kf[e] *= k_mul;
#pragma unroll
          for (int g = 0; g < kMaxGroup; ++g)
            if (g < G) {
              const float* qg = qs + g * D + c * kVec;
#pragma unroll
              for (int e = 0; e < kVec; ++e) dot[g] = fmaf(qg[e], kf[e], dot[g]);
            }
        }
      }
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < G) {
          float s = dot[g];
          if (a.scale_op == 1) s = s * scale;
          if (a.scale_op == 2) s = s / scale;
          const int64_t mi = b * a.m_sb + (h0 + g) * a.m_sh + j * a.m_sk;
          if constexpr (!std::is_same_v<M, bool>)
            if (a.mask) s = s + static_cast<float>(load_c(static_cast<const M*>(a.mask), mi));
          if (a.mask_b && a.mask_b[mi] == a.fill_when) s = fill;
          sc[g * kThreads + t] = s;
        }
    }
    __syncthreads();
    // Per head (a warp each): the chunk's max, the running max and sum rescaled, the weights.
    for (int g = warp; g < G; g += kWarps) {
      float x[kThreads / 32];
      float cm = -INFINITY;
#pragma unroll
      for (int r = 0; r < kThreads / 32; ++r) {
        const int jj = lane + 32 * r;
        x[r] = jj < nk ? sc[g * kThreads + jj] : -INFINITY;
        cm = x[r] > cm ? x[r] : cm;  // NaN never adopted
      }
      cm = warp_max(cm);
      const float m = stat[g * 4], l = stat[g * 4 + 1];
      const float m_new = cm > m ? cm : m;
      const float ref = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = m == -INFINITY ? 0.f : expf(m - ref);
      float ps = 0.f;
#pragma unroll
      for (int r = 0; r < kThreads / 32; ++r) {
        const int jj = lane + 32 * r;
        if (jj < nk) {
          const float pj = expf(x[r] - ref);
          sc[g * kThreads + jj] = pj;
          ps += pj;
        }
      }
      ps = warp_sum(ps);
      if (lane == 0) {
        stat[g * 4] = m_new;
        stat[g * 4 + 1] = l * alpha + ps;
        stat[g * 4 + 2] = alpha;
      }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kMaxOut; ++r) {
      const int o = t + r * kThreads;
      if (o < outs) {
        const int g = o / D, e = o - g * D;
        const float* w = sc + g * kThreads;
        float s = acc[r] * stat[g * 4 + 2];
        for (int jj = 0; jj < nk; ++jj) s = fmaf(w[jj], load_c(vt, int64_t{jj} * D + e), s);
        acc[r] = s;
      }
    }
    __syncthreads();  // the next chunk overwrites the scores, the values and the factors
  }
  T* y = static_cast<T*>(a.y);
  if (splits == 1) {
#pragma unroll
    for (int r = 0; r < kMaxOut; ++r) {
      const int o = t + r * kThreads;
      if (o < outs) {
        const int g = o / D, e = o - g * D;
        const float m = stat[g * 4], l = stat[g * 4 + 1];
        const float v = row_end(a, l == 0.f ? 0.f : acc[r] / l, l, m);
        y[b * a.y_sb + (h0 + g) * a.y_sh + e] = store_c<T>(v);
      }
    }
    return;
  }
  // This split's share: part [(b * Hq + h) * splits + split][D + 2] (sums, max, exponential sum).
  const int64_t row0 = b * a.Hq + h0;
#pragma unroll
  for (int r = 0; r < kMaxOut; ++r) {
    const int o = t + r * kThreads;
    if (o < outs) {
      const int g = o / D, e = o - g * D;
      part[((row0 + g) * splits + split) * (D + 2) + e] = acc[r];
    }
  }
  if (t < G) {
    float* ps = part + ((row0 + t) * splits + split) * (D + 2);
    ps[D] = stat[t * 4];
    ps[D + 1] = stat[t * 4 + 1];
  }
  __threadfence();
  __syncthreads();
  if (t == 0) last = atomicAdd(&counters[bk], 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  // The last block of the head group joins the splits in split order.
  for (int o = t; o < outs; o += kThreads) {
    const int g = o / D, e = o - g * D;
    const float* pp = part + (row0 + g) * splits * (D + 2);
    // Eight splits loaded at once (their latencies overlap), joined in split order.
    float m = -INFINITY;
    for (int s0 = 0; s0 < splits; s0 += 8) {
      float ms[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) ms[u] = s0 + u < splits ? __ldcg(pp + (s0 + u) * (D + 2) + D) : -INFINITY;
#pragma unroll
      for (int u = 0; u < 8; ++u) m = fmaxf(m, ms[u]);  // NaN never adopted
    }
    float l = 0.f, sum = 0.f;
    for (int s0 = 0; s0 < splits; s0 += 8) {
      float ms[8], ls[8], xs[8];
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (s0 + u < splits) {
          const float* q = pp + (s0 + u) * (D + 2);
          ms[u] = __ldcg(q + D);
          ls[u] = __ldcg(q + D + 1);
          xs[u] = __ldcg(q + e);
        }
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (s0 + u < splits && ms[u] != -INFINITY) {
          const float f = expf(ms[u] - m);
          l += ls[u] * f;
          sum += xs[u] * f;
        }
    }
    y[b * a.y_sb + (h0 + g) * a.y_sh + e] = store_c<T>(row_end(a, l == 0.f ? 0.f : sum / l, l, m));
  }
  if (t == 0) counters[bk] = 0;
}

template <typename T, typename M>
void launch(const DecodeAttention& a) {
  const int64_t heads = a.B * (a.Hq / a.group);  // blocks of one split
  // Enough splits of the keys that every multiprocessor has two blocks, each split at least
  // kMinSplit keys.
  const int64_t want = std::max<int64_t>(1, (2 * multiprocessors() + heads - 1) / heads);
  int64_t split_len = (a.L + want - 1) / want;
  split_len = std::max<int64_t>(kMinSplit, (split_len + kMinSplit - 1) / kMinSplit * kMinSplit);
  if (a.split_keys > 0) split_len = a.split_keys;
  const int64_t splits = (a.L + split_len - 1) / split_len;
  Tensor partial, counters;
  if (splits > 1) split_scratch(a.B * a.Hq * splits * (a.D + 2), heads, partial, counters);
  const size_t bytes = shared_bytes(a.group, a.D, sizeof(T));
  decode_kernel<T, M><<<static_cast<unsigned>(heads * splits), kThreads, bytes, stream()>>>(
      a, static_cast<int>(splits), split_len, splits > 1 ? static_cast<float*>(partial.mutable_raw()) : nullptr,
      splits > 1 ? static_cast<unsigned*>(counters.mutable_raw()) : nullptr);
  check_launch("Attention (decoding)");
}

template <typename T>
void launch_masked(const DecodeAttention& a) {
  if (!a.mask)
    launch<T, bool>(a);
  else if (a.mask_dtype == DType::Float32)
    launch<T, float>(a);
  else
    launch<T, T>(a);
}

}  // namespace

bool decode_attention_fits(const DecodeAttention& a) {
  if (a.dtype != DType::BFloat16 && a.dtype != DType::Float16) return false;
  if (a.D < kVec || a.D > kMaxD || a.D % kVec != 0) return false;
  if (a.group < 1 || a.group > kMaxGroup || a.Hq < 1 || a.Hq % a.group != 0 || a.B < 1 || a.L < 1) return false;
  if (a.scale_op < 0 || a.scale_op > 3 || (a.scale_op == 3 && !a.k_scale_p) || a.split_keys < 0) return false;
  if (a.mask && a.mask_dtype != a.dtype && a.mask_dtype != DType::Float32) return false;
  if (!aligned16(a.k) || !aligned16(a.v)) return false;
  for (int64_t s : {a.k_sb, a.k_sh, a.k_ss, a.v_sb, a.v_sh, a.v_ss})
    if (s % kVec != 0) return false;
  return shared_bytes(a.group, a.D, 2) <= 48 * 1024;
}

void decode_attention(const DecodeAttention& a) {
  if (a.dtype == DType::BFloat16)
    launch_masked<__nv_bfloat16>(a);
  else
    launch_masked<__half>(a);
}

}  // namespace reforge::cuda
