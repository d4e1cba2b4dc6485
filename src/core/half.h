// 16-bit float storage types. Kernels compute in float32 and convert at load/store; the
// conversions round to nearest even and keep NaN/Inf, so float16/bfloat16 results match
// numpy's and the ONNX reference's.
//
// float16::from_float is IEEE 754 binary16 rounding (ONNX Cast to FLOAT16, numpy's astype):
// round to nearest even, subnormals kept, |x| >= 65520 becomes +-inf (65504 is the largest
// finite half; values in [65504, 65520) round down to it), NaN stays NaN (quiet, top payload
// bits kept). It equals F16C's vcvtps2ph (round-to-nearest) for every one of the 2^32 float32
// inputs; to_float equals vcvtph2ps for every one of the 2^16 halves (tests/half_test.cc).
#pragma once

#include <cstdint>
#include <cstring>

namespace reforge {

inline float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

struct float16 {
  uint16_t bits = 0;
  float16() = default;
  explicit float16(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }

  static uint16_t from_float(float f) {
    uint32_t x = float_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) {  // inf or nan
      return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0u));
    }
    if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
    if (absx < 0x38800000u) {                                               // subnormal or zero in half
      // Use float arithmetic for correct rounding of subnormals.
      float af = bits_to_float(absx);
      float scaled = af * 16777216.0f;  // 2^24: half subnormal unit is 2^-24
      // round to nearest even
      uint32_t r = static_cast<uint32_t>(scaled);
      float frac = scaled - static_cast<float>(r);
      if (frac > 0.5f || (frac == 0.5f && (r & 1u))) ++r;
      return static_cast<uint16_t>(sign | r);
    }
    uint32_t mant_odd = (absx >> 13) & 1u;
    absx += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
    return static_cast<uint16_t>(sign | (absx >> 13));
  }
  static float to_float(uint16_t h) {
    uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
      float f = static_cast<float>(mant) * (1.0f / 16777216.0f);
      return sign ? -f : f;
    }
    // NaN: quieted (as F16C's vcvtph2ps does), payload kept.
    if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
    return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
  }
};

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }

  static uint16_t from_float(float f) {
    uint32_t x = float_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
    uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>((x + rounding) >> 16);
  }
  static float to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }
};

static_assert(sizeof(float16) == 2 && sizeof(bfloat16) == 2);

}  // namespace reforge
