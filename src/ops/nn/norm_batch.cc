// BatchNormalization (inference, and training mode from opset 14) and InstanceNormalization.
//
// Statistics accumulate in double; the per-element work is one multiply-add per value with a
// per-channel scale and shift folded from the parameters. Parameters may have their own float
// types (opset 15 lets scale/bias and mean/var differ from X).
#include <omp.h>

#include <cmath>
#include <type_traits>

#include "core/dispatch.h"
#include "core/thread_pool.h"
#include "ops/nn/nn_common.h"
#include "ops/nn/norm_setup.h"

namespace reforge::ops::nn {

namespace {

// y = x * a[c] + b[c] over [N, C, inner] (a, b have C entries, or C*inner when per-activation).
template <typename T>
void scale_shift(const T* x, T* y, int64_t N, int64_t C, int64_t inner, const std::vector<double>& a,
                 const std::vector<double>& b) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const bool per_element = static_cast<int64_t>(a.size()) != C;
  parallel_for(N * C, N * C * inner > (1 << 16) ? omp_get_max_threads() : 1, 1, [&](int64_t nc0, int64_t nc1) {
    for (int64_t nc = nc0; nc < nc1; ++nc) {
      const int64_t c = nc % C;
      const T* xp = x + nc * inner;
      T* yp = y + nc * inner;
      if (!per_element) {
        const A av = static_cast<A>(a[c]), bv = static_cast<A>(b[c]);
        for (int64_t i = 0; i < inner; ++i) yp[i] = from_compute<T>(static_cast<A>(to_compute(xp[i])) * av + bv);
      } else {
        const double* ap = a.data() + c * inner;
        const double* bp = b.data() + c * inner;
        for (int64_t i = 0; i < inner; ++i) yp[i] = from_compute<T>(static_cast<A>(to_compute(xp[i]) * ap[i] + bp[i]));
      }
    }
  });
}

// Per-channel mean and (population) variance over N and the spatial positions.
template <typename T>
void channel_stats(const T* x, int64_t N, int64_t C, int64_t inner, std::vector<double>& mean,
                   std::vector<double>& var) {
  mean.assign(C, 0.0);
  var.assign(C, 0.0);
  const double count = static_cast<double>(N * inner);
  parallel_for(C, N * C * inner > (1 << 16) ? omp_get_max_threads() : 1, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* xp = x + (n * C + c) * inner;
        for (int64_t i = 0; i < inner; ++i) s += static_cast<double>(to_compute(xp[i]));
      }
      const double m = count > 0 ? s / count : 0.0;
      double q = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* xp = x + (n * C + c) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const double dv = static_cast<double>(to_compute(xp[i])) - m;
          q += dv * dv;
        }
      }
      mean[c] = m;
      var[c] = count > 0 ? q / count : 0.0;
    }
  });
}

Tensor doubles_to(DType dtype, const std::vector<double>& v, const Shape& shape) {
  Tensor t = Tensor::empty(dtype, shape);
  dispatch_float(
      dtype,
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* p = t.mutable_data<T>();
        for (size_t i = 0; i < v.size(); ++i) p[i] = from_compute<T>(static_cast<compute_t<T>>(v[i]));
      },
      "BatchNormalization");
  return t;
}

void batch_norm_kernel(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const BatchNormSetup bn = batch_norm_setup(ctx);
  const int64_t N = bn.n, C = bn.c, inner = bn.inner;
  const double eps = bn.eps, momentum = bn.momentum;
  const bool training = bn.training;
  batch_norm_param_size(ctx, bn);
  std::vector<double> p[4];  // scale, bias, mean, var
  for (int i = 0; i < 4; ++i) p[i] = to_doubles(ctx.input(static_cast<size_t>(i + 1)));
  std::vector<double> mean = p[2], var = p[3];
  if (training) {
    dispatch_float(
        X.dtype(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          channel_stats<T>(X.data<T>(), N, C, inner, mean, var);
        },
        "BatchNormalization");
  }
  std::vector<double> a(p[0].size()), b(p[0].size());
  for (size_t c = 0; c < a.size(); ++c) {
    a[c] = p[0][c] / std::sqrt(var[c] + eps);
    b[c] = p[1][c] - mean[c] * a[c];
  }
  Tensor& Y = ctx.allocate_output(0, X.dtype(), X.shape());
  if (Y.numel() > 0) {
    dispatch_float(
        X.dtype(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          scale_shift<T>(X.data<T>(), Y.mutable_data<T>(), N, C, inner, a, b);
        },
        "BatchNormalization");
  }
  if (training) {
    // running = input * momentum + batch statistic * (1 - momentum)
    const Tensor& in_mean = ctx.input(3);
    const Tensor& in_var = ctx.input(4);
    std::vector<double> rm(C), rv(C);
    for (int64_t c = 0; c < C; ++c) {
      rm[c] = p[2][c] * momentum + mean[c] * (1 - momentum);
      rv[c] = p[3][c] * momentum + var[c] * (1 - momentum);
    }
    if (ctx.output_wanted(1)) ctx.set_output(1, doubles_to(in_mean.dtype(), rm, in_mean.shape()));
    if (ctx.output_wanted(2)) ctx.set_output(2, doubles_to(in_var.dtype(), rv, in_var.shape()));
  }
}

void instance_norm_kernel(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const Tensor& S = ctx.input(1);
  const Tensor& B = ctx.input(2);
  const std::string& label = ctx.node().label();
  REFORGE_CHECK(X.rank() >= 3, label, ": X must be [N, C, spatial...], got ", X.describe());
  const int64_t N = X.dim(0), C = X.dim(1), inner = N * C == 0 ? 0 : X.numel() / (N * C);
  REFORGE_CHECK(S.numel() == C && B.numel() == C, label, ": scale ", S.describe(), " and B ", B.describe(),
                " must have ", C, " elements");
  REFORGE_CHECK(is_float(S.dtype()) && is_float(B.dtype()), label, ": scale and B must be float tensors");
  const double eps = ctx.attr_float("epsilon", 1e-5f);
  const std::vector<double> scale = to_doubles(S), bias = to_doubles(B);
  Tensor& Y = ctx.allocate_output(0, X.dtype(), X.shape());
  if (Y.numel() == 0) return;
  dispatch_float(
      X.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
        const T* x = X.data<T>();
        T* y = Y.mutable_data<T>();
        parallel_for(N * C, X.numel() > (1 << 16) ? omp_get_max_threads() : 1, 1, [&](int64_t nc0, int64_t nc1) {
          for (int64_t nc = nc0; nc < nc1; ++nc) {
            const int64_t c = nc % C;
            const T* xp = x + nc * inner;
            T* yp = y + nc * inner;
            const Moments mo = moments(xp, inner);
            const double m = mo.mean;
            const double a = scale[c] / std::sqrt(mo.variance + eps);
            const A av = static_cast<A>(a), bv = static_cast<A>(bias[c] - m * a);
            for (int64_t i = 0; i < inner; ++i) yp[i] = from_compute<T>(static_cast<A>(to_compute(xp[i])) * av + bv);
          }
        });
      },
      "InstanceNormalization");
}

}  // namespace

void register_batch_norm_ops(OpRegistry& r) {
  r.add({"",
         "BatchNormalization",
         1,
         INT_MAX,
         batch_norm_kernel,
         batch_norm_check,
         nullptr,
         {InputRole::kData, InputRole::kWeight, InputRole::kWeight, InputRole::kWeight, InputRole::kWeight}});
  r.add({"",
         "InstanceNormalization",
         1,
         INT_MAX,
         instance_norm_kernel,
         nullptr,
         nullptr,
         {InputRole::kData, InputRole::kWeight, InputRole::kWeight}});
}

}  // namespace reforge::ops::nn
