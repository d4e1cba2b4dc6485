// Tensor-producing and miscellaneous ops: Constant, ConstantOfShape, Range, Dropout, OneHot,
// NonZero.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "ops/tensor/tensor_common.h"
#include "ops/tensor/tensor_misc_setup.h"

namespace reforge::ops {
namespace {

// ---- Constant -------------------------------------------------------------------------------

const char* const kConstantValueAttrs[] = {"value", "value_float", "value_floats", "value_int", "value_ints"};

std::string check_constant(const ir::Node& node) {
  for (const char* a : {"value_string", "value_strings"})
    if (node.has_attr(a)) return std::string("attribute '") + a + "' (string constants) is not supported";
  if (node.has_attr("sparse_value")) return "attribute 'sparse_value' (sparse constants) is not supported";
  int n = 0;
  for (const char* a : kConstantValueAttrs) n += node.has_attr(a) ? 1 : 0;
  if (n != 1) return "exactly one value attribute is required, found " + std::to_string(n);
  return "";
}

Tensor vector_tensor(DType t, const void* data, size_t n, bool scalar) {
  return Tensor::copy_of(t, scalar ? Shape{} : Shape{static_cast<int64_t>(n)}, data);
}

void constant_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string reason = check_constant(node);
  if (!reason.empty()) fail(node.label(), ": ", reason);
  if (const Tensor* t = node.attr_tensor("value")) {
    ctx.set_output(0, *t);
  } else if (node.has_attr("value_float")) {
    ctx.set_output(0, Tensor::scalar<float>(DType::Float32, ctx.attr_float("value_float", 0)));
  } else if (node.has_attr("value_floats")) {
    const std::vector<float> v = ctx.attr_floats("value_floats");
    ctx.set_output(0, vector_tensor(DType::Float32, v.data(), v.size(), false));
  } else if (node.has_attr("value_int")) {
    ctx.set_output(0, Tensor::scalar<int64_t>(DType::Int64, ctx.attr_int("value_int", 0)));
  } else {
    const std::vector<int64_t> v = ctx.attr_ints("value_ints");
    ctx.set_output(0, vector_tensor(DType::Int64, v.data(), v.size(), false));
  }
}

// ---- ConstantOfShape ------------------------------------------------------------------------

void constant_of_shape_kernel(KernelContext& ctx) {
  const ConstantOfShapeSetup s = constant_of_shape_setup(ctx);
  const Tensor& value = s.value;
  Tensor& y = ctx.allocate_output(0, value.dtype(), s.shape);
  dispatch_bytes(
      value.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        T x;
        std::memcpy(&x, value.raw(), sizeof(T));
        std::fill(y.mutable_data<T>(), y.mutable_data<T>() + y.numel(), x);
      },
      ctx.node().label());
}

// ---- Range ----------------------------------------------------------------------------------

// Element i = start + i * delta. Integers are computed exactly (128-bit), floats in double
// (float16/bfloat16 stash in float per the spec, which double subsumes).
void range_kernel(KernelContext& ctx) {
  const RangeSetup r = range_setup(ctx);
  const DType t = r.dtype;
  const int64_t n = r.n;
  Tensor& y = ctx.allocate_output(0, t, {n});
  if (is_integer(t)) {
    const __int128 s = ctx.input(0).as_int64(), d = ctx.input(2).as_int64();
    dispatch_integer(
        t,
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          T* out = y.mutable_data<T>();
          for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(s + i * d);
        },
        "Range");
    return;
  }
  const double s = ctx.input(0).as_double(), d = ctx.input(2).as_double();
  dispatch_float(
      t,
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* out = y.mutable_data<T>();
        for (int64_t i = 0; i < n; ++i) out[i] = from_compute<T>(s + static_cast<double>(i) * d);
      },
      "Range");
}

// ---- Dropout --------------------------------------------------------------------------------

// Dropout is the identity at inference. Opsets 1-11 have no training switch that an inference
// engine honours (is_test/training are a runtime mode there), so they always pass through.
// From opset 12 the training_mode input can turn dropout on: the mask (dropout_keep_mask) keeps
// an element when a uniform draw in [0,1) is >= ratio and kept values are scaled by
// 1/(1-ratio).
void dropout_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const DropoutSetup s =
      dropout_setup(ctx, [&](size_t i, const char* name) -> const Tensor& { return scalar_input(ctx, i, name); });
  const double ratio = s.ratio;
  if (!s.drop) {
    ctx.set_output(0, x);
    if (s.want_mask) {
      Tensor& m = ctx.allocate_output(1, s.mask_type, x.shape());
      if (s.mask_type == DType::Bool) {
        std::fill(m.mutable_data<bool>(), m.mutable_data<bool>() + m.numel(), true);
      } else {
        dispatch_float(
            s.mask_type,
            [&](auto tag) {
              using T = typename decltype(tag)::type;
              std::fill(m.mutable_data<T>(), m.mutable_data<T>() + m.numel(), from_compute<T>(1.0f));
            },
            "Dropout");
      }
    }
    return;
  }
  const uint32_t seed =
      ctx.node().has_attr("seed") ? static_cast<uint32_t>(ctx.attr_int("seed", 0)) : std::random_device{}();
  std::unique_ptr<bool[]> keep(new bool[static_cast<size_t>(x.numel())]);
  dropout_keep_mask(seed, ratio, x.numel(), keep.get());
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = compute_t<T>;
        const C scale = static_cast<C>(1) / (static_cast<C>(1) - static_cast<C>(ratio));
        const T* in = x.data<T>();
        T* out = y.mutable_data<T>();
        for (int64_t i = 0; i < x.numel(); ++i)
          out[i] = keep[static_cast<size_t>(i)] ? from_compute<T>(to_compute(in[i]) * scale) : from_compute<T>(C(0));
      },
      "Dropout");
  if (s.want_mask) {
    Tensor& m = ctx.allocate_output(1, DType::Bool, x.shape());
    std::copy(keep.get(), keep.get() + x.numel(), m.mutable_data<bool>());
  }
}

// ---- OneHot ---------------------------------------------------------------------------------

// Indices (any numeric type; fractional values truncate) in [-depth, depth) select on_value;
// anything else leaves the row all off_value, as the spec says.
void one_hot_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& ind = ctx.input(0);
  const Tensor& values = ctx.input(2);
  const OneHotSetup s = one_hot_setup(ctx);
  const int64_t depth = s.depth, outer = s.outer, inner = s.inner;
  const Shape& out = s.out;
  std::vector<int64_t> idx(static_cast<size_t>(ind.numel()));
  dispatch_numeric(
      ind.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* p = ind.data<T>();
        for (int64_t i = 0; i < ind.numel(); ++i) {
          const double v = static_cast<double>(to_compute(p[i]));
          // Out-of-range (or NaN) values become -1, i.e. no position is set.
          int64_t k = (v >= -static_cast<double>(depth) && v < static_cast<double>(depth)) ? static_cast<int64_t>(v)
                                                                                           : -depth - 1;
          if (k < 0) k += depth;
          idx[static_cast<size_t>(i)] = k;
        }
      },
      "OneHot indices");
  Tensor& y = ctx.allocate_output(0, values.dtype(), out);
  dispatch_bytes(
      values.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T off = values.data<T>()[0], on = values.data<T>()[1];
        T* dst = y.mutable_data<T>();
        std::fill(dst, dst + y.numel(), off);
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t k = idx[static_cast<size_t>(o * inner + i)];
            if (k >= 0 && k < depth) dst[(o * depth + k) * inner + i] = on;
          }
      },
      where);
}

// ---- NonZero --------------------------------------------------------------------------------

// Output int64 [rank, count]: the coordinates of non-zero elements in row-major order. A scalar
// gives shape [0, count], per the spec (numpy would give [1, count]).
void non_zero_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> hits;
  dispatch_all(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* p = x.data<T>();
        for (int64_t i = 0; i < x.numel(); ++i)
          if (to_compute(p[i]) != 0) hits.push_back(i);
      },
      "NonZero");
  const int64_t rank = x.rank(), n = static_cast<int64_t>(hits.size());
  Tensor& y = ctx.allocate_output(0, DType::Int64, {rank, n});
  int64_t* out = y.mutable_data<int64_t>();
  for (int64_t j = 0; j < n; ++j) {
    int64_t lin = hits[static_cast<size_t>(j)];
    for (int64_t d = rank - 1; d >= 0; --d) {
      out[d * n + j] = lin % x.dim(d);
      lin /= x.dim(d);
    }
  }
}

}  // namespace

void register_tensor_misc_ops(OpRegistry& r) {
  r.add({"", "Constant", 1, INT_MAX, constant_kernel, check_constant});
  r.add({"",
         "ConstantOfShape",
         9,
         INT_MAX,
         constant_of_shape_kernel,
         constant_of_shape_check,
         nullptr,
         {InputRole::kShape}});
  r.add({"",
         "Range",
         11,
         INT_MAX,
         range_kernel,
         nullptr,
         nullptr,
         {InputRole::kShape, InputRole::kShape, InputRole::kShape}});
  r.add({"", "Dropout", 1, INT_MAX, dropout_kernel, nullptr, nullptr, {}, dropout_draws_random});
  r.add({"", "OneHot", 9, INT_MAX, one_hot_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kShape}});
  r.add({"", "NonZero", 9, INT_MAX, non_zero_kernel, nullptr});
}

}  // namespace reforge::ops
