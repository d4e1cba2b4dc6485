// Launch geometry of the CUDA backend's grid-stride kernels, in one place so that every kernel
// family sizes its grids the same way.
//
// Kernels loop over their elements with a grid stride, so a grid smaller than the work is still
// correct: the caps below only bound how many blocks one launch asks for (more would add
// scheduling cost without adding parallelism on any current device).
#pragma once

#include <cstdint>

#include "backends/cuda/cuda_common.h"

namespace reforge::cuda {

// What an element-size dispatch (ops::dispatch_bytes) adds to its refusal on this backend.
inline constexpr const char* kOnCuda = " on the CUDA backend";

// The most blocks of a launch whose blocks each do much work (rows, heads).
inline constexpr unsigned kMaxWideGrid = 65535u * 8;

// Blocks of 256 threads for `n` independent elements, at most `max_blocks`.
inline unsigned grid_for(int64_t n, unsigned max_blocks = 65535u * 4) {
  const unsigned b = blocks_for(n);
  return b > max_blocks ? max_blocks : b;
}

// Blocks for `rows` rows handled by `groups` groups of threads a block (at least 1, at most
// kMaxWideGrid).
inline unsigned row_grid(int64_t rows, int groups) {
  const int64_t b = (rows + groups - 1) / groups;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxWideGrid ? kMaxWideGrid : b));
}

}  // namespace reforge::cuda
