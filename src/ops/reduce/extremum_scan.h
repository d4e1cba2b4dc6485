// Max/min scans over float and double, shared by the reduce family's extremum kernels.
//
// Why not plain loops: under the default -ftrapping-math GCC will not if-convert float compares
// (`v > m ? v : m`, `v != v`), so max/min/NaN scans stay scalar however they are written. GCC
// and Clang vector types make the compare-and-select explicit. The scans are templates over the
// vector width and name no instruction set: the reference kernels run them on 16-byte vectors; the
// CPU backend (backends/cpu/reduce.cc) compiles them once per instruction set, each on vectors
// one register of its own width (64, 32 or 16 bytes), and picks one per call. Max and min are
// exact, so the width only decides which of two equal values (-0 and +0) is kept.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/registry.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // wide vectors only cross always-inline boundaries
#endif

namespace reforge::ops::extremum {

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

// The scans a kernel runs, one per element type and direction: ReduceMax / ReduceMin and
// ReduceLogSumExp (reduce.cc), ArgMax / ArgMin (reduce_arg.cc) take them as an argument. reference_scans() are
// the reference kernels' (16-byte vectors in the default target); the CPU backend passes its own,
// one per instruction set (backends/cpu/reduce.cc).
template <typename S>
struct ScansOf {
  // Max (IsMax) or min of x[0..n) folded into `init`; *nan is set when any element is NaN (the
  // value returned then ignores the NaNs).
  S (*max_row)(const S* x, int64_t n, S init, bool* nan);
  S (*min_row)(const S* x, int64_t n, S init, bool* nan);
  // acc[j] = extremum(acc[j], x[j]) for j in [0, n), NaN-propagating (a NaN in x or acc sticks).
  void (*max_col)(S* acc, const S* x, int64_t n);
  void (*min_col)(S* acc, const S* x, int64_t n);
  template <bool IsMax>
  S row(const S* x, int64_t n, S init, bool* nan) const {
    return (IsMax ? max_row : min_row)(x, n, init, nan);
  }
  template <bool IsMax>
  void col(S* acc, const S* x, int64_t n) const {
    (IsMax ? max_col : min_col)(acc, x, n);
  }
};
struct ExtremumScans {
  ScansOf<float> f32;
  ScansOf<double> f64;
  template <typename S>
  const ScansOf<S>& of() const {
    if constexpr (std::is_same_v<S, float>)
      return f32;
    else
      return f64;
  }
};

// The scans of one vector width (kBytes-wide vectors: the portable default is 16).
template <int kBytes>
struct ScansOfWidth {
  template <typename S, bool IsMax>
  static S row(const S* x, int64_t n, S init, bool* nan) {
    return extremum_row_impl<S, IsMax, kBytes>(x, n, init, nan);
  }
  template <typename S, bool IsMax>
  static void col(S* acc, const S* x, int64_t n) {
    extremum_col_impl<S, IsMax, kBytes>(acc, x, n);
  }
};

inline const ExtremumScans& reference_scans() {
  using W = ScansOfWidth<16>;
  static const ExtremumScans scans = {
      {W::row<float, true>, W::row<float, false>, W::col<float, true>, W::col<float, false>},
      {W::row<double, true>, W::row<double, false>, W::col<double, true>, W::col<double, false>}};
  return scans;
}

// ReduceMax / ReduceMin, ReduceLogSumExp (its first pass is a max) (reduce.cc) and ArgMax /
// ArgMin (reduce_arg.cc) with the given scans.
void reduce_extremum_kernel(KernelContext& ctx, bool is_max, const ExtremumScans& scans);
void reduce_log_sum_exp_kernel(KernelContext& ctx, const ExtremumScans& scans);
void arg_extremum_kernel(KernelContext& ctx, bool is_max, const ExtremumScans& scans);

}  // namespace reforge::ops::extremum
