// Element types in CUDA code: reforge's dtypes mapped to device types (float16 -> __half,
// bfloat16 -> __nv_bfloat16, bool as one byte), a dispatcher over them, and float conversions
// for arithmetic (16-bit types compute in float32).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace reforge::cuda {

template <typename T>
struct DevTag {
  using type = T;
};

// Calls f(DevTag<T>{}) for the device type of `dt`; throws naming `what` for other types.
// `floats_only`: float32, float64, float16, bfloat16.
template <typename F>
auto dispatch_device(DType dt, const char* what, F&& f, bool floats_only = false) {
  switch (dt) {
    case DType::Float32:
      return f(DevTag<float>{});
    case DType::Float64:
      return f(DevTag<double>{});
    case DType::Float16:
      return f(DevTag<__half>{});
    case DType::BFloat16:
      return f(DevTag<__nv_bfloat16>{});
    default:
      break;
  }
  if (!floats_only) switch (dt) {
      case DType::Int8:
        return f(DevTag<int8_t>{});
      case DType::Int16:
        return f(DevTag<int16_t>{});
      case DType::Int32:
        return f(DevTag<int32_t>{});
      case DType::Int64:
        return f(DevTag<int64_t>{});
      case DType::UInt8:
        return f(DevTag<uint8_t>{});
      case DType::UInt16:
        return f(DevTag<uint16_t>{});
      case DType::UInt32:
        return f(DevTag<uint32_t>{});
      case DType::UInt64:
        return f(DevTag<uint64_t>{});
      case DType::Bool:
        return f(DevTag<bool>{});
      default:
        break;
    }
  fail(what, ": element type ", dtype_name(dt), " is not supported on the CUDA backend");
}

// The type arithmetic on T is done in: float for 16-bit floats, T otherwise.
template <typename T>
struct ComputeOf {
  using type = T;
};
template <>
struct ComputeOf<__half> {
  using type = float;
};
template <>
struct ComputeOf<__nv_bfloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename ComputeOf<T>::type;

template <typename T>
__device__ __forceinline__ compute_t<T> load_c(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(p[i]);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(p[i]);
  else
    return p[i];
}

template <typename T, typename C>
__device__ __forceinline__ T store_c(C v) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// Eight 16-bit values of one 16-byte load (bfloat16 or float16) as floats.
template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    } else {
      __half2 h;
      memcpy(&h, &w[i], sizeof(h));
      const float2 g = __half22float2(h);
      f[2 * i] = g.x;
      f[2 * i + 1] = g.y;
    }
  }
}

// Whether a pointer allows 16-byte loads and stores.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Output shape with up to kMaxRank dimensions and each operand's element strides along them (0
// where the operand is broadcast), for kernels that index any broadcast by division.
inline constexpr int kMaxRank = 8;
template <int N>
struct Strides {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t stride[N][kMaxRank] = {};
  // Element offset in operand k of output element i.
  __device__ __forceinline__ void offsets(int64_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t q = i / dims[d];
      const int64_t c = i - q * dims[d];
      i = q;
      for (int k = 0; k < N; ++k) off[k] += c * stride[k][d];
    }
  }
};

// The strides of `in` (each broadcasting to `out`, numpy rules) along `out`, with size-1
// dimensions dropped and dimensions merged where every operand walks them contiguously.
template <int N>
Strides<N> make_strides(const Shape& out, const Shape* const (&in)[N], const std::string& where) {
  const int r = static_cast<int>(out.size());
  std::vector<int64_t> dims;
  std::vector<std::array<int64_t, N>> st;
  std::array<int64_t, N> run{};
  for (int k = 0; k < N; ++k) run[k] = 1;
  std::vector<std::array<int64_t, N>> full(static_cast<size_t>(r));
  for (int k = 0; k < N; ++k) {
    const Shape& s = *in[k];
    const int off = r - static_cast<int>(s.size());
    REFORGE_CHECK(off >= 0, where, ": operand ", shape_str(s), " has more dimensions than the output ", shape_str(out));
    int64_t stride = 1;
    for (int d = r - 1; d >= 0; --d) {
      const int64_t extent = d >= off ? s[static_cast<size_t>(d - off)] : 1;
      REFORGE_CHECK(extent == out[static_cast<size_t>(d)] || extent == 1, where, ": ", shape_str(s),
                    " does not broadcast to ", shape_str(out));
      full[static_cast<size_t>(d)][k] = extent == 1 ? 0 : stride;
      stride *= extent;
    }
  }
  for (int d = 0; d < r; ++d) {
    const int64_t n = out[static_cast<size_t>(d)];
    if (n == 1) continue;
    if (!dims.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge &= st.back()[k] == full[static_cast<size_t>(d)][k] * n;
      if (merge) {
        dims.back() *= n;
        st.back() = full[static_cast<size_t>(d)];
        continue;
      }
    }
    dims.push_back(n);
    st.push_back(full[static_cast<size_t>(d)]);
  }
  REFORGE_CHECK(static_cast<int>(dims.size()) <= kMaxRank, where, ": broadcast of rank ", dims.size(),
                " exceeds the CUDA backend's ", kMaxRank);
  Strides<N> s;
  s.rank = static_cast<int>(dims.size());
  for (int d = 0; d < s.rank; ++d) {
    s.dims[d] = dims[static_cast<size_t>(d)];
    for (int k = 0; k < N; ++k) s.stride[k][d] = st[static_cast<size_t>(d)][k];
  }
  return s;
}

}  // namespace reforge::cuda
