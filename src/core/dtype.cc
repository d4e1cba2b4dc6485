#include "core/dtype.h"

namespace reforge {

bool is_supported(DType t) {
  switch (t) {
    case DType::Float32:
    case DType::UInt8:
    case DType::Int8:
    case DType::UInt16:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64:
    case DType::Bool:
    case DType::Float16:
    case DType::Float64:
    case DType::UInt32:
    case DType::UInt64:
    case DType::BFloat16:
      return true;
    default:
      return false;
  }
}

bool is_float(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 || t == DType::Float64;
}

bool is_integer(DType t) {
  switch (t) {
    case DType::UInt8:
    case DType::Int8:
    case DType::UInt16:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64:
    case DType::UInt32:
    case DType::UInt64:
      return true;
    default:
      return false;
  }
}

bool is_signed(DType t) {
  switch (t) {
    case DType::Int8:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64:
      return true;
    default:
      return is_float(t);
  }
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32:
    case DType::Int32:
    case DType::UInt32:
      return 4;
    case DType::UInt8:
    case DType::Int8:
    case DType::Bool:
      return 1;
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
      return 1;
    case DType::UInt16:
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Int64:
    case DType::UInt64:
    case DType::Float64:
    case DType::Complex64:
      return 8;
    case DType::Complex128:
      return 16;
    default:
      return 0;
  }
}

std::string dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::UInt8:
      return "uint8";
    case DType::Int8:
      return "int8";
    case DType::UInt16:
      return "uint16";
    case DType::Int16:
      return "int16";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::String:
      return "string";
    case DType::Bool:
      return "bool";
    case DType::Float16:
      return "float16";
    case DType::Float64:
      return "float64";
    case DType::UInt32:
      return "uint32";
    case DType::UInt64:
      return "uint64";
    case DType::Complex64:
      return "complex64";
    case DType::Complex128:
      return "complex128";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float8E4M3FN:
      return "float8e4m3fn";
    case DType::Float8E4M3FNUZ:
      return "float8e4m3fnuz";
    case DType::Float8E5M2:
      return "float8e5m2";
    case DType::Float8E5M2FNUZ:
      return "float8e5m2fnuz";
    case DType::UInt4:
      return "uint4";
    case DType::Int4:
      return "int4";
    case DType::Float4E2M1:
      return "float4e2m1";
    case DType::Float8E8M0:
      return "float8e8m0";
    case DType::UInt2:
      return "uint2";
    case DType::Int2:
      return "int2";
    case DType::Undefined:
      return "undefined";
  }
  return "unknown(" + std::to_string(static_cast<int>(t)) + ")";
}

DType dtype_from_onnx(int32_t code) {
  if (code >= 1 && code <= 26) return static_cast<DType>(code);
  return DType::Undefined;
}

}  // namespace reforge
