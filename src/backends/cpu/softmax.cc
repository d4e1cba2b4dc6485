// The CPU's Softmax and LogSoftmax: float runs on GCC/Clang vector types with a polynomial exp,
// compiled for AVX-512, AVX2 and SSE2, each on vectors one register of its own width
// (simd_vec.h), and picked at run time: std::exp is a scalar library call, and the compiler
// will not vectorize a clamped exp on its own (it may not if-convert float compares under the
// default -ftrapping-math). The polynomial is within 2 ulp of expf and returns exactly 0 below
// float's normal range, so masked (-inf) logits give 0. Everything else is the shared logic of
// ops/reduce/softmax.h (double with std::exp, 16-bit with the reference's rounding).
#include "ops/reduce/softmax.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd_vec.h"
#include "core/simd.h"

namespace reforge::ops {
namespace {

using simdv::kMaxW;
using simdv::load;
using simdv::splat;
using simdv::store;
using simdv::vexp;  // softmax feeds it x - max <= 0 (or NaN)

// Loads the first n floats of p (n may be <= 0 or >= the width), the other lanes set to `fill`.
template <typename V>
RF_INLINE V load_part(const float* p, int64_t n, float fill) {
  constexpr int64_t kW = simdv::lanes_of<V>;
  float buf[kW];
  for (int64_t i = 0; i < kW; ++i) buf[i] = i < n ? p[i] : fill;
  return load<V>(buf);
}
template <typename V>
RF_INLINE void store_part(float* p, const V& v, int64_t n) {
  for (int64_t i = 0; i < n && i < simdv::lanes_of<V>; ++i) p[i] = v[i];
}
// NaN may or may not survive the max, but exp(NaN - m) makes the sum, and so the block, NaN.
template <typename V>
RF_INLINE V vmax(const V& a, const V& b) {
  return a > b ? a : b;
}

// float: one [n, inner] block. A row (inner == 1) runs in steps of kMaxW = 16 floats, as
// kMaxW / W vectors of the variant's width W with an accumulator each (tails padded with -inf,
// whose exp is 0), and the horizontal sum adds the 16 lane sums in the same order at every width:
// the vector width never changes how a row's sum rounds (variants differ only where FMA
// contraction rounds exp differently). Columns (inner > 1) are lane by lane anyway.
template <int kTag>
RF_INLINE void softmax_block_impl(const float* x, float* y, int64_t n, int64_t inner, bool log, float* work) {
  using V = simdv::Vec<kTag>;
  constexpr int64_t kW = simdv::kW<kTag>;
  constexpr int kK = static_cast<int>(kMaxW / kW);
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  if (inner == 1) {
    const int64_t body = n - n % kMaxW, tail = n - body;
    V vm[kK];
    for (int k = 0; k < kK; ++k) vm[k] = splat<V>(ninf);
    for (int64_t i = 0; i < body; i += kMaxW)
      for (int k = 0; k < kK; ++k) vm[k] = vmax(vm[k], load<V>(x + i + k * kW));
    // Tail vectors wholly past the end are skipped: -inf would leave the max, and exp(-inf) = +0
    // the sums, as they are.
    for (int k = 0; k < kK && k * kW < tail; ++k)
      vm[k] = vmax(vm[k], load_part<V>(x + body + k * kW, tail - k * kW, ninf));
    float m = vm[0][0];
    for (int k = 0; k < kK; ++k)
      for (int l = 0; l < kW; ++l) m = std::max(m, vm[k][l]);
    const V mv = splat<V>(m);
    V vs[kK];
    for (int k = 0; k < kK; ++k) vs[k] = V{};
    for (int64_t i = 0; i < body; i += kMaxW) {
      for (int k = 0; k < kK; ++k) {
        const V e = vexp(load<V>(x + i + k * kW) - mv);
        if (!log) store<V>(y + i + k * kW, e);
        vs[k] += e;
      }
    }
    for (int k = 0; k < kK && k * kW < tail; ++k) {
      const V e = vexp(load_part<V>(x + body + k * kW, tail - k * kW, ninf) - mv);
      if (!log) store_part(y + body + k * kW, e, tail - k * kW);
      vs[k] += e;
    }
    float s = 0;
    for (int k = 0; k < kK; ++k)
      for (int l = 0; l < kW; ++l) s += vs[k][l];
    if (log) {
      const float shift = m + std::log(s);
      for (int64_t k = 0; k < n; ++k) y[k] = x[k] - shift;
    } else {
      const float inv = 1.0f / s;
      for (int64_t k = 0; k < n; ++k) y[k] *= inv;
    }
    return;
  }
  float* mx = work;
  float* sum = work + inner;
  for (int64_t j = 0; j < inner; ++j) {
    mx[j] = ninf;
    sum[j] = 0;
  }
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x + r * inner;
    for (int64_t j = 0; j < inner; ++j) mx[j] = std::max(mx[j], row[j]);
  }
  const int64_t body = inner - inner % kW, tail = inner - body;
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x + r * inner;
    float* out = y + r * inner;
    for (int64_t j = 0; j < body; j += kW) {
      const V e = vexp(load<V>(row + j) - load<V>(mx + j));
      if (!log) store<V>(out + j, e);
      store<V>(sum + j, load<V>(sum + j) + e);
    }
    if (tail) {
      const V e = vexp(load_part<V>(row + body, tail, ninf) - load_part<V>(mx + body, tail, 0.0f));
      if (!log) store_part(out + body, e, tail);
      store_part(sum + body, load_part<V>(sum + body, tail, 0.0f) + e, tail);
    }
  }
  if (log) {
    for (int64_t j = 0; j < inner; ++j) sum[j] = mx[j] + std::log(sum[j]);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < inner; ++j) y[r * inner + j] = x[r * inner + j] - sum[j];
  } else {
    for (int64_t j = 0; j < inner; ++j) sum[j] = 1.0f / sum[j];
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < inner; ++j) y[r * inner + j] *= sum[j];
  }
}

RF_AVX512_TARGET void softmax_block_f32_avx512(const float* x, float* y, int64_t n, int64_t inner, bool log,
                                               float* work) {
  softmax_block_impl<simdv::kAvx512>(x, y, n, inner, log, work);
}
RF_AVX2_TARGET void softmax_block_f32_avx2(const float* x, float* y, int64_t n, int64_t inner, bool log, float* work) {
  softmax_block_impl<simdv::kAvx2>(x, y, n, inner, log, work);
}
void softmax_block_f32_generic(const float* x, float* y, int64_t n, int64_t inner, bool log, float* work) {
  softmax_block_impl<simdv::kGeneric>(x, y, n, inner, log, work);
}
void softmax_block_f32(const float* x, float* y, int64_t n, int64_t inner, bool log, float* work) {
  simdv::pick(softmax_block_f32_avx512, softmax_block_f32_avx2, softmax_block_f32_generic)(x, y, n, inner, log, work);
}

template <bool Log>
void softmax_kernel(KernelContext& ctx) {
  softmax_run(ctx, Log, softmax_block_f32);
}

}  // namespace
}  // namespace reforge::ops

namespace reforge::cpu {

void register_softmax_kernels(KernelRegistry& r) {
  r.add({"cpu", "", "Softmax", 1, INT_MAX, ops::softmax_kernel<false>});
  r.add({"cpu", "", "LogSoftmax", 1, INT_MAX, ops::softmax_kernel<true>});
}

}  // namespace reforge::cpu
