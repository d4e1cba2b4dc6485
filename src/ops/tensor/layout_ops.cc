// Layout ops: Transpose, Concat, Split, Slice, Tile, DepthToSpace, SpaceToDepth, Trilu.
//
// Transpose, Slice, Tile and the depth/space rearrangements are all expressed as strided_copy()
// over a view of the input (permuted, offset, zero or interleaved strides), so the index
// arithmetic of each op is only a few lines of stride bookkeeping.
#include <algorithm>
#include <cstring>
#include <limits>

#include "ops/tensor/tensor_common.h"
#include "ops/tensor/transpose2d.h"

namespace reforge::ops {
namespace {

void transpose_kernel(KernelContext& ctx) {
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
  const std::vector<int64_t> xs = contiguous_strides(x.shape());
  Shape out(static_cast<size_t>(rank));
  std::vector<int64_t> strides(static_cast<size_t>(rank));
  for (size_t i = 0; i < perm.size(); ++i) {
    out[i] = x.dim(perm[i]);
    strides[i] = xs[static_cast<size_t>(perm[i])];
  }
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), out);
  // Batched 2-D swaps (weight [in, out] <-> [out, in], attention heads): cache-blocked, parallel.
  Transpose2D t2;
  if (as_transpose_2d(x.shape(), perm, dtype_size(x.dtype()), &t2))
    return transpose_2d(y.mutable_raw(), x.raw(), t2, ctx.threads());
  strided_copy(y.mutable_raw(), x.raw(), dtype_size(x.dtype()), out, strides, 0);
}

void concat_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  std::vector<const Tensor*> ins;
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) ins.push_back(&ctx.input(i));
  if (ins.empty()) fail(where, ": needs at least one input");
  const Tensor& first = *ins[0];
  const int64_t rank = first.rank();
  if (rank == 0) fail(where, ": cannot concatenate scalars");
  if (ctx.opset() >= 4 && !ctx.node().has_attr("axis")) fail(where, ": required attribute 'axis' is missing");
  const int64_t axis = normalize_axis(ctx.attr_int("axis", 1), rank, where);
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
  const size_t elem = dtype_size(first.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= out[static_cast<size_t>(d)];
  const int64_t out_row = out[static_cast<size_t>(axis)] * inner;  // elements per outer index
  char* dst = static_cast<char*>(y.mutable_raw());
#pragma omp parallel for schedule(static) if (y.numel() > (int64_t{1} << 16) && outer > 1)
  for (int64_t o = 0; o < outer; ++o) {
    int64_t at = o * out_row;
    for (const Tensor* t : ins) {
      const int64_t n = t->dim(axis) * inner;
      if (n)
        std::memcpy(dst + at * elem, static_cast<const char*>(t->raw()) + o * n * elem, static_cast<size_t>(n) * elem);
      at += n;
    }
  }
}

// Split sizes: the `split` attribute (opsets 1-12) or input (13+), else num_outputs (18+, last
// chunk smaller when uneven), else equal parts, one per output.
void split_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  if (x.rank() == 0) fail(where, ": cannot split a scalar");
  const int64_t axis = normalize_axis(ctx.attr_int("axis", 0), x.rank(), where);
  const int64_t dim = x.dim(axis);
  const int64_t n_out = static_cast<int64_t>(ctx.num_outputs());
  std::vector<int64_t> sizes;
  if (ctx.opset() < 13 && ctx.node().has_attr("split")) {
    sizes = ctx.attr_ints("split");
  } else if (ctx.has_input(1) && ctx.input(1).numel() > 0) {
    sizes = read_int_tensor(ctx.input(1), where, "input 'split'");
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
  const size_t elem = dtype_size(x.dtype());
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
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

// Slice: starts/ends/axes attributes (opsets 1-9), then inputs starts, ends, axes, steps.
void slice_kernel(KernelContext& ctx) {
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
    starts = read_int_tensor(ctx.input(1), where, "input 'starts'");
    ends = read_int_tensor(ctx.input(2), where, "input 'ends'");
    if ((has_axes = ctx.has_input(3))) axes = read_int_tensor(ctx.input(3), where, "input 'axes'");
    if ((has_steps = ctx.has_input(4))) steps = read_int_tensor(ctx.input(4), where, "input 'steps'");
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
  axes = normalize_axes(axes, rank, where);

  Shape out = x.shape();
  const std::vector<int64_t> xs = contiguous_strides(x.shape());
  std::vector<int64_t> strides = xs;
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t a = static_cast<size_t>(axes[i]);
    const int64_t dim = x.shape()[a];
    int64_t step = steps[i];
    if (step == 0) fail(where, ": step for axis ", axes[i], " is 0");
    // A step larger than the dim selects at most one element either way; clamping it keeps the
    // stride arithmetic below from overflowing.
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
  strided_copy(y.mutable_raw(), x.raw(), dtype_size(x.dtype()), out, strides, offset);
}

// Tile is Expand of an interleaved view: output dims [r0, d0, r1, d1, ...] with stride 0 on the
// repeat dims read exactly the tiled order, then collapse to [r0*d0, r1*d1, ...].
void tile_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> reps = read_int_tensor(ctx.input(1), where, "input 'repeats'");
  if (static_cast<int64_t>(reps.size()) != x.rank())
    fail(where, ": repeats has ", reps.size(), " entries for an input of rank ", x.rank());
  const std::vector<int64_t> xs = contiguous_strides(x.shape());
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
  strided_copy(y.mutable_raw(), x.raw(), dtype_size(x.dtype()), view, strides, 0);
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

void depth_to_space_kernel(KernelContext& ctx) {
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
  Tensor& y = ctx.allocate_output(0, x.dtype(), {s.n, c2, s.h * b, s.w * b});
  strided_copy(y.mutable_raw(), x.raw(), dtype_size(x.dtype()), view, strides, 0);
}

void space_to_depth_kernel(KernelContext& ctx) {
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
  Tensor& y = ctx.allocate_output(0, x.dtype(), {s.n, s.c * b * b, h2, w2});
  strided_copy(y.mutable_raw(), x.raw(), dtype_size(x.dtype()), view, strides, 0);
}

// Trilu keeps the upper (j - i >= k) or lower (j - i <= k) triangle of each matrix.
void trilu_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) fail(where, ": input must have rank >= 2, got ", x.describe());
  int64_t k = 0;
  if (ctx.has_input(1)) {
    std::vector<int64_t> kv = read_int_tensor(ctx.input(1), where, "input 'k'");
    if (kv.size() != 1) fail(where, ": k must hold one value, got ", ctx.input(1).describe());
    k = kv[0];
  }
  const bool upper = ctx.attr_int("upper", 1) != 0;
  const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
  const int64_t mats = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
  k = std::clamp<int64_t>(k, -rows - 1, cols + 1);  // beyond these the result no longer changes
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
  r.add({"", "Concat", 1, INT_MAX, concat_kernel, nullptr});
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
  r.add({"", "DepthToSpace", 1, INT_MAX, depth_to_space_kernel, check_mode});
  r.add({"", "SpaceToDepth", 1, INT_MAX, space_to_depth_kernel, check_mode});
  r.add({"", "Trilu", 14, INT_MAX, trilu_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kShape}});
}

}  // namespace reforge::ops
