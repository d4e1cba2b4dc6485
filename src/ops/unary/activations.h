// Activation functions: Tanh Sigmoid Relu LeakyRelu Elu Selu Celu HardSigmoid HardSwish Softplus
// Softsign Gelu Mish Swish ThresholdedRelu Shrink.
//
// Forms are chosen for accuracy over the whole float range rather than copied from the spec's
// formula: exp(x) - 1 is expm1 (no cancellation near 0), Softplus is max(x, 0) +
// log1p(exp(-|x|)) (no overflow), the Gelu tails come from erfc / sigmoid instead of 1 + erf or
// 1 + tanh (which cancel for negative x).
//
// The op structs and the list of kernels, built on a map policy (unary_common.h): activations.cc
// registers the list on ReferenceMap as the reference kernels, backends/cpu/unary.cc its
// vectorized ones.
#pragma once

#include <cmath>
#include <string>

#include "ops/unary/unary_common.h"

namespace reforge::ops::unary {

struct TanhOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return vtanh(x);
  }
  double scalar(double x) const { return std::tanh(x); }
};

struct SigmoidOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return vsigmoid(x);
  }
  double scalar(double x) const { return sigmoid(x); }
};

// max(x, 0), written so that NaN propagates (as numpy.maximum).
struct ReluOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return x < 0.0f ? V{} : x;
  }
  template <typename T>
  T scalar(T x) const {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < T(0) ? T(0) : x;
  }
};

struct LeakyReluOp {
  float alpha;
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return x < 0.0f ? alpha * x : x;
  }
  double scalar(double x) const { return x < 0 ? static_cast<double>(alpha) * x : x; }
};

struct EluOp {
  float alpha;
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return x > 0.0f ? x : alpha * vexpm1(x);
  }
  double scalar(double x) const { return x > 0 ? x : static_cast<double>(alpha) * std::expm1(x); }
};

struct SeluOp {
  float alpha, gamma;
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return gamma * (x > 0.0f ? x : alpha * vexpm1(x));
  }
  double scalar(double x) const {
    return static_cast<double>(gamma) * (x > 0 ? x : static_cast<double>(alpha) * std::expm1(x));
  }
};

// max(0, x) + min(0, alpha * (exp(x / alpha) - 1)); the two parts never overlap, so it is a select.
struct CeluOp {
  float alpha;
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return x > 0.0f ? x : alpha * vexpm1(x / alpha);
  }
  double scalar(double x) const {
    double a = alpha;
    return x > 0 ? x : a * std::expm1(x / a);
  }
};

// clamp(alpha * x + beta, 0, 1), NaN kept.
struct HardSigmoidOp {
  float alpha, beta;
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    V v = alpha * x + beta;
    v = v < 0.0f ? V{} : v;
    return v > 1.0f ? splat<V>(1.0f) : v;
  }
  double scalar(double x) const {
    double v = static_cast<double>(alpha) * x + static_cast<double>(beta);
    v = v < 0 ? 0.0 : v;
    return v > 1 ? 1.0 : v;
  }
};

// x * HardSigmoid(x) with alpha = 1/6, beta = 1/2.
struct HardSwishOp {
  HardSigmoidOp hs{1.0f / 6.0f, 0.5f};
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return x * hs.vec(x);
  }
  double scalar(double x) const {
    double v = x / 6.0 + 0.5;
    v = v < 0 ? 0.0 : v;
    return x * (v > 1 ? 1.0 : v);
  }
};

struct SoftplusOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return (x < 0.0f ? V{} : x) + vlog1p(vexp(-vabs(x)));
  }
  double scalar(double x) const { return (x < 0 ? 0.0 : x) + std::log1p(std::exp(-std::fabs(x))); }
};

// x / (1 + |x|), with +-inf giving +-1 instead of inf / inf.
struct SoftsignOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    V a = vabs(x);
    return a == kInf ? vcopysign(splat<V>(1.0f), x) : x / (1.0f + a);
  }
  double scalar(double x) const { return std::isinf(x) ? std::copysign(1.0, x) : x / (1.0 + std::fabs(x)); }
};

// x * Phi(x) (approximate = 'none').
struct GeluErfOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return x * vnormal_cdf(x);
  }
  double scalar(double x) const { return x * normal_cdf(x); }
};

// 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), computed as x * sigmoid(2u): the
// same value, without the cancellation of 1 + tanh(u) for negative u.
struct GeluTanhOp {
  static constexpr double kTwoSqrt2OverPi = 1.5957691216057307;  // 2 * sqrt(2 / pi)
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return x * vsigmoid(static_cast<float>(kTwoSqrt2OverPi) * (x + 0.044715f * (x * x * x)));
  }
  double scalar(double x) const { return x * sigmoid(kTwoSqrt2OverPi * (x + 0.044715 * x * x * x)); }
};

// x * tanh(softplus(x)). With e = exp(x), tanh(log(1 + e)) = n / (n + 2) where n = e (e + 2): one
// exp, accurate for negative x; above x = 20 the factor is 1 in float and e is clamped so that
// n stays finite.
struct MishOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    V e = vexp(x > 20.0f ? splat<V>(20.0f) : x);
    V n = e * (e + 2.0f);
    return x * (n / (n + 2.0f));
  }
  double scalar(double x) const {
    double e = std::exp(x > 40.0 ? 40.0 : x);
    double n = e * (e + 2.0);
    return x * (n / (n + 2.0));
  }
};

// x * sigmoid(alpha * x) (SiLU for alpha = 1).
struct SwishOp {
  float alpha;
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return x * vsigmoid(alpha * x);
  }
  double scalar(double x) const { return x * sigmoid(static_cast<double>(alpha) * x); }
};

struct ThresholdedReluOp {
  float alpha;
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return x > alpha ? x : V{};
  }
  double scalar(double x) const { return x > static_cast<double>(alpha) ? x : 0.0; }
};

// x + bias below -lambd, x - bias above lambd, 0 between. Integer inputs compute in double and
// convert back like numpy's astype (truncation), saturating instead of overflowing.
struct ShrinkOp {
  float bias, lambd;
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    V r = x > lambd ? x - bias : V{};
    return x < -lambd ? x + bias : r;  // checked last: it wins when lambd < 0, as in the spec
  }
  template <typename T>
  T scalar(T x) const {
    const double b = bias, l = lambd, v = static_cast<double>(x);
    const double r = v < -l ? v + b : (v > l ? v - b : 0.0);
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(r);
    } else {
      if (!(r > static_cast<double>(std::numeric_limits<T>::lowest()))) return std::numeric_limits<T>::lowest();
      if (!(r < static_cast<double>(std::numeric_limits<T>::max()))) return std::numeric_limits<T>::max();
      return static_cast<T>(r);
    }
  }
};

inline std::string check_gelu(const ir::Node& node) {
  std::string a = node.attr_string("approximate", "none");
  if (a == "none" || a == "tanh") return "";
  return "approximate '" + a + "' is not supported (expected 'none' or 'tanh')";
}

inline std::string check_celu(const ir::Node& node) {
  if (node.attr_float("alpha", 1.0f) == 0.0f) return "alpha = 0 is not valid (Celu divides by alpha)";
  return "";
}

template <typename Map>
void gelu_kernel(KernelContext& ctx) {
  std::string why = check_gelu(ctx.node());
  if (!why.empty()) fail(ctx.node().label(), ": ", why);
  if (ctx.attr_string("approximate", "none") == "tanh")
    float_kernel<Map, GeluTanhOp>()(ctx);
  else
    float_kernel<Map, GeluErfOp>()(ctx);
}

// The kernels of the activations on map policy `Map` (every one has a vector form).
template <typename Map>
void activation_kernels(const AddUnaryKernel& add) {
  add("Tanh", 1, float_kernel<Map, TanhOp>(), nullptr, true);
  add("Sigmoid", 1, float_kernel<Map, SigmoidOp>(), nullptr, true);
  add("Relu", 1, numeric_kernel<Map, ReluOp>(), nullptr, true);
  add("LeakyRelu", 1,
      float_kernel<Map>([](const KernelContext& c) { return LeakyReluOp{c.attr_float("alpha", 0.01f)}; }), nullptr,
      true);
  add("Elu", 1, float_kernel<Map>([](const KernelContext& c) { return EluOp{c.attr_float("alpha", 1.0f)}; }), nullptr,
      true);
  add("Selu", 1, float_kernel<Map>([](const KernelContext& c) {
        return SeluOp{c.attr_float("alpha", 1.67326319217681884765625f),
                      c.attr_float("gamma", 1.05070102214813232421875f)};
      }),
      nullptr, true);
  add("Celu", 12, float_kernel<Map>([](const KernelContext& c) {
        std::string why = check_celu(c.node());
        if (!why.empty()) fail(c.node().label(), ": ", why);
        return CeluOp{c.attr_float("alpha", 1.0f)};
      }),
      check_celu, true);
  add("HardSigmoid", 1, float_kernel<Map>([](const KernelContext& c) {
        return HardSigmoidOp{c.attr_float("alpha", 0.2f), c.attr_float("beta", 0.5f)};
      }),
      nullptr, true);
  add("HardSwish", 14, float_kernel<Map, HardSwishOp>(), nullptr, true);
  add("Softplus", 1, float_kernel<Map, SoftplusOp>(), nullptr, true);
  add("Softsign", 1, float_kernel<Map, SoftsignOp>(), nullptr, true);
  add("Gelu", 20, gelu_kernel<Map>, check_gelu, true);
  add("Mish", 18, float_kernel<Map, MishOp>(), nullptr, true);
  add("Swish", 24, float_kernel<Map>([](const KernelContext& c) { return SwishOp{c.attr_float("alpha", 1.0f)}; }),
      nullptr, true);
  add("ThresholdedRelu", 10,
      float_kernel<Map>([](const KernelContext& c) { return ThresholdedReluOp{c.attr_float("alpha", 1.0f)}; }), nullptr,
      true);
  add("Shrink", 9, numeric_kernel<Map>([](const KernelContext& c) {
        return ShrinkOp{c.attr_float("bias", 0.0f), c.attr_float("lambd", 0.5f)};
      }),
      nullptr, true);
}

}  // namespace reforge::ops::unary
