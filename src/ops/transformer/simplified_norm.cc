// ONNX Runtime's RMS norms, as its CPU kernels compute them (core/providers/cpu/nn/layer_norm_impl.cc
// and contrib_ops/cpu/skip_layer_norm.cc):
//
// SimplifiedLayerNormalization (default domain, opset 1, an ONNX Runtime op outside the ONNX
// standard): X seen as rows of the dimensions from `axis` (default -1) on;
//   Y = X / sqrt(mean(X^2) + epsilon) * scale,   inv_std_var = 1 / sqrt(mean(X^2) + epsilon)
// scale holds exactly one row's elements; Y has scale's type; the optional inv_std_var is float32,
// X's shape with the normalized dimensions 1. stash_type must be 1 (float32): ONNX Runtime has no
// kernel for another. epsilon defaults to 1e-5.
//
// com.microsoft SkipSimplifiedLayerNormalization (opset 1): S = input + skip (+ bias), then the
// same norm of S over the last axis by gamma. input is [batch, seq, hidden] or [seq, hidden]; skip
// has input's shape or broadcasts over the batch ([seq, hidden] or [1, seq, hidden]); gamma and
// bias are [hidden]. Outputs: output, mean (float32, zeros: the simplified norm has no mean),
// inv_std_var (float32) and input_skip_bias_sum (S), the statistics of input's shape with the
// last dimension 1.
//
// Both accumulate in float32 (float64 for float64 data) in index order, divide by the root and
// then multiply by the scale, as ONNX Runtime does; float16 data widens to float32 and rounds once.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

std::string simplified_check(const ir::Node& node) {
  const int64_t stash = node.attr_int("stash_type", 1);
  if (stash != 1) return str_cat("attribute stash_type = ", stash, " is not supported (only 1, float32)");
  return "";
}

std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  dispatch_float(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(to_compute(p[i]));
  });
  return out;
}

// Normalizes `rows` rows of `n` elements of `x` (A: the accumulation type) into `y` of type Y.
template <typename A, typename X, typename Y>
void rms_rows(const X* x, Y* y, const std::vector<double>& scale, int64_t rows, int64_t n, float eps, float* inv_std) {
  std::vector<A> sc(scale.begin(), scale.end());
  parallel_for(rows, rows * n > (1 << 16) ? omp_get_max_threads() : 1, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const X* xr = x + r * n;
      A sq = 0;
      for (int64_t i = 0; i < n; ++i) {
        const A v = static_cast<A>(to_compute(xr[i]));
        sq += v * v;
      }
      const A root = std::sqrt(sq / static_cast<A>(n) + static_cast<A>(eps));
      Y* yr = y + r * n;
      for (int64_t i = 0; i < n; ++i) yr[i] = from_compute<Y>(static_cast<A>(to_compute(xr[i])) / root * sc[i]);
      if (inv_std) inv_std[r] = static_cast<float>(A(1) / root);
    }
  });
}

// Normalizes X ([rows, n]) by `scale` into output 0 (scale's type) and, when wanted, inv_std_var
// into output `inv_index`.
void rms_outputs(KernelContext& ctx, const Tensor& x, const Tensor& scale, int64_t rows, int64_t n, float eps,
                 size_t inv_index, const Shape& stat_shape) {
  Tensor& y = ctx.allocate_output_uninit(0, scale.dtype(), x.shape());
  float* inv = nullptr;
  if (ctx.output_wanted(inv_index))
    inv = ctx.allocate_output_uninit(inv_index, DType::Float32, stat_shape).mutable_data<float>();
  const std::vector<double> sc = as_doubles(scale);
  dispatch_float(
      x.dtype(),
      [&](auto xt) {
        using X = typename decltype(xt)::type;
        dispatch_float(
            scale.dtype(),
            [&](auto yt) {
              using Y = typename decltype(yt)::type;
              if constexpr (std::is_same_v<X, double>)
                rms_rows<double>(x.data<X>(), y.mutable_data<Y>(), sc, rows, n, eps, inv);
              else
                rms_rows<float>(x.data<X>(), y.mutable_data<Y>(), sc, rows, n, eps, inv);
            },
            "SimplifiedLayerNormalization");
      },
      "SimplifiedLayerNormalization");
}

void simplified_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const std::string why = simplified_check(ctx.node());
  REFORGE_CHECK(why.empty(), where, ": ", why);
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  REFORGE_CHECK(is_float(x.dtype()) && x.dtype() != DType::BFloat16 && is_float(scale.dtype()) &&
                    scale.dtype() != DType::BFloat16,
                where, ": X and scale must be float32, float16 or float64, got ", x.describe(), " and ",
                scale.describe());
  const int64_t rank = x.rank();
  int64_t axis = ctx.attr_int("axis", -1);
  REFORGE_CHECK(axis >= -rank && axis < rank, where, ": axis ", axis, " is outside [", -rank, ", ", rank, ") for X ",
                x.describe());
  if (axis < 0) axis += rank;
  int64_t rows = 1, n = 1;
  Shape stat = x.shape();
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) {
      rows *= x.dim(d);
    } else {
      n *= x.dim(d);
      stat[static_cast<size_t>(d)] = 1;
    }
  }
  REFORGE_CHECK(scale.numel() == n, where, ": scale ", scale.describe(), " must hold the ", n,
                " elements of X's dimensions from axis ", axis, " (X ", x.describe(), ")");
  rms_outputs(ctx, x, scale, rows, n, ctx.attr_float("epsilon", 1e-5f), 1, stat);
}

void skip_simplified_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& skip = ctx.input(1);
  const Tensor& gamma = ctx.input(2);
  REFORGE_CHECK(x.dtype() == DType::Float32 || x.dtype() == DType::Float16 || x.dtype() == DType::Float64, where,
                ": input must be float32, float16 or float64, got ", x.describe());
  REFORGE_CHECK(x.rank() == 2 || x.rank() == 3, where, ": input must be [batch, sequence, hidden] or "
                "[sequence, hidden], got ", x.describe());
  const int64_t n = x.shape().back();
  REFORGE_CHECK(skip.dtype() == x.dtype() && (skip.rank() == 2 || skip.rank() == 3) && skip.shape().back() == n &&
                    skip.dim(skip.rank() - 2) == x.dim(x.rank() - 2) &&
                    (skip.rank() == 2 || skip.dim(0) == 1 || (x.rank() == 3 && skip.dim(0) == x.dim(0))),
                where, ": skip ", skip.describe(), " must have input's shape ", shape_str(x.shape()),
                " or broadcast over its batch");
  REFORGE_CHECK(gamma.dtype() == x.dtype() && gamma.rank() == 1 && gamma.dim(0) == n, where, ": gamma must be ",
                dtype_name(x.dtype()), "[", n, "], got ", gamma.describe());
  const bool has_bias = ctx.has_input(3);
  if (has_bias)
    REFORGE_CHECK(ctx.input(3).dtype() == x.dtype() && ctx.input(3).rank() == 1 && ctx.input(3).dim(0) == n, where,
                  ": bias must be ", dtype_name(x.dtype()), "[", n, "], got ", ctx.input(3).describe());
  const int64_t rows = x.numel() / std::max<int64_t>(n, 1), skip_n = skip.numel();
  Shape stat = x.shape();
  stat.back() = 1;
  // S = input + skip (+ bias) in the accumulation type; the norm reads it unrounded, the
  // input_skip_bias_sum output holds it in the data's type.
  if (ctx.output_wanted(1)) ctx.allocate_output(1, DType::Float32, stat);  // zeros
  float* inv = ctx.output_wanted(2) ? ctx.allocate_output_uninit(2, DType::Float32, stat).mutable_data<float>() : nullptr;
  const float eps = ctx.attr_float("epsilon", 1e-12f);
  const std::vector<double> g = as_doubles(gamma);
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
        const T* a = x.data<T>();
        const T* s = skip.data<T>();
        const T* b = has_bias ? ctx.input(3).data<T>() : nullptr;
        std::vector<A> v(static_cast<size_t>(x.numel()));
        for (int64_t i = 0; i < x.numel(); ++i) {
          A e = static_cast<A>(to_compute(a[i])) + static_cast<A>(to_compute(s[i % skip_n]));
          if (b) e += static_cast<A>(to_compute(b[i % n]));
          v[static_cast<size_t>(i)] = e;
        }
        if (ctx.output_wanted(3)) {
          T* o = ctx.allocate_output_uninit(3, x.dtype(), x.shape()).template mutable_data<T>();
          for (size_t i = 0; i < v.size(); ++i) o[i] = from_compute<T>(v[i]);
        }
        T* y = ctx.allocate_output_uninit(0, x.dtype(), x.shape()).template mutable_data<T>();
        rms_rows<A>(v.data(), y, g, rows, n, eps, inv);
      },
      "SkipSimplifiedLayerNormalization");
}

}  // namespace

void register_simplified_norms(OpRegistry& r) {
  using R = InputRole;
  r.add({"", "SimplifiedLayerNormalization", 1, INT_MAX, simplified_kernel, simplified_check, nullptr,
         {R::kData, R::kWeight}});
  r.add({"com.microsoft", "SkipSimplifiedLayerNormalization", 1, INT_MAX, skip_simplified_kernel, nullptr, nullptr,
         {R::kData, R::kData, R::kWeight, R::kWeight}});
}

}  // namespace reforge::ops
