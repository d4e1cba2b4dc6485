// Batched 2-D transpose, the data movement behind most Transposes (weights stored [in, out] vs
// [out, in], attention heads [B, S, H, D] <-> [B, H, S, D]): a perm that, after dropping size-1
// axes and merging axes that stay adjacent, swaps two axes between an outer batch and an inner
// block is batch x [rows, cols] -> batch x [cols, rows] with `elem`-byte elements.
//
// transpose_2d() copies cache-blocked tiles through a small buffer (so neither side walks a
// column), parallel over tiles on the kernel thread pool. transpose_equals() compares a tensor
// with the transpose of another the same way without materializing it, stopping at the first
// difference. Both move bytes only, so the result does not depend on the thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace reforge::ops {

struct Transpose2D {
  int64_t batch = 1, rows = 1, cols = 1;
  size_t elem = 0;  // bytes per moved block
};

// The batched 2-D form of transposing an input of `shape` (elements of `elem` bytes) by `perm`,
// or false when the perm is not such a swap (or is an identity) or the input is empty.
bool as_transpose_2d(const Shape& shape, const std::vector<int64_t>& perm, size_t elem, Transpose2D* out);

// dst[b][c][r] = src[b][r][c].
void transpose_2d(void* dst, const void* src, const Transpose2D& t, int threads);

// The tile kernel behind transpose_2d, for one strided matrix and on the calling thread:
// dst[j * dst_pitch + i] = src[i * src_pitch + j] for i < rows, j < cols (pitches in elements,
// elements of 1, 2, 4 or 8 bytes). strided_copy() uses it for its transpose-like copies, so
// Transpose, Slice-of-transposed and the layout ops all move tiles the same way.
void transpose_block(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t rows, int64_t cols,
                     size_t elem);

// True when `transposed` holds exactly the bytes transpose_2d(src) would write.
bool transpose_equals(const void* transposed, const void* src, const Transpose2D& t, int threads);

}  // namespace reforge::ops
