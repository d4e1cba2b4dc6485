// Vector helpers shared by the reduce family (max/min scans over float and double).
//
// Why not plain loops: under the default -ftrapping-math GCC will not if-convert float compares
// (`v > m ? v : m`, `v != v`), so max/min/NaN scans stay scalar however they are written. GCC
// and Clang vector types make the compare-and-select explicit. 16-byte vectors are the width
// every x86-64 (SSE2) and AArch64 (NEON) build has.
#pragma once

#include <cstdint>
#include <cstring>

namespace reforge::ops::simd {

template <typename S> struct Vec;
template <> struct Vec<float> {
  using V = float __attribute__((vector_size(16)));
  using M = int32_t __attribute__((vector_size(16)));
  static constexpr int W = 4;
};
template <> struct Vec<double> {
  using V = double __attribute__((vector_size(16)));
  using M = int64_t __attribute__((vector_size(16)));
  static constexpr int W = 2;
};

template <typename S>
inline typename Vec<S>::V load(const S* p) {
  typename Vec<S>::V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename S>
inline void store(S* p, typename Vec<S>::V v) { std::memcpy(p, &v, sizeof(v)); }
template <typename S>
inline typename Vec<S>::V splat(S s) { return typename Vec<S>::V{} + s; }

// Max (IsMax) or min of x[0..n) folded into `init`; *nan is set when any element is NaN (the
// value returned then ignores the NaNs).
template <typename S, bool IsMax>
inline S extremum_row(const S* x, int64_t n, S init, bool* nan) {
  using V = typename Vec<S>::V;
  using M = typename Vec<S>::M;
  constexpr int W = Vec<S>::W;
  V a = splat(init), b = a;
  M bad = M{};
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const V u = load(x + i), v = load(x + i + W);
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

// acc[j] = extremum(acc[j], x[j]) for j in [0, n), NaN-propagating (a NaN in x or acc sticks).
template <typename S, bool IsMax>
inline void extremum_col(S* acc, const S* x, int64_t n) {
  using V = typename Vec<S>::V;
  constexpr int W = Vec<S>::W;
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    const V v = load(x + j), c = load(acc + j);
    if constexpr (IsMax) store(acc + j, ((v > c) | (v != v)) ? v : c);
    else store(acc + j, ((v < c) | (v != v)) ? v : c);
  }
  for (; j < n; ++j) {
    const S v = x[j];
    if ((IsMax ? v > acc[j] : v < acc[j]) || v != v) acc[j] = v;
  }
}

}  // namespace reforge::ops::simd
