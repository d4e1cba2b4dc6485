// The validation and geometry of RotaryEmbedding (opset 23), shared by the CPU reference kernel
// (rotary.cc) and the CUDA kernel (backends/cuda/rotary.cu), so that both refuse the same inputs
// with the same messages and read the same cache rows. Host code only (rotary_setup.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::ops {

// X is [batch, heads, seq, head_size] or, 3-D, [batch, seq, heads * head_size] (num_heads);
// the first `rot` features of each head rotate, as `half` pairs. The caches (inputs 1 and 2, X's
// type) are [max_position, half] indexed by position_ids (input 3) when given, else
// [batch, seq, half].
struct RotarySetup {
  bool is_3d = false, interleaved = false;
  int64_t batch = 0, heads = 0, seq = 0, head_size = 0;
  int64_t rot = 0, half = 0;
  bool has_positions = false;
};
RotarySetup rotary_setup(const KernelContext& ctx);

// The cache row offset (in elements) of each (b, s) for `positions` (position_ids read on the
// host, [batch, seq]): each must be inside the cache.
std::vector<int64_t> rotary_position_rows(const KernelContext& ctx, const RotarySetup& s,
                                          const std::vector<int64_t>& positions);

}  // namespace reforge::ops
