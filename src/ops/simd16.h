// 16-lane float32 vectors (GCC/Clang vector extensions) for the fused transformer kernels.
//
// The build has no -march flag, so the kernels are written once as always-inline templates over
// these types and instantiated three times: inside a function compiled with
// __attribute__((target("avx512f,..."))) (one zmm register per vector), one compiled for AVX2 +
// FMA (two ymm registers per vector: AMD Zen 3 and older Intel cores) and a plain one (the
// compiler splits each vector into SSE registers). RF_AVX512_TARGET / RF_AVX2_TARGET mark the
// first two; pick() chooses one at run time, following core/simd.h's simd_level().
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "core/simd.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // 64-byte vectors only cross always-inline boundaries

namespace reforge::ops::simd16 {

#define RF_INLINE inline __attribute__((always_inline))
#define RF_AVX512_TARGET __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma,bmi2")))
#define RF_AVX2_TARGET __attribute__((target("avx2,fma,bmi2")))

using v16 = float __attribute__((vector_size(64)));
using i16 = int32_t __attribute__((vector_size(64)));
using u16 = uint32_t __attribute__((vector_size(64)));
constexpr int64_t kW = 16;

// The widest variant core/simd.h's level allows runs (the CPU has it and neither a SimdOverride
// nor REFORGE_SIMD caps it), so tests can check the variants against each other. Kernels are
// instantiated with a tag per variant (kGeneric, kAvx2, kAvx512) so that the template bodies
// compiled for different targets never merge.
enum : int { kGeneric = 0, kAvx512 = 1, kAvx2 = 2 };
template <typename Fn>
inline Fn pick(Fn avx512, Fn avx2, Fn generic) {
  switch (simd_level()) {
    case SimdLevel::Avx512: return avx512;
    case SimdLevel::Avx2: return avx2;
    default: return generic;
  }
}

RF_INLINE v16 splat(float x) { return v16{} + x; }
RF_INLINE v16 load(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
RF_INLINE void store(float* p, const v16& v) { std::memcpy(p, &v, sizeof(v)); }
RF_INLINE float hsum(const v16& v) {
  float s = 0;
  for (int i = 0; i < 16; ++i) s += v[i];
  return s;
}
RF_INLINE float hmax(const v16& v) {
  float m = v[0];
  for (int i = 1; i < 16; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

// Cephes-style expf: exp(x) = 2^n e^r, |r| <= ln2/2, degree-6 polynomial (within 2 ulp of expf).
// Below -87.3 it returns 0 (masked logits), above 88 it saturates at exp(88).
RF_INLINE v16 vexp(const v16& x) {
  v16 xc = x < -87.3365447505531f ? splat(-87.3365447505531f) : x;
  xc = xc > 88.0f ? splat(88.0f) : xc;
  const v16 fx = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  v16 r = xc - fx * 0.693359375f;
  r = r - fx * -2.12194440e-4f;
  v16 p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const u16 bits = (std::bit_cast<u16>(__builtin_convertvector(fx, i16)) + 127u) << 23;
  v16 res = p * std::bit_cast<v16>(bits);
  // Exactly 0 below the normal range (the clamp above would give FLT_MIN-ish values).
  return x < -87.3365447505531f ? v16{} : res;
}

}  // namespace reforge::ops::simd16
