// Softmax and LogSoftmax.
//
// Before opset 13 the input is coerced to 2-D at `axis` ([prod(dims[:axis]), prod(dims[axis:])])
// and normalized over the second dimension; from opset 13 the normalization runs along `axis`
// alone. Both become blocks [n, inner] (inner == 1 for the 2-D form and for a last axis), one per
// outer index, normalized over n. Every block subtracts its max before exponentiating, so large
// inputs do not overflow. 16-bit floats follow the reference's rounding (see softmax_block_16).
//
// float uses a polynomial exp written as plain arithmetic so the compiler vectorizes the
// exponent loop (std::exp is a scalar library call); it is within 2 ulp of expf over the range
// that matters and returns exactly 0 below float's normal range, so masked (-inf) logits give 0.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

// Cephes-style expf: exp(x) = 2^n * e^r with |r| <= ln2/2, degree-6 polynomial for e^r.
// Softmax only feeds it x <= 0 (or NaN); above 88 it saturates at exp(88), above ln(FLT_MAX)
// it returns inf.
inline float exp_vec(float x) {
  constexpr float kHi = 88.0f;
  constexpr float kLo = -87.3365447505531f;  // below this, exp(x) < FLT_MIN: return 0
  const float xc = std::min(std::max(x, kLo), kHi);
  // Round x*log2(e) to nearest with the 1.5*2^23 trick (no SSE4.1 round instruction needed).
  const float fx = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - fx * 0.693359375f;
  r = r - fx * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t n = static_cast<int32_t>(fx);
  const uint32_t bits = static_cast<uint32_t>(n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  float y = p * scale;
  y = x > 88.72283935546875f ? std::numeric_limits<float>::infinity() : y;
  return x < kLo ? 0.0f : y;  // NaN falls through both tests and stays NaN
}
inline double exp_vec(double x) { return std::exp(x); }

// Normalizes one [n, inner] block of C (float or double) from x into y (may alias x).
template <typename C>
void softmax_block(const C* x, C* y, int64_t n, int64_t inner, bool log, C* work) {
  if (inner == 1) {
    constexpr int L = 8;
    C lane[L];
    for (auto& l : lane) l = -std::numeric_limits<C>::infinity();
    int64_t i = 0;
    for (; i + L <= n; i += L)
      for (int j = 0; j < L; ++j) lane[j] = std::max(lane[j], x[i + j]);
    C m = lane[0];
    for (int j = 1; j < L; ++j) m = std::max(m, lane[j]);
    for (; i < n; ++i) m = std::max(m, x[i]);
    C sl[L] = {};
    i = 0;
    if (log) {
      for (; i + L <= n; i += L)
        for (int j = 0; j < L; ++j) sl[j] += exp_vec(x[i + j] - m);
    } else {
      for (; i + L <= n; i += L)
        for (int j = 0; j < L; ++j) {
          const C e = exp_vec(x[i + j] - m);
          y[i + j] = e;
          sl[j] += e;
        }
    }
    C s = ((sl[0] + sl[1]) + (sl[2] + sl[3])) + ((sl[4] + sl[5]) + (sl[6] + sl[7]));
    for (; i < n; ++i) {
      const C e = exp_vec(x[i] - m);
      if (!log) y[i] = e;
      s += e;
    }
    if (log) {
      const C shift = m + std::log(s);
      for (int64_t k = 0; k < n; ++k) y[k] = x[k] - shift;
    } else {
      const C inv = C(1) / s;
      for (int64_t k = 0; k < n; ++k) y[k] *= inv;
    }
    return;
  }
  C* mx = work;
  C* sum = work + inner;
  for (int64_t j = 0; j < inner; ++j) {
    mx[j] = -std::numeric_limits<C>::infinity();
    sum[j] = 0;
  }
  for (int64_t r = 0; r < n; ++r) {
    const C* row = x + r * inner;
    for (int64_t j = 0; j < inner; ++j) mx[j] = std::max(mx[j], row[j]);
  }
  for (int64_t r = 0; r < n; ++r) {
    const C* row = x + r * inner;
    C* out = y + r * inner;
    if (log) {
      for (int64_t j = 0; j < inner; ++j) sum[j] += exp_vec(row[j] - mx[j]);
    } else {
      for (int64_t j = 0; j < inner; ++j) {
        const C e = exp_vec(row[j] - mx[j]);
        out[j] = e;
        sum[j] += e;
      }
    }
  }
  if (log) {
    for (int64_t j = 0; j < inner; ++j) sum[j] = mx[j] + std::log(sum[j]);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < inner; ++j) y[r * inner + j] = x[r * inner + j] - sum[j];
  } else {
    for (int64_t j = 0; j < inner; ++j) sum[j] = C(1) / sum[j];
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < inner; ++j) y[r * inner + j] *= sum[j];
  }
}

// 16-bit floats: computed in float, but every intermediate is rounded to T where the ONNX
// reference (numpy on float16/bfloat16 arrays) rounds it: x - max, exp, the sum and the
// quotient; float16 sums over a contiguous axis accumulate in float (numpy's pairwise half sum),
// all other sums round after each addition. A float-only computation differs by an ulp often
// enough that the suite's rtol (1e-3, finer than a bfloat16 ulp) rejects it.
template <typename T>
void softmax_block_16(const T* x, T* y, int64_t n, int64_t inner, bool log, float* work) {
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
      float v = rnd(static_cast<float>(y[r * inner + j]) / sum[j]);
      if (log) v = std::log(v);  // the reference's LogSoftmax is log(Softmax)
      y[r * inner + j] = T(v);
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
#pragma omp for schedule(static)
    for (int64_t o = 0; o < outer; ++o) {
      if constexpr (std::is_same_v<T, C>)
        softmax_block<C>(x + o * block, y + o * block, n, inner, log, work.data());
      else
        softmax_block_16<T>(x + o * block, y + o * block, n, inner, log, work.data());
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
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
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
