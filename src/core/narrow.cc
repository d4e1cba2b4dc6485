#include "core/narrow.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace reforge {
namespace {

// A small binary float format: sign bit, `ebits` exponent bits with `bias`, `mbits` mantissa
// bits, subnormals when the exponent field is 0.
struct MiniFloat {
  int ebits;
  int mbits;
  int bias;
  double max;  // largest finite value
  enum class Specials : uint8_t {
    kFN,    // no infinity; all-ones exponent and mantissa is NaN (E4M3FN)
    kIEEE,  // all-ones exponent: infinity (mantissa 0) or NaN (E5M2)
    kFNUZ,  // no infinity, no negative zero; 0x80 is the only NaN
    kNone,  // neither infinity nor NaN (E2M1)
  } specials;
};

const MiniFloat* minifloat(DType t) {
  static const MiniFloat e4m3fn{4, 3, 7, 448.0, MiniFloat::Specials::kFN};
  static const MiniFloat e4m3fnuz{4, 3, 8, 240.0, MiniFloat::Specials::kFNUZ};
  static const MiniFloat e5m2{5, 2, 15, 57344.0, MiniFloat::Specials::kIEEE};
  static const MiniFloat e5m2fnuz{5, 2, 16, 57344.0, MiniFloat::Specials::kFNUZ};
  static const MiniFloat e2m1{2, 1, 1, 6.0, MiniFloat::Specials::kNone};
  switch (t) {
    case DType::Float8E4M3FN:
      return &e4m3fn;
    case DType::Float8E4M3FNUZ:
      return &e4m3fnuz;
    case DType::Float8E5M2:
      return &e5m2;
    case DType::Float8E5M2FNUZ:
      return &e5m2fnuz;
    case DType::Float4E2M1:
      return &e2m1;
    default:
      return nullptr;
  }
}

// Width in bits of the sub-byte integer types; 0 for the others.
int int_bits(DType t) {
  switch (t) {
    case DType::Int4:
    case DType::UInt4:
      return 4;
    case DType::Int2:
    case DType::UInt2:
      return 2;
    default:
      return 0;
  }
}

double minifloat_decode(const MiniFloat& f, uint8_t code) {
  const int total = 1 + f.ebits + f.mbits;
  code &= static_cast<uint8_t>((1u << total) - 1);
  const bool neg = (code >> (total - 1)) & 1;
  const int exp = (code >> f.mbits) & ((1 << f.ebits) - 1);
  const int man = code & ((1 << f.mbits) - 1);
  const int exp_all_ones = (1 << f.ebits) - 1;
  switch (f.specials) {
    case MiniFloat::Specials::kFNUZ:
      if (code == 0x80) return std::numeric_limits<double>::quiet_NaN();
      break;
    case MiniFloat::Specials::kFN:
      if (exp == exp_all_ones && man == (1 << f.mbits) - 1) return std::numeric_limits<double>::quiet_NaN();
      break;
    case MiniFloat::Specials::kIEEE:
      if (exp == exp_all_ones)
        return man == 0 ? (neg ? -HUGE_VAL : HUGE_VAL) : std::numeric_limits<double>::quiet_NaN();
      break;
    case MiniFloat::Specials::kNone:
      break;
  }
  double v = exp == 0 ? std::ldexp(static_cast<double>(man), 1 - f.bias - f.mbits)
                      : std::ldexp(static_cast<double>((1 << f.mbits) + man), exp - f.bias - f.mbits);
  return neg ? -v : v;
}

uint8_t minifloat_encode(const MiniFloat& f, double x, bool saturate) {
  const int total = 1 + f.ebits + f.mbits;
  const uint8_t sign_bit = static_cast<uint8_t>(1u << (total - 1));
  const bool fnuz = f.specials == MiniFloat::Specials::kFNUZ;
  const bool neg = std::signbit(x);
  const uint8_t sign = neg ? sign_bit : 0;
  const uint8_t exp_all_ones = static_cast<uint8_t>((1u << f.ebits) - 1);
  // NaN codes: E4M3FN keeps the sign (S.1111.111), E5M2 too (S.11111.10, as ml_dtypes writes a
  // quiet NaN); FNUZ has the one code 0x80; float4 has no NaN and takes 0x8.
  auto nan_code = [&]() -> uint8_t {
    switch (f.specials) {
      case MiniFloat::Specials::kFN:
        return static_cast<uint8_t>(sign | (exp_all_ones << f.mbits) | ((1u << f.mbits) - 1));
      case MiniFloat::Specials::kIEEE:
        return static_cast<uint8_t>(sign | (exp_all_ones << f.mbits) | (1u << (f.mbits - 1)));
      case MiniFloat::Specials::kFNUZ:
        return 0x80;
      case MiniFloat::Specials::kNone:
        break;
    }
    return 0;
  };
  auto overflow_code = [&]() -> uint8_t {
    if (f.specials == MiniFloat::Specials::kIEEE) return static_cast<uint8_t>(sign | (exp_all_ones << f.mbits));
    return nan_code();
  };
  // Float4 has no NaN: a NaN becomes a zero of the opposite sign, bit for bit what the ONNX
  // reference evaluator (ml_dtypes) writes.
  if (std::isnan(x)) return f.specials == MiniFloat::Specials::kNone ? (neg ? 0 : sign_bit) : nan_code();
  double a = std::fabs(x);
  if (saturate || f.specials == MiniFloat::Specials::kNone) {
    if (a > f.max) a = f.max;
  } else if (std::isinf(a)) {
    return overflow_code();
  }
  const uint8_t zero = fnuz ? 0 : sign;
  if (a == 0) return zero;
  int e2 = 0;
  std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1)
  const int min_exp = 1 - f.bias;
  const int e = std::max(e2 - 1, min_exp);
  const int quantum = e - f.mbits;
  // a / 2^quantum is exact in double; rint rounds to nearest even in the default mode.
  double q = std::nearbyint(std::ldexp(a, -quantum));
  if (std::ldexp(q, quantum) > f.max) return overflow_code();
  if (q == 0) return zero;
  const double implicit = std::ldexp(1.0, f.mbits);
  int exp_field;
  if (q < implicit) {  // subnormal (only at the minimum exponent)
    exp_field = 0;
  } else {
    int ee = e;
    if (q >= 2 * implicit) {  // rounded up into the next binade
      q /= 2;
      ++ee;
    }
    exp_field = ee + f.bias;
    q -= implicit;
  }
  return static_cast<uint8_t>(sign | (exp_field << f.mbits) | static_cast<int>(q));
}

uint8_t e8m0_encode(double x, const NarrowCastOptions& o) {
  constexpr uint8_t kNaN = 0xFF, kMax = 0xFE, kMin = 0x00;
  if (std::isnan(x)) return kNaN;
  const double a = std::fabs(x);  // the sign is unspecified by ONNX; the magnitude is encoded
  if (std::isinf(a)) return o.saturate ? kMax : kNaN;
  if (a == 0) return o.saturate ? kMin : kNaN;
  int e2 = 0;
  const double m = 2 * std::frexp(a, &e2);  // a = m * 2^(e2-1), m in [1, 2)
  int k = e2 - 1;
  switch (o.e8m0_rounding) {
    case E8M0Rounding::kDown:
      break;
    case E8M0Rounding::kUp:
      if (m > 1) ++k;
      break;
    case E8M0Rounding::kNearest:
      if (m >= 1.5) ++k;
      break;
  }
  if (k < -127) return o.saturate ? kMin : kNaN;
  if (k > 127) return o.saturate ? kMax : kNaN;
  return static_cast<uint8_t>(k + 127);
}

}  // namespace

bool is_narrow(DType t) {
  switch (t) {
    case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ:
    case DType::Float8E8M0:
    case DType::Float4E2M1:
    case DType::UInt4:
    case DType::Int4:
    case DType::UInt2:
    case DType::Int2:
      return true;
    default:
      return false;
  }
}

bool has_storage(DType t) { return is_supported(t) || is_narrow(t); }

bool is_narrow_integer(DType t) { return int_bits(t) > 0; }

bool parse_e8m0_rounding(const std::string& s, E8M0Rounding& out) {
  if (s == "up") {
    out = E8M0Rounding::kUp;
  } else if (s == "down") {
    out = E8M0Rounding::kDown;
  } else if (s == "nearest") {
    out = E8M0Rounding::kNearest;
  } else {
    return false;
  }
  return true;
}

double narrow_to_double(DType t, uint8_t code) {
  if (const MiniFloat* f = minifloat(t)) return minifloat_decode(*f, code);
  if (t == DType::Float8E8M0)
    return code == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, static_cast<int>(code) - 127);
  const int bits = int_bits(t);
  REFORGE_CHECK(bits > 0, dtype_name(t), " is not a narrow type");
  const int v = code & ((1 << bits) - 1);
  if (t == DType::Int4 || t == DType::Int2) return v >= (1 << (bits - 1)) ? v - (1 << bits) : v;
  return v;
}

uint8_t narrow_from_double(DType t, double x, const NarrowCastOptions& o) {
  if (const MiniFloat* f = minifloat(t)) return minifloat_encode(*f, x, o.saturate);
  if (t == DType::Float8E8M0) return e8m0_encode(x, o);
  REFORGE_CHECK(int_bits(t) > 0, dtype_name(t), " is not a narrow type");
  if (std::isnan(x)) return 0;
  // Truncation toward zero; beyond the int64 range the low bits are those of the clamped value.
  double tr = std::trunc(x);
  int64_t v = tr <= -9.2233720368547758e18  ? std::numeric_limits<int64_t>::min()
              : tr >= 9.2233720368547758e18 ? std::numeric_limits<int64_t>::max()
                                            : static_cast<int64_t>(tr);
  return narrow_from_int64(t, v, o);
}

uint8_t narrow_from_int64(DType t, int64_t v, const NarrowCastOptions& o) {
  const int bits = int_bits(t);
  if (bits == 0) return narrow_from_double(t, static_cast<double>(v), o);
  return static_cast<uint8_t>(static_cast<uint64_t>(v) & ((1u << bits) - 1));
}

int onnx_bits_per_element(DType t) {
  switch (t) {
    case DType::Int4:
    case DType::UInt4:
    case DType::Float4E2M1:
      return 4;
    case DType::Int2:
    case DType::UInt2:
      return 2;
    default:
      return static_cast<int>(8 * dtype_size(t));
  }
}

size_t onnx_packed_bytes(DType t, int64_t n) {
  const int bits = onnx_bits_per_element(t);
  return (static_cast<size_t>(n) * static_cast<size_t>(bits) + 7) / 8;
}

void unpack_subbyte(DType t, const uint8_t* src, int64_t n, uint8_t* dst) {
  const int bits = onnx_bits_per_element(t);
  REFORGE_CHECK(bits == 4 || bits == 2, dtype_name(t), " is not a sub-byte type");
  const int per = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>((src[i / per] >> ((i % per) * bits)) & mask);
}

void pack_subbyte(DType t, const uint8_t* src, int64_t n, uint8_t* dst) {
  const int bits = onnx_bits_per_element(t);
  REFORGE_CHECK(bits == 4 || bits == 2, dtype_name(t), " is not a sub-byte type");
  const int per = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  std::memset(dst, 0, onnx_packed_bytes(t, n));
  for (int64_t i = 0; i < n; ++i) dst[i / per] |= static_cast<uint8_t>((src[i] & mask) << ((i % per) * bits));
}

}  // namespace reforge
