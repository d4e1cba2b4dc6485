// Tensor-producing and miscellaneous ops: Constant, ConstantOfShape, Range, Dropout, OneHot,
// NonZero.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "ops/tensor/tensor_common.h"

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

std::string check_constant_of_shape(const ir::Node& node) {
  const Tensor* v = node.attr_tensor("value");
  if (v && v->numel() != 1) return "attribute 'value' must hold exactly one element, it is " + v->describe();
  return "";
}

void constant_of_shape_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const std::string reason = check_constant_of_shape(ctx.node());
  if (!reason.empty()) fail(where, ": ", reason);
  const Tensor& shape_in = ctx.input(0);
  const std::vector<int64_t> shape = read_int_tensor(shape_in, where, "input 'shape'");
  for (int64_t d : shape)
    if (d < 0) fail(where, ": shape ", shape_str(shape), " has a negative dimension");
  const Tensor* v = ctx.node().attr_tensor("value");
  const Tensor value = v ? *v : Tensor::scalar<float>(DType::Float32, 0.0f);
  Tensor& y = ctx.allocate_output(0, value.dtype(), shape);
  dispatch_bytes(
      value.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        T x;
        std::memcpy(&x, value.raw(), sizeof(T));
        std::fill(y.mutable_data<T>(), y.mutable_data<T>() + y.numel(), x);
      },
      where);
}

// ---- Range ----------------------------------------------------------------------------------

// Scalar input i as a plain value; Range's inputs are scalars (or one-element tensors).
const Tensor& scalar_input(KernelContext& ctx, size_t i, const char* name) {
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1) fail(ctx.node().label(), ": input '", name, "' must be a scalar, got ", t.describe());
  return t;
}

// Output elements = max(ceil((limit - start) / delta), 0); element i = start + i * delta. Integers
// are computed exactly (128-bit), floats in double (float16/bfloat16 stash in float per the spec,
// which double subsumes).
void range_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& start = scalar_input(ctx, 0, "start");
  const Tensor& limit = scalar_input(ctx, 1, "limit");
  const Tensor& delta = scalar_input(ctx, 2, "delta");
  const DType t = start.dtype();
  if (limit.dtype() != t || delta.dtype() != t)
    fail(where, ": start, limit and delta must have one element type, got ", start.describe(), ", ", limit.describe(),
         ", ", delta.describe());
  if (is_integer(t)) {
    const __int128 s = start.as_int64(), l = limit.as_int64(), d = delta.as_int64();
    if (d == 0) fail(where, ": delta is 0");
    const __int128 diff = l - s;
    __int128 n = 0;
    if ((diff > 0 && d > 0) || (diff < 0 && d < 0)) n = (diff + d + (d > 0 ? -1 : 1)) / d;
    if (n > (__int128{1} << 40)) fail(where, ": range of ", static_cast<long long>(n), " elements is too large");
    Tensor& y = ctx.allocate_output(0, t, {static_cast<int64_t>(n)});
    dispatch_integer(
        t,
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          T* out = y.mutable_data<T>();
          for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) out[i] = static_cast<T>(s + i * d);
        },
        "Range");
    return;
  }
  const double s = start.as_double(), l = limit.as_double(), d = delta.as_double();
  if (d == 0) fail(where, ": delta is 0");
  const double count = std::ceil((l - s) / d);
  if (std::isnan(count)) fail(where, ": range from ", s, " to ", l, " by ", d, " is not finite");
  if (count > static_cast<double>(int64_t{1} << 40)) fail(where, ": range of ", count, " elements is too large");
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  Tensor& y = ctx.allocate_output(0, t, {n});
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
// From opset 12 the training_mode input can turn dropout on: the mask keeps an element when a
// uniform draw in [0,1) is >= ratio and kept values are scaled by 1/(1-ratio). With the `seed`
// attribute the draws are numpy's legacy RandomState(seed).uniform(0, 1, shape) — MT19937 seeded
// with init_genrand and 53-bit doubles — which is what the ONNX reference and its test data use,
// so a seeded model reproduces them exactly.
void dropout_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  bool training = false;
  double ratio = 0.5;
  if (ctx.opset() >= 12) {
    if (ctx.has_input(1)) ratio = scalar_input(ctx, 1, "ratio").as_double();
    if (ctx.has_input(2)) training = scalar_input(ctx, 2, "training_mode").as_int64() != 0;
  }
  const bool drop = training && ratio != 0;
  if (drop && !(ratio > 0 && ratio < 1)) fail(where, ": ratio ", ratio, " must be in [0, 1)");
  const bool want_mask = ctx.num_outputs() > 1 && ctx.output_wanted(1);
  const DType mask_type = ctx.opset() >= 10 ? DType::Bool : x.dtype();
  if (!drop) {
    ctx.set_output(0, x);
    if (want_mask) {
      Tensor& m = ctx.allocate_output(1, mask_type, x.shape());
      if (mask_type == DType::Bool) {
        std::fill(m.mutable_data<bool>(), m.mutable_data<bool>() + m.numel(), true);
      } else {
        dispatch_float(
            mask_type,
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
  std::mt19937 gen(seed);
  std::vector<bool> keep(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const uint32_t a = gen() >> 5, b = gen() >> 6;
    const double u = (a * 67108864.0 + b) / 9007199254740992.0;
    keep[static_cast<size_t>(i)] = u >= ratio;
  }
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
  if (want_mask) {
    Tensor& m = ctx.allocate_output(1, DType::Bool, x.shape());
    bool* mp = m.mutable_data<bool>();
    for (int64_t i = 0; i < x.numel(); ++i) mp[i] = keep[static_cast<size_t>(i)];
  }
}

// Dropout draws only from opset 12, when a training_mode input can turn it on, and only
// without a `seed` (a seeded draw is reproducible). Inference graphs leave training_mode out.
bool dropout_draws_random(const ir::Node& n) {
  return n.opset >= 12 && n.inputs.size() > 2 && !n.inputs[2].empty() && !n.has_attr("seed");
}

// ---- OneHot ---------------------------------------------------------------------------------

// Indices (any numeric type; fractional values truncate) in [-depth, depth) select on_value;
// anything else leaves the row all off_value, as the spec says.
void one_hot_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& ind = ctx.input(0);
  const Tensor& depth_t = scalar_input(ctx, 1, "depth");
  const Tensor& values = ctx.input(2);
  if (values.numel() != 2) fail(where, ": values must hold [off_value, on_value], got ", values.describe());
  const double depth_d = depth_t.as_double();
  if (!(depth_d >= 0) || depth_d > static_cast<double>(int64_t{1} << 40))
    fail(where, ": depth ", depth_d, " is not a valid size");
  const int64_t depth = static_cast<int64_t>(depth_d);
  const int64_t r = ind.rank();
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < -r - 1 || axis > r) fail(where, ": axis ", axis, " is out of range for indices of rank ", r);
  if (axis < 0) axis += r + 1;
  Shape out = ind.shape();
  out.insert(out.begin() + axis, depth);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= ind.dim(d);
  for (int64_t d = axis; d < r; ++d) inner *= ind.dim(d);
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
         check_constant_of_shape,
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
