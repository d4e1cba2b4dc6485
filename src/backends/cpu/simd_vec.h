// Float32 vectors of each instruction set's native width (GCC/Clang vector extensions), for the
// fused transformer kernels (backends/cpu: rms_norm.cc, silu.cc, attention.cc, rotary.cc, gelu.cc,
// layer_normalization.cc), the unary ops (unary.cc) and Softmax (softmax.cc). The vector types and lane
// helpers themselves are portable (ops/vector_ext.h); this header adds the per-instruction-set part.
//
// The build has no -march flag, so those kernels are written once as always-inline templates over
// a tag (kGeneric, kAvx2, kAvx512) and instantiated three times: inside a function compiled with
// RF_AVX512_TARGET, one with RF_AVX2_TARGET (AVX2 + FMA: AMD Zen 1-3, Intel before Skylake-X) and
// a plain one (SSE2 on x86-64); pick() chooses one at run time, following core/simd.h's
// simd_level(). Each tag has its own vector type, Vec<kTag>, one register wide: 16 lanes (zmm),
// 8 (ymm) and 4 (xmm). A vector wider than the target's registers is legal, but GCC 12 lowers it
// lane by lane through the stack: with 64-byte vectors the AVX2 variant ran attention at
// ~3 GFLOPS, no faster than generic. Register-blocked kernels take their block sizes per tag too
// (32 zmm registers against 16 ymm or xmm).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

#include "core/simd.h"
#include "ops/vector_ext.h"

namespace reforge::ops::simdv {

#define RF_AVX512_TARGET __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma,bmi2")))
#define RF_AVX2_TARGET __attribute__((target("avx2,fma,bmi2")))

// Kernels are instantiated with a tag per variant so that template bodies compiled for different
// targets never merge.
enum : int { kGeneric = 0, kAvx512 = 1, kAvx2 = 2 };

// The widest variant core/simd.h's level allows runs (the CPU has it and neither a SimdOverride
// nor REFORGE_SIMD caps it), so tests can check the variants against each other.
template <typename Fn>
inline Fn pick(Fn avx512, Fn avx2, Fn generic) {
  switch (simd_level()) {
    case SimdLevel::Avx512:
      return avx512;
    case SimdLevel::Avx2:
      return avx2;
    default:
      return generic;
  }
}

template <int kTag>
inline constexpr int kLanesOf = kTag == kAvx512 ? 16
                                : kTag == kAvx2 ? 8
                                                : 4;
// The float vector of a variant, and its lane count.
template <int kTag>
using Vec = typename LaneTypes<kLanesOf<kTag>>::F;
template <int kTag>
inline constexpr int64_t kW = kLanesOf<kTag>;
// The widest lane count of any variant: split points that every variant's vectors divide.
inline constexpr int64_t kMaxW = 16;

// Cephes-style expf: exp(x) = 2^n e^r, |r| <= ln2/2, degree-6 polynomial (within 2 ulp of expf).
// Below -87.3 it returns 0 (masked logits); between 88 and ln(FLT_MAX) it saturates at exp(88),
// above that it is inf, as expf is. NaN stays NaN. Softmax, attention, SiLU and GELU share it.
template <typename V>
RF_INLINE V vexp(const V& x) {
  V xc = x < -87.3365447505531f ? splat<V>(-87.3365447505531f) : x;
  xc = xc > 88.0f ? splat<V>(88.0f) : xc;
  const V fx = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  V r = xc - fx * 0.693359375f;
  r = r - fx * -2.12194440e-4f;
  V p = splat<V>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const UVec<V> bits = (std::bit_cast<UVec<V>>(__builtin_convertvector(fx, IVec<V>)) + 127u) << 23;
  V res = p * std::bit_cast<V>(bits);
  res = x > 88.72283935546875f ? splat<V>(std::numeric_limits<float>::infinity()) : res;
  // Exactly 0 below the normal range (the clamp above would give FLT_MIN-ish values).
  return x < -87.3365447505531f ? V{} : res;
}

}  // namespace reforge::ops::simdv
