// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
//
// Both read scores of shape [N, C, d1, ..., dk] and integer targets [N, d1, ..., dk] (class
// indices in [0, C), or `ignore_index`). For each position the loss is -w[t] * x[n, t, d], where
// w[t] is the optional per-class weight (1 without one) and 0 for an ignored position.
// reduction 'none' gives the per-position losses (the target's shape), 'sum' their sum and
// 'mean' their sum divided by the sum of the weights of the positions that were not ignored
// (0/0 gives NaN, as the ONNX reference does, when every position is ignored).
// SoftmaxCrossEntropyLoss applies LogSoftmax over axis 1 first and may also return those
// log-probabilities (output 1).
//
// Sums accumulate in double whatever the element type, so float16 and bfloat16 losses are as
// exact as their rounding allows; a target outside [0, C) that is not ignore_index is an error
// naming the node and the position.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

enum class Reduction { None, Sum, Mean };

Reduction parse_reduction(const ir::Node& node) {
  const std::string r = node.attr_string("reduction", "mean");
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  if (r == "mean") return Reduction::Mean;
  fail(node.label(), ": reduction must be 'none', 'sum' or 'mean', got '", r, "'");
}

std::string check_loss(const ir::Node& node) {
  const std::string r = node.attr_string("reduction", "mean");
  if (r != "none" && r != "sum" && r != "mean") return "reduction must be 'none', 'sum' or 'mean', got '" + r + "'";
  return "";
}

// The geometry shared by both losses, checked against the inputs.
struct LossShape {
  int64_t n = 0, c = 0, d = 1;  // scores viewed as [n, c, d]
  Shape target;                 // [n, d1, ..., dk]
};

LossShape loss_shape(const std::string& label, const Tensor& x, const Tensor& t, const Tensor* w) {
  REFORGE_CHECK(x.rank() >= 2, label, ": scores must have rank >= 2 ([N, C, ...]), got ", x.describe());
  REFORGE_CHECK(t.dtype() == DType::Int32 || t.dtype() == DType::Int64, label, ": target must be int32 or int64, got ",
                t.describe());
  LossShape s;
  s.n = x.dim(0);
  s.c = x.dim(1);
  for (int64_t i = 2; i < x.rank(); ++i) s.d *= x.dim(i);
  Shape expect{x.dim(0)};
  for (int64_t i = 2; i < x.rank(); ++i) expect.push_back(x.dim(i));
  REFORGE_CHECK(t.shape() == expect, label, ": target ", t.describe(), " does not match scores ", x.describe(),
                " (expected the scores' shape without dimension 1)");
  if (w) {
    REFORGE_CHECK(w->dtype() == x.dtype(), label, ": weight ", w->describe(), " must have the scores' element type ",
                  dtype_name(x.dtype()));
    REFORGE_CHECK(w->rank() == 1 && w->dim(0) == s.c, label, ": weight must have shape [", s.c,
                  "] (one per class), got ", w->describe());
  }
  s.target = expect;
  return s;
}

// The loss over log-probabilities `lp` ([n, c, d], compute type C) into output 0.
template <typename T>
void nll_into(KernelContext& ctx, const LossShape& s, const T* lp, const Tensor& target, const Tensor* weight,
              Reduction red, int64_t ignore_index) {
  const std::string label = ctx.node().label();
  const int64_t positions = s.n * s.d;
  std::vector<double> loss(static_cast<size_t>(positions));
  double weight_sum = 0.0, loss_sum = 0.0;
  const T* w = weight ? weight->data<T>() : nullptr;
  for (int64_t i = 0; i < s.n; ++i) {
    for (int64_t j = 0; j < s.d; ++j) {
      const int64_t p = i * s.d + j;
      const int64_t cls = target.as_int64(p);
      double l = 0.0, wt = 0.0;
      if (cls != ignore_index) {
        REFORGE_CHECK(cls >= 0 && cls < s.c, label, ": target ", cls, " at flat position ", p,
                      " is not a class index in [0, ", s.c, ") nor ignore_index ", ignore_index);
        wt = w ? static_cast<double>(to_compute(w[cls])) : 1.0;
        l = -wt * static_cast<double>(to_compute(lp[(i * s.c + cls) * s.d + j]));
      }
      loss[static_cast<size_t>(p)] = l;
      loss_sum += l;
      weight_sum += wt;
    }
  }
  if (red == Reduction::None) {
    Tensor& out = ctx.allocate_output_uninit(0, CppType<T>::value, s.target);
    T* o = out.mutable_data<T>();
    for (int64_t p = 0; p < positions; ++p)
      o[p] = from_compute<T>(static_cast<compute_t<T>>(loss[static_cast<size_t>(p)]));
    return;
  }
  const double v = red == Reduction::Sum ? loss_sum : loss_sum / weight_sum;
  Tensor& out = ctx.allocate_output_uninit(0, CppType<T>::value, Shape{});
  *out.mutable_data<T>() = from_compute<T>(static_cast<compute_t<T>>(v));
}

void nll_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& t = ctx.input(1);
  const Tensor* w = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const LossShape s = loss_shape(label, x, t, w);
  const Reduction red = parse_reduction(ctx.node());
  const int64_t ignore =
      ctx.node().attr("ignore_index") ? ctx.attr_int("ignore_index", 0) : std::numeric_limits<int64_t>::min();
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        nll_into<T>(ctx, s, x.data<T>(), t, w, red, ignore);
      },
      label.c_str());
}

// LogSoftmax over axis 1 of [n, c, d], computed in double and rounded once to T.
template <typename T>
void log_softmax_axis1(const T* x, T* y, const LossShape& s) {
  std::vector<double> col(static_cast<size_t>(s.c));
  for (int64_t i = 0; i < s.n; ++i) {
    for (int64_t j = 0; j < s.d; ++j) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < s.c; ++k) {
        const double v = static_cast<double>(to_compute(x[(i * s.c + k) * s.d + j]));
        col[static_cast<size_t>(k)] = v;
        mx = std::max(mx, v);
      }
      double sum = 0.0;
      for (int64_t k = 0; k < s.c; ++k) sum += std::exp(col[static_cast<size_t>(k)] - mx);
      const double lse = mx + std::log(sum);
      for (int64_t k = 0; k < s.c; ++k)
        y[(i * s.c + k) * s.d + j] = from_compute<T>(static_cast<compute_t<T>>(col[static_cast<size_t>(k)] - lse));
    }
  }
}

void sce_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& t = ctx.input(1);
  const Tensor* w = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const LossShape s = loss_shape(label, x, t, w);
  const Reduction red = parse_reduction(ctx.node());
  const int64_t ignore =
      ctx.node().attr("ignore_index") ? ctx.attr_int("ignore_index", 0) : std::numeric_limits<int64_t>::min();
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        Tensor lp = ctx.output_wanted(1) ? ctx.allocate_output_uninit(1, x.dtype(), x.shape())
                                         : Tensor::uninitialized(x.dtype(), x.shape());
        log_softmax_axis1<T>(x.data<T>(), lp.mutable_data<T>(), s);
        nll_into<T>(ctx, s, lp.data<T>(), t, w, red, ignore);
      },
      label.c_str());
}

}  // namespace

void register_loss_kernels(OpRegistry& r) {
  r.add({"", "NegativeLogLikelihoodLoss", 12, INT_MAX, nll_kernel, check_loss});
  r.add({"", "SoftmaxCrossEntropyLoss", 12, INT_MAX, sce_kernel, check_loss});
}

}  // namespace reforge::ops
