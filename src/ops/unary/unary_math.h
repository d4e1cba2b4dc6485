// Unary math: Abs Neg Sign Sqrt Reciprocal Exp Log Erf, rounding (Floor Ceil Round), the
// trigonometric and hyperbolic functions, and the IsNaN/IsInf predicates: the op structs and the
// list of kernels, built on a map policy (unary_common.h). unary_math.cc registers the list on
// ReferenceMap as the reference kernels; backends/cpu/unary.cc registers its vectorized ones.
//
// Float32 (and float16/bfloat16, converted) go through the vector forms of unary_common.h; double
// uses libm; Abs/Neg/Sign also take every integer type.
#pragma once

#include <cmath>

#include "ops/unary/unary_common.h"

namespace reforge::ops::unary {

struct AbsOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return vabs(x);
  }
  template <typename T>
  T scalar(T x) const {
    if constexpr (std::is_floating_point_v<T>)
      return std::fabs(x);
    else if constexpr (std::is_signed_v<T>)
      return x < 0 ? wrapping_neg(x) : x;
    else
      return x;
  }
};

struct NegOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return -x;
  }
  template <typename T>
  T scalar(T x) const {
    if constexpr (std::is_floating_point_v<T>)
      return -x;
    else
      return wrapping_neg(x);
  }
};

// -1, 0 or 1; NaN stays NaN (as numpy.sign), zero keeps its sign.
struct SignOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return x > 0.0f ? splat<V>(1.0f) : (x < 0.0f ? splat<V>(-1.0f) : x);
  }
  template <typename T>
  T scalar(T x) const {
    if constexpr (std::is_floating_point_v<T>)
      return x > 0 ? T(1) : (x < 0 ? T(-1) : x);
    else if constexpr (std::is_signed_v<T>)
      return static_cast<T>((x > 0) - (x < 0));
    else
      return static_cast<T>(x > 0);
  }
};

struct SqrtOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return vsqrt(x);
  }
  double scalar(double x) const { return std::sqrt(x); }
};

struct ReciprocalOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return 1.0f / x;
  }
  double scalar(double x) const { return 1.0 / x; }
};

struct ExpOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return vexp(x);
  }
  double scalar(double x) const { return std::exp(x); }
};

struct LogOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return vlog(x);
  }
  double scalar(double x) const { return std::log(x); }
};

struct ErfOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return verf(x);
  }
  double scalar(double x) const { return std::erf(x); }
};

struct FloorOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return vfloor(x);
  }
  double scalar(double x) const { return std::floor(x); }
};

struct CeilOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return vceil(x);
  }
  double scalar(double x) const { return std::ceil(x); }
};

// Round half to even (ONNX Round, numpy.round): nearbyint in the default rounding mode.
struct RoundOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return vround_even(x);
  }
  double scalar(double x) const { return std::nearbyint(x); }
};

// Functions without a vector form: libm for float and double alike (float uses the float
// overloads, so float16/bfloat16 compute in float).
#define REFORGE_LIBM_OP(Name, fn) \
  struct Name {                   \
    template <typename C>         \
    C scalar(C x) const {         \
      return std::fn(x);          \
    }                             \
  };
REFORGE_LIBM_OP(SinOp, sin)
REFORGE_LIBM_OP(CosOp, cos)
REFORGE_LIBM_OP(TanOp, tan)
REFORGE_LIBM_OP(AsinOp, asin)
REFORGE_LIBM_OP(AcosOp, acos)
REFORGE_LIBM_OP(AtanOp, atan)
REFORGE_LIBM_OP(SinhOp, sinh)
REFORGE_LIBM_OP(CoshOp, cosh)
REFORGE_LIBM_OP(AsinhOp, asinh)
REFORGE_LIBM_OP(AcoshOp, acosh)
REFORGE_LIBM_OP(AtanhOp, atanh)
#undef REFORGE_LIBM_OP

struct IsNaNOp {
  template <typename C>
  bool scalar(C x) const {
    return x != x;
  }
};

struct IsInfOp {
  bool negative = true;
  bool positive = true;
  template <typename C>
  bool scalar(C x) const {
    return (positive && x == std::numeric_limits<C>::infinity()) ||
           (negative && x == -std::numeric_limits<C>::infinity());
  }
};

// Predicates: float input, bool output.
template <typename Op>
void run_predicate(KernelContext& ctx, const Op& op) {
  const Tensor& x = ctx.input(0);
  const std::string who = ctx.node().label();
  Tensor& y = ctx.allocate_output(0, DType::Bool, x.shape());
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        map_tensor<ReferenceMap, T, bool>(x, y, ctx.threads(), op);
      },
      who.c_str());
}

// The kernels of the ops above on map policy `Map`. IsNaN and IsInf have no vector form: their
// kernels are the same under every policy.
template <typename Map>
void unary_math_kernels(const AddUnaryKernel& add) {
  add("Abs", 1, numeric_kernel<Map, AbsOp>(), nullptr, HasVec<AbsOp>);
  add("Neg", 1, numeric_kernel<Map, NegOp>(), nullptr, HasVec<NegOp>);
  add("Sign", 9, numeric_kernel<Map, SignOp>(), nullptr, HasVec<SignOp>);
  add("Sqrt", 1, float_kernel<Map, SqrtOp>(), nullptr, HasVec<SqrtOp>);
  add("Reciprocal", 1, float_kernel<Map, ReciprocalOp>(), nullptr, HasVec<ReciprocalOp>);
  add("Exp", 1, float_kernel<Map, ExpOp>(), nullptr, HasVec<ExpOp>);
  add("Log", 1, float_kernel<Map, LogOp>(), nullptr, HasVec<LogOp>);
  add("Erf", 9, float_kernel<Map, ErfOp>(), nullptr, HasVec<ErfOp>);
  add("Floor", 1, float_kernel<Map, FloorOp>(), nullptr, HasVec<FloorOp>);
  add("Ceil", 1, float_kernel<Map, CeilOp>(), nullptr, HasVec<CeilOp>);
  add("Round", 11, float_kernel<Map, RoundOp>(), nullptr, HasVec<RoundOp>);
  add("Sin", 7, float_kernel<Map, SinOp>(), nullptr, HasVec<SinOp>);
  add("Cos", 7, float_kernel<Map, CosOp>(), nullptr, HasVec<CosOp>);
  add("Tan", 7, float_kernel<Map, TanOp>(), nullptr, HasVec<TanOp>);
  add("Asin", 7, float_kernel<Map, AsinOp>(), nullptr, HasVec<AsinOp>);
  add("Acos", 7, float_kernel<Map, AcosOp>(), nullptr, HasVec<AcosOp>);
  add("Atan", 7, float_kernel<Map, AtanOp>(), nullptr, HasVec<AtanOp>);
  add("Sinh", 9, float_kernel<Map, SinhOp>(), nullptr, HasVec<SinhOp>);
  add("Cosh", 9, float_kernel<Map, CoshOp>(), nullptr, HasVec<CoshOp>);
  add("Asinh", 9, float_kernel<Map, AsinhOp>(), nullptr, HasVec<AsinhOp>);
  add("Acosh", 9, float_kernel<Map, AcoshOp>(), nullptr, HasVec<AcoshOp>);
  add("Atanh", 9, float_kernel<Map, AtanhOp>(), nullptr, HasVec<AtanhOp>);
  add(
      "IsNaN", 9, [](KernelContext& ctx) { run_predicate(ctx, IsNaNOp{}); }, nullptr, false);
  add(
      "IsInf", 10,
      [](KernelContext& ctx) {
        run_predicate(ctx, IsInfOp{ctx.attr_int("detect_negative", 1) != 0, ctx.attr_int("detect_positive", 1) != 0});
      },
      nullptr, false);
}

}  // namespace reforge::ops::unary
