// The CPU's float32 Add, Sub, Mul and Div, and Pow by a constant exponent: loops compiled per
// instruction set (core/simd.h) and picked at run time, plugged into the reference kernels'
// broadcasting (ops/elementwise/binary_arith.h). Everything else runs the reference kernels.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_backend.h"
#include "core/simd.h"
#include "core/thread_pool.h"
#include "ops/elementwise/binary_arith.h"

namespace reforge::ops {
namespace {

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

// The float32 runs above, for same_type_binary.
struct ArithRunF32 {
  template <typename Op>
  void operator()(float* out, int64_t n, int64_t sa, int64_t sb, const float* a, const float* b, Op op) const {
    arith_run_f32(out, n, sa, sb, a, b, op);
  }
};

void add_kernel(KernelContext& ctx) { same_type_binary(ctx, AddOp{}, ArithRunF32{}); }
void sub_kernel(KernelContext& ctx) { same_type_binary(ctx, SubOp{}, ArithRunF32{}); }
void mul_kernel(KernelContext& ctx) { same_type_binary(ctx, MulOp{}, ArithRunF32{}); }
void div_kernel(KernelContext& ctx) { same_type_binary(ctx, DivOp{}, ArithRunF32{}); }

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
  parallel_tasks(chunks, n > kParallelElements ? omp_get_max_threads() : 1, [&](int64_t c) {
    pow_const_f32(px + c * kChunk, py + c * kChunk, std::min(kChunk, n - c * kChunk), k);
  });
  return true;
}

void pow_kernel(KernelContext& ctx) {
  if (pow_const_fast(ctx)) return;
  // Other exponents and types: the reference kernel.
  const OpDef* def = OpRegistry::global().find(ctx.node().domain, ctx.node().op_type, ctx.opset());
  REFORGE_ASSERT(def != nullptr && def->kernel);
  def->kernel(ctx);
}

}  // namespace
}  // namespace reforge::ops

namespace reforge::cpu {

void register_arithmetic_kernels(KernelRegistry& r) {
  r.add({"cpu", "", "Add", 1, INT_MAX, ops::add_kernel});
  r.add({"cpu", "", "Sub", 1, INT_MAX, ops::sub_kernel});
  r.add({"cpu", "", "Mul", 1, INT_MAX, ops::mul_kernel});
  r.add({"cpu", "", "Div", 1, INT_MAX, ops::div_kernel});
  r.add({"cpu", "", "Pow", 1, INT_MAX, ops::pow_kernel});
}

}  // namespace reforge::cpu
