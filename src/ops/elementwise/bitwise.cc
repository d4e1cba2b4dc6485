// Bitwise ops on integers: BitShift, BitwiseAnd, BitwiseOr, BitwiseXor (broadcasting) and
// BitwiseNot.
//
// BitShift shifts X by Y bits (same element type; unsigned types from opset 11, signed ones from
// opset 28). Every shift amount is defined, unlike C++'s: a left shift wraps (the bits shifted
// past the width are dropped, so 64 << 1 in int8 is -128); a right shift of a signed value is
// arithmetic (fills with the sign bit); an amount that is negative or at least the bit width
// shifts everything out, giving 0, or -1 for a negative value shifted right.
#include <type_traits>

#include "core/dispatch.h"
#include "ops/broadcast.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

template <typename T>
T shift_value(T x, T amount, bool left) {
  using U = std::make_unsigned_t<T>;
  constexpr int64_t width = static_cast<int64_t>(sizeof(T)) * 8;
  const int64_t s = static_cast<int64_t>(amount);
  if constexpr (std::is_signed_v<T>) {
    if (s < 0 || s >= width) return left ? T(0) : (x < 0 ? T(-1) : T(0));
    if (left) return static_cast<T>(static_cast<U>(static_cast<U>(x) << s));
    return static_cast<T>(x >> s);  // arithmetic (C++20)
  } else {
    if (static_cast<U>(amount) >= static_cast<U>(width)) return T(0);
    return static_cast<T>(left ? static_cast<U>(x << amount) : static_cast<U>(x >> amount));
  }
}

std::string check_bitshift(const ir::Node& node) {
  const std::string d = node.attr_string("direction", "");
  if (d != "LEFT" && d != "RIGHT") return "direction must be 'LEFT' or 'RIGHT', got '" + d + "'";
  return "";
}

void bitshift_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const std::string what = ctx.node().label();
  REFORGE_CHECK(a.dtype() == b.dtype(), what, ": inputs have different element types (", a.describe(), " and ",
                b.describe(), ")");
  REFORGE_CHECK(is_integer(a.dtype()) && (ctx.opset() >= 28 || !is_signed(a.dtype())), what, ": element type ",
                dtype_name(a.dtype()), " is not supported at opset ", ctx.opset(),
                " (unsigned integers, and signed ones from opset 28)");
  const std::string dir = ctx.attr_string("direction", "");
  REFORGE_CHECK(dir == "LEFT" || dir == "RIGHT", what, ": direction must be 'LEFT' or 'RIGHT', got '", dir, "'");
  const bool left = dir == "LEFT";
  const BinaryShapes s = binary_shapes(ctx);
  Tensor& out = ctx.allocate_output_uninit(0, a.dtype(), s.out);
  dispatch_integer(
      a.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        broadcast_map(
            out.mutable_data<T>(), s.out, [left](T x, T y) { return shift_value<T>(x, y, left); },
            Operand{a.data<T>(), s.a}, Operand{b.data<T>(), s.b});
      },
      what.c_str());
}

template <typename Op>
void bitwise_kernel(KernelContext& ctx, Op op) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const std::string what = ctx.node().label();
  REFORGE_CHECK(a.dtype() == b.dtype(), what, ": inputs have different element types (", a.describe(), " and ",
                b.describe(), ")");
  REFORGE_CHECK(is_integer(a.dtype()), what, ": inputs must be integers, got ", a.describe());
  const BinaryShapes s = binary_shapes(ctx);
  Tensor& out = ctx.allocate_output_uninit(0, a.dtype(), s.out);
  dispatch_integer(
      a.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        broadcast_map(
            out.mutable_data<T>(), s.out, [op](T x, T y) { return static_cast<T>(op(x, y)); },
            Operand{a.data<T>(), s.a}, Operand{b.data<T>(), s.b});
      },
      what.c_str());
}

void bitwise_not_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::string what = ctx.node().label();
  REFORGE_CHECK(is_integer(x.dtype()), what, ": input must be an integer, got ", x.describe());
  Tensor& out = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  dispatch_integer(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        broadcast_map(
            out.mutable_data<T>(), x.shape(), [](T v) { return static_cast<T>(~v); }, Operand{x.data<T>(), x.shape()});
      },
      what.c_str());
}

}  // namespace

void register_bitwise_ops(OpRegistry& r) {
  r.add({"", "BitShift", 11, INT_MAX, bitshift_kernel, check_bitshift});
  r.add({"", "BitwiseAnd", 18, INT_MAX,
         [](KernelContext& c) { bitwise_kernel(c, [](auto x, auto y) { return x & y; }); }, nullptr});
  r.add({"", "BitwiseOr", 18, INT_MAX,
         [](KernelContext& c) { bitwise_kernel(c, [](auto x, auto y) { return x | y; }); }, nullptr});
  r.add({"", "BitwiseXor", 18, INT_MAX,
         [](KernelContext& c) { bitwise_kernel(c, [](auto x, auto y) { return x ^ y; }); }, nullptr});
  r.add({"", "BitwiseNot", 18, INT_MAX, bitwise_not_kernel, nullptr});
}

}  // namespace reforge::ops
