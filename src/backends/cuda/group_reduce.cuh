// Deterministic reductions by groups of threads within a block (shared by the reduction, softmax
// and normalization kernels): each group of G threads (G a power of two dividing the 256 threads
// of a block) combines its partials by a tree in shared memory, in a fixed order, so results do
// not depend on timing (no atomics).
#pragma once

#include <cstdint>

namespace reforge::cuda {

inline constexpr int kGroupThreads = 256;

// This block's scratch of kGroupThreads accumulators of Acc (at most 16 bytes each). Callers of
// different Acc types get different arrays; one caller's uses are separated by group_combine's
// barriers.
template <typename Acc>
__device__ __forceinline__ Acc* shared_acc() {
  static_assert(sizeof(Acc) <= 16, "accumulator too large");
  __shared__ alignas(16) unsigned char raw[kGroupThreads * 16];
  return reinterpret_cast<Acc*>(raw);
}

// Combines each thread's `a` over its group of G threads with combine(x, y); every thread gets
// its group's result. Every thread of the block must call it (uniform control flow).
template <int G, typename Acc, typename Combine>
__device__ __forceinline__ Acc group_combine(Acc a, Combine combine) {
  Acc* sh = shared_acc<Acc>();
  const int lane = threadIdx.x % G;
  sh[threadIdx.x] = a;
  __syncthreads();
  for (int s = G / 2; s > 0; s >>= 1) {
    if (lane < s) sh[threadIdx.x] = combine(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const Acc r = sh[threadIdx.x - lane];
  __syncthreads();
  return r;
}

// A warp's maximum (a NaN lane's value is never adopted by the others) and sum, by shuffles in
// a fixed order.
template <typename C>
__device__ __forceinline__ C warp_max(C v) {
  for (int o = 16; o > 0; o >>= 1) {
    const C w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;  // NaN never adopted
  }
  return v;
}

template <typename C>
__device__ __forceinline__ C warp_sum(C v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace reforge::cuda
