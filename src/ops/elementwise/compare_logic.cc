// Comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual), boolean logic (And, Or, Xor,
// Not) and Where.
//
// Bool tensors are read as bytes and tested with != 0: a bool input comes from a file or a
// caller's buffer, and loading a byte other than 0/1 as C++ bool is undefined behaviour.
// Comparisons involving NaN are false (Equal(NaN, NaN) too), as in IEEE and numpy.
#include <type_traits>

#include "core/dispatch.h"
#include "ops/broadcast.h"
#include "ops/elementwise/select_setup.h"
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::ops {
namespace {

struct EqualOp {
  template <typename C>
  bool operator()(C x, C y) const {
    return x == y;
  }
};
struct LessOp {
  template <typename C>
  bool operator()(C x, C y) const {
    return x < y;
  }
};
struct GreaterOp {
  template <typename C>
  bool operator()(C x, C y) const {
    return x > y;
  }
};
struct LessEqualOp {
  template <typename C>
  bool operator()(C x, C y) const {
    return x <= y;
  }
};
struct GreaterEqualOp {
  template <typename C>
  bool operator()(C x, C y) const {
    return x >= y;
  }
};

// Compares inputs 0 and 1 (same type, any supported type) into a bool output.
template <typename Op>
void compare_kernel(KernelContext& ctx, Op op) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const std::string what = ctx.node().label();
  REFORGE_CHECK(a.dtype() == b.dtype(), what, ": inputs have different element types (", a.describe(), " and ",
                b.describe(), ")");
  const BinaryShapes s = binary_shapes(ctx);
  Tensor& out = ctx.allocate_output(0, DType::Bool, s.out);
  bool* o = out.mutable_data<bool>();
  if (a.dtype() == DType::Bool) {
    broadcast_map(
        o, s.out, [op](uint8_t x, uint8_t y) { return op(x != 0, y != 0); }, Operand{a.data<uint8_t>(), s.a},
        Operand{b.data<uint8_t>(), s.b});
    return;
  }
  dispatch_numeric(
      a.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        broadcast_map(
            o, s.out, [op](T x, T y) { return op(to_compute(x), to_compute(y)); }, Operand{a.data<T>(), s.a},
            Operand{b.data<T>(), s.b});
      },
      what.c_str());
}

// Boolean And/Or/Xor: inputs and output are bool.
template <typename Op>
void logic_kernel(KernelContext& ctx, Op op) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const std::string what = ctx.node().label();
  REFORGE_CHECK(a.dtype() == DType::Bool && b.dtype() == DType::Bool, what, ": inputs must be bool, got ", a.describe(),
                " and ", b.describe());
  const BinaryShapes s = binary_shapes(ctx);
  Tensor& out = ctx.allocate_output(0, DType::Bool, s.out);
  broadcast_map(
      out.mutable_data<bool>(), s.out, [op](uint8_t x, uint8_t y) { return op(x != 0, y != 0); },
      Operand{a.data<uint8_t>(), s.a}, Operand{b.data<uint8_t>(), s.b});
}

void not_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(x.dtype() == DType::Bool, ctx.node().label(), ": input must be bool, got ", x.describe());
  Tensor& out = ctx.allocate_output(0, DType::Bool, x.shape());
  broadcast_map(
      out.mutable_data<bool>(), x.shape(), [](uint8_t v) { return v == 0; }, Operand{x.data<uint8_t>(), x.shape()});
}

// Where(cond, X, Y): elements are copied as raw bits of their width, so one instantiation per
// element size covers every type (float16 and int16 alike).
void where_kernel(KernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  const Shape os = where_setup(ctx);
  Tensor& out = ctx.allocate_output(0, x.dtype(), os);
  auto run = [&](auto tag) {
    using B = typename decltype(tag)::type;
    broadcast_map(
        out.mutable_data<B>(), os, [](uint8_t ci, B xi, B yi) { return ci ? xi : yi; },
        Operand{c.data<uint8_t>(), c.shape()}, Operand{x.data<B>(), x.shape()}, Operand{y.data<B>(), y.shape()});
  };
  // where_setup refused every type whose size is not 1, 2, 4 or 8 bytes.
  dispatch_bytes(x.dtype(), run, ctx.node().label());
}

}  // namespace

void register_compare_logic_ops(OpRegistry& r) {
  r.add({"", "Equal", 1, INT_MAX, [](KernelContext& c) { compare_kernel(c, EqualOp{}); }, nullptr});
  r.add({"", "Less", 1, INT_MAX, [](KernelContext& c) { compare_kernel(c, LessOp{}); }, nullptr});
  r.add({"", "Greater", 1, INT_MAX, [](KernelContext& c) { compare_kernel(c, GreaterOp{}); }, nullptr});
  r.add({"", "LessOrEqual", 12, INT_MAX, [](KernelContext& c) { compare_kernel(c, LessEqualOp{}); }, nullptr});
  r.add({"", "GreaterOrEqual", 12, INT_MAX, [](KernelContext& c) { compare_kernel(c, GreaterEqualOp{}); }, nullptr});
  r.add({"", "And", 1, INT_MAX, [](KernelContext& c) { logic_kernel(c, [](bool x, bool y) { return x && y; }); },
         nullptr});
  r.add({"", "Or", 1, INT_MAX, [](KernelContext& c) { logic_kernel(c, [](bool x, bool y) { return x || y; }); },
         nullptr});
  r.add({"", "Xor", 1, INT_MAX, [](KernelContext& c) { logic_kernel(c, [](bool x, bool y) { return x != y; }); },
         nullptr});
  r.add({"", "Not", 1, INT_MAX, not_kernel, nullptr});
  r.add({"", "Where", 9, INT_MAX, where_kernel, nullptr});
}

}  // namespace reforge::ops
