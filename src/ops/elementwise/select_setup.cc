// The shared setup of Where, the variadic folds, PRelu and Mod (select_setup.h).
#include "ops/elementwise/select_setup.h"

#include <vector>

#include "core/error.h"
#include "ops/broadcast.h"

namespace reforge::ops {

Shape where_setup(const KernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  const std::string what = ctx.node().label();
  REFORGE_CHECK(c.dtype() == DType::Bool, what, ": condition must be bool, got ", c.describe());
  REFORGE_CHECK(x.dtype() == y.dtype(), what, ": X and Y have different element types (", x.describe(), " and ",
                y.describe(), ")");
  REFORGE_CHECK(is_supported(x.dtype()), what, " does not support element type ", dtype_name(x.dtype()));
  return broadcast_shapes({c.shape(), x.shape(), y.shape()}, what);
}

Shape variadic_setup(const KernelContext& ctx, bool mean) {
  const std::string what = ctx.node().label();
  const size_t n = ctx.num_inputs();
  REFORGE_CHECK(n >= 1, what, " needs at least one input");
  std::vector<Shape> shapes;
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = ctx.input(i);
    REFORGE_CHECK(t.dtype() == ctx.input(0).dtype(), what, ": input ", i, " is ", t.describe(), " but input 0 is ",
                  ctx.input(0).describe());
    shapes.push_back(t.shape());
  }
  const Shape os = broadcast_shapes(shapes, what);
  const DType dt = ctx.input(0).dtype();
  REFORGE_CHECK(!mean || is_float(dt), what, " does not support element type ", dtype_name(dt));
  return os;
}

void prelu_check(const KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& slope = ctx.input(1);
  const std::string what = ctx.node().label();
  REFORGE_CHECK(x.dtype() == slope.dtype(), what, ": X and slope have different element types (", x.describe(), " and ",
                slope.describe(), ")");
  REFORGE_CHECK(broadcasts_to(slope.shape(), x.shape()), what, ": slope of shape ", shape_str(slope.shape()),
                " does not broadcast to X of shape ", shape_str(x.shape()));
}

std::string mod_check(const ir::Node& node) {
  const int64_t f = node.attr_int("fmod", 0);
  if (f != 0 && f != 1) return str_cat("fmod must be 0 or 1, got ", f);
  return "";
}

}  // namespace reforge::ops
