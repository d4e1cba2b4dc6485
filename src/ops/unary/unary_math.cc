// Unary math: Abs Neg Sign Sqrt Reciprocal Exp Log Erf, rounding (Floor Ceil Round), the
// trigonometric and hyperbolic functions, and the IsNaN/IsInf predicates.
//
// Float32 (and float16/bfloat16, converted) go through the SIMD forms of unary_common.h; double
// uses libm; Abs/Neg/Sign also take every integer type.
#include <cmath>

#include "ops/unary/unary_common.h"

namespace reforge::ops {
namespace {

using namespace unary;

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

// Functions without a SIMD form: libm for float and double alike (float uses the float
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
        map_tensor<T, bool>(x, y, ctx.threads(), op);
      },
      who.c_str());
}

}  // namespace

void register_unary_math_ops(OpRegistry& r) {
  r.add({"", "Abs", 1, INT_MAX, numeric_kernel<AbsOp>(), nullptr});
  r.add({"", "Neg", 1, INT_MAX, numeric_kernel<NegOp>(), nullptr});
  r.add({"", "Sign", 9, INT_MAX, numeric_kernel<SignOp>(), nullptr});
  r.add({"", "Sqrt", 1, INT_MAX, float_kernel<SqrtOp>(), nullptr});
  r.add({"", "Reciprocal", 1, INT_MAX, float_kernel<ReciprocalOp>(), nullptr});
  r.add({"", "Exp", 1, INT_MAX, float_kernel<ExpOp>(), nullptr});
  r.add({"", "Log", 1, INT_MAX, float_kernel<LogOp>(), nullptr});
  r.add({"", "Erf", 9, INT_MAX, float_kernel<ErfOp>(), nullptr});
  r.add({"", "Floor", 1, INT_MAX, float_kernel<FloorOp>(), nullptr});
  r.add({"", "Ceil", 1, INT_MAX, float_kernel<CeilOp>(), nullptr});
  r.add({"", "Round", 11, INT_MAX, float_kernel<RoundOp>(), nullptr});
  r.add({"", "Sin", 7, INT_MAX, float_kernel<SinOp>(), nullptr});
  r.add({"", "Cos", 7, INT_MAX, float_kernel<CosOp>(), nullptr});
  r.add({"", "Tan", 7, INT_MAX, float_kernel<TanOp>(), nullptr});
  r.add({"", "Asin", 7, INT_MAX, float_kernel<AsinOp>(), nullptr});
  r.add({"", "Acos", 7, INT_MAX, float_kernel<AcosOp>(), nullptr});
  r.add({"", "Atan", 7, INT_MAX, float_kernel<AtanOp>(), nullptr});
  r.add({"", "Sinh", 9, INT_MAX, float_kernel<SinhOp>(), nullptr});
  r.add({"", "Cosh", 9, INT_MAX, float_kernel<CoshOp>(), nullptr});
  r.add({"", "Asinh", 9, INT_MAX, float_kernel<AsinhOp>(), nullptr});
  r.add({"", "Acosh", 9, INT_MAX, float_kernel<AcoshOp>(), nullptr});
  r.add({"", "Atanh", 9, INT_MAX, float_kernel<AtanhOp>(), nullptr});
  r.add({"", "IsNaN", 9, INT_MAX, [](KernelContext& ctx) { run_predicate(ctx, IsNaNOp{}); }, nullptr});
  r.add(
      {"", "IsInf", 10, INT_MAX,
       [](KernelContext& ctx) {
         run_predicate(ctx, IsInfOp{ctx.attr_int("detect_negative", 1) != 0, ctx.attr_int("detect_positive", 1) != 0});
       },
       nullptr});
}

}  // namespace reforge::ops
