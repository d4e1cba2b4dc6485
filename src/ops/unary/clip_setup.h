// Clip's bounds, shared by the CPU kernels (unary_clip.h) and the CUDA kernel
// (backends/cuda/unary.cu), so that both read them the same way and refuse the same inputs with
// the same messages. Attributes `min`/`max` before opset 11, optional one-element inputs 1 and 2
// of X's type from opset 11 on; an absent bound is no bound. Header-only: the CUDA compiler
// includes it.
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "ops/registry.h"

namespace reforge::ops {

// A float attribute converted to the compute type; integers saturate (a float attribute on an
// integer Clip only exists in hand-made models, but must not overflow).
template <typename C>
C bound_from_float(float v, const std::string& who) {
  if constexpr (std::is_floating_point_v<C>) {
    return static_cast<C>(v);
  } else {
    if (std::isnan(v)) fail(who, ": bound attribute is NaN on an integer input");
    if (v <= static_cast<float>(std::numeric_limits<C>::lowest())) return std::numeric_limits<C>::lowest();
    if (v >= static_cast<float>(std::numeric_limits<C>::max())) return std::numeric_limits<C>::max();
    return static_cast<C>(v);
  }
}

// The bounds in compute type C that do not come from inputs: none (the type's extremes,
// infinities for floats), or before opset 11 the attributes.
template <typename C>
void clip_attribute_bounds(const KernelContext& ctx, C& lo, C& hi) {
  lo = std::numeric_limits<C>::lowest();
  hi = std::numeric_limits<C>::max();
  if constexpr (std::is_floating_point_v<C>) {
    lo = -std::numeric_limits<C>::infinity();
    hi = std::numeric_limits<C>::infinity();
  }
  if (ctx.opset() < 11) {
    const std::string who = ctx.node().label();
    if (ctx.node().has_attr("min")) lo = bound_from_float<C>(ctx.attr_float("min", 0.0f), who);
    if (ctx.node().has_attr("max")) hi = bound_from_float<C>(ctx.attr_float("max", 0.0f), who);
  }
}

// Optional bound input i (opset >= 11): a one-element tensor of X's type, or null when absent.
inline const Tensor* clip_bound_input(const KernelContext& ctx, size_t i, const char* name) {
  if (!ctx.has_input(i)) return nullptr;
  const Tensor& x = ctx.input(0);
  const Tensor& b = ctx.input(i);
  REFORGE_CHECK(b.dtype() == x.dtype(), ctx.node().label(), ": input '", name, "' has type ", dtype_name(b.dtype()),
                ", expected ", dtype_name(x.dtype()), " (the type of the input)");
  REFORGE_CHECK(b.numel() == 1, ctx.node().label(), ": input '", name, "' must be a scalar, got shape ",
                shape_str(b.shape()));
  return &b;
}

}  // namespace reforge::ops
