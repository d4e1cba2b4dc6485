// Layout ops on the GPU: Transpose, Concat, Split, Slice, Tile, DepthToSpace, SpaceToDepth and
// Trilu. As on the CPU (src/ops/tensor/layout_ops.cc), each is stride bookkeeping on the host
// over one data-movement kernel: walk a view in C order and copy element i from
// src[src_offset + sum c_d * src_stride_d] to dst[dst_offset + sum c_d * dst_stride_d]. Elements
// move by size (1, 2, 4 or 8 bytes), never by value, so every dtype is copied bit for bit.
// Structure inputs (Split's split, Slice's starts/ends/axes/steps, Tile's repeats, Trilu's k)
// arrive on the host.
#include <algorithm>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
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

unsigned grid_for(int64_t n) {
  const unsigned b = blocks_for(n);
  return b > 65535u * 4 ? 65535u * 4 : b;
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
  std::vector<int64_t> perm = ctx.attr_ints("perm");
  if (!ctx.node().has_attr("perm")) {
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  }
  if (static_cast<int64_t>(perm.size()) != rank)
    fail(where, ": perm ", shape_str(perm), " has ", perm.size(), " entries for an input of rank ", rank);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[static_cast<size_t>(p)])
      fail(where, ": perm ", shape_str(perm), " is not a permutation of the ", rank, " input axes");
    seen[static_cast<size_t>(p)] = true;
  }
  const std::vector<int64_t> xs = ops::contiguous_strides(x.shape());
  Shape out(static_cast<size_t>(rank));
  std::vector<int64_t> strides(static_cast<size_t>(rank));
  for (size_t i = 0; i < perm.size(); ++i) {
    out[i] = x.dim(perm[i]);
    strides[i] = xs[static_cast<size_t>(perm[i])];
  }
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), out);
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
  gather_view(y, x, out, strides, 0, where);
}

void concat_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  std::vector<const Tensor*> ins;
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) ins.push_back(&ctx.input(i));
  if (ins.empty()) fail(where, ": needs at least one input");
  const Tensor& first = *ins[0];
  const int64_t rank = first.rank();
  if (rank == 0) fail(where, ": cannot concatenate scalars");
  if (ctx.opset() >= 4 && !ctx.node().has_attr("axis")) fail(where, ": required attribute 'axis' is missing");
  const int64_t axis = ops::normalize_axis(ctx.attr_int("axis", 1), rank, where);
  Shape out = first.shape();
  out[static_cast<size_t>(axis)] = 0;
  for (const Tensor* t : ins) {
    if (t->dtype() != first.dtype())
      fail(where, ": inputs have different element types (", first.describe(), " and ", t->describe(), ")");
    bool ok = t->rank() == rank;
    for (int64_t d = 0; ok && d < rank; ++d) ok = d == axis || t->dim(d) == first.dim(d);
    if (!ok)
      fail(where, ": input shapes ", shape_str(first.shape()), " and ", shape_str(t->shape()), " differ outside axis ",
           axis);
    out[static_cast<size_t>(axis)] += t->dim(axis);
  }
  Tensor& y = ctx.allocate_output_uninit(0, first.dtype(), out);
  const std::vector<int64_t> ys = ops::contiguous_strides(out);
  int64_t at = 0;  // offset along axis
  for (const Tensor* t : ins) {
    strided_copy(y.mutable_raw(), t->raw(), dtype_size(first.dtype()), t->shape(), ops::contiguous_strides(t->shape()),
                 0, ys, at * ys[static_cast<size_t>(axis)], where);
    at += t->dim(axis);
  }
}

// Split sizes: the `split` attribute (opsets 1-12) or input (13+), else num_outputs (18+, last
// chunk smaller when uneven), else equal parts, one per output.
void split_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  if (x.rank() == 0) fail(where, ": cannot split a scalar");
  const int64_t axis = ops::normalize_axis(ctx.attr_int("axis", 0), x.rank(), where);
  const int64_t dim = x.dim(axis);
  const int64_t n_out = static_cast<int64_t>(ctx.num_outputs());
  std::vector<int64_t> sizes;
  if (ctx.opset() < 13 && ctx.node().has_attr("split")) {
    sizes = ctx.attr_ints("split");
  } else if (ctx.has_input(1) && ctx.input(1).numel() > 0) {
    sizes = ops::read_int_tensor(ctx.input(1), where, "input 'split'");
  }
  if (!sizes.empty()) {
    if (static_cast<int64_t>(sizes.size()) != n_out)
      fail(where, ": split ", shape_str(sizes), " has ", sizes.size(), " entries for ", n_out, " outputs");
    int64_t sum = 0;
    for (int64_t s : sizes) {
      if (s < 0) fail(where, ": split ", shape_str(sizes), " has a negative size");
      sum += s;
    }
    if (sum != dim) fail(where, ": split ", shape_str(sizes), " sums to ", sum, ", but axis ", axis, " has size ", dim);
  } else if (ctx.opset() >= 18 && ctx.node().has_attr("num_outputs")) {
    const int64_t n = ctx.attr_int("num_outputs", 0);
    if (n != n_out) fail(where, ": num_outputs is ", n, " but the node has ", n_out, " outputs");
    const int64_t chunk = (dim + n - 1) / n;
    const int64_t last = dim - chunk * (n - 1);
    if (last < 0) fail(where, ": cannot split axis ", axis, " of size ", dim, " into ", n, " chunks");
    sizes.assign(static_cast<size_t>(n), chunk);
    sizes.back() = last;
  } else {
    if (n_out <= 0 || dim % n_out != 0)
      fail(where, ": axis ", axis, " of size ", dim, " cannot be split into ", n_out, " equal parts");
    sizes.assign(static_cast<size_t>(n_out), dim / n_out);
  }
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
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

// Slice: starts/ends/axes attributes (opsets 1-9), then inputs starts, ends, axes, steps.
void slice_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  std::vector<int64_t> starts, ends, axes, steps;
  bool has_axes = false, has_steps = false;
  if (ctx.opset() < 10) {
    starts = ctx.attr_ints("starts");
    ends = ctx.attr_ints("ends");
    has_axes = ctx.node().has_attr("axes");
    axes = ctx.attr_ints("axes");
  } else {
    starts = ops::read_int_tensor(ctx.input(1), where, "input 'starts'");
    ends = ops::read_int_tensor(ctx.input(2), where, "input 'ends'");
    if ((has_axes = ctx.has_input(3))) axes = ops::read_int_tensor(ctx.input(3), where, "input 'axes'");
    if ((has_steps = ctx.has_input(4))) steps = ops::read_int_tensor(ctx.input(4), where, "input 'steps'");
  }
  const size_t n = starts.size();
  if (ends.size() != n) fail(where, ": starts has ", n, " entries but ends has ", ends.size());
  if (!has_axes) {
    axes.resize(n);
    for (size_t i = 0; i < n; ++i) axes[i] = static_cast<int64_t>(i);
  }
  if (!has_steps) steps.assign(n, 1);
  if (axes.size() != n) fail(where, ": starts has ", n, " entries but axes has ", axes.size());
  if (steps.size() != n) fail(where, ": starts has ", n, " entries but steps has ", steps.size());
  axes = ops::normalize_axes(axes, rank, where);

  Shape out = x.shape();
  const std::vector<int64_t> xs = ops::contiguous_strides(x.shape());
  std::vector<int64_t> strides = xs;
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t a = static_cast<size_t>(axes[i]);
    const int64_t dim = x.shape()[a];
    int64_t step = steps[i];
    if (step == 0) fail(where, ": step for axis ", axes[i], " is 0");
    const int64_t max_step = std::max<int64_t>(dim, 1);
    step = std::clamp(step, -max_step, max_step);
    int64_t start = starts[i], end = ends[i];
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    int64_t len;
    if (dim == 0) {
      len = 0;
    } else if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      len = end > start ? (end - start + step - 1) / step : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      len = start > end ? (start - end - step - 1) / (-step) : 0;
    }
    out[a] = len;
    if (len > 0) offset += start * xs[a];
    strides[a] = step * xs[a];
  }
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), out);
  gather_view(y, x, out, strides, offset, where);
}

// Tile: the interleaved view [r0, d0, r1, d1, ...] with stride 0 on the repeat dims.
void tile_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> reps = ops::read_int_tensor(ctx.input(1), where, "input 'repeats'");
  if (static_cast<int64_t>(reps.size()) != x.rank())
    fail(where, ": repeats has ", reps.size(), " entries for an input of rank ", x.rank());
  const std::vector<int64_t> xs = ops::contiguous_strides(x.shape());
  Shape view, strides, out;
  for (size_t d = 0; d < reps.size(); ++d) {
    if (reps[d] < 0) fail(where, ": repeats ", shape_str(reps), " has a negative entry");
    view.push_back(reps[d]);
    strides.push_back(0);
    view.push_back(x.shape()[d]);
    strides.push_back(xs[d]);
    out.push_back(reps[d] * x.shape()[d]);
  }
  shape_numel(view);  // rejects overflow before allocating
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), out);
  gather_view(y, x, view, strides, 0, where);
}

struct Nchw {
  int64_t n, c, h, w;
};

Nchw check_nchw(const Tensor& x, int64_t b, const std::string& where) {
  if (x.rank() != 4) fail(where, ": input must have rank 4, got ", x.describe());
  if (b <= 0) fail(where, ": blocksize must be positive, got ", b);
  return {x.dim(0), x.dim(1), x.dim(2), x.dim(3)};
}

std::string check_mode(const ir::Node& node) {
  std::string mode = node.attr_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") return "mode '" + mode + "' is not supported (expected DCR or CRD)";
  return "";
}

void depth_to_space_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t b = ctx.node().attr_int("blocksize");
  const Nchw s = check_nchw(x, b, where);
  if (s.c % (b * b) != 0) fail(where, ": channels ", s.c, " are not divisible by blocksize^2 = ", b * b);
  const std::string reason = check_mode(ctx.node());
  if (!reason.empty()) fail(where, ": ", reason);
  const bool crd = ctx.opset() >= 11 && ctx.attr_string("mode", "DCR") == "CRD";
  const int64_t c2 = s.c / (b * b), hw = s.h * s.w;
  // Output walked as [n, c', h, i, w, j]: y[n, c', h*b+i, w*b+j].
  const Shape view{s.n, c2, s.h, b, s.w, b};
  std::vector<int64_t> strides;
  if (crd)  // x channel = c'*b*b + i*b + j
    strides = {s.c * hw, b * b * hw, s.w, b * hw, 1, hw};
  else  // DCR: x channel = (i*b + j)*c' + c'
    strides = {s.c * hw, hw, s.w, b * c2 * hw, 1, c2 * hw};
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), {s.n, c2, s.h * b, s.w * b});
  gather_view(y, x, view, strides, 0, where);
}

void space_to_depth_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t b = ctx.node().attr_int("blocksize");
  const Nchw s = check_nchw(x, b, where);
  if (s.h % b != 0 || s.w % b != 0) fail(where, ": spatial size ", s.h, "x", s.w, " is not divisible by blocksize ", b);
  const std::string reason = check_mode(ctx.node());
  if (!reason.empty()) fail(where, ": ", reason);
  const bool crd = ctx.attr_string("mode", "DCR") == "CRD";
  const int64_t h2 = s.h / b, w2 = s.w / b, hw = s.h * s.w;
  Shape view;
  std::vector<int64_t> strides;
  if (crd) {  // y channel = c*b*b + i*b + j: walk [n, c, i, j, h', w']
    view = {s.n, s.c, b, b, h2, w2};
    strides = {s.c * hw, hw, s.w, 1, b * s.w, b};
  } else {  // DCR: y channel = (i*b + j)*C + c: walk [n, i, j, c, h', w']
    view = {s.n, b, b, s.c, h2, w2};
    strides = {s.c * hw, s.w, 1, hw, b * s.w, b};
  }
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), {s.n, s.c * b * b, h2, w2});
  gather_view(y, x, view, strides, 0, where);
}

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
  if (x.rank() < 2) fail(where, ": input must have rank >= 2, got ", x.describe());
  int64_t k = 0;
  if (ctx.has_input(1)) {
    std::vector<int64_t> kv = ops::read_int_tensor(ctx.input(1), where, "input 'k'");
    if (kv.size() != 1) fail(where, ": k must hold one value, got ", ctx.input(1).describe());
    k = kv[0];
  }
  const bool upper = ctx.attr_int("upper", 1) != 0;
  const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
  k = std::clamp<int64_t>(k, -rows - 1, cols + 1);
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
  add_kernel(r, "", "DepthToSpace", depth_to_space_kernel, check_mode);
  add_kernel(r, "", "SpaceToDepth", space_to_depth_kernel, check_mode);
  add_kernel(r, "", "Trilu", trilu_kernel);
}

}  // namespace reforge::cuda
