// The shared setup of ConstantOfShape, Range, OneHot and Dropout (tensor_misc_setup.h).
#include "ops/tensor/tensor_misc_setup.h"

#include <cmath>
#include <random>

#include "ops/tensor/tensor_common.h"

namespace reforge::ops {

const Tensor& scalar_input(const KernelContext& ctx, size_t i, const char* name) {
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1) fail(ctx.node().label(), ": input '", name, "' must be a scalar, got ", t.describe());
  return t;
}

std::string constant_of_shape_check(const ir::Node& node) {
  const Tensor* v = node.attr_tensor("value");
  if (v && v->numel() != 1) return "attribute 'value' must hold exactly one element, it is " + v->describe();
  return "";
}

ConstantOfShapeSetup constant_of_shape_setup(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const std::string reason = constant_of_shape_check(ctx.node());
  if (!reason.empty()) fail(where, ": ", reason);
  ConstantOfShapeSetup s;
  s.shape = read_int_tensor(ctx.input(0), where, "input 'shape'");
  for (int64_t d : s.shape)
    if (d < 0) fail(where, ": shape ", shape_str(s.shape), " has a negative dimension");
  const Tensor* v = ctx.node().attr_tensor("value");
  s.value = v ? *v : Tensor::scalar<float>(DType::Float32, 0.0f);
  return s;
}

RangeSetup range_setup(const KernelContext& ctx) {
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
    return {t, static_cast<int64_t>(n)};
  }
  const double s = start.as_double(), l = limit.as_double(), d = delta.as_double();
  if (d == 0) fail(where, ": delta is 0");
  const double count = std::ceil((l - s) / d);
  if (std::isnan(count)) fail(where, ": range from ", s, " to ", l, " by ", d, " is not finite");
  if (count > static_cast<double>(int64_t{1} << 40)) fail(where, ": range of ", count, " elements is too large");
  return {t, count > 0 ? static_cast<int64_t>(count) : 0};
}

OneHotSetup one_hot_setup(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& ind = ctx.input(0);
  const Tensor& depth_t = scalar_input(ctx, 1, "depth");
  const Tensor& values = ctx.input(2);
  if (values.numel() != 2) fail(where, ": values must hold [off_value, on_value], got ", values.describe());
  const double depth_d = depth_t.as_double();
  if (!(depth_d >= 0) || depth_d > static_cast<double>(int64_t{1} << 40))
    fail(where, ": depth ", depth_d, " is not a valid size");
  OneHotSetup s;
  s.depth = static_cast<int64_t>(depth_d);
  const int64_t r = ind.rank();
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < -r - 1 || axis > r) fail(where, ": axis ", axis, " is out of range for indices of rank ", r);
  if (axis < 0) axis += r + 1;
  s.out = ind.shape();
  s.out.insert(s.out.begin() + axis, s.depth);
  for (int64_t d = 0; d < axis; ++d) s.outer *= ind.dim(d);
  for (int64_t d = axis; d < r; ++d) s.inner *= ind.dim(d);
  return s;
}

bool dropout_draws_random(const ir::Node& n) {
  return n.opset >= 12 && n.inputs.size() > 2 && !n.inputs[2].empty() && !n.has_attr("seed");
}

void dropout_keep_mask(uint32_t seed, double ratio, int64_t n, bool* keep) {
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t a = gen() >> 5, b = gen() >> 6;
    const double u = (a * 67108864.0 + b) / 9007199254740992.0;
    keep[i] = u >= ratio;
  }
}

}  // namespace reforge::ops
