// The shared setup of the layout ops (layout_setup.h): validation messages name the node, and
// every view reads only elements inside the input.
#include "ops/tensor/layout_setup.h"

#include <algorithm>

#include "ops/tensor/tensor_common.h"

namespace reforge::ops {

TransposeSetup transpose_setup(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  TransposeSetup s;
  std::vector<int64_t>& perm = s.perm;
  perm = ctx.attr_ints("perm");
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
  s.view.shape.resize(static_cast<size_t>(rank));
  s.view.strides.resize(static_cast<size_t>(rank));
  for (size_t i = 0; i < perm.size(); ++i) {
    s.view.shape[i] = x.dim(perm[i]);
    s.view.strides[i] = xs[static_cast<size_t>(perm[i])];
  }
  s.view.out = s.view.shape;
  return s;
}

ConcatSetup concat_setup(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  ConcatSetup s;
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) s.inputs.push_back(&ctx.input(i));
  if (s.inputs.empty()) fail(where, ": needs at least one input");
  const Tensor& first = *s.inputs[0];
  const int64_t rank = first.rank();
  if (rank == 0) fail(where, ": cannot concatenate scalars");
  if (ctx.opset() >= 4 && !ctx.node().has_attr("axis")) fail(where, ": required attribute 'axis' is missing");
  const int64_t axis = normalize_axis(ctx.attr_int("axis", 1), rank, where);
  s.axis = axis;
  s.out = first.shape();
  s.out[static_cast<size_t>(axis)] = 0;
  for (const Tensor* t : s.inputs) {
    if (t->dtype() != first.dtype())
      fail(where, ": inputs have different element types (", first.describe(), " and ", t->describe(), ")");
    bool ok = t->rank() == rank;
    for (int64_t d = 0; ok && d < rank; ++d) ok = d == axis || t->dim(d) == first.dim(d);
    if (!ok)
      fail(where, ": input shapes ", shape_str(first.shape()), " and ", shape_str(t->shape()), " differ outside axis ",
           axis);
    s.out[static_cast<size_t>(axis)] += t->dim(axis);
  }
  return s;
}

// Split sizes: the `split` attribute (opsets 1-12) or input (13+), else num_outputs (18+, last
// chunk smaller when uneven), else equal parts, one per output.
SplitSetup split_setup(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  if (x.rank() == 0) fail(where, ": cannot split a scalar");
  const int64_t axis = normalize_axis(ctx.attr_int("axis", 0), x.rank(), where);
  const int64_t dim = x.dim(axis);
  const int64_t n_out = static_cast<int64_t>(ctx.num_outputs());
  SplitSetup s;
  s.axis = axis;
  std::vector<int64_t>& sizes = s.sizes;
  if (ctx.opset() < 13 && ctx.node().has_attr("split")) {
    sizes = ctx.attr_ints("split");
  } else if (ctx.has_input(1) && ctx.input(1).numel() > 0) {
    sizes = read_int_tensor(ctx.input(1), where, "input 'split'");
  }
  if (!sizes.empty()) {
    if (static_cast<int64_t>(sizes.size()) != n_out)
      fail(where, ": split ", shape_str(sizes), " has ", sizes.size(), " entries for ", n_out, " outputs");
    int64_t sum = 0;
    for (int64_t v : sizes) {
      if (v < 0) fail(where, ": split ", shape_str(sizes), " has a negative size");
      sum += v;
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
  for (int64_t d = axis + 1; d < x.rank(); ++d) s.inner *= x.dim(d);
  return s;
}

SliceRange slice_range(int64_t dim, int64_t start, int64_t end, int64_t step) {
  // A step larger than the dim selects at most one element either way; clamping it keeps the
  // stride arithmetic of the view from overflowing.
  const int64_t max_step = std::max<int64_t>(dim, 1);
  step = std::clamp(step, -max_step, max_step);
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
  return {start, step, len};
}

StridedView slice_view(const KernelContext& ctx) {
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

  StridedView v;
  v.shape = x.shape();
  const std::vector<int64_t> xs = contiguous_strides(x.shape());
  v.strides = xs;
  for (size_t i = 0; i < n; ++i) {
    const size_t a = static_cast<size_t>(axes[i]);
    if (steps[i] == 0) fail(where, ": step for axis ", axes[i], " is 0");
    const SliceRange r = slice_range(x.shape()[a], starts[i], ends[i], steps[i]);
    v.shape[a] = r.len;
    if (r.len > 0) v.offset += r.start * xs[a];
    v.strides[a] = r.step * xs[a];
  }
  v.out = v.shape;
  return v;
}

// Tile is Expand of an interleaved view: output dims [r0, d0, r1, d1, ...] with stride 0 on the
// repeat dims read exactly the tiled order, then collapse to [r0*d0, r1*d1, ...].
StridedView tile_view(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> reps = read_int_tensor(ctx.input(1), where, "input 'repeats'");
  if (static_cast<int64_t>(reps.size()) != x.rank())
    fail(where, ": repeats has ", reps.size(), " entries for an input of rank ", x.rank());
  const std::vector<int64_t> xs = contiguous_strides(x.shape());
  StridedView v;
  for (size_t d = 0; d < reps.size(); ++d) {
    if (reps[d] < 0) fail(where, ": repeats ", shape_str(reps), " has a negative entry");
    v.shape.push_back(reps[d]);
    v.strides.push_back(0);
    v.shape.push_back(x.shape()[d]);
    v.strides.push_back(xs[d]);
    v.out.push_back(reps[d] * x.shape()[d]);
  }
  shape_numel(v.shape);  // rejects overflow before allocating
  return v;
}

namespace {

struct Nchw {
  int64_t n, c, h, w;
};

Nchw check_nchw(const Tensor& x, int64_t b, const std::string& where) {
  if (x.rank() != 4) fail(where, ": input must have rank 4, got ", x.describe());
  if (b <= 0) fail(where, ": blocksize must be positive, got ", b);
  return {x.dim(0), x.dim(1), x.dim(2), x.dim(3)};
}

}  // namespace

std::string depth_space_check(const ir::Node& node) {
  std::string mode = node.attr_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") return "mode '" + mode + "' is not supported (expected DCR or CRD)";
  return "";
}

StridedView depth_to_space_view(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t b = ctx.node().attr_int("blocksize");
  const Nchw s = check_nchw(x, b, where);
  if (s.c % (b * b) != 0) fail(where, ": channels ", s.c, " are not divisible by blocksize^2 = ", b * b);
  const std::string reason = depth_space_check(ctx.node());
  if (!reason.empty()) fail(where, ": ", reason);
  const bool crd = ctx.opset() >= 11 && ctx.attr_string("mode", "DCR") == "CRD";
  const int64_t c2 = s.c / (b * b), hw = s.h * s.w;
  StridedView v;
  // Output walked as [n, c', h, i, w, j]: y[n, c', h*b+i, w*b+j].
  v.shape = {s.n, c2, s.h, b, s.w, b};
  if (crd)  // x channel = c'*b*b + i*b + j
    v.strides = {s.c * hw, b * b * hw, s.w, b * hw, 1, hw};
  else  // DCR: x channel = (i*b + j)*c' + c'
    v.strides = {s.c * hw, hw, s.w, b * c2 * hw, 1, c2 * hw};
  v.out = {s.n, c2, s.h * b, s.w * b};
  return v;
}

StridedView space_to_depth_view(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t b = ctx.node().attr_int("blocksize");
  const Nchw s = check_nchw(x, b, where);
  if (s.h % b != 0 || s.w % b != 0) fail(where, ": spatial size ", s.h, "x", s.w, " is not divisible by blocksize ", b);
  const std::string reason = depth_space_check(ctx.node());
  if (!reason.empty()) fail(where, ": ", reason);
  const bool crd = ctx.attr_string("mode", "DCR") == "CRD";
  const int64_t h2 = s.h / b, w2 = s.w / b, hw = s.h * s.w;
  StridedView v;
  if (crd) {  // y channel = c*b*b + i*b + j: walk [n, c, i, j, h', w']
    v.shape = {s.n, s.c, b, b, h2, w2};
    v.strides = {s.c * hw, hw, s.w, 1, b * s.w, b};
  } else {  // DCR: y channel = (i*b + j)*C + c: walk [n, i, j, c, h', w']
    v.shape = {s.n, b, b, s.c, h2, w2};
    v.strides = {s.c * hw, s.w, 1, hw, b * s.w, b};
  }
  v.out = {s.n, s.c * b * b, h2, w2};
  return v;
}

TriluSetup trilu_setup(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) fail(where, ": input must have rank >= 2, got ", x.describe());
  TriluSetup s;
  if (ctx.has_input(1)) {
    std::vector<int64_t> kv = read_int_tensor(ctx.input(1), where, "input 'k'");
    if (kv.size() != 1) fail(where, ": k must hold one value, got ", ctx.input(1).describe());
    s.k = kv[0];
  }
  s.upper = ctx.attr_int("upper", 1) != 0;
  s.rows = x.dim(x.rank() - 2);
  s.cols = x.dim(x.rank() - 1);
  s.k = std::clamp<int64_t>(s.k, -s.rows - 1, s.cols + 1);  // beyond these the result no longer changes
  return s;
}

}  // namespace reforge::ops
