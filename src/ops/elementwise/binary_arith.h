// What the elementwise family's binary arithmetic (binary_arith.cc) shares with backends: the
// arithmetic ops and the broadcasting driver, into which a backend plugs its float32 loops.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/dispatch.h"
#include "ops/broadcast.h"
#include "ops/registry.h"

namespace reforge::ops {

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
// No float32 run plugged in: every type goes through broadcast_map.
struct NoF32Run {};

// Runs a same-type binary op over inputs 0 and 1, writing output 0 of the same type. A backend
// may plug in `f32_run`, called as f32_run(out, n, sa, sb, a, b, op) for each contiguous float32
// run of the broadcast (out[i] = op(a[i * sa], b[i * sb]), sa / sb the operands' inner strides:
// 1 advances, 0 repeats one value; `out` may be an advancing operand's buffer).
template <typename Op, typename F32Run = NoF32Run>
void same_type_binary(KernelContext& ctx, Op op, F32Run f32_run = {}) {
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
        if constexpr (std::is_same_v<T, float> && !std::is_same_v<F32Run, NoF32Run>) {
          const BroadcastLayout<2> L(s.out, {s.a, s.b});
          float* po = out.mutable_data<float>();
          const float* pa = a.data<float>();
          const float* pb = b.data<float>();
          for_each_run(L, [&](int64_t o, const std::array<int64_t, 2>& off, int64_t n) {
            f32_run(po + o, n, L.inner_stride[0], L.inner_stride[1], pa + off[0], pb + off[1], op);
          });
          return;
        }
        broadcast_map(
            out.mutable_data<T>(), s.out, [op](T x, T y) { return from_compute<T>(op(to_compute(x), to_compute(y))); },
            Operand{a.data<T>(), s.a}, Operand{b.data<T>(), s.b});
      },
      what.c_str());
}

}  // namespace reforge::ops
