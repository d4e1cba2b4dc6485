// Unary ops on the GPU: the math functions (Abs Neg Sign Sqrt Reciprocal Exp Log Erf Floor Ceil
// Round, trigonometric and hyperbolic), the predicates IsNaN IsInf and Not, the activations
// (Tanh Sigmoid Relu LeakyRelu Elu Selu Celu HardSigmoid HardSwish Softplus Softsign Gelu Mish
// Swish ThresholdedRelu Shrink) and Clip, with the semantics of the CPU reference kernels
// (src/ops/unary): the same formulas (expm1 for Elu/Selu/Celu, the overflow-free Softplus, the
// erfc and sigmoid forms of Gelu), NaN propagated, integer Abs/Neg wrapping, Shrink on integers
// saturating. float32 and the 16-bit floats compute in float32 with CUDA's math library, float64
// in double. One grid-stride kernel per (op, type); Clip reads its opset-11 bound inputs on the
// device, so no copy to the host is needed.
#include <string>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"
#include "ops/unary/clip_setup.h"

namespace reforge::cuda {

namespace {

// float and double overloads of CUDA's math functions.
#define REFORGE_MATH(name, ffn, dfn)                                \
  __device__ __forceinline__ float name(float x) { return ffn(x); } \
  __device__ __forceinline__ double name(double x) { return dfn(x); }
REFORGE_MATH(m_sqrt, sqrtf, sqrt)
REFORGE_MATH(m_exp, expf, exp)
REFORGE_MATH(m_expm1, expm1f, expm1)
REFORGE_MATH(m_log, logf, log)
REFORGE_MATH(m_log1p, log1pf, log1p)
REFORGE_MATH(m_erf, erff, erf)
REFORGE_MATH(m_erfc, erfcf, erfc)
REFORGE_MATH(m_floor, floorf, floor)
REFORGE_MATH(m_ceil, ceilf, ceil)
REFORGE_MATH(m_rint, rintf, rint)
REFORGE_MATH(m_fabs, fabsf, fabs)
REFORGE_MATH(m_sin, sinf, sin)
REFORGE_MATH(m_cos, cosf, cos)
REFORGE_MATH(m_tan, tanf, tan)
REFORGE_MATH(m_asin, asinf, asin)
REFORGE_MATH(m_acos, acosf, acos)
REFORGE_MATH(m_atan, atanf, atan)
REFORGE_MATH(m_sinh, sinhf, sinh)
REFORGE_MATH(m_cosh, coshf, cosh)
REFORGE_MATH(m_tanh, tanhf, tanh)
REFORGE_MATH(m_asinh, asinhf, asinh)
REFORGE_MATH(m_acosh, acoshf, acosh)
REFORGE_MATH(m_atanh, atanhf, atanh)
#undef REFORGE_MATH

template <typename T>
inline constexpr bool is_float_dev = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                     std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <typename C>
__device__ __forceinline__ C wrapping_neg(C v) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(static_cast<U>(U{0} - static_cast<U>(v)));
}

// 1 / (1 + exp(-x)) from exp(-|x|), which never overflows; e / (1 + e) on the negative side.
template <typename C>
__device__ __forceinline__ C sigmoid(C x) {
  const C e = m_exp(-m_fabs(x));
  const C s = C(1) / (C(1) + e);
  return x < C(0) ? e * s : s;
}

// ---- the op functors: operator()(C) on the compute type ----------------------------------

#define REFORGE_FLOAT_OP(Name, expr)     \
  struct Name {                          \
    template <typename C>                \
    __device__ C operator()(C x) const { \
      return expr;                       \
    }                                    \
  };
REFORGE_FLOAT_OP(SqrtF, m_sqrt(x))
REFORGE_FLOAT_OP(ReciprocalF, C(1) / x)
REFORGE_FLOAT_OP(ExpF, m_exp(x))
REFORGE_FLOAT_OP(LogF, m_log(x))
REFORGE_FLOAT_OP(ErfF, m_erf(x))
REFORGE_FLOAT_OP(FloorF, m_floor(x))
REFORGE_FLOAT_OP(CeilF, m_ceil(x))
REFORGE_FLOAT_OP(RoundF, m_rint(x))  // half to even in the default rounding mode
REFORGE_FLOAT_OP(SinF, m_sin(x))
REFORGE_FLOAT_OP(CosF, m_cos(x))
REFORGE_FLOAT_OP(TanF, m_tan(x))
REFORGE_FLOAT_OP(AsinF, m_asin(x))
REFORGE_FLOAT_OP(AcosF, m_acos(x))
REFORGE_FLOAT_OP(AtanF, m_atan(x))
REFORGE_FLOAT_OP(SinhF, m_sinh(x))
REFORGE_FLOAT_OP(CoshF, m_cosh(x))
REFORGE_FLOAT_OP(AsinhF, m_asinh(x))
REFORGE_FLOAT_OP(AcoshF, m_acosh(x))
REFORGE_FLOAT_OP(AtanhF, m_atanh(x))
REFORGE_FLOAT_OP(TanhF, m_tanh(x))
REFORGE_FLOAT_OP(SigmoidF, sigmoid(x))
// max(x, 0) + log1p(exp(-|x|)): no overflow for large x.
REFORGE_FLOAT_OP(SoftplusF, (x < C(0) ? C(0) : x) + m_log1p(m_exp(-m_fabs(x))))
// x / (1 + |x|), +-inf giving +-1.
REFORGE_FLOAT_OP(SoftsignF, isinf(x) ? (x < C(0) ? C(-1) : C(1)) : x / (C(1) + m_fabs(x)))
// x * Phi(x) with Phi(x) = erfc(-x / sqrt(2)) / 2 (no cancellation in the negative tail).
REFORGE_FLOAT_OP(GeluErfF, x*(C(0.5) * m_erfc(-x * C(0.70710678118654752440))))
// 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), as x * sigmoid(2u).
REFORGE_FLOAT_OP(GeluTanhF, x* sigmoid(C(1.5957691216057307) * (x + C(0.044715) * (x * x * x))))
#undef REFORGE_FLOAT_OP

// x * tanh(softplus(x)) = x * n / (n + 2) with n = e (e + 2), e = exp(x); e is clamped (x <= 20
// in float, 40 in double) where the factor is already 1, so n stays finite.
struct MishF {
  template <typename C>
  __device__ C operator()(C x) const {
    const C cap = std::is_same_v<C, float> ? C(20) : C(40);
    const C e = m_exp(x > cap ? cap : x);
    const C n = e * (e + C(2));
    return x * (n / (n + C(2)));
  }
};

struct AbsF {
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return m_fabs(x);
    else if constexpr (std::is_signed_v<C>)
      return x < 0 ? wrapping_neg(x) : x;
    else
      return x;
  }
};
struct NegF {
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return -x;
    else
      return wrapping_neg(x);
  }
};
// -1, 0 or 1; NaN stays NaN, zero keeps its sign.
struct SignF {
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      return x > C(0) ? C(1) : (x < C(0) ? C(-1) : x);
    else if constexpr (std::is_signed_v<C>)
      return static_cast<C>((x > 0) - (x < 0));
    else
      return static_cast<C>(x > 0);
  }
};
// max(x, 0) with NaN propagated.
struct ReluF {
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>)
      return x;
    else
      return x < C(0) ? C(0) : x;
  }
};
struct LeakyReluF {
  float alpha;
  template <typename C>
  __device__ C operator()(C x) const {
    return x < C(0) ? C(alpha) * x : x;
  }
};
struct EluF {
  float alpha;
  template <typename C>
  __device__ C operator()(C x) const {
    return x > C(0) ? x : C(alpha) * m_expm1(x);
  }
};
struct SeluF {
  float alpha, gamma;
  template <typename C>
  __device__ C operator()(C x) const {
    return C(gamma) * (x > C(0) ? x : C(alpha) * m_expm1(x));
  }
};
struct CeluF {
  float alpha;
  template <typename C>
  __device__ C operator()(C x) const {
    return x > C(0) ? x : C(alpha) * m_expm1(x / C(alpha));
  }
};
// clamp(alpha * x + beta, 0, 1), NaN kept.
struct HardSigmoidF {
  float alpha, beta;
  template <typename C>
  __device__ C operator()(C x) const {
    C v = C(alpha) * x + C(beta);
    v = v < C(0) ? C(0) : v;
    return v > C(1) ? C(1) : v;
  }
};
// x * HardSigmoid(x) with alpha = 1/6, beta = 1/2.
struct HardSwishF {
  template <typename C>
  __device__ C operator()(C x) const {
    C v = std::is_same_v<C, float> ? C(1.0f / 6.0f) * x + C(0.5) : x / C(6) + C(0.5);
    v = v < C(0) ? C(0) : v;
    return x * (v > C(1) ? C(1) : v);
  }
};
struct SwishF {
  float alpha;
  template <typename C>
  __device__ C operator()(C x) const {
    return x * sigmoid(C(alpha) * x);
  }
};
struct ThresholdedReluF {
  float alpha;
  template <typename C>
  __device__ C operator()(C x) const {
    return x > C(alpha) ? x : C(0);
  }
};
// x + bias below -lambd, x - bias above lambd, 0 between (the first wins when lambd < 0).
// Integers compute in double and convert back truncating, saturated to the type's range.
struct ShrinkF {
  float bias, lambd;
  template <typename C>
  __device__ C operator()(C x) const {
    if constexpr (std::is_same_v<C, float>) {
      const C r = x > lambd ? x - bias : C(0);
      return x < -lambd ? x + bias : r;
    } else {
      const double b = bias, l = lambd, v = static_cast<double>(x);
      const double r = v < -l ? v + b : (v > l ? v - b : 0.0);
      if constexpr (std::is_floating_point_v<C>) {
        return static_cast<C>(r);
      } else {
        const double lo = static_cast<double>(std::numeric_limits<C>::lowest());
        const double hi = static_cast<double>(std::numeric_limits<C>::max());
        if (!(r > lo)) return std::numeric_limits<C>::lowest();
        if (!(r < hi)) return std::numeric_limits<C>::max();
        return static_cast<C>(r);
      }
    }
  }
};

struct IsNaNF {
  template <typename C>
  __device__ bool operator()(C x) const {
    return x != x;
  }
};
struct IsInfF {
  bool negative, positive;
  template <typename C>
  __device__ bool operator()(C x) const {
    return (positive && isinf(x) && x > C(0)) || (negative && isinf(x) && x < C(0));
  }
};

// ---- launch ------------------------------------------------------------------------------

template <typename In, typename Out, typename Op>
__global__ void map_kernel(const In* x, Out* y, int64_t n, Op op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = store_c<Out>(op(load_c(x, i)));
}

template <typename In, typename Out, typename Op>
void launch_map(const Tensor& x, Tensor& y, const Op& op, const std::string& where) {
  const int64_t n = x.numel();
  if (n == 0) return;
  map_kernel<In, Out, Op><<<grid_for(n), 256, 0, stream()>>>(x.data<In>(), y.mutable_data<Out>(), n, op);
  check_launch(where.c_str());
}

// The CPU's dispatch_float / dispatch_numeric error for element types the op does not take.
void require_type(DType t, bool numeric, const std::string& who) {
  const bool ok = is_float(t) || (numeric && t != DType::Bool);
  if (!ok) fail(who, " does not support element type ", dtype_name(t));
}

// Y = op(X), Y of X's type. `Numeric`: integers too (else floats only). `make` builds the op
// from the kernel context (attributes).
template <bool Numeric, typename MakeOp>
ops::KernelFn same_type(MakeOp make) {
  return [make](ops::KernelContext& ctx) {
    const Tensor& x = ctx.input(0);
    const std::string who = ctx.node().label();
    require_type(x.dtype(), Numeric, who);
    const auto op = make(ctx);
    Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
    dispatch_device(x.dtype(), who.c_str(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool> || (!Numeric && !is_float_dev<T>))
        fail(who, " does not support element type ", dtype_name(x.dtype()));
      else
        launch_map<T, T>(x, y, op, who);
    });
  };
}
template <typename Op>
ops::KernelFn float_op() {
  return same_type<false>([](const ops::KernelContext&) { return Op{}; });
}
template <typename Op>
ops::KernelFn numeric_op() {
  return same_type<true>([](const ops::KernelContext&) { return Op{}; });
}

// Float input, bool output.
template <typename Op>
void run_predicate(ops::KernelContext& ctx, const Op& op) {
  const Tensor& x = ctx.input(0);
  const std::string who = ctx.node().label();
  require_type(x.dtype(), false, who);
  Tensor& y = ctx.allocate_output_uninit(0, DType::Bool, x.shape());
  dispatch_device(
      x.dtype(), who.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (is_float_dev<T>) launch_map<T, bool>(x, y, op, who);
      },
      true);
}

// Not reads bool bytes and tests them against 0 (a byte other than 0/1 is still "true").
struct NotF {
  __device__ bool operator()(uint8_t v) const { return v == 0; }
};
void not_kernel(ops::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(x.dtype() == DType::Bool, ctx.node().label(), ": input must be bool, got ", x.describe());
  Tensor& y = ctx.allocate_output_uninit(0, DType::Bool, x.shape());
  launch_map<uint8_t, bool>(x, y, NotF{}, ctx.node().label());
}

std::string check_gelu(const ir::Node& node) {
  std::string a = node.attr_string("approximate", "none");
  if (a == "none" || a == "tanh") return "";
  return "approximate '" + a + "' is not supported (expected 'none' or 'tanh')";
}

std::string check_celu(const ir::Node& node) {
  if (node.attr_float("alpha", 1.0f) == 0.0f) return "alpha = 0 is not valid (Celu divides by alpha)";
  return "";
}

void gelu_kernel(ops::KernelContext& ctx) {
  const std::string why = check_gelu(ctx.node());
  if (!why.empty()) fail(ctx.node().label(), ": ", why);
  if (ctx.attr_string("approximate", "none") == "tanh")
    float_op<GeluTanhF>()(ctx);
  else
    float_op<GeluErfF>()(ctx);
}

// ---- Clip --------------------------------------------------------------------------------

// min(max(x, lo), hi); NaN in x stays NaN; lo > hi gives hi. Bounds come from the attributes
// (lo, hi) or, where the pointers are set, from one-element device tensors of x's type.
template <typename T>
__global__ void clip_kernel(const T* x, T* y, int64_t n, compute_t<T> lo, compute_t<T> hi, const T* lo_p,
                            const T* hi_p) {
  using C = compute_t<T>;
  if (lo_p) lo = load_c(lo_p, 0);
  if (hi_p) hi = load_c(hi_p, 0);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const C v0 = load_c(x, i);
    const C v = v0 < lo ? lo : v0;
    y[i] = store_c<T>(hi < v ? hi : v);
  }
}

void clip(ops::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::string who = ctx.node().label();
  require_type(x.dtype(), true, who);
  const void* lo_p = nullptr;
  const void* hi_p = nullptr;
  if (ctx.opset() >= 11) {
    if (const Tensor* b = ops::clip_bound_input(ctx, 1, "min")) lo_p = b->raw();
    if (const Tensor* b = ops::clip_bound_input(ctx, 2, "max")) hi_p = b->raw();
  }
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  dispatch_device(x.dtype(), who.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      fail(who, " does not support element type bool");
    } else {
      C lo, hi;
      ops::clip_attribute_bounds<C>(ctx, lo, hi);
      const int64_t n = x.numel();
      if (n == 0) return;
      clip_kernel<T><<<grid_for(n), 256, 0, stream()>>>(x.data<T>(), y.mutable_data<T>(), n, lo, hi,
                                                        static_cast<const T*>(lo_p), static_cast<const T*>(hi_p));
      check_launch(who.c_str());
    }
  });
}

}  // namespace

void register_unary_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "Abs", numeric_op<AbsF>());
  add_kernel(r, "", "Neg", numeric_op<NegF>());
  add_kernel(r, "", "Sign", numeric_op<SignF>());
  add_kernel(r, "", "Sqrt", float_op<SqrtF>());
  add_kernel(r, "", "Reciprocal", float_op<ReciprocalF>());
  add_kernel(r, "", "Exp", float_op<ExpF>());
  add_kernel(r, "", "Log", float_op<LogF>());
  add_kernel(r, "", "Erf", float_op<ErfF>());
  add_kernel(r, "", "Floor", float_op<FloorF>());
  add_kernel(r, "", "Ceil", float_op<CeilF>());
  add_kernel(r, "", "Round", float_op<RoundF>());
  add_kernel(r, "", "Sin", float_op<SinF>());
  add_kernel(r, "", "Cos", float_op<CosF>());
  add_kernel(r, "", "Tan", float_op<TanF>());
  add_kernel(r, "", "Asin", float_op<AsinF>());
  add_kernel(r, "", "Acos", float_op<AcosF>());
  add_kernel(r, "", "Atan", float_op<AtanF>());
  add_kernel(r, "", "Sinh", float_op<SinhF>());
  add_kernel(r, "", "Cosh", float_op<CoshF>());
  add_kernel(r, "", "Asinh", float_op<AsinhF>());
  add_kernel(r, "", "Acosh", float_op<AcoshF>());
  add_kernel(r, "", "Atanh", float_op<AtanhF>());
  add_kernel(r, "", "IsNaN", [](ops::KernelContext& ctx) { run_predicate(ctx, IsNaNF{}); });
  add_kernel(r, "", "IsInf", [](ops::KernelContext& ctx) {
    run_predicate(ctx, IsInfF{ctx.attr_int("detect_negative", 1) != 0, ctx.attr_int("detect_positive", 1) != 0});
  });
  add_kernel(r, "", "Not", not_kernel);

  add_kernel(r, "", "Tanh", float_op<TanhF>());
  add_kernel(r, "", "Sigmoid", float_op<SigmoidF>());
  add_kernel(r, "", "Relu", numeric_op<ReluF>());
  add_kernel(r, "", "LeakyRelu",
             same_type<false>([](const ops::KernelContext& c) { return LeakyReluF{c.attr_float("alpha", 0.01f)}; }));
  add_kernel(r, "", "Elu",
             same_type<false>([](const ops::KernelContext& c) { return EluF{c.attr_float("alpha", 1.0f)}; }));
  add_kernel(r, "", "Selu", same_type<false>([](const ops::KernelContext& c) {
               return SeluF{c.attr_float("alpha", 1.67326319217681884765625f),
                            c.attr_float("gamma", 1.05070102214813232421875f)};
             }));
  add_kernel(r, "", "Celu", same_type<false>([](const ops::KernelContext& c) {
               const std::string why = check_celu(c.node());
               if (!why.empty()) fail(c.node().label(), ": ", why);
               return CeluF{c.attr_float("alpha", 1.0f)};
             }),
             check_celu);
  add_kernel(r, "", "HardSigmoid", same_type<false>([](const ops::KernelContext& c) {
               return HardSigmoidF{c.attr_float("alpha", 0.2f), c.attr_float("beta", 0.5f)};
             }));
  add_kernel(r, "", "HardSwish", float_op<HardSwishF>());
  add_kernel(r, "", "Softplus", float_op<SoftplusF>());
  add_kernel(r, "", "Softsign", float_op<SoftsignF>());
  add_kernel(r, "", "Gelu", gelu_kernel, check_gelu);
  add_kernel(r, "", "Mish", float_op<MishF>());
  add_kernel(r, "", "Swish",
             same_type<false>([](const ops::KernelContext& c) { return SwishF{c.attr_float("alpha", 1.0f)}; }));
  add_kernel(r, "", "ThresholdedRelu", same_type<false>([](const ops::KernelContext& c) {
               return ThresholdedReluF{c.attr_float("alpha", 1.0f)};
             }));
  add_kernel(r, "", "Shrink", same_type<true>([](const ops::KernelContext& c) {
               return ShrinkF{c.attr_float("bias", 0.0f), c.attr_float("lambd", 0.5f)};
             }));
  add_kernel(r, "", "Clip", clip);
}

}  // namespace reforge::cuda
