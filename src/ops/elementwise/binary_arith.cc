// Binary arithmetic: Add, Sub, Mul, Div, Mod, Pow, PRelu.
//
// Integer arithmetic wraps (two's complement) like numpy and ONNX Runtime: it is done in an
// unsigned type of at least 32 bits, because signed overflow (and uint16 * uint16 promoted to
// int) is undefined behaviour in C++. Integer division and Mod by zero give 0 instead of
// trapping, and INT_MIN / -1 wraps; ONNX leaves both undefined, so any value is conformant, but
// a crash is not. 16-bit floats compute in float and round once per result.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/dispatch.h"
#include "core/simd.h"
#include "ops/broadcast.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

template <typename T>
using wide_unsigned = std::conditional_t<(sizeof(T) <= 4), uint32_t, uint64_t>;

struct AddOp {
  template <typename C>
  C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>)
      return static_cast<C>(wide_unsigned<C>(x) + wide_unsigned<C>(y));
    else
      return x + y;
  }
};
struct SubOp {
  template <typename C>
  C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>)
      return static_cast<C>(wide_unsigned<C>(x) - wide_unsigned<C>(y));
    else
      return x - y;
  }
};
struct MulOp {
  template <typename C>
  C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>)
      return static_cast<C>(wide_unsigned<C>(x) * wide_unsigned<C>(y));
    else
      return x * y;
  }
};
// Integer division truncates toward zero (C++ and ONNX agree).
struct DivOp {
  template <typename C>
  C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) {
      if (y == 0) return 0;
      if constexpr (std::is_signed_v<C>) {
        if (y == -1) return static_cast<C>(wide_unsigned<C>(0) - wide_unsigned<C>(x));
      }
      return static_cast<C>(x / y);
    } else {
      return x / y;
    }
  }
};

// fmod=1: C fmod / %, the result takes the dividend's sign.
struct FmodOp {
  template <typename C>
  C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) {
      if (y == 0) return 0;
      if constexpr (std::is_signed_v<C>) {
        if (y == -1) return 0;
      }
      return static_cast<C>(x % y);
    } else {
      return std::fmod(x, y);
    }
  }
};
// fmod=0: Python / numpy mod, the result takes the divisor's sign. For floats this follows
// numpy's npy_divmod exactly (x mod 0 = NaN, a zero result gets the divisor's sign, a negative
// x mod +inf = +inf).
struct PyModOp {
  template <typename C>
  C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) {
      if (y == 0) return 0;
      if constexpr (std::is_signed_v<C>) {
        if (y == -1) return 0;
        C r = static_cast<C>(x % y);
        if (r != 0 && ((r < 0) != (y < 0))) r = static_cast<C>(r + y);
        return r;
      } else {
        return static_cast<C>(x % y);
      }
    } else {
      C m = std::fmod(x, y);
      if (y == 0) return m;
      if (m != 0) {
        if ((y < 0) != (m < 0)) m += y;
      } else {
        m = std::copysign(C(0), y);
      }
      return m;
    }
  }
};

// float32 runs of the four arithmetic ops, compiled per instruction set (core/simd.h). sa / sb
// are the operands' inner strides (1: advances, 0: one broadcast value), as broadcast_map gives
// them; `out` may be the same buffer as an advancing operand (in-place folds).
REFORGE_SIMD_VARIANTS(template <typename Op>, void, arith_run_f32,
                      (float* out, int64_t n, int64_t sa, int64_t sb, const float* a, const float* b, Op op),
                      (out, n, sa, sb, a, b, op), {
                        if (sa == 1 && sb == 1) {
                          for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
                        } else if (sa == 1) {
                          const float y = b[0];
                          for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], y);
                        } else if (sb == 1) {
                          const float x = a[0];
                          for (int64_t i = 0; i < n; ++i) out[i] = op(x, b[i]);
                        } else {
                          const float v = op(a[0], b[0]);
                          for (int64_t i = 0; i < n; ++i) out[i] = v;
                        }
                      })

template <typename Op>
constexpr bool kVectorArith =
    std::is_same_v<Op, AddOp> || std::is_same_v<Op, SubOp> || std::is_same_v<Op, MulOp> || std::is_same_v<Op, DivOp>;

// Runs a same-type binary op over inputs 0 and 1, writing output 0 of the same type.
template <typename Op>
void same_type_binary(KernelContext& ctx, Op op) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  REFORGE_CHECK(a.dtype() == b.dtype(), ctx.node().label(), ": inputs have different element types (", a.describe(),
                " and ", b.describe(), ")");
  const BinaryShapes s = binary_shapes(ctx);
  const std::string what = ctx.node().label();
  dispatch_numeric(
      a.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        Tensor& out = ctx.allocate_output_uninit(0, dtype_of<T>, s.out);
        if constexpr (std::is_same_v<T, float> && kVectorArith<Op>) {
          const BroadcastLayout<2> L(s.out, {s.a, s.b});
          float* po = out.mutable_data<float>();
          const float* pa = a.data<float>();
          const float* pb = b.data<float>();
          for_each_run(L, [&](int64_t o, const std::array<int64_t, 2>& off, int64_t n) {
            arith_run_f32(po + o, n, L.inner_stride[0], L.inner_stride[1], pa + off[0], pb + off[1], op);
          });
          return;
        }
        broadcast_map(
            out.mutable_data<T>(), s.out, [op](T x, T y) { return from_compute<T>(op(to_compute(x), to_compute(y))); },
            Operand{a.data<T>(), s.a}, Operand{b.data<T>(), s.b});
      },
      what.c_str());
}

void add_kernel(KernelContext& ctx) { same_type_binary(ctx, AddOp{}); }
void sub_kernel(KernelContext& ctx) { same_type_binary(ctx, SubOp{}); }
void mul_kernel(KernelContext& ctx) { same_type_binary(ctx, MulOp{}); }
void div_kernel(KernelContext& ctx) { same_type_binary(ctx, DivOp{}); }

void mod_kernel(KernelContext& ctx) {
  if (ctx.attr_int("fmod", 0) != 0)
    same_type_binary(ctx, FmodOp{});
  else
    same_type_binary(ctx, PyModOp{});
}

std::string mod_check(const ir::Node& node) {
  const int64_t f = node.attr_int("fmod", 0);
  if (f != 0 && f != 1) return str_cat("fmod must be 0 or 1, got ", f);
  return "";
}

// Integer power by squaring, wrapping on overflow like numpy. A negative exponent gives
// trunc(1 / x^-e): 1 for x == 1, +-1 for x == -1, 0 otherwise (x == 0 included: no trap).
template <typename T, typename E>
T int_pow(T x, E e) {
  using U = wide_unsigned<T>;
  if constexpr (std::is_signed_v<E>) {
    if (e < 0) {
      if (x == 1) return 1;
      if constexpr (std::is_signed_v<T>) {
        if (x == -1) return (e % 2 == 0) ? T(1) : T(-1);
      }
      return 0;
    }
  }
  U result = 1;
  U base = static_cast<U>(x);
  auto n = static_cast<std::make_unsigned_t<E>>(e);
  while (n) {
    if (n & 1u) result *= base;
    base *= base;
    n >>= 1;
  }
  return static_cast<T>(result);
}

// Pow: the output has the base's type (ONNX >= 12 allows a different exponent type). Float
// bases with a float32 exponent use powf; every other mix computes in double, and an integer
// base with a float exponent truncates the double result toward zero, as numpy's
// power(int, float).astype(int) does.
template <typename T, typename E>
T pow_one(T x, E e) {
  if constexpr (std::is_integral_v<T> && std::is_integral_v<E>) {
    return int_pow(x, e);
  } else {
    using CT = compute_t<T>;
    using CE = compute_t<E>;
    if constexpr (std::is_same_v<CT, float> && std::is_same_v<CE, float>) {
      return from_compute<T>(std::pow(to_compute(x), to_compute(e)));
    } else {
      const double r = std::pow(static_cast<double>(to_compute(x)), static_cast<double>(to_compute(e)));
      if constexpr (std::is_integral_v<T>) {
        if (!(r > -9.3e18 && r < 9.3e18)) return 0;  // NaN or out of int64 range: no UB
        return static_cast<T>(static_cast<int64_t>(r));
      } else {
        return from_compute<T>(static_cast<CT>(r));
      }
    }
  }
}

// x^e for the exponents exporters write as constants (x^2 in every RMSNorm/LayerNorm variance,
// x^0.5, x^3 in tanh-GELU), float32: a multiply instead of powf. x * x and x * x * x differ
// from a correctly rounded pow by at most one and two roundings; x^0.5 is sqrt with pow's
// special cases (-0 -> +0, -inf -> +inf).
enum class PowKind { Zero, One, Square, Cube, Sqrt, Inverse, General };

PowKind pow_kind(float e) {
  if (e == 0.0f) return PowKind::Zero;
  if (e == 1.0f) return PowKind::One;
  if (e == 2.0f) return PowKind::Square;
  if (e == 3.0f) return PowKind::Cube;
  if (e == 0.5f) return PowKind::Sqrt;
  if (e == -1.0f) return PowKind::Inverse;
  return PowKind::General;
}

REFORGE_SIMD_VARIANTS(, void, pow_const_f32, (const float* x, float* y, int64_t n, PowKind k), (x, y, n, k), {
  switch (k) {
    case PowKind::Zero:
      for (int64_t i = 0; i < n; ++i) y[i] = 1.0f;
      break;
    case PowKind::One:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i];
      break;
    case PowKind::Square:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i];
      break;
    case PowKind::Cube:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i] * x[i];
      break;
    case PowKind::Inverse:
      for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / x[i];
      break;
    case PowKind::Sqrt:
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        y[i] =
            v == -std::numeric_limits<float>::infinity() ? std::numeric_limits<float>::infinity() : std::sqrt(v) + 0.0f;
      }
      break;
    case PowKind::General:
      for (int64_t i = 0; i < n; ++i) y[i] = std::pow(x[i], 2.0f);  // unreachable: callers filter General
      break;
  }
})

// Pow with a float32 base and a one-element float exponent of a fast kind. Returns false when
// the node does not qualify (the generic kernel runs).
bool pow_const_fast(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.dtype() != DType::Float32 || b.numel() != 1 || b.rank() > a.rank()) return false;
  if (ctx.opset() < 7 && ctx.attr_int("broadcast", 0) != 0) return false;
  float e;
  if (b.dtype() == DType::Float32)
    e = b.data<float>()[0];
  else if (b.dtype() == DType::Float64)
    e = static_cast<float>(b.data<double>()[0]);
  else
    return false;
  if (b.dtype() == DType::Float64 && static_cast<double>(e) != b.data<double>()[0]) return false;
  const PowKind k = pow_kind(e);
  if (k == PowKind::General) return false;
  Tensor& y = ctx.allocate_output_uninit(0, DType::Float32, a.shape());
  const float* px = a.data<float>();
  float* py = y.mutable_data<float>();
  const int64_t n = a.numel();
  constexpr int64_t kChunk = int64_t{1} << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t c = 0; c < chunks; ++c)
    pow_const_f32(px + c * kChunk, py + c * kChunk, std::min(kChunk, n - c * kChunk), k);
  return true;
}

void pow_kernel(KernelContext& ctx) {
  if (pow_const_fast(ctx)) return;
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const std::string what = ctx.node().label();
  REFORGE_CHECK(ctx.opset() >= 12 || a.dtype() == b.dtype(), what, ": inputs have different element types (",
                a.describe(), " and ", b.describe(), "), allowed only from opset 12");
  const BinaryShapes s = binary_shapes(ctx);
  // ONNX lists int32/int64 and float bases; the other integer widths work the same way.
  dispatch_numeric(
      a.dtype(),
      [&](auto btag) {
        using T = typename decltype(btag)::type;
        dispatch_numeric(
            b.dtype(),
            [&](auto etag) {
              using E = typename decltype(etag)::type;
              Tensor& out = ctx.allocate_output_uninit(0, dtype_of<T>, s.out);
              broadcast_map(
                  out.mutable_data<T>(), s.out, [](T x, E e) { return pow_one(x, e); }, Operand{a.data<T>(), s.a},
                  Operand{b.data<E>(), s.b});
            },
            what.c_str());
      },
      what.c_str());
}

// PRelu: y = x < 0 ? slope * x : x, slope broadcast unidirectionally to x's shape.
void prelu_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& slope = ctx.input(1);
  const std::string what = ctx.node().label();
  REFORGE_CHECK(x.dtype() == slope.dtype(), what, ": X and slope have different element types (", x.describe(), " and ",
                slope.describe(), ")");
  const Shape& ss = slope.shape();
  REFORGE_CHECK(broadcasts_to(ss, x.shape()), what, ": slope of shape ", shape_str(ss),
                " does not broadcast to X of shape ", shape_str(x.shape()));
  dispatch_numeric(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        Tensor& out = ctx.allocate_output(0, dtype_of<T>, x.shape());
        broadcast_map(
            out.mutable_data<T>(), x.shape(),
            [](T v, T s) {
              auto c = to_compute(v);
              if (c < decltype(c)(0)) return from_compute<T>(MulOp{}(c, to_compute(s)));
              return v;
            },
            Operand{x.data<T>(), x.shape()}, Operand{slope.data<T>(), ss});
      },
      what.c_str());
}

}  // namespace

void register_binary_arith_ops(OpRegistry& r) {
  r.add({"", "Add", 1, INT_MAX, add_kernel, nullptr});
  r.add({"", "Sub", 1, INT_MAX, sub_kernel, nullptr});
  r.add({"", "Mul", 1, INT_MAX, mul_kernel, nullptr});
  r.add({"", "Div", 1, INT_MAX, div_kernel, nullptr});
  r.add({"", "Mod", 10, INT_MAX, mod_kernel, mod_check});
  r.add({"", "Pow", 1, INT_MAX, pow_kernel, nullptr});
  r.add({"", "PRelu", 1, INT_MAX, prelu_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kWeight}});
}

}  // namespace reforge::ops
