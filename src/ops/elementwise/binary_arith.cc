// Binary arithmetic: Add, Sub, Mul, Div, Mod, Pow, PRelu.
//
// Integer arithmetic wraps (two's complement) like numpy and ONNX Runtime: it is done in an
// unsigned type of at least 32 bits, because signed overflow (and uint16 * uint16 promoted to
// int) is undefined behaviour in C++. Integer division and Mod by zero give 0 instead of
// trapping, and INT_MIN / -1 wraps; ONNX leaves both undefined, so any value is conformant, but
// a crash is not. 16-bit floats compute in float and round once per result. These are the
// reference kernels; the CPU backend runs float32 Add/Sub/Mul/Div and Pow by a constant
// exponent on per-instruction-set loops (backends/cpu/arithmetic.cc).
#include "ops/elementwise/binary_arith.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/dispatch.h"
#include "ops/broadcast.h"
#include "ops/elementwise/mod_math.h"
#include "ops/elementwise/select_setup.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

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

void pow_kernel(KernelContext& ctx) {
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
  prelu_check(ctx);
  const Shape& ss = slope.shape();
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
