// Narrow element types: the float8 formats (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0), float4
// (E2M1) and the 4- and 2-bit integers. reforge holds them one element per byte, the code in the
// low bits (a 4-bit int4 -3 is the byte 0x0D, a float8 is its 8-bit code), so that every layout
// operation that moves bytes (Reshape, Transpose, Gather, plan storage) works on them unchanged.
// Only at the ONNX boundary are 4- and 2-bit types packed (two or four elements per byte, the
// first element in the lowest bits, as TensorProto.raw_data stores them).
//
// Arithmetic does not run on them: Cast, CastLike and the quantization ops convert to and from
// them through the functions below, which follow the ONNX Cast specification:
// - float8 E4M3FN/E4M3FNUZ/E5M2/E5M2FNUZ and float4 E2M1: round to nearest even. With
//   `saturate` (the default) values beyond the largest finite value, infinities included, become
//   that value; without it they become NaN, or infinity for E5M2 (the tables in the Cast
//   schema). The FNUZ formats have no negative zero (-0 gives +0) and one NaN (0x80). Float4 has
//   neither infinity nor NaN: it always saturates, and NaN gives a zero of the opposite sign
//   (0x8 for a positive NaN: the ONNX reference evaluator's codes, through ml_dtypes).
// - float8 E8M0 (a bare power of two 2^(code-127), code 0xFF is NaN, no sign, no zero): the
//   magnitude is rounded to a power of two by `round_mode` (up: the nearest not below it; down:
//   the nearest not above it; nearest: the nearer, ties up). Below 2^-127 (zero included) and
//   above 2^127 it saturates to the extreme codes, or gives NaN without `saturate`; infinity
//   gives 2^127 with `saturate` and NaN without, NaN gives NaN (the Cast schema's table).
// - int4/uint4/int2/uint2: from floats truncated toward zero (NaN gives 0), then, like every
//   integer narrowing, the high bits are discarded (two's complement): 9 -> int4 -7, -1 -> uint4 15.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"

namespace reforge {

// True for float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0), float4e2m1, int4/uint4, int2/uint2.
// dtype_size() is 1 for each of them: one element per byte.
bool is_narrow(DType t);
// True for the types a tensor can hold: the supported (is_supported) and the narrow types.
bool has_storage(DType t);

enum class E8M0Rounding : uint8_t { kUp, kDown, kNearest };

// How a value is converted to a narrow type (the Cast attributes `saturate` and `round_mode`).
struct NarrowCastOptions {
  bool saturate = true;
  E8M0Rounding e8m0_rounding = E8M0Rounding::kUp;
};

// True for int4, uint4, int2, uint2.
bool is_narrow_integer(DType t);

// Parses a Cast `round_mode` value ("up", "down", "nearest"); false for anything else.
bool parse_e8m0_rounding(const std::string& s, E8M0Rounding& out);

// The value of a code of a narrow type. Integers decode exactly, float8/float4 codes to their
// exact value (NaN codes to NaN, infinities to infinity).
double narrow_to_double(DType t, uint8_t code);
// The code of a narrow type for x, by the rules above.
uint8_t narrow_from_double(DType t, double x, const NarrowCastOptions& o = {});
// The code for an integer: int4/uint4/int2/uint2 keep the low bits; float formats round v.
uint8_t narrow_from_int64(DType t, int64_t v, const NarrowCastOptions& o = {});

// cast_tensor() extended to narrow types, with the Cast attributes that apply to narrow targets
// (cast_tensor(src, to) is this with the defaults: saturating, E8M0 rounding up).
Tensor cast_tensor(const Tensor& src, DType to, const NarrowCastOptions& narrow);

// Bits per element of a type as ONNX packs it (4 for int4/uint4/float4e2m1, 2 for int2/uint2,
// 8 * dtype_size otherwise), and the bytes n such elements take packed.
int onnx_bits_per_element(DType t);
size_t onnx_packed_bytes(DType t, int64_t n);
// Unpacks n elements of a 4- or 2-bit type from ONNX's packing into one byte per element
// (`dst` holds n bytes); sign-extension is not applied: codes stay in the low bits.
void unpack_subbyte(DType t, const uint8_t* src, int64_t n, uint8_t* dst);
// The reverse: packs n one-byte codes into onnx_packed_bytes(t, n) bytes (padding bits zero).
void pack_subbyte(DType t, const uint8_t* src, int64_t n, uint8_t* dst);

}  // namespace reforge
