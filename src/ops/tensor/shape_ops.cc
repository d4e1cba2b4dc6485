// Shape ops: Shape, Size, Identity, Reshape, Flatten, Squeeze, Unsqueeze, Expand.
//
// All but Shape/Size/Expand only change the shape, so they alias their input's storage
// (Tensor::reshaped) instead of copying: tensors are immutable once produced.
#include <algorithm>

#include "ops/broadcast.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::ops {
namespace {

void identity_kernel(KernelContext& ctx) { ctx.set_output(0, ctx.input(0)); }

// Shape-15 added start/end: a slice of the dims, with Python-style negative indices and
// clamping to [0, rank] (an empty result when start >= end).
void shape_kernel(KernelContext& ctx) {
  const Shape& s = ctx.input(0).shape();
  const int64_t rank = static_cast<int64_t>(s.size());
  int64_t start = 0, end = rank;
  if (ctx.opset() >= 15) {
    start = ctx.attr_int("start", 0);
    end = ctx.attr_int("end", rank);
  }
  auto clamp = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  start = clamp(start);
  end = clamp(end);
  const int64_t n = std::max<int64_t>(end - start, 0);
  Tensor& y = ctx.allocate_output_uninit(0, DType::Int64, {n});
  for (int64_t i = 0; i < n; ++i) y.mutable_data<int64_t>()[i] = s[static_cast<size_t>(start + i)];
}

void size_kernel(KernelContext& ctx) {
  const int64_t n = ctx.input(0).numel();
  *ctx.allocate_output_uninit(0, DType::Int64, {}).mutable_data<int64_t>() = n;
}

// Reshape: 0 copies the input's dim at that position (unless allowzero=1, opset 14+, where 0 is
// a real zero), -1 (at most one) is inferred from the element count.
void reshape_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> spec;
  if (ctx.opset() < 5) {
    if (!ctx.node().has_attr("shape")) fail(where, ": required attribute 'shape' is missing");
    spec = ctx.attr_ints("shape");
  } else {
    spec = read_int_tensor(ctx.input(1), where, "input 'shape'");
  }
  const bool allowzero = ctx.opset() >= 14 && ctx.attr_int("allowzero", 0) != 0;
  Shape out(spec.size());
  int64_t infer = -1;
  bool has_zero = false;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t v = spec[i];
    if (v == -1) {
      if (infer >= 0) fail(where, ": shape ", shape_str(spec), " has more than one -1");
      infer = static_cast<int64_t>(i);
      out[i] = 1;
      continue;
    }
    if (v < -1) fail(where, ": shape ", shape_str(spec), " has invalid dimension ", v);
    if (v == 0 && !allowzero) {
      if (static_cast<int64_t>(i) >= x.rank())
        fail(where, ": shape ", shape_str(spec), " copies dimension ", i, " (0) but the input ", x.describe(),
             " has rank ", x.rank());
      v = x.dim(static_cast<int64_t>(i));
    }
    if (v == 0) has_zero = true;
    out[i] = v;
  }
  if (infer >= 0) {
    if (allowzero && has_zero) fail(where, ": shape ", shape_str(spec), " has both 0 and -1 with allowzero=1");
    const int64_t known = shape_numel(out);
    if (known == 0 || x.numel() % known != 0)
      fail(where, ": cannot reshape ", x.describe(), " to ", shape_str(spec), " (the -1 cannot be inferred)");
    out[static_cast<size_t>(infer)] = x.numel() / known;
  }
  if (shape_numel(out) != x.numel())
    fail(where, ": cannot reshape ", x.describe(), " to ", shape_str(spec), " (resolved ", shape_str(out),
         ", element counts differ)");
  ctx.set_output(0, x.reshaped(std::move(out)));
}

void flatten_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  int64_t axis = ctx.attr_int("axis", 1);
  if (axis < -rank || axis > rank)
    fail(ctx.node().label(), ": axis ", axis, " is out of range for a tensor of rank ", rank);
  if (axis < 0) axis += rank;
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  const int64_t inner = outer == 0 ? shape_numel(Shape(x.shape().begin() + axis, x.shape().end())) : x.numel() / outer;
  ctx.set_output(0, x.reshaped({outer, inner}));
}

// Axes come from an attribute before opset 13 and from an optional input from 13 on.
std::vector<int64_t> axes_operand(KernelContext& ctx, bool* given) {
  if (ctx.opset() < 13) {
    *given = ctx.node().has_attr("axes");
    return ctx.attr_ints("axes");
  }
  *given = ctx.has_input(1);
  return *given ? read_int_tensor(ctx.input(1), ctx.node().label(), "input 'axes'") : std::vector<int64_t>{};
}

void squeeze_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  bool given = false;
  std::vector<int64_t> axes = normalize_axes(axes_operand(ctx, &given), x.rank(), where);
  std::vector<bool> drop(static_cast<size_t>(x.rank()), false);
  if (axes.empty()) {  // no axes: drop every dim of size 1
    for (int64_t d = 0; d < x.rank(); ++d) drop[static_cast<size_t>(d)] = x.dim(d) == 1;
  } else {
    for (int64_t a : axes) {
      if (x.dim(a) != 1) fail(where, ": cannot squeeze axis ", a, " of ", x.describe(), ": its size is not 1");
      drop[static_cast<size_t>(a)] = true;
    }
  }
  Shape out;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (!drop[static_cast<size_t>(d)]) out.push_back(x.dim(d));
  ctx.set_output(0, x.reshaped(std::move(out)));
}

void unsqueeze_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  bool given = false;
  std::vector<int64_t> raw = axes_operand(ctx, &given);
  if (!given) fail(where, ": axes are required");
  const int64_t out_rank = x.rank() + static_cast<int64_t>(raw.size());
  std::vector<int64_t> axes = normalize_axes(raw, out_rank, where);
  std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
  for (int64_t a : axes) inserted[static_cast<size_t>(a)] = true;
  Shape out;
  size_t next = 0;
  for (int64_t d = 0; d < out_rank; ++d) out.push_back(inserted[static_cast<size_t>(d)] ? 1 : x.shape()[next++]);
  ctx.set_output(0, x.reshaped(std::move(out)));
}

// Expand broadcasts both ways: a 1 in `shape` keeps the input's dim.
void expand_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> target = read_int_tensor(ctx.input(1), where, "input 'shape'");
  for (int64_t v : target)
    if (v < 0) fail(where, ": shape ", shape_str(target), " has a negative dimension");
  Shape out = broadcast_shapes({x.shape(), target}, where);
  if (out == x.shape()) {
    ctx.set_output(0, x);
    return;
  }
  const size_t rank = out.size(), xr = x.shape().size();
  std::vector<int64_t> xs = contiguous_strides(x.shape());
  std::vector<int64_t> strides(rank, 0);
  for (size_t j = 0; j < xr; ++j) {
    const size_t xd = xr - 1 - j, od = rank - 1 - j;
    strides[od] = (x.shape()[xd] == 1) ? 0 : xs[xd];
  }
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), out);
  strided_copy(y.mutable_raw(), x.raw(), dtype_size(x.dtype()), out, strides, 0);
}

}  // namespace

void register_shape_ops(OpRegistry& r) {
  // These kernels return their input with another shape (KernelContext::set_output of a reshaped view).
  const std::vector<Sharing> view = {{0, 0, Sharing::kView}};
  r.add(with_sharing({"", "Identity", 1, INT_MAX, identity_kernel, nullptr}, view));
  r.add({"", "Shape", 1, INT_MAX, shape_kernel, nullptr});
  r.add({"", "Size", 1, INT_MAX, size_kernel, nullptr});
  r.add(with_sharing({"", "Reshape", 1, INT_MAX, reshape_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kShape}}, view));
  r.add(with_sharing({"", "Flatten", 1, INT_MAX, flatten_kernel, nullptr}, view));
  r.add(with_sharing({"", "Squeeze", 1, INT_MAX, squeeze_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kShape}}, view));
  r.add(with_sharing({"", "Unsqueeze", 1, INT_MAX, unsqueeze_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kShape}}, view));
  r.add({"", "Expand", 8, INT_MAX, expand_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kShape}});
}

}  // namespace reforge::ops
