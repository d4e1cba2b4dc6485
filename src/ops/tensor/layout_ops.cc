// Layout ops: Transpose, Concat, Split, Slice, Tile, DepthToSpace, SpaceToDepth, Trilu.
//
// Transpose, Slice, Tile and the depth/space rearrangements are all expressed as strided_copy()
// over a view of the input (permuted, offset, zero or interleaved strides), so the index
// arithmetic of each op is only a few lines of stride bookkeeping.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/thread_pool.h"
#include "ops/tensor/layout_setup.h"
#include "ops/tensor/tensor_common.h"
#include "ops/tensor/transpose2d.h"

namespace reforge::ops {
namespace {

void transpose_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const TransposeSetup s = transpose_setup(ctx);
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), s.view.out);
  // Batched 2-D swaps (weight [in, out] <-> [out, in], attention heads): cache-blocked, parallel.
  Transpose2D t2;
  if (as_transpose_2d(x.shape(), s.perm, dtype_size(x.dtype()), &t2))
    return transpose_2d(y.mutable_raw(), x.raw(), t2, ctx.threads());
  strided_copy(y.mutable_raw(), x.raw(), dtype_size(x.dtype()), s.view.shape, s.view.strides, 0);
}

void concat_kernel(KernelContext& ctx) {
  const ConcatSetup s = concat_setup(ctx);
  const std::vector<const Tensor*>& ins = s.inputs;
  const Tensor& first = *ins[0];
  const int64_t rank = first.rank(), axis = s.axis;
  const Shape& out = s.out;
  Tensor& y = ctx.allocate_output_uninit(0, first.dtype(), out);
  const size_t elem = dtype_size(first.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= out[static_cast<size_t>(d)];
  const int64_t out_row = out[static_cast<size_t>(axis)] * inner;  // elements per outer index
  char* dst = static_cast<char*>(y.mutable_raw());
  // Outer block o of inputs [from, end) into the output, after `at` elements of it.
  auto copy_block = [&](int64_t o, size_t from, int64_t at) {
    for (size_t k = from; k < ins.size(); ++k) {
      const int64_t n = ins[k]->dim(axis) * inner;
      if (n)
        std::memcpy(dst + (o * out_row + at) * elem, static_cast<const char*>(ins[k]->raw()) + o * n * elem,
                    static_cast<size_t>(n) * elem);
      at += n;
    }
  };
  if (dst == first.raw() && first.numel() > 0) {
    // In place (Sharing::kInPlace): the output's memory holds input 0 at its start, as a state
    // buffer with room for the whole output does (runtime/state.h). Each outer block of input 0
    // moves up to its place in the output, last block first so that no block is overwritten
    // before it has moved (block o lands at or after where it was), then the other inputs are
    // written after it.
    const int64_t n0 = first.dim(axis) * inner;
    for (int64_t o = outer - 1; o >= 0; --o) {
      if (o > 0) std::memmove(dst + o * out_row * elem, dst + o * n0 * elem, static_cast<size_t>(n0) * elem);
      copy_block(o, 1, n0);
    }
    return;
  }
  const int threads = y.numel() > (int64_t{1} << 16) && outer > 1 ? omp_get_max_threads() : 1;
  parallel_for(outer, threads, 1, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) copy_block(o, 0, 0);
  });
}

void split_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const SplitSetup s = split_setup(ctx);
  const int64_t axis = s.axis, inner = s.inner;
  const std::vector<int64_t>& sizes = s.sizes;
  const size_t elem = dtype_size(x.dtype());
  const std::vector<int64_t> strides = contiguous_strides(x.shape());
  int64_t begin = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    Shape s = x.shape();
    s[static_cast<size_t>(axis)] = sizes[k];
    if (ctx.output_wanted(k)) {
      Tensor& y = ctx.allocate_output(k, x.dtype(), s);
      strided_copy(y.mutable_raw(), x.raw(), elem, s, strides, begin * inner);
    }
    begin += sizes[k];
  }
}

// y = view `v` of input 0 (every output element is written).
void copy_view(KernelContext& ctx, const StridedView& v) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), v.out);
  strided_copy(y.mutable_raw(), x.raw(), dtype_size(x.dtype()), v.shape, v.strides, v.offset);
}

void slice_kernel(KernelContext& ctx) { copy_view(ctx, slice_view(ctx)); }
void tile_kernel(KernelContext& ctx) { copy_view(ctx, tile_view(ctx)); }
void depth_to_space_kernel(KernelContext& ctx) { copy_view(ctx, depth_to_space_view(ctx)); }
void space_to_depth_kernel(KernelContext& ctx) { copy_view(ctx, space_to_depth_view(ctx)); }

// Trilu keeps the upper (j - i >= k) or lower (j - i <= k) triangle of each matrix.
void trilu_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const TriluSetup s = trilu_setup(ctx);
  const bool upper = s.upper;
  const int64_t rows = s.rows, cols = s.cols, k = s.k;
  const int64_t mats = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
  const size_t elem = dtype_size(x.dtype());
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.mutable_raw());
  for (int64_t m = 0; m < mats; ++m) {
    for (int64_t i = 0; i < rows; ++i) {
      // Kept columns [lo, hi) of row i; the rest stays zero.
      const int64_t lo = upper ? std::clamp<int64_t>(i + k, 0, cols) : 0;
      const int64_t hi = upper ? cols : std::clamp<int64_t>(i + k + 1, 0, cols);
      if (hi <= lo) continue;
      const int64_t at = (m * rows + i) * cols + lo;
      std::memcpy(dst + at * elem, src + at * elem, static_cast<size_t>(hi - lo) * elem);
    }
  }
}

}  // namespace

void register_layout_ops(OpRegistry& r) {
  r.add({"", "Transpose", 1, INT_MAX, transpose_kernel, nullptr});
  r.add(with_sharing({"", "Concat", 1, INT_MAX, concat_kernel, nullptr}, {{0, 0, Sharing::kInPlace}}));
  r.add({"", "Split", 1, INT_MAX, split_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kShape}});
  r.add({"",
         "Slice",
         1,
         INT_MAX,
         slice_kernel,
         nullptr,
         nullptr,
         {InputRole::kData, InputRole::kShape, InputRole::kShape, InputRole::kShape, InputRole::kShape}});
  r.add({"", "Tile", 6, INT_MAX, tile_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kShape}});
  r.add({"", "DepthToSpace", 1, INT_MAX, depth_to_space_kernel, depth_space_check});
  r.add({"", "SpaceToDepth", 1, INT_MAX, space_to_depth_kernel, depth_space_check});
  r.add({"", "Trilu", 14, INT_MAX, trilu_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kShape}});
}

}  // namespace reforge::ops
