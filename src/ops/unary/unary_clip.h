// Clip: Y = min(max(X, min), max), every numeric type.
//
// The bounds moved over the opsets: attributes `min`/`max` before opset 11, optional scalar
// inputs 1 and 2 from opset 11 on. An absent bound is no bound (opset 6-10's defaults are the
// float extremes, which only differ for float64 values beyond float range, where "no bound" is
// what the defaults were meant to say). When min > max every element becomes max, as the spec
// says. NaN in X stays NaN.
//
// The op and its kernel on a map policy (unary_common.h): unary_clip.cc registers it on
// ReferenceMap as the reference kernel, backends/cpu/unary.cc its vectorized one.
#pragma once

#include <cstring>
#include <string>

#include "ops/unary/clip_setup.h"
#include "ops/unary/unary_common.h"

namespace reforge::ops::unary {

template <typename C>
struct ClipOp {
  C lo, hi;
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const requires std::is_same_v<C, float> {
    V v = x < lo ? splat<V>(lo) : x;
    return hi < v ? splat<V>(hi) : v;
  }
  C scalar(C x) const {
    C v = x < lo ? lo : x;
    return hi < v ? hi : v;
  }
};

// Reads optional bound input i (opset >= 11): a one-element tensor of X's type.
template <typename T>
bool bound_from_input(const KernelContext& ctx, size_t i, const char* name, compute_t<T>& out) {
  const Tensor* b = clip_bound_input(ctx, i, name);
  if (!b) return false;
  T v;
  std::memcpy(&v, b->raw(), sizeof(T));  // bound tensors need not be aligned
  out = to_compute(v);
  return true;
}

template <typename Map>
void clip_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::string who = ctx.node().label();
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  dispatch_numeric(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = compute_t<T>;
        ClipOp<C> op;
        clip_attribute_bounds<C>(ctx, op.lo, op.hi);
        if (ctx.opset() >= 11) {
          bound_from_input<T>(ctx, 1, "min", op.lo);
          bound_from_input<T>(ctx, 2, "max", op.hi);
        }
        map_tensor<Map, T, T>(x, y, ctx.threads(), op);
      },
      who.c_str());
}

template <typename Map>
void clip_kernels(const AddUnaryKernel& add) {
  add("Clip", 1, clip_kernel<Map>, nullptr, true);
}

}  // namespace reforge::ops::unary
