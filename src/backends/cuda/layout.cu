// Layout ops on the GPU: Transpose, Concat, Split, Slice, Tile, DepthToSpace, SpaceToDepth and
// Trilu. As on the CPU (src/ops/tensor/layout_ops.cc), each is stride bookkeeping on the host
// over one data-movement kernel: walk a view in C order and copy element i from
// src[src_offset + sum c_d * src_stride_d] to dst[dst_offset + sum c_d * dst_stride_d]. Elements
// move by size (1, 2, 4 or 8 bytes), never by value, so every dtype is copied bit for bit.
// Concat of up to eight inputs is one launch over the output's rows instead, moving 16-byte units
// where the rows allow (the key-value cache's Concat of a decoding step).
// Structure inputs (Split's split, Slice's starts/ends/axes/steps, Tile's repeats, Trilu's k)
// arrive on the host.
#include <algorithm>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"
#include "ops/tensor/layout_setup.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::cuda {

namespace {

// Dimensions of a strided view: Tile doubles the input's rank.
constexpr int kMaxViewRank = 2 * kMaxRank;

struct ViewStrides {
  int rank = 0;
  int64_t dims[kMaxViewRank] = {};
  int64_t src[kMaxViewRank] = {};
  int64_t dst[kMaxViewRank] = {};
};

template <typename T>
__global__ void strided_copy_kernel(T* dst, const T* src, ViewStrides s, int64_t src_offset, int64_t dst_offset,
                                    int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, so = src_offset, dof = dst_offset;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t q = rest / s.dims[d];
      const int64_t c = rest - q * s.dims[d];
      rest = q;
      so += c * s.src[d];
      dof += c * s.dst[d];
    }
    dst[dof] = src[so];
  }
}

// Copies the view `shape` of `src` (strides `src_strides`, may be 0 or negative, from element
// `src_offset`) into `dst` at `dst_offset` with strides `dst_strides` (empty: dense C order).
// Size-1 dimensions are dropped and dimensions both sides walk contiguously are merged.
void strided_copy(void* dst, const void* src, size_t elem, const Shape& shape, const std::vector<int64_t>& src_strides,
                  int64_t src_offset, std::vector<int64_t> dst_strides, int64_t dst_offset, const std::string& where) {
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  if (dst_strides.empty()) dst_strides = ops::contiguous_strides(shape);
  std::vector<int64_t> dims, ss, ds;
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t e = shape[d];
    if (e == 1) continue;
    if (!dims.empty() && ss.back() == src_strides[d] * e && ds.back() == dst_strides[d] * e) {
      dims.back() *= e;
      ss.back() = src_strides[d];
      ds.back() = dst_strides[d];
      continue;
    }
    dims.push_back(e);
    ss.push_back(src_strides[d]);
    ds.push_back(dst_strides[d]);
  }
  REFORGE_CHECK(static_cast<int>(dims.size()) <= kMaxViewRank, where, ": a view of rank ", dims.size(),
                " exceeds the CUDA backend's ", kMaxViewRank);
  ViewStrides s;
  s.rank = static_cast<int>(dims.size());
  for (int d = 0; d < s.rank; ++d) {
    s.dims[d] = dims[static_cast<size_t>(d)];
    s.src[d] = ss[static_cast<size_t>(d)];
    s.dst[d] = ds[static_cast<size_t>(d)];
  }
  auto launch = [&](auto tag) {
    using U = typename decltype(tag)::type;
    strided_copy_kernel<U><<<grid_for(n), 256, 0, stream()>>>(static_cast<U*>(dst), static_cast<const U*>(src), s,
                                                              src_offset, dst_offset, n);
  };
  switch (elem) {
    case 1:
      launch(TypeTag<uint8_t>{});
      break;
    case 2:
      launch(TypeTag<uint16_t>{});
      break;
    case 4:
      launch(TypeTag<uint32_t>{});
      break;
    case 8:
      launch(TypeTag<uint64_t>{});
      break;
    default:
      fail(where, ": elements of ", elem, " bytes are not supported");
  }
  check_launch("strided_copy");
}

// Dense copy: dst (C order, `shape`) = view of src.
void gather_view(Tensor& y, const Tensor& x, const Shape& view, const std::vector<int64_t>& strides, int64_t offset,
                 const std::string& where) {
  strided_copy(y.mutable_raw(), x.raw(), dtype_size(x.dtype()), view, strides, offset, {}, 0, where);
}

// Tiled transpose of the last two dimensions of a [batch, rows, cols] tensor: 32x32 tiles through
// shared memory, so both the read and the write are coalesced.
template <typename T>
__global__ void transpose_last2_kernel(T* dst, const T* src, int64_t rows, int64_t cols, int64_t tiles_r,
                                       int64_t tiles_c, int64_t tiles) {
  __shared__ T tile[32][33];
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t b = t / (tiles_r * tiles_c);
    const int64_t rest = t - b * tiles_r * tiles_c;
    const int64_t r0 = (rest / tiles_c) * 32, c0 = (rest % tiles_c) * 32;
    const T* in = src + b * rows * cols;
    T* out = dst + b * rows * cols;
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
      const int64_t r = r0 + k, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[k][threadIdx.x] = in[r * cols + c];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
      const int64_t c = c0 + k, r = r0 + threadIdx.x;  // out[c][r], shape [cols, rows]
      if (r < rows && c < cols) out[c * rows + r] = tile[threadIdx.x][k];
    }
    __syncthreads();
  }
}

void transpose_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  const ops::TransposeSetup s = ops::transpose_setup(ctx);
  const std::vector<int64_t>& perm = s.perm;
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), s.view.out);
  if (y.numel() == 0) return;
  // Swap of the last two axes, leading axes in order: the tiled kernel.
  bool last2 =
      rank >= 2 && perm[static_cast<size_t>(rank - 1)] == rank - 2 && perm[static_cast<size_t>(rank - 2)] == rank - 1;
  for (int64_t d = 0; last2 && d < rank - 2; ++d) last2 = perm[static_cast<size_t>(d)] == d;
  const int64_t rows = rank >= 2 ? x.dim(rank - 2) : 1, cols = rank >= 2 ? x.dim(rank - 1) : 1;
  if (last2 && rows > 1 && cols > 1) {
    const int64_t batch = x.numel() / (rows * cols);
    const int64_t tr = (rows + 31) / 32, tc = (cols + 31) / 32;
    const int64_t tiles = batch * tr * tc;
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, 65535 * 4));
    ops::dispatch_bytes(
        x.dtype(),
        [&](auto tag) {
          using U = typename decltype(tag)::type;
          transpose_last2_kernel<U><<<grid, dim3(32, 8), 0, stream()>>>(
              static_cast<U*>(y.mutable_raw()), static_cast<const U*>(x.raw()), rows, cols, tr, tc, tiles);
        },
        where);
    check_launch("transpose_last2");
    return;
  }
  gather_view(y, x, s.view.shape, s.view.strides, 0, where);
}

// Concat in one launch: the output as `rows` rows (the dimensions before the axis) of the inputs'
// rows side by side (each input's dimensions from the axis on), copied in units of U (16 bytes
// where every row and pointer allows, else 4, else 1). Unit i of the output finds its input by
// the column offsets.
constexpr int kConcatInputs = 8;
struct ConcatRows {
  int inputs = 0;
  const void* src[kConcatInputs] = {};
  int64_t cols[kConcatInputs] = {};  // an input row's units
  int64_t at[kConcatInputs] = {};    // its first column in the output row
  int64_t out_cols = 0, rows = 0;
};

template <typename U>
__global__ void concat_rows_kernel(U* __restrict__ dst, const ConcatRows c) {
  const int64_t n = c.rows * c.out_cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / c.out_cols, col = i - r * c.out_cols;
    int k = 0;
    while (k + 1 < c.inputs && col >= c.at[k + 1]) ++k;
    dst[i] = static_cast<const U*>(c.src[k])[r * c.cols[k] + (col - c.at[k])];
  }
}

// The one-launch concat of `inputs` along `axis` into `y` when there are at most kConcatInputs
// inputs; false otherwise (nothing done).
bool concat_rows(Tensor& y, const std::vector<const Tensor*>& inputs, int64_t axis) {
  if (inputs.size() > static_cast<size_t>(kConcatInputs) || y.numel() == 0) return false;
  const size_t elem = dtype_size(y.dtype());
  int64_t rows = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= y.dim(d);
  std::vector<const Tensor*> ins;
  std::vector<int64_t> bytes;  // an input row's bytes
  uintptr_t bits = reinterpret_cast<uintptr_t>(y.raw());
  for (const Tensor* t : inputs) {
    if (t->numel() == 0) continue;
    ins.push_back(t);
    bytes.push_back(t->numel() / rows * static_cast<int64_t>(elem));
    bits |= reinterpret_cast<uintptr_t>(t->raw()) | static_cast<uintptr_t>(bytes.back());
  }
  const int64_t unit = bits % 16 == 0 ? 16 : bits % 4 == 0 ? 4 : 1;
  ConcatRows c;
  c.inputs = static_cast<int>(ins.size());
  c.rows = rows;
  for (size_t k = 0; k < ins.size(); ++k) {
    c.src[k] = ins[k]->raw();
    c.cols[k] = bytes[k] / unit;
    c.at[k] = c.out_cols;
    c.out_cols += c.cols[k];
  }
  const unsigned grid = grid_for(rows * c.out_cols);
  if (unit == 16)
    concat_rows_kernel<uint4><<<grid, 256, 0, stream()>>>(static_cast<uint4*>(y.mutable_raw()), c);
  else if (unit == 4)
    concat_rows_kernel<uint32_t><<<grid, 256, 0, stream()>>>(static_cast<uint32_t*>(y.mutable_raw()), c);
  else
    concat_rows_kernel<uint8_t><<<grid, 256, 0, stream()>>>(static_cast<uint8_t*>(y.mutable_raw()), c);
  check_launch("Concat");
  return true;
}

void concat_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const ops::ConcatSetup s = ops::concat_setup(ctx);
  const Tensor& first = *s.inputs[0];
  const Shape& out = s.out;
  const int64_t axis = s.axis;
  Tensor& y = ctx.allocate_output_uninit(0, first.dtype(), out);
  if (concat_rows(y, s.inputs, axis)) return;
  const std::vector<int64_t> ys = ops::contiguous_strides(out);
  int64_t at = 0;  // offset along axis
  for (const Tensor* t : s.inputs) {
    strided_copy(y.mutable_raw(), t->raw(), dtype_size(first.dtype()), t->shape(), ops::contiguous_strides(t->shape()),
                 0, ys, at * ys[static_cast<size_t>(axis)], where);
    at += t->dim(axis);
  }
}

void split_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const ops::SplitSetup s = ops::split_setup(ctx);
  const int64_t axis = s.axis, inner = s.inner;
  const std::vector<int64_t>& sizes = s.sizes;
  const std::vector<int64_t> strides = ops::contiguous_strides(x.shape());
  int64_t begin = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    Shape s = x.shape();
    s[static_cast<size_t>(axis)] = sizes[k];
    if (ctx.output_wanted(k)) {
      Tensor& y = ctx.allocate_output_uninit(k, x.dtype(), s);
      gather_view(y, x, s, strides, begin * inner, where);
    }
    begin += sizes[k];
  }
}

// y = view `v` of input 0.
void copy_view(ops::KernelContext& ctx, const ops::StridedView& v) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), v.out);
  gather_view(y, x, v.shape, v.strides, v.offset, ctx.node().label());
}

void slice_kernel(ops::KernelContext& ctx) { copy_view(ctx, ops::slice_view(ctx)); }
void tile_kernel(ops::KernelContext& ctx) { copy_view(ctx, ops::tile_view(ctx)); }
void depth_to_space_kernel(ops::KernelContext& ctx) { copy_view(ctx, ops::depth_to_space_view(ctx)); }
void space_to_depth_kernel(ops::KernelContext& ctx) { copy_view(ctx, ops::space_to_depth_view(ctx)); }

// Trilu: y[.., i, j] = x[.., i, j] where j - i >= k (upper) or j - i <= k (lower), else 0.
template <typename U>
__global__ void trilu_kernel_dev(U* dst, const U* src, int64_t rows, int64_t cols, int64_t k, bool upper, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % cols;
    const int64_t r = (i / cols) % rows;
    const bool keep = upper ? c - r >= k : c - r <= k;
    dst[i] = keep ? src[i] : U(0);
  }
}

void trilu_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const ops::TriluSetup s = ops::trilu_setup(ctx);
  const int64_t rows = s.rows, cols = s.cols, k = s.k;
  const bool upper = s.upper;
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  const int64_t n = y.numel();
  if (n == 0) return;
  ops::dispatch_bytes(
      x.dtype(),
      [&](auto tag) {
        using U = typename decltype(tag)::type;
        trilu_kernel_dev<U><<<grid_for(n), 256, 0, stream()>>>(static_cast<U*>(y.mutable_raw()),
                                                               static_cast<const U*>(x.raw()), rows, cols, k, upper, n);
      },
      where);
  check_launch("trilu");
}

}  // namespace

void register_layout_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "Transpose", transpose_kernel);
  add_kernel(r, "", "Concat", concat_kernel);
  add_kernel(r, "", "Split", split_kernel);
  add_kernel(r, "", "Slice", slice_kernel);
  add_kernel(r, "", "Tile", tile_kernel);
  add_kernel(r, "", "DepthToSpace", depth_to_space_kernel, ops::depth_space_check);
  add_kernel(r, "", "SpaceToDepth", space_to_depth_kernel, ops::depth_space_check);
  add_kernel(r, "", "Trilu", trilu_kernel);
}

}  // namespace reforge::cuda
