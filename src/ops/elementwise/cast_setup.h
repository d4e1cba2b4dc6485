// The target type of Cast, shared by the CPU reference kernel (cast.cc) and the CUDA kernel
// (backends/cuda/cast.cu), so that both read the `to` attribute the same way and refuse with the
// same messages. Which targets a backend can make is its own: the reference casts to every type
// with storage (narrow floats and integers included), the CUDA backend to the standard types.
// Header-only: the CUDA compiler includes it.
#pragma once

#include <string>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/registry.h"

namespace reforge::ops {

// Cast-1..5 named the target type with a string ("FLOAT", "INT64"); later opsets use the
// TensorProto code. Undefined for any other name.
inline DType legacy_type_from_name(const std::string& name) {
  static const std::pair<const char*, DType> names[] = {
      {"FLOAT", DType::Float32}, {"FLOAT16", DType::Float16}, {"DOUBLE", DType::Float64}, {"BFLOAT16", DType::BFloat16},
      {"INT8", DType::Int8},     {"INT16", DType::Int16},     {"INT32", DType::Int32},    {"INT64", DType::Int64},
      {"UINT8", DType::UInt8},   {"UINT16", DType::UInt16},   {"UINT32", DType::UInt32},  {"UINT64", DType::UInt64},
      {"BOOL", DType::Bool},     {"STRING", DType::String},
  };
  for (const auto& [n, t] : names)
    if (name == n) return t;
  return DType::Undefined;
}

// The `to` attribute as a dtype the backend can make (`supported`), or Undefined with `why` set.
inline DType cast_target(const ir::Node& node, bool (*supported)(DType), std::string& why) {
  const ir::Attribute* a = node.attr("to");
  if (!a) {
    why = "attribute 'to' is missing";
    return DType::Undefined;
  }
  DType t = DType::Undefined;
  if (a->type == ir::AttrType::String) {
    t = legacy_type_from_name(a->s);
    if (t == DType::Undefined) why = str_cat("unknown target type '", a->s, "'");
  } else {
    t = dtype_from_onnx(static_cast<int32_t>(node.attr_int("to")));
    if (t == DType::Undefined) why = str_cat("unknown target type code ", node.attr_int("to"));
  }
  if (t != DType::Undefined && !supported(t)) {
    why = str_cat("casting to ", dtype_name(t), " is not supported");
    t = DType::Undefined;
  }
  return t;
}

}  // namespace reforge::ops
