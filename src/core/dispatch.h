// Compile-time dispatch over element types.
//
//   dispatch_all(t.dtype(), [&](auto tag) { using T = typename decltype(tag)::type; ... });
//
// dispatch_all covers every supported type; dispatch_float only float types (float16/bfloat16
// arrive as storage types: use to_compute()/from_compute<T>() to get float arithmetic);
// dispatch_numeric all but bool. An unsupported dtype throws an Error naming it and `what`.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"

namespace reforge {

template <typename T>
struct TypeTag {
  using type = T;
};

template <typename T>
struct CppType;
template <>
struct CppType<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct CppType<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct CppType<float16> {
  static constexpr DType value = DType::Float16;
};
template <>
struct CppType<bfloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct CppType<int8_t> {
  static constexpr DType value = DType::Int8;
};
template <>
struct CppType<int16_t> {
  static constexpr DType value = DType::Int16;
};
template <>
struct CppType<int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct CppType<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct CppType<uint8_t> {
  static constexpr DType value = DType::UInt8;
};
template <>
struct CppType<uint16_t> {
  static constexpr DType value = DType::UInt16;
};
template <>
struct CppType<uint32_t> {
  static constexpr DType value = DType::UInt32;
};
template <>
struct CppType<uint64_t> {
  static constexpr DType value = DType::UInt64;
};
template <>
struct CppType<bool> {
  static constexpr DType value = DType::Bool;
};
template <typename T>
constexpr DType dtype_of = CppType<T>::value;

// Arithmetic type for a storage type: float for the 16-bit floats, the type itself otherwise.
template <typename T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<float16> {
  using type = float;
};
template <>
struct ComputeType<bfloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename ComputeType<T>::type;

template <typename T>
inline compute_t<T> to_compute(T v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    return static_cast<float>(v);
  else
    return v;
}
template <typename T, typename C>
inline T from_compute(C v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

template <typename F>
decltype(auto) dispatch_float(DType t, F&& f, const char* what = "this operator") {
  switch (t) {
    case DType::Float32:
      return f(TypeTag<float>{});
    case DType::Float64:
      return f(TypeTag<double>{});
    case DType::Float16:
      return f(TypeTag<float16>{});
    case DType::BFloat16:
      return f(TypeTag<bfloat16>{});
    default:
      fail(what, " does not support element type ", dtype_name(t));
  }
}

template <typename F>
decltype(auto) dispatch_integer(DType t, F&& f, const char* what = "this operator") {
  switch (t) {
    case DType::Int8:
      return f(TypeTag<int8_t>{});
    case DType::Int16:
      return f(TypeTag<int16_t>{});
    case DType::Int32:
      return f(TypeTag<int32_t>{});
    case DType::Int64:
      return f(TypeTag<int64_t>{});
    case DType::UInt8:
      return f(TypeTag<uint8_t>{});
    case DType::UInt16:
      return f(TypeTag<uint16_t>{});
    case DType::UInt32:
      return f(TypeTag<uint32_t>{});
    case DType::UInt64:
      return f(TypeTag<uint64_t>{});
    default:
      fail(what, " does not support element type ", dtype_name(t));
  }
}

template <typename F>
decltype(auto) dispatch_numeric(DType t, F&& f, const char* what = "this operator") {
  if (is_float(t)) return dispatch_float(t, std::forward<F>(f), what);
  return dispatch_integer(t, std::forward<F>(f), what);
}

template <typename F>
decltype(auto) dispatch_all(DType t, F&& f, const char* what = "this operator") {
  if (t == DType::Bool) return f(TypeTag<bool>{});
  return dispatch_numeric(t, std::forward<F>(f), what);
}

}  // namespace reforge
