// Softmax, LogSoftmax and Hardmax: the shape logic every kernel shares (softmax.h) and the reference
// kernels.
//
// Before opset 13 the input is coerced to 2-D at `axis` ([prod(dims[:axis]), prod(dims[axis:])])
// and normalized over the second dimension; from opset 13 the normalization runs along `axis`
// alone. Both become blocks [n, inner] (inner == 1 for the 2-D form and for a last axis), one per
// outer index, normalized over n. Every block subtracts its max before exponentiating, so large
// inputs do not overflow. 16-bit Softmax follows the reference's rounding (see softmax_block_16).
// float and double blocks run the scalar loop with std::exp here; the CPU backend plugs in its
// vectorized float block (backends/cpu/softmax.cc).
#include "ops/reduce/softmax.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/thread_pool.h"
#include "ops/numerics.h"

namespace reforge::ops {
namespace {

// One [n, inner] block in T (float or double), scalar std::exp: the reference computation.
template <typename T>
void softmax_block_scalar(const T* x, T* y, int64_t n, int64_t inner, bool log, T* work) {
  T* mx = work;
  T* sum = work + inner;
  for (int64_t j = 0; j < inner; ++j) {
    mx[j] = -std::numeric_limits<T>::infinity();
    sum[j] = 0;
  }
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < inner; ++j) mx[j] = std::max(mx[j], x[r * inner + j]);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < inner; ++j) {
      const T e = std::exp(x[r * inner + j] - mx[j]);
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

// 16-bit floats: computed in float, every intermediate rounded to T where the ONNX reference
// (numpy on float16/bfloat16 arrays) rounds it: x - max, exp, the sum and the quotient. The sum
// accumulates in float and is rounded once (ops/numerics.h); with the reference's rounding
// (`reference`), float16 sums over a contiguous axis still accumulate in float (numpy's pairwise
// half sum) and all other sums round after each addition, which the suite's 16-bit expected
// outputs need (its rtol, 1e-3, is finer than a bfloat16 ulp). (LogSoftmax does not follow the
// reference's log(Softmax), which gives -inf wherever the 16-bit probability underflows; it
// computes x - max - log(sum) in float and rounds once.)
template <typename T>
void softmax_block_16(const T* x, T* y, int64_t n, int64_t inner, float* work, bool reference) {
  auto rnd = [](float v) { return static_cast<float>(T(v)); };
  float* mx = work;
  float* sum = work + inner;
  for (int64_t j = 0; j < inner; ++j) {
    mx[j] = -std::numeric_limits<float>::infinity();
    sum[j] = 0;
  }
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < inner; ++j) mx[j] = std::max(mx[j], static_cast<float>(x[r * inner + j]));
  const bool float_sum = !reference || (std::is_same_v<T, float16> && inner == 1);
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
void softmax_typed(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool log, int threads,
                   SoftmaxF32Block f32_block, bool reference) {
  using C = compute_t<T>;
  const int64_t block = n * inner;
  const bool par = threads > 1 && outer > 1 && outer * block >= (1 << 14);
  parallel_for(outer, par ? threads : 1, 1, [&](int64_t o0, int64_t o1) {
    std::vector<C> work(static_cast<size_t>(2 * inner));
    std::vector<float> buf;
    for (int64_t o = o0; o < o1; ++o) {
      const T* xs = x + o * block;
      T* ys = y + o * block;
      if constexpr (std::is_same_v<T, float>) {
        f32_block(xs, ys, n, inner, log, work.data());
      } else if constexpr (std::is_same_v<T, double>) {
        softmax_block_scalar<double>(xs, ys, n, inner, log, work.data());
      } else if (!log) {
        softmax_block_16<T>(xs, ys, n, inner, work.data(), reference);
      } else {
        buf.resize(static_cast<size_t>(block));
        for (int64_t i = 0; i < block; ++i) buf[static_cast<size_t>(i)] = static_cast<float>(xs[i]);
        f32_block(buf.data(), buf.data(), n, inner, true, work.data());
        for (int64_t i = 0; i < block; ++i) ys[i] = T(buf[static_cast<size_t>(i)]);
      }
    }
  });
}

}  // namespace

SoftmaxBlocks softmax_blocks(const KernelContext& ctx) {
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
  SoftmaxBlocks b;
  for (int64_t i = 0; i < rank; ++i) {
    if (i < axis)
      b.outer *= x.dim(i);
    else if (coerce_2d || i == axis)
      b.n *= x.dim(i);
    else
      b.inner *= x.dim(i);
  }
  return b;
}

void softmax_run(KernelContext& ctx, bool log, SoftmaxF32Block f32_block) {
  const Tensor& x = ctx.input(0);
  const SoftmaxBlocks b = softmax_blocks(ctx);
  const int64_t outer = b.outer, n = b.n, inner = b.inner;
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  if (y.numel() == 0) return;
  const int threads = ctx.threads() > 0 ? ctx.threads() : omp_get_max_threads();
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        softmax_typed<T>(x.data<T>(), y.mutable_data<T>(), outer, n, inner, log, threads, f32_block,
                         reference_rounding(ctx.node()));
      },
      log ? "LogSoftmax" : "Softmax");
}

namespace {

void softmax_reference_f32(const float* x, float* y, int64_t n, int64_t inner, bool log, float* work) {
  softmax_block_scalar<float>(x, y, n, inner, log, work);
}

template <bool Log>
void softmax_kernel(KernelContext& ctx) {
  softmax_run(ctx, Log, softmax_reference_f32);
}

// Hardmax: 1 at the first largest element along the axis (the axes from `axis` on, flattened,
// before opset 13, as for Softmax), 0 elsewhere.
void hardmax_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const SoftmaxBlocks b = softmax_blocks(ctx);
  const int64_t outer = b.outer, n = b.n, inner = b.inner;
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  if (y.numel() == 0) return;
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xs = x.data<T>();
        T* ys = y.mutable_data<T>();
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t j = 0; j < inner; ++j) {
            const int64_t base = o * n * inner + j;
            int64_t best = 0;
            auto bv = to_compute(xs[base]);
            for (int64_t k = 1; k < n; ++k) {
              const auto v = to_compute(xs[base + k * inner]);
              if (v > bv) bv = v, best = k;
            }
            ys[base + best * inner] = from_compute<T>(1.0f);
          }
      },
      label.c_str());
}

}  // namespace

void register_softmax_kernels(OpRegistry& r) {
  r.add({"", "Softmax", 1, INT_MAX, softmax_kernel<false>, nullptr});
  r.add({"", "LogSoftmax", 1, INT_MAX, softmax_kernel<true>, nullptr});
  r.add({"", "Hardmax", 1, INT_MAX, hardmax_kernel, nullptr});
}

}  // namespace reforge::ops
