// The CPU's kernels of the unary op family (ops/unary: the math ops, the activations and Clip):
// the reference kernels' op structs and kernel lists, with the float32 element loop compiled once
// per instruction set (AVX-512, AVX2 + FMA, generic SSE2; backends/cpu/simd_vec.h), each on
// vectors one register of its own width, and picked per call. The generic variant computes what
// the reference kernel does, bit for bit; the AVX variants contract a * b + c into FMAs. Sqrt uses
// the vector square-root instructions. Ops without a vector form (libm's trigonometric and
// hyperbolic functions, IsNaN, IsInf) run their reference kernels.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd_vec.h"
#include "core/simd.h"
#include "ops/unary/activations.h"
#include "ops/unary/unary_clip.h"
#include "ops/unary/unary_math.h"

#if defined(__SSE__)
#include <immintrin.h>
#endif

namespace reforge::cpu {
namespace {

using namespace ops::unary;
namespace simdv = ops::simdv;

// One element loop per instruction set, each on its own register width.
template <typename Op>
REFORGE_TARGET_AVX512 void map_f32_avx512(const float* in, float* out, int64_t n, const Op& op) {
  map_f32_impl<simdv::Vec<simdv::kAvx512>>(in, out, n, op);
}
template <typename Op>
REFORGE_TARGET_AVX2 void map_f32_avx2(const float* in, float* out, int64_t n, const Op& op) {
  map_f32_impl<simdv::Vec<simdv::kAvx2>>(in, out, n, op);
}
template <typename Op>
REFORGE_TARGET_GENERIC void map_f32_generic(const float* in, float* out, int64_t n, const Op& op) {
  map_f32_impl<simdv::Vec<simdv::kGeneric>>(in, out, n, op);
}

// The map policy of the CPU kernels: the widest loop core/simd.h's level allows.
struct CpuMap {
  template <typename Op>
  static void f32(const float* in, float* out, int64_t n, const Op& op) {
    simdv::pick(map_f32_avx512<Op>, map_f32_avx2<Op>, map_f32_generic<Op>)(in, out, n, op);
  }
};

// Square roots with the vector instructions (correctly rounded, so the bits of ops' SqrtOp).
template <typename V>
REFORGE_VINLINE V cpu_vsqrt(const V& x) {
#if defined(__SSE__)
  if constexpr (simdv::lanes_of<V> == 8) {
    // Only ever inlined into the AVX2 variant, whose target has the instruction.
    return reinterpret_cast<V>(__builtin_ia32_sqrtps256(reinterpret_cast<__v8sf>(x)));
  } else {
    // SSE square roots, a quad at a time (AVX-512: four per vector; Sqrt is rare enough in hot
    // loops not to need the zmm form).
    using q = float __attribute__((vector_size(16)));
    constexpr int kQuads = simdv::lanes_of<V> / 4;
    struct Quads {
      q v[kQuads];
    };
    Quads in = std::bit_cast<Quads>(x), out;
    for (int i = 0; i < kQuads; ++i) out.v[i] = std::bit_cast<q>(_mm_sqrt_ps(std::bit_cast<__m128>(in.v[i])));
    return std::bit_cast<V>(out);
  }
#else
  return vsqrt(x);
#endif
}

struct CpuSqrtOp : SqrtOp {
  template <typename V>
  REFORGE_VINLINE V vec(const V& x) const {
    return cpu_vsqrt(x);
  }
};

}  // namespace

void register_unary_kernels(KernelRegistry& r) {
  const ops::unary::AddUnaryKernel add = [&r](const char* op, int since, ops::KernelFn kernel, ops::CheckFn,
                                              bool uses_map) {
    // Kernels that never reach the map are the reference kernels themselves: not registered.
    // Sqrt is registered below with the vector square-root instructions.
    if (!uses_map || std::string_view(op) == "Sqrt") return;
    r.add({"cpu", "", op, since, INT_MAX, std::move(kernel)});
  };
  unary_math_kernels<CpuMap>(add);
  activation_kernels<CpuMap>(add);
  clip_kernels<CpuMap>(add);
  r.add({"cpu", "", "Sqrt", 1, INT_MAX, float_kernel<CpuMap, CpuSqrtOp>()});
}

}  // namespace reforge::cpu
