// Softmax and LogSoftmax over [outer, n, inner] blocks (softmax.cc): the shape logic and the
// 16-bit and double computations every backend shares; a backend plugs in the float32 block.
#pragma once

#include <cstdint>

#include "ops/registry.h"

namespace reforge::ops {

// Normalizes one float32 block [n, inner] over n (log: LogSoftmax). `work` holds 2 * inner floats.
using SoftmaxF32Block = void (*)(const float* x, float* y, int64_t n, int64_t inner, bool log, float* work);

// The input seen as [outer, n, inner] blocks normalized over n: around `axis` (default -1), or,
// before opset 13, everything from `axis` (default 1) on as one block (n its size, inner 1).
// Shared with Hardmax and the CUDA kernel (backends/cuda/softmax.cu).
struct SoftmaxBlocks {
  int64_t outer = 1, n = 1, inner = 1;
};
SoftmaxBlocks softmax_blocks(const KernelContext& ctx);

// Softmax (log = false) or LogSoftmax of the node's input, float32 blocks by `f32_block`.
void softmax_run(KernelContext& ctx, bool log, SoftmaxF32Block f32_block);

}  // namespace reforge::ops
