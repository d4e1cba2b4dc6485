// Element types. The numeric codes are ONNX's TensorProto.DataType codes so that importers and
// the plan format can store them as they are. The "standard" types have kernels; the narrow
// types (float8, float4, 4- and 2-bit integers) are held one element per byte and only Cast,
// BitCast and the quantization ops read or write them (core/narrow.h: is_narrow, has_storage,
// the conversions); string and complex exist so that an importer can name them in an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace reforge {

enum class DType : int32_t {
  Undefined = 0,
  Float32 = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Float64 = 11,
  UInt32 = 12,
  UInt64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
  Float8E4M3FN = 17,
  Float8E4M3FNUZ = 18,
  Float8E5M2 = 19,
  Float8E5M2FNUZ = 20,
  UInt4 = 21,
  Int4 = 22,
  Float4E2M1 = 23,
  Float8E8M0 = 24,
  UInt2 = 25,
  Int2 = 26,
};

// True for the types reforge computes with (float32/16, bfloat16, float64, all ints, bool).
bool is_supported(DType t);
bool is_float(DType t);    // float32, float16, bfloat16, float64
bool is_integer(DType t);  // signed or unsigned integer (not bool)
bool is_signed(DType t);
// Bytes per element in memory: 1 for every narrow type (4- and 2-bit types are unpacked, one
// element per byte); 0 for string.
size_t dtype_size(DType t);
// ONNX-style lower-case name: "float32", "int64", "bfloat16", "unknown(99)".
std::string dtype_name(DType t);
// Converts an ONNX code read from a file; unknown codes give DType::Undefined.
DType dtype_from_onnx(int32_t code);

}  // namespace reforge
