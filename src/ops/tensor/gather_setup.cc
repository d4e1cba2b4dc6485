// The shared setup of the gathers and scatters (gather_setup.h).
#include "ops/tensor/gather_setup.h"

#include <algorithm>

#include "ops/tensor/tensor_common.h"

namespace reforge::ops {

GatherSetup gather_setup(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  if (x.rank() == 0) fail(where, ": data must have rank >= 1");
  GatherSetup s;
  s.axis = normalize_axis(ctx.attr_int("axis", 0), x.rank(), where);
  s.dim = x.dim(s.axis);
  s.out.assign(x.shape().begin(), x.shape().begin() + s.axis);
  s.out.insert(s.out.end(), idx.shape().begin(), idx.shape().end());
  s.out.insert(s.out.end(), x.shape().begin() + s.axis + 1, x.shape().end());
  for (int64_t d = 0; d < s.axis; ++d) s.outer *= x.dim(d);
  for (int64_t d = s.axis + 1; d < x.rank(); ++d) s.inner *= x.dim(d);
  return s;
}

int64_t elements_axis(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  if (x.rank() == 0) fail(where, ": data must have rank >= 1");
  const int64_t axis = normalize_axis(ctx.attr_int("axis", 0), x.rank(), where);
  if (idx.rank() != x.rank()) fail(where, ": indices ", idx.describe(), " must have the rank of data ", x.describe());
  for (int64_t d = 0; d < x.rank(); ++d)
    if (d != axis && idx.dim(d) > x.dim(d))
      fail(where, ": indices ", idx.describe(), " exceed data ", x.describe(), " along axis ", d);
  return axis;
}

int64_t scatter_elements_axis(const KernelContext& ctx) {
  const int64_t axis = elements_axis(ctx);
  const Tensor& idx = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  if (upd.shape() != idx.shape())
    fail(ctx.node().label(), ": updates ", upd.describe(), " must have the shape of indices ", idx.describe());
  return axis;
}

NdSetup gather_nd_setup(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  NdSetup s;
  const int64_t b = ctx.opset() >= 12 ? ctx.attr_int("batch_dims", 0) : 0;
  const int64_t r = x.rank(), q = idx.rank();
  if (r < 1 || q < 1) fail(where, ": data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(r, q)) fail(where, ": batch_dims ", b, " must be in [0, ", std::min(r, q), ")");
  const int64_t k = idx.dim(q - 1);
  if (k > r - b) fail(where, ": index tuples of length ", k, " exceed data ", x.describe(), " with batch_dims ", b);
  for (int64_t d = 0; d < b; ++d)
    if (idx.dim(d) != x.dim(d))
      fail(where, ": batch dimension ", d, " differs between data ", x.describe(), " and indices ", idx.describe());
  s.b = b;
  s.k = k;
  s.out.assign(idx.shape().begin(), idx.shape().end() - 1);
  s.out.insert(s.out.end(), x.shape().begin() + b + k, x.shape().end());
  s.slice = shape_numel(Shape(x.shape().begin() + b + k, x.shape().end()));
  return s;
}

NdSetup scatter_nd_setup(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  NdSetup s;
  const int64_t r = x.rank(), q = idx.rank();
  if (r < 1 || q < 1) fail(where, ": data and indices must have rank >= 1");
  const int64_t k = idx.dim(q - 1);
  if (k > r) fail(where, ": index tuples of length ", k, " exceed data ", x.describe());
  s.k = k;
  s.out.assign(idx.shape().begin(), idx.shape().end() - 1);
  s.out.insert(s.out.end(), x.shape().begin() + k, x.shape().end());
  if (upd.shape() != s.out)
    fail(where, ": updates ", upd.describe(), " must have shape ", shape_str(s.out), " for data ", x.describe(),
         " and indices ", idx.describe());
  s.slice = shape_numel(Shape(x.shape().begin() + k, x.shape().end()));
  return s;
}

namespace {

Reduction parse_reduction(const ir::Node& node, std::string* error) {
  const std::string s = node.attr_string("reduction", "none");
  if (s == "none") return Reduction::None;
  if (node.opset >= 16 && s == "add") return Reduction::Add;
  if (node.opset >= 16 && s == "mul") return Reduction::Mul;
  if (node.opset >= 18 && s == "max") return Reduction::Max;
  if (node.opset >= 18 && s == "min") return Reduction::Min;
  if (error) *error = "reduction '" + s + "' is not supported at opset " + std::to_string(node.opset);
  return Reduction::None;
}

}  // namespace

std::string reduction_check(const ir::Node& node) {
  std::string error;
  parse_reduction(node, &error);
  return error;
}

Reduction scatter_reduction(const KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& u = ctx.input(2);
  if (u.dtype() != x.dtype())
    fail(ctx.node().label(), ": updates ", u.describe(), " must have the element type of data ", x.describe());
  std::string error;
  Reduction r = parse_reduction(ctx.node(), &error);
  if (!error.empty()) fail(ctx.node().label(), ": ", error);
  return r;
}

}  // namespace reforge::ops
