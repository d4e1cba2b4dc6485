// The shared setup of the reductions (reduce_setup.h).
#include "ops/reduce/reduce_setup.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace reforge::ops {

ReduceSetup reduce_setup(const KernelContext& ctx, int axes_input_since, bool bool_ok) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> axes;
  if (ctx.opset() >= axes_input_since) {
    if (ctx.has_input(1)) {
      const Tensor& a = ctx.input(1);
      REFORGE_CHECK(a.dtype() == DType::Int64 || a.dtype() == DType::Int32, label, ": axes must be int64, got ",
                    a.describe());
      REFORGE_CHECK(a.rank() <= 1, label, ": axes must be a 1-D tensor, got ", a.describe());
      axes = a.to_int64_vector();
    }
  } else {
    axes = ctx.attr_ints("axes");
  }
  ReduceSetup s;
  const bool keepdims = ctx.attr_int("keepdims", 1) != 0;
  const bool noop = ctx.attr_int("noop_with_empty_axes", 0) != 0;
  if (axes.empty() && noop) {
    s.identity = true;
    return s;
  }
  const DType dt = x.dtype();
  if (dt == DType::Bool && !bool_ok) fail(label, ": input of type bool is only supported by ReduceMax and ReduceMin");
  REFORGE_CHECK(dt != DType::Bool || ctx.opset() >= 20, label, ": bool input requires opset 20, model has ",
                ctx.opset());

  const int64_t rank = x.rank();
  s.flags.assign(static_cast<size_t>(rank), axes.empty() ? 1 : 0);
  for (int64_t a : axes) {
    REFORGE_CHECK(a >= -rank && a < std::max<int64_t>(rank, 1) && (rank > 0 || a == 0 || a == -1), label, ": axis ", a,
                  " is out of range for input of rank ", rank);
    if (rank == 0) continue;  // numpy-style: axis 0/-1 of a scalar reduces nothing
    const int64_t n = a < 0 ? a + rank : a;
    REFORGE_CHECK(!s.flags[static_cast<size_t>(n)], label, ": axis ", a, " is listed more than once");
    s.flags[static_cast<size_t>(n)] = 1;
  }
  for (int64_t i = 0; i < rank; ++i) {
    if (!s.flags[static_cast<size_t>(i)])
      s.out.push_back(x.dim(i));
    else if (keepdims)
      s.out.push_back(1);
  }
  return s;
}

ArgSetup arg_setup(const KernelContext& ctx, bool is_max) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  ArgSetup s;
  int64_t axis = ctx.attr_int("axis", 0);
  const bool keepdims = ctx.attr_int("keepdims", 1) != 0;
  s.last = ctx.attr_int("select_last_index", 0) != 0;
  const int64_t r = std::max<int64_t>(rank, 1);  // a scalar acts as a 1-element vector
  REFORGE_CHECK(axis >= -r && axis < r, label, ": axis ", axis, " is out of range for input of rank ", rank);
  if (axis < 0) axis += r;
  s.axis = axis;
  s.flags.assign(static_cast<size_t>(rank), 0);
  for (int64_t i = 0; i < rank; ++i) {
    if (i < axis)
      s.outer *= x.dim(i);
    else if (i > axis)
      s.inner *= x.dim(i);
    else
      s.n = x.dim(i);
    if (i == axis) s.flags[static_cast<size_t>(i)] = 1;
    if (i != axis)
      s.out.push_back(x.dim(i));
    else if (keepdims)
      s.out.push_back(1);
  }
  REFORGE_CHECK(s.n > 0 || shape_numel(s.out) == 0, label, ": cannot take ", is_max ? "ArgMax" : "ArgMin",
                " over axis ", axis, " of size 0 (input ", x.describe(), ")");
  return s;
}

}  // namespace reforge::ops
