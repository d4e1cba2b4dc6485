// The validation and stride bookkeeping of the layout ops (Transpose, Concat, Split, Slice, Tile,
// DepthToSpace, SpaceToDepth, Trilu), shared by the CPU reference kernels (layout_ops.cc), the
// CUDA kernels (backends/cuda/layout.cu) and, for Slice's clamping, shape inference (infer.cc),
// so that every backend refuses the same inputs with the same messages and reads the same
// elements. Each op here is "walk a view of the input in C order": the setup gives the view, a
// backend moves the bytes. Host code only (layout_setup.cc); the CUDA compiler includes the
// declarations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::ops {

// Output element i (C order over `shape`) is input element `offset + sum_d c_d * strides[d]`,
// c the coordinates of i. `out` is the output's shape: `shape` itself, or the same elements
// under fewer dimensions (Tile, DepthToSpace, SpaceToDepth walk a finer view).
struct StridedView {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  Shape out;
};

// Transpose: `perm` (the attribute, or the reversed axes), checked to be a permutation.
struct TransposeSetup {
  std::vector<int64_t> perm;
  StridedView view;
};
TransposeSetup transpose_setup(const KernelContext& ctx);

// Concat: the present inputs (same type, same shape outside `axis`), the normalized axis and the
// output shape.
struct ConcatSetup {
  std::vector<const Tensor*> inputs;
  int64_t axis = 0;
  Shape out;
};
ConcatSetup concat_setup(const KernelContext& ctx);

// Split: the normalized axis, each output's extent along it, and the elements after the axis.
struct SplitSetup {
  int64_t axis = 0;
  std::vector<int64_t> sizes;
  int64_t inner = 1;
};
SplitSetup split_setup(const KernelContext& ctx);

// One axis of a Slice: the first index read, the step (clamped to the dimension, so that the
// stride arithmetic cannot overflow) and the number of elements.
struct SliceRange {
  int64_t start = 0;
  int64_t step = 1;
  int64_t len = 0;
};
// `start`/`end` as given (negative ones count from the end, any value clamps into the axis),
// `step` non-zero.
SliceRange slice_range(int64_t dim, int64_t start, int64_t end, int64_t step);

// Slice: starts/ends/axes attributes (opsets 1-9), then inputs starts, ends, axes, steps.
StridedView slice_view(const KernelContext& ctx);
// Tile: the interleaved view [r0, d0, r1, d1, ...] with stride 0 on the repeat dims.
StridedView tile_view(const KernelContext& ctx);
// DepthToSpace and SpaceToDepth (blocksize, mode DCR or CRD).
StridedView depth_to_space_view(const KernelContext& ctx);
StridedView space_to_depth_view(const KernelContext& ctx);
// The checker of DepthToSpace and SpaceToDepth: mode is DCR or CRD.
std::string depth_space_check(const ir::Node& node);

// Trilu: keep j - i >= k (upper) or j - i <= k (lower) of each [rows, cols] matrix. `k` is
// clamped to [-rows - 1, cols + 1], beyond which the result no longer changes.
struct TriluSetup {
  int64_t k = 0;
  bool upper = true;
  int64_t rows = 0, cols = 0;
};
TriluSetup trilu_setup(const KernelContext& ctx);

}  // namespace reforge::ops
