// Float32 vectors as GCC/Clang vector extensions, and the lane helpers every kernel written on
// them shares. Nothing here names an instruction set: a vector of any width compiles for any
// target (the compiler splits it into the registers it has), so the reference kernels of the op
// set use the 4-lane type and stay portable. The CPU backend (backends/cpu/simd_vec.h) compiles
// the same templates once per instruction set, each on vectors one register of its own width.
//
// Functions taking or returning a vector are always inlined (RF_INLINE), so no call passes one
// (the ABI of a vector wider than the base ISA's registers would differ between targets).
#pragma once

#include <cstdint>
#include <cstring>

#pragma GCC diagnostic ignored "-Wpsabi"  // wide vectors only cross always-inline boundaries

namespace reforge::ops::simdv {

#define RF_INLINE inline __attribute__((always_inline))

template <int kLanes>
struct LaneTypes;
template <>
struct LaneTypes<16> {
  using F = float __attribute__((vector_size(64)));
  using I = int32_t __attribute__((vector_size(64)));
  using U = uint32_t __attribute__((vector_size(64)));
};
template <>
struct LaneTypes<8> {
  using F = float __attribute__((vector_size(32)));
  using I = int32_t __attribute__((vector_size(32)));
  using U = uint32_t __attribute__((vector_size(32)));
};
template <>
struct LaneTypes<4> {
  using F = float __attribute__((vector_size(16)));
  using I = int32_t __attribute__((vector_size(16)));
  using U = uint32_t __attribute__((vector_size(16)));
};

// The vector the reference kernels compute on: 4 lanes, one SSE2 or NEON register.
using Vec4 = LaneTypes<4>::F;

template <typename V>
inline constexpr int lanes_of = static_cast<int>(sizeof(V) / sizeof(float));
template <typename V>
using IVec = typename LaneTypes<lanes_of<V>>::I;
template <typename V>
using UVec = typename LaneTypes<lanes_of<V>>::U;

// Every lane x: one vbroadcastss (from memory when x comes from there). The kernel templates are
// default-target functions inlined into the per-ISA ones, and GCC lowers a vector built from
// non-constant lanes ({x, x, ...}, or the lane-by-lane fill) in the default target's terms
// before inlining: it came out as vinsertps chains. V{} + x keeps a broadcast but adds a scalar
// 0 + x (and turns -0 into +0). Broadcasting lane 0 with __builtin_shufflevector stays one
// instruction.
template <typename V>
RF_INLINE V splat(float x) {
  const V v = {x};
  if constexpr (lanes_of<V> == 16)
    return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  else if constexpr (lanes_of<V> == 8)
    return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0);
  else
    return __builtin_shufflevector(v, v, 0, 0, 0, 0);
}
template <typename V>
RF_INLINE V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename V>
RF_INLINE void store(float* p, const V& v) {
  std::memcpy(p, &v, sizeof(v));
}
// Lane by lane, in order (so a variant's sums do not depend on how the compiler reduces).
template <typename V>
RF_INLINE float hsum(const V& v) {
  float s = 0;
  for (int i = 0; i < lanes_of<V>; ++i) s += v[i];
  return s;
}
template <typename V>
RF_INLINE float hmax(const V& v) {
  float m = v[0];
  for (int i = 1; i < lanes_of<V>; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

}  // namespace reforge::ops::simdv
