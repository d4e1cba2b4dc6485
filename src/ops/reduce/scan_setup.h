// The validation and shape arithmetic of CumSum/CumProd and TopK, shared by the CPU reference
// kernels (ops/reduce/cumsum.cc, topk.cc) and the CUDA kernels (backends/cuda/cumsum_topk.cu), so
// that both refuse the same inputs with the same messages and split the input the same way.
// Header-only: the CUDA compiler includes it too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "ops/registry.h"

namespace reforge::ops {

// An input seen as [outer, n, inner] around one axis.
struct AxisSplit {
  int64_t axis = 0;  // normalized
  int64_t outer = 1, n = 1, inner = 1;
};

inline AxisSplit split_at_axis(const Shape& shape, int64_t axis) {
  AxisSplit s;
  s.axis = axis;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i < axis)
      s.outer *= shape[static_cast<size_t>(i)];
    else if (i == axis)
      s.n = shape[static_cast<size_t>(i)];
    else
      s.inner *= shape[static_cast<size_t>(i)];
  }
  return s;
}

// CumSum / CumProd: the axis input (a scalar int32/int64; a scalar input scans its one element)
// checked and normalized, the input split around it.
inline AxisSplit cumulate_setup(const KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& at = ctx.input(1);
  REFORGE_CHECK((at.dtype() == DType::Int32 || at.dtype() == DType::Int64) && at.numel() == 1 && at.rank() <= 1, label,
                ": axis must be a scalar int32/int64 tensor, got ", at.describe());
  const int64_t rank = x.rank();
  int64_t axis = at.as_int64(0);
  const int64_t r = std::max<int64_t>(rank, 1);
  REFORGE_CHECK(axis >= -r && axis < r, label, ": axis ", axis, " is out of range for input of rank ", rank);
  if (axis < 0) axis += r;
  return split_at_axis(x.shape(), axis);
}

struct TopKSetup {
  AxisSplit split;
  int64_t k = 0;
  bool largest = true;
  Shape out_shape;  // the input's, with k along the axis
};

// TopK: the axis attribute, k (input from opset 10, attribute before) and largest, checked.
inline TopKSetup topk_setup(const KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  REFORGE_CHECK(rank >= 1, label, ": input must have rank >= 1, got ", x.describe());
  int64_t axis = ctx.attr_int("axis", -1);
  REFORGE_CHECK(axis >= -rank && axis < rank, label, ": axis ", axis, " is out of range for input of rank ", rank);
  if (axis < 0) axis += rank;
  TopKSetup t;
  if (ctx.opset() >= 10) {
    const Tensor& kt = ctx.input(1);
    REFORGE_CHECK(kt.numel() == 1 && kt.rank() <= 1 && is_integer(kt.dtype()), label,
                  ": K must be a 1-element integer tensor, got ", kt.describe());
    t.k = kt.as_int64(0);
  } else {
    REFORGE_CHECK(ctx.node().has_attr("k"), label, ": attribute k is required before opset 10");
    t.k = ctx.attr_int("k", 0);
  }
  t.largest = ctx.attr_int("largest", 1) != 0;
  t.split = split_at_axis(x.shape(), axis);
  REFORGE_CHECK(t.k >= 0 && t.k <= t.split.n, label, ": k = ", t.k, " is out of range for axis ", axis, " of size ",
                t.split.n, " (input ", x.describe(), ")");
  t.out_shape = x.shape();
  t.out_shape[static_cast<size_t>(axis)] = t.k;
  return t;
}

}  // namespace reforge::ops
