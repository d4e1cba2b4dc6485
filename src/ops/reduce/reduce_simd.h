// Vector helpers shared by the reduce family (max/min scans over float and double).
//
// Why not plain loops: under the default -ftrapping-math GCC will not if-convert float compares
// (`v > m ? v : m`, `v != v`), so max/min/NaN scans stay scalar however they are written. GCC
// and Clang vector types make the compare-and-select explicit. The scans are compiled once per
// instruction set (core/simd.h: AVX-512, AVX2, generic SSE2), each on vectors one register of its
// own width (64, 32 or 16 bytes: a wider vector would be lowered lane by lane), and picked per
// call. Max and min are exact, so the width only decides which of two equal values (-0 and +0)
// is kept.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/simd.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // wide vectors only cross always-inline boundaries
#endif

namespace reforge::ops::simd {

#define REFORGE_REDUCE_INLINE inline __attribute__((always_inline))

// kBytes-wide vectors of S (one register of the variant), and the matching lane masks.
template <typename S, int kBytes>
struct Vec;
#define REFORGE_REDUCE_VEC(S, I, BYTES)                           \
  template <>                                                     \
  struct Vec<S, BYTES> {                                          \
    using V = S __attribute__((vector_size(BYTES)));              \
    using M = I __attribute__((vector_size(BYTES)));              \
    static constexpr int W = BYTES / static_cast<int>(sizeof(S)); \
  };
REFORGE_REDUCE_VEC(float, int32_t, 16)
REFORGE_REDUCE_VEC(float, int32_t, 32)
REFORGE_REDUCE_VEC(float, int32_t, 64)
REFORGE_REDUCE_VEC(double, int64_t, 16)
REFORGE_REDUCE_VEC(double, int64_t, 32)
REFORGE_REDUCE_VEC(double, int64_t, 64)
#undef REFORGE_REDUCE_VEC

template <typename V>
REFORGE_REDUCE_INLINE V load(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename V>
REFORGE_REDUCE_INLINE void store(void* p, const V& v) {
  std::memcpy(p, &v, sizeof(v));
}

template <typename S, bool IsMax, int kBytes>
REFORGE_REDUCE_INLINE S extremum_row_impl(const S* x, int64_t n, S init, bool* nan) {
  using V = typename Vec<S, kBytes>::V;
  using M = typename Vec<S, kBytes>::M;
  constexpr int W = Vec<S, kBytes>::W;
  V a = V{} + init, b = a;
  M bad = M{};
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const V u = load<V>(x + i), v = load<V>(x + i + W);
    if constexpr (IsMax) {
      a = u > a ? u : a;
      b = v > b ? v : b;
    } else {
      a = u < a ? u : a;
      b = v < b ? v : b;
    }
    bad |= (u != u) | (v != v);
  }
  S m = init;
  bool any = false;
  for (int j = 0; j < W; ++j) {
    m = (IsMax ? a[j] > m : a[j] < m) ? a[j] : m;
    m = (IsMax ? b[j] > m : b[j] < m) ? b[j] : m;
    any = any || bad[j] != 0;
  }
  for (; i < n; ++i) {
    const S v = x[i];
    m = (IsMax ? v > m : v < m) ? v : m;
    any = any || v != v;
  }
  *nan = any;
  return m;
}

template <typename S, bool IsMax, int kBytes>
REFORGE_REDUCE_INLINE void extremum_col_impl(S* acc, const S* x, int64_t n) {
  using V = typename Vec<S, kBytes>::V;
  constexpr int W = Vec<S, kBytes>::W;
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    const V v = load<V>(x + j), c = load<V>(acc + j);
    if constexpr (IsMax)
      store(acc + j, ((v > c) | (v != v)) ? v : c);
    else
      store(acc + j, ((v < c) | (v != v)) ? v : c);
  }
  for (; j < n; ++j) {
    const S v = x[j];
    if ((IsMax ? v > acc[j] : v < acc[j]) || v != v) acc[j] = v;
  }
}

template <typename S, bool IsMax>
REFORGE_TARGET_AVX512 S extremum_row_avx512(const S* x, int64_t n, S init, bool* nan) {
  return extremum_row_impl<S, IsMax, 64>(x, n, init, nan);
}
template <typename S, bool IsMax>
REFORGE_TARGET_AVX2 S extremum_row_avx2(const S* x, int64_t n, S init, bool* nan) {
  return extremum_row_impl<S, IsMax, 32>(x, n, init, nan);
}
template <typename S, bool IsMax>
REFORGE_TARGET_GENERIC S extremum_row_generic(const S* x, int64_t n, S init, bool* nan) {
  return extremum_row_impl<S, IsMax, 16>(x, n, init, nan);
}
template <typename S, bool IsMax>
REFORGE_TARGET_AVX512 void extremum_col_avx512(S* acc, const S* x, int64_t n) {
  extremum_col_impl<S, IsMax, 64>(acc, x, n);
}
template <typename S, bool IsMax>
REFORGE_TARGET_AVX2 void extremum_col_avx2(S* acc, const S* x, int64_t n) {
  extremum_col_impl<S, IsMax, 32>(acc, x, n);
}
template <typename S, bool IsMax>
REFORGE_TARGET_GENERIC void extremum_col_generic(S* acc, const S* x, int64_t n) {
  extremum_col_impl<S, IsMax, 16>(acc, x, n);
}

// Max (IsMax) or min of x[0..n) folded into `init`; *nan is set when any element is NaN (the
// value returned then ignores the NaNs).
template <typename S, bool IsMax>
inline S extremum_row(const S* x, int64_t n, S init, bool* nan) {
  switch (simd_level()) {
    case SimdLevel::Avx512:
      return extremum_row_avx512<S, IsMax>(x, n, init, nan);
    case SimdLevel::Avx2:
      return extremum_row_avx2<S, IsMax>(x, n, init, nan);
    default:
      return extremum_row_generic<S, IsMax>(x, n, init, nan);
  }
}

// acc[j] = extremum(acc[j], x[j]) for j in [0, n), NaN-propagating (a NaN in x or acc sticks).
template <typename S, bool IsMax>
inline void extremum_col(S* acc, const S* x, int64_t n) {
  switch (simd_level()) {
    case SimdLevel::Avx512:
      return extremum_col_avx512<S, IsMax>(acc, x, n);
    case SimdLevel::Avx2:
      return extremum_col_avx2<S, IsMax>(acc, x, n);
    default:
      return extremum_col_generic<S, IsMax>(acc, x, n);
  }
}

}  // namespace reforge::ops::simd
