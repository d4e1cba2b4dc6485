// LRN, MeanVarianceNormalization and GroupNormalization.
//
// LRN normalizes x [N, C, ...] across channels: y = x / (bias + alpha / size * sum x^2)^beta, the
// sum over channels c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2) that exist.
//
// MeanVarianceNormalization computes (x - mean) / (sqrt(E[x^2] - mean^2) + 1e-9) over `axes`
// (default [0, 2, 3]), as the ONNX function that defines it does (a variance that rounds below 0
// counts as 0).
//
// GroupNormalization splits the C channels of x [N, C, ...] into num_groups groups and
// normalizes each (N, group) over its channels and spatial positions: (x - mean) /
// sqrt(var + epsilon) (epsilon default 1e-5, population variance), then scale and bias, one per
// channel from opset 21 and one per group before.
//
// Sums run in double and each output is rounded once.
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "ops/nn/group_norm_setup.h"
#include "ops/nn/nn_common.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::ops::nn {
namespace {

std::string check_lrn(const ir::Node& node) {
  if (!node.has_attr("size")) return "the size attribute is required";
  if (node.attr_int("size", 0) < 1) return "size must be >= 1";
  return "";
}

void lrn_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(x.rank() >= 2, label, ": X must be [N, C, ...], got ", x.describe());
  const int64_t size = ctx.node().attr_int("size");
  REFORGE_CHECK(size >= 1, label, ": size must be >= 1, got ", size);
  const double alpha = ctx.attr_float("alpha", 1e-4f), beta = ctx.attr_float("beta", 0.75f);
  const double bias = ctx.attr_float("bias", 1.0f);
  const int64_t n = x.dim(0), c = x.dim(1);
  const int64_t inner = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  if (y.numel() == 0) return;
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xs = x.data<T>();
        T* ys = y.mutable_data<T>();
        for (int64_t b = 0; b < n; ++b)
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < inner; ++i) {
              double sq = 0;
              for (int64_t k = std::max<int64_t>(0, ch - before); k <= std::min(c - 1, ch + after); ++k) {
                const double v = static_cast<double>(to_compute(xs[(b * c + k) * inner + i]));
                sq += v * v;
              }
              const double v = static_cast<double>(to_compute(xs[(b * c + ch) * inner + i]));
              ys[(b * c + ch) * inner + i] =
                  from_compute<T>(static_cast<compute_t<T>>(v / std::pow(bias + alpha / size * sq, beta)));
            }
      },
      label.c_str());
}

void mvn_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t> axes = normalize_axes(ctx.attr_ints("axes", {0, 2, 3}), x.rank(), label);
  std::vector<char> reduced(static_cast<size_t>(x.rank()), 0);
  for (int64_t a : axes) reduced[static_cast<size_t>(a)] = 1;
  // Each element's group: its index with the reduced axes dropped.
  const Shape& s = x.shape();
  int64_t groups = 1;
  for (size_t d = 0; d < s.size(); ++d)
    if (!reduced[d]) groups *= s[d];
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  if (y.numel() == 0) return;
  std::vector<int64_t> group_of(static_cast<size_t>(x.numel()));
  std::vector<int64_t> idx(s.size(), 0);
  for (int64_t flat = 0; flat < x.numel(); ++flat) {
    int64_t g = 0;
    for (size_t d = 0; d < s.size(); ++d)
      if (!reduced[d]) g = g * s[d] + idx[d];
    group_of[static_cast<size_t>(flat)] = g;
    for (size_t d = s.size(); d-- > 0;) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
  const double count = static_cast<double>(x.numel() / groups);
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xs = x.data<T>();
        T* ys = y.mutable_data<T>();
        std::vector<double> sum(static_cast<size_t>(groups), 0.0), sq(static_cast<size_t>(groups), 0.0);
        for (int64_t i = 0; i < x.numel(); ++i) {
          const double v = static_cast<double>(to_compute(xs[i]));
          sum[static_cast<size_t>(group_of[static_cast<size_t>(i)])] += v;
          sq[static_cast<size_t>(group_of[static_cast<size_t>(i)])] += v * v;
        }
        for (int64_t i = 0; i < x.numel(); ++i) {
          const size_t g = static_cast<size_t>(group_of[static_cast<size_t>(i)]);
          const double mean = sum[g] / count;
          const double sd = std::sqrt(std::max(sq[g] / count - mean * mean, 0.0));
          ys[i] =
              from_compute<T>(static_cast<compute_t<T>>((static_cast<double>(to_compute(xs[i])) - mean) / (sd + 1e-9)));
        }
      },
      label.c_str());
}

void group_norm_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor& bias = ctx.input(2);
  const GroupNormSetup gs = group_norm_setup(ctx);
  const int64_t n = gs.n, c = gs.c, groups = gs.groups, cg = gs.cg, spatial = gs.spatial;
  const double eps = gs.eps;
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  if (y.numel() == 0) return;
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xs = x.data<T>();
        T* ys = y.mutable_data<T>();
        const int64_t block = cg * spatial;
        for (int64_t b = 0; b < n; ++b)
          for (int64_t g = 0; g < groups; ++g) {
            const T* xp = xs + (b * c + g * cg) * spatial;
            T* yp = ys + (b * c + g * cg) * spatial;
            double sum = 0, sq = 0;
            for (int64_t i = 0; i < block; ++i) sum += static_cast<double>(to_compute(xp[i]));
            const double mean = sum / static_cast<double>(block);
            for (int64_t i = 0; i < block; ++i) {
              const double d = static_cast<double>(to_compute(xp[i])) - mean;
              sq += d * d;
            }
            const double inv = 1.0 / std::sqrt(sq / static_cast<double>(block) + eps);
            for (int64_t ch = 0; ch < cg; ++ch) {
              const int64_t p = gs.per_channel ? g * cg + ch : g;
              const double s = static_cast<double>(to_compute(scale.data<T>()[p]));
              const double bb = static_cast<double>(to_compute(bias.data<T>()[p]));
              for (int64_t i = ch * spatial; i < (ch + 1) * spatial; ++i)
                yp[i] = from_compute<T>(
                    static_cast<compute_t<T>>((static_cast<double>(to_compute(xp[i])) - mean) * inv * s + bb));
            }
          }
      },
      label.c_str());
}

}  // namespace

void register_local_norm_ops(OpRegistry& r) {
  r.add({"",
         "GroupNormalization",
         18,
         INT_MAX,
         group_norm_kernel,
         group_norm_check,
         nullptr,
         {InputRole::kData, InputRole::kWeight, InputRole::kWeight}});
  r.add({"", "LRN", 1, INT_MAX, lrn_kernel, check_lrn});
  r.add({"", "MeanVarianceNormalization", 9, INT_MAX, mvn_kernel, nullptr});
}

}  // namespace reforge::ops::nn
