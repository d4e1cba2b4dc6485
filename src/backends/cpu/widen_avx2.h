// Eight weights widened exactly to float32 in one AVX2 register: float32, bfloat16 (bits as
// uint16_t: zero-extend, shift into the high half) or float16 (F16C). The loads of the few-row
// kernels on plain W (gemv_avx2.cc) and on packed panels (gemv_panels.cc); unaligned loads, which
// cost nothing extra on aligned data.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/half.h"

namespace reforge::cpu::avx2 {

#define REFORGE_WIDEN_AVX2 __attribute__((target("avx2,fma,f16c")))

REFORGE_WIDEN_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
REFORGE_WIDEN_AVX2 inline __m256 load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
REFORGE_WIDEN_AVX2 inline __m256 load8(const float16* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

}  // namespace reforge::cpu::avx2
