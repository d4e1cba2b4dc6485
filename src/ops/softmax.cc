// Softmax and LogSoftmax.
//
// Before opset 13 the input is coerced to 2-D at `axis` ([prod(dims[:axis]), prod(dims[axis:])])
// and normalized over the second dimension; from opset 13 the normalization runs along `axis`
// alone. Both become blocks [n, inner] (inner == 1 for the 2-D form and for a last axis), one per
// outer index, normalized over n. Every block subtracts its max before exponentiating, so large
// inputs do not overflow. 16-bit Softmax follows the reference's rounding (see softmax_block_16).
//
// float runs 16 lanes at a time on GCC/Clang vector types with a polynomial exp, compiled for
// AVX-512, AVX2 and SSE2 and picked at run time (core/simd.h): std::exp is a scalar library call, and the compiler will not vectorize a clamped exp on its own (it may not
// if-convert float compares under the default -ftrapping-math). The polynomial is within 2 ulp
// of expf and returns exactly 0 below float's normal range, so masked (-inf) logits give 0.
// double uses std::exp.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/simd.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

// 64-byte vectors (one AVX-512 register, two AVX2 or four SSE2 ones). Every helper taking one
// is always inlined into the per-ISA block functions below, so none is ever passed in a call.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#define SOFTMAX_INLINE inline __attribute__((always_inline))
using f4 = float __attribute__((vector_size(64)));
using i4 = int32_t __attribute__((vector_size(64)));
using u4 = uint32_t __attribute__((vector_size(64)));
constexpr int64_t kW = 16;

SOFTMAX_INLINE f4 splat(float v) { return f4{} + v; }
SOFTMAX_INLINE f4 load4(const float* p) {
  f4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
SOFTMAX_INLINE void store4(float* p, f4 v) { std::memcpy(p, &v, sizeof(v)); }
// Loads the first n < 4 floats of p, the other lanes set to `fill`.
SOFTMAX_INLINE f4 load_part(const float* p, int64_t n, float fill) {
  f4 v = splat(fill);
  for (int64_t i = 0; i < n; ++i) v[i] = p[i];
  return v;
}
SOFTMAX_INLINE void store_part(float* p, f4 v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = v[i];
}
// NaN may or may not survive the max, but exp(NaN - m) makes the sum, and so the block, NaN.
SOFTMAX_INLINE f4 max4(f4 a, f4 b) { return a > b ? a : b; }
SOFTMAX_INLINE float hmax(f4 v) {
  float m = v[0];
  for (int i = 1; i < kW; ++i) m = std::max(m, v[i]);
  return m;
}
SOFTMAX_INLINE float hsum(f4 v) {
  float s = 0;
  for (int i = 0; i < kW; ++i) s += v[i];
  return s;
}

// Cephes-style expf on 4 lanes: exp(x) = 2^n * e^r with |r| <= ln2/2, degree-6 polynomial for
// e^r. Softmax only feeds it x <= 0 (or NaN); above 88 it saturates at exp(88), above
// ln(FLT_MAX) it returns inf.
SOFTMAX_INLINE f4 exp4(f4 x) {
  const f4 lo = splat(-87.3365447505531f);  // below this, exp(x) < FLT_MIN: return 0
  const f4 hi = splat(88.0f);
  f4 xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  // Round x*log2(e) to nearest with the 1.5*2^23 trick (no SSE4.1 round instruction needed).
  const f4 fx = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  f4 r = xc - fx * 0.693359375f;
  r = r - fx * -2.12194440e-4f;
  f4 p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const u4 bits = (std::bit_cast<u4>(__builtin_convertvector(fx, i4)) + 127u) << 23;
  f4 y = p * std::bit_cast<f4>(bits);
  y = x > splat(88.72283935546875f) ? splat(std::numeric_limits<float>::infinity()) : y;
  return x < lo ? f4{} : y;  // NaN fails every compare and stays NaN
}

// float: one [n, inner] block, 16 lanes at a time (tails padded with -inf, whose exp is 0).
REFORGE_SIMD_VARIANTS(, void, softmax_block_f32,
                      (const float* x, float* y, int64_t n, int64_t inner, bool log, float* work),
                      (x, y, n, inner, log, work), {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  if (inner == 1) {
    const int64_t body = n - n % kW, tail = n - body;
    f4 vm = splat(ninf);
    for (int64_t i = 0; i < body; i += kW) vm = max4(vm, load4(x + i));
    if (tail) vm = max4(vm, load_part(x + body, tail, ninf));
    const float m = hmax(vm);
    const f4 mv = splat(m);
    f4 vs = f4{};
    for (int64_t i = 0; i < body; i += kW) {
      const f4 e = exp4(load4(x + i) - mv);
      if (!log) store4(y + i, e);
      vs += e;
    }
    if (tail) {
      const f4 e = exp4(load_part(x + body, tail, ninf) - mv);
      if (!log) store_part(y + body, e, tail);
      vs += e;
    }
    const float s = hsum(vs);
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
      const f4 e = exp4(load4(row + j) - load4(mx + j));
      if (!log) store4(out + j, e);
      store4(sum + j, load4(sum + j) + e);
    }
    if (tail) {
      const f4 e = exp4(load_part(row + body, tail, ninf) - load_part(mx + body, tail, 0.0f));
      if (!log) store_part(out + body, e, tail);
      store_part(sum + body, load_part(sum + body, tail, 0.0f) + e, tail);
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
})

// double: one [n, inner] block, scalar std::exp.
void softmax_block_f64(const double* x, double* y, int64_t n, int64_t inner, bool log, double* work) {
  double* mx = work;
  double* sum = work + inner;
  for (int64_t j = 0; j < inner; ++j) {
    mx[j] = -std::numeric_limits<double>::infinity();
    sum[j] = 0;
  }
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < inner; ++j) mx[j] = std::max(mx[j], x[r * inner + j]);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < inner; ++j) {
      const double e = std::exp(x[r * inner + j] - mx[j]);
      if (!log) y[r * inner + j] = e;
      sum[j] += e;
    }
  if (log) {
    for (int64_t j = 0; j < inner; ++j) sum[j] = mx[j] + std::log(sum[j]);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < inner; ++j) y[r * inner + j] = x[r * inner + j] - sum[j];
  } else {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < inner; ++j) y[r * inner + j] /= sum[j];
  }
}

// 16-bit floats: computed in float, but every intermediate is rounded to T where the ONNX
// reference (numpy on float16/bfloat16 arrays) rounds it: x - max, exp, the sum and the
// quotient; float16 sums over a contiguous axis accumulate in float (numpy's pairwise half sum),
// all other sums round after each addition. A float-only computation differs by an ulp often
// enough that the suite's rtol (1e-3, finer than a bfloat16 ulp) rejects it. (LogSoftmax does
// not follow the reference's log(Softmax), which gives -inf wherever the 16-bit probability
// underflows; it computes x - max - log(sum) in float and rounds once.)
template <typename T>
void softmax_block_16(const T* x, T* y, int64_t n, int64_t inner, float* work) {
  auto rnd = [](float v) { return static_cast<float>(T(v)); };
  float* mx = work;
  float* sum = work + inner;
  for (int64_t j = 0; j < inner; ++j) {
    mx[j] = -std::numeric_limits<float>::infinity();
    sum[j] = 0;
  }
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < inner; ++j) mx[j] = std::max(mx[j], static_cast<float>(x[r * inner + j]));
  const bool float_sum = std::is_same_v<T, float16> && inner == 1;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < inner; ++j) {
      const float e = rnd(std::exp(rnd(static_cast<float>(x[r * inner + j]) - mx[j])));
      y[r * inner + j] = T(e);
      sum[j] = float_sum ? sum[j] + e : rnd(sum[j] + e);
    }
  for (int64_t j = 0; j < inner; ++j) sum[j] = rnd(sum[j]);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < inner; ++j) {
      y[r * inner + j] = T(static_cast<float>(y[r * inner + j]) / sum[j]);
    }
}

template <typename T>
void softmax_typed(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool log, int threads) {
  using C = compute_t<T>;
  const int64_t block = n * inner;
  const bool par = threads > 1 && outer > 1 && outer * block >= (1 << 14);
#pragma omp parallel num_threads(threads) if (par)
  {
    std::vector<C> work(static_cast<size_t>(2 * inner));
    std::vector<float> buf;
#pragma omp for schedule(static)
    for (int64_t o = 0; o < outer; ++o) {
      const T* xs = x + o * block;
      T* ys = y + o * block;
      if constexpr (std::is_same_v<T, float>) {
        softmax_block_f32(xs, ys, n, inner, log, work.data());
      } else if constexpr (std::is_same_v<T, double>) {
        softmax_block_f64(xs, ys, n, inner, log, work.data());
      } else if (!log) {
        softmax_block_16<T>(xs, ys, n, inner, work.data());
      } else {
        buf.resize(static_cast<size_t>(block));
        for (int64_t i = 0; i < block; ++i) buf[static_cast<size_t>(i)] = static_cast<float>(xs[i]);
        softmax_block_f32(buf.data(), buf.data(), n, inner, true, work.data());
        for (int64_t i = 0; i < block; ++i) ys[i] = T(buf[static_cast<size_t>(i)]);
      }
    }
  }
}

template <bool Log>
void softmax_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  const bool coerce_2d = ctx.opset() < 13;
  int64_t axis = ctx.attr_int("axis", coerce_2d ? 1 : -1);
  const int64_t r = std::max<int64_t>(rank, 1);
  // Opset < 13 also accepts axis == rank (an empty trailing block of size 1).
  REFORGE_CHECK(axis >= -r && (axis < r || (coerce_2d && axis == rank)), label, ": axis ", axis,
                " is out of range for input of rank ", rank);
  if (axis < 0) axis += r;
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i) {
    if (i < axis) outer *= x.dim(i);
    else if (coerce_2d || i == axis) n *= x.dim(i);
    else inner *= x.dim(i);
  }
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  if (y.numel() == 0) return;
  const int threads = ctx.threads() > 0 ? ctx.threads() : omp_get_max_threads();
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_typed<T>(x.data<T>(), y.mutable_data<T>(), outer, n, inner, Log, threads);
  }, Log ? "LogSoftmax" : "Softmax");
}

}  // namespace

void register_softmax_kernels(OpRegistry& r) {
  r.add({"", "Softmax", 1, INT_MAX, softmax_kernel<false>, nullptr});
  r.add({"", "LogSoftmax", 1, INT_MAX, softmax_kernel<true>, nullptr});
}

}  // namespace reforge::ops
