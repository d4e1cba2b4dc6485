// Shape and type inference of the tensor op family (ops/infer.h): shape ops, layout ops, Pad,
// gather/scatter, Constant and friends.
//
// These ops are where shapes are *computed*: Shape, Size, Gather, Slice, Concat, Squeeze,
// Unsqueeze, Reshape and Identity carry the contents of small integer tensors along as
// dimensions (set_output_dims_value), and Reshape, Expand, Tile, ConstantOfShape and Range read
// them back as output shapes, so a shape computed from Shape(x) stays symbolic instead of
// becoming unknown. The rules follow the ONNX operator definitions per opset; where a size
// depends on data (NonZero, a Range bound, a Slice bound that is not known) the dimension is a
// fresh symbol.
#include "ops/infer.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "ops/registry.h"
#include "ops/tensor/layout_setup.h"

namespace reforge::ops {
namespace {

std::string ints_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

int64_t rank_of(const ValueType& t) { return static_cast<int64_t>(t.shape.size()); }

// A shape of `rank` fresh symbols.
SymShape fresh_shape(InferContext& ctx, int64_t rank) {
  SymShape s;
  for (int64_t i = 0; i < rank; ++i) s.push_back(ctx.fresh_dim());
  return s;
}

// Axes normalized against `rank`, failing on duplicates or values out of range.
std::vector<int64_t> normalize_axes(InferContext& ctx, const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    int64_t n = normalize_axis(ctx, a, rank);
    if (std::find(out.begin(), out.end(), n) != out.end())
      ctx.fail("axis " + std::to_string(a) + " appears twice in " + ints_str(axes));
    out.push_back(n);
  }
  return out;
}

// Output 0 has input 0's dtype and an unknown rank.
void unranked_like_input(InferContext& ctx) { ctx.set_output(0, ValueType::unranked(ctx.input_type(0).dtype)); }

// ---- Shape ops ---------------------------------------------------------------------------------

void infer_identity(InferContext& ctx) {
  ctx.set_output(0, ctx.input_type(0));
  if (const SymShape* d = ctx.input_dims_value(0)) ctx.set_output_dims_value(0, *d);
}

void infer_shape(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (!x.rank_known) {
    ctx.set_output(0, ValueType::of(DType::Int64, {ctx.fresh_dim()}));
    return;
  }
  const int64_t rank = rank_of(x);
  int64_t start = 0, end = rank;
  if (ctx.opset() >= 15) {
    start = ctx.attr_int("start", 0);
    end = ctx.attr_int("end", rank);
  }
  auto clamp = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  start = clamp(start);
  end = clamp(end);
  SymShape dims;
  if (start < end) dims.assign(x.shape.begin() + start, x.shape.begin() + end);
  ctx.set_output(0, ValueType::of(DType::Int64, {static_cast<int64_t>(dims.size())}));
  ctx.set_output_dims_value(0, std::move(dims));
}

void infer_size(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  ctx.set_output(0, ValueType::of(DType::Int64, {}));
  if (x.rank_known) ctx.set_output_dims_value(0, {sym_product(x.shape)});
}

// The target shape of Reshape as dimensions (entries may be 0 or -1), or null when unknown.
std::optional<SymShape> reshape_spec(InferContext& ctx) {
  if (ctx.opset() < 5) {
    if (!ctx.node().has_attr("shape")) ctx.fail("required attribute 'shape' is missing");
    std::vector<int64_t> v = ctx.attr_ints("shape");
    return SymShape(v.begin(), v.end());
  }
  if (const SymShape* d = ctx.input_dims_value(1)) return *d;
  return std::nullopt;
}

void infer_reshape(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  std::optional<SymShape> spec = reshape_spec(ctx);
  if (!spec) {
    // The target's length gives the rank even when its values are unknown.
    const ValueType& s = ctx.input_type(1);
    if (s.rank_known && s.shape.size() == 1 && s.shape[0].known())
      ctx.set_output(0, ValueType::of(x.dtype, fresh_shape(ctx, s.shape[0].value())));
    else
      unranked_like_input(ctx);
    return;
  }
  const bool allowzero = ctx.opset() >= 14 && ctx.attr_int("allowzero", 0) != 0;
  SymShape out = reshape_shape(ctx, x.shape, x.rank_known, *spec, allowzero);
  const bool small = out.size() <= 1;
  ctx.set_output(0, ValueType::of(x.dtype, out));
  if (const SymShape* d = ctx.input_dims_value(0); d && small) ctx.set_output_dims_value(0, *d);
}

void infer_flatten(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (!x.rank_known) {
    ctx.set_output(0, ValueType::of(x.dtype, {ctx.fresh_dim(), ctx.fresh_dim()}));
    return;
  }
  const int64_t rank = rank_of(x);
  int64_t axis = ctx.attr_int("axis", 1);
  if (axis < -rank || axis > rank)
    ctx.fail("axis " + std::to_string(axis) + " is out of range for a tensor of rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  const size_t a = static_cast<size_t>(axis);
  ctx.set_output(0, ValueType::of(x.dtype, {sym_product(x.shape, 0, a), sym_product(x.shape, a)}));
}

// Squeeze/Unsqueeze axes: attribute before opset 13, optional input from 13. `given` tells
// whether any are given; nullopt when they are given but not known.
std::optional<std::vector<int64_t>> axes_operand(InferContext& ctx, bool* given) {
  if (ctx.opset() < 13) {
    *given = ctx.node().has_attr("axes");
    return ctx.attr_ints("axes");
  }
  *given = ctx.has_input(1);
  if (!*given) return std::vector<int64_t>{};
  return known_ints(ctx, 1);
}

void infer_squeeze(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  bool given = false;
  std::optional<std::vector<int64_t>> raw = axes_operand(ctx, &given);
  if (!x.rank_known || !raw) return unranked_like_input(ctx);
  const int64_t rank = rank_of(x);
  std::vector<bool> drop(static_cast<size_t>(rank), false);
  if (!given || raw->empty()) {
    // Every dimension of size 1 goes: the rank is known only when every dimension is.
    for (int64_t d = 0; d < rank; ++d) {
      if (!x.shape[d].known()) return unranked_like_input(ctx);
      drop[d] = x.shape[d].value() == 1;
    }
  } else {
    for (int64_t a : normalize_axes(ctx, *raw, rank)) {
      if (x.shape[a].known() && x.shape[a].value() != 1)
        ctx.fail("cannot squeeze axis " + std::to_string(a) + " of " + x.str() + ": its size is not 1");
      drop[a] = true;
    }
  }
  SymShape out;
  for (int64_t d = 0; d < rank; ++d)
    if (!drop[d]) out.push_back(x.shape[d]);
  const bool small = out.size() <= 1;
  ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
  if (const SymShape* d = ctx.input_dims_value(0); d && small) ctx.set_output_dims_value(0, *d);
}

void infer_unsqueeze(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  bool given = false;
  std::optional<std::vector<int64_t>> raw = axes_operand(ctx, &given);
  if (!given) ctx.fail("axes are required");
  if (!x.rank_known || !raw) return unranked_like_input(ctx);
  const int64_t out_rank = rank_of(x) + static_cast<int64_t>(raw->size());
  std::vector<int64_t> axes = normalize_axes(ctx, *raw, out_rank);
  SymShape out;
  size_t next = 0;
  for (int64_t d = 0; d < out_rank; ++d)
    out.push_back(std::find(axes.begin(), axes.end(), d) != axes.end() ? SymDim(1) : x.shape[next++]);
  const bool small = out.size() <= 1;
  ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
  if (const SymShape* d = ctx.input_dims_value(0); d && small) ctx.set_output_dims_value(0, *d);
}

// Expand broadcasts both ways: a 1 in the target keeps the input's dimension.
void infer_expand(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const SymShape* target = ctx.input_dims_value(1);
  if (!target || !x.rank_known) {
    const ValueType& s = ctx.input_type(1);
    if (x.rank_known && s.rank_known && s.shape.size() == 1 && s.shape[0].known())
      ctx.set_output(0, ValueType::of(x.dtype, fresh_shape(ctx, std::max(rank_of(x), s.shape[0].value()))));
    else
      unranked_like_input(ctx);
    return;
  }
  for (const auto& d : *target)
    if (d.known() && d.value() < 0) ctx.fail("shape " + sym_shape_str(*target) + " has a negative dimension");
  ctx.set_output(0, ValueType::of(x.dtype, broadcast_shapes(ctx, x.shape, *target)));
}

// ---- Layout ops --------------------------------------------------------------------------------

void infer_transpose(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (!x.rank_known) return unranked_like_input(ctx);
  const int64_t rank = rank_of(x);
  std::vector<int64_t> perm = ctx.attr_ints("perm");
  if (!ctx.node().has_attr("perm"))
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  if (static_cast<int64_t>(perm.size()) != rank)
    ctx.fail("perm " + ints_str(perm) + " has " + std::to_string(perm.size()) + " entries for an input of rank " +
             std::to_string(rank));
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  SymShape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      ctx.fail("perm " + ints_str(perm) + " is not a permutation of the " + std::to_string(rank) + " input axes");
    seen[p] = true;
    out.push_back(x.shape[p]);
  }
  ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
}

void infer_concat(InferContext& ctx) {
  std::vector<size_t> ins;
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) ins.push_back(i);
  if (ins.empty()) ctx.fail("needs at least one input");
  if (ctx.opset() >= 4 && !ctx.node().has_attr("axis")) ctx.fail("required attribute 'axis' is missing");
  DType dtype = DType::Undefined;
  const ValueType* first = nullptr;
  for (size_t i : ins) {
    const ValueType& t = ctx.input_type(i);
    if (t.dtype != DType::Undefined) {
      if (dtype != DType::Undefined && t.dtype != dtype)
        ctx.fail("inputs have different element types (" + dtype_name(dtype) + " and " + dtype_name(t.dtype) + ")");
      dtype = t.dtype;
    }
    if (t.rank_known && !first) first = &t;
  }
  if (!first) {
    ctx.set_output(0, ValueType::unranked(dtype));
    return;
  }
  const int64_t rank = rank_of(*first);
  if (rank == 0) ctx.fail("cannot concatenate scalars");
  const int64_t axis = normalize_axis(ctx, ctx.attr_int("axis", 1), rank);
  SymShape out = first->shape;
  out[axis] = 0;
  bool all_ranked = true;
  for (size_t i : ins) {
    const ValueType& t = ctx.input_type(i);
    if (!t.rank_known) {
      all_ranked = false;
      continue;
    }
    if (rank_of(t) != rank) ctx.fail("inputs have different ranks (" + first->str() + " and " + t.str() + ")");
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis)
        out[d] = merge_dims(
            ctx, out[d], t.shape[d],
            "input shapes " + first->str() + " and " + t.str() + " differ outside axis " + std::to_string(axis));
    out[axis] = sym_add(out[axis], t.shape[axis]);
  }
  if (!all_ranked) out[axis] = ctx.fresh_dim();
  ctx.set_output(0, ValueType::of(dtype, out));
  // Concatenated dims values (the usual way a shape is assembled).
  if (rank == 1 && all_ranked) {
    SymShape dims;
    for (size_t i : ins) {
      const SymShape* d = ctx.input_dims_value(i);
      if (!d) return;
      dims.insert(dims.end(), d->begin(), d->end());
    }
    ctx.set_output_dims_value(0, std::move(dims));
  }
}

void infer_split(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const int64_t n_out = static_cast<int64_t>(ctx.num_outputs());
  auto all_unranked = [&] {
    for (size_t k = 0; k < ctx.num_outputs(); ++k) ctx.set_output(k, ValueType::unranked(x.dtype));
  };
  if (!x.rank_known) return all_unranked();
  if (x.shape.empty()) ctx.fail("cannot split a scalar");
  const int64_t axis = normalize_axis(ctx, ctx.attr_int("axis", 0), rank_of(x));
  const SymDim dim = x.shape[axis];
  std::vector<SymDim> sizes;
  bool explicit_sizes = false;
  if (ctx.opset() < 13 && ctx.node().has_attr("split")) {
    for (int64_t v : ctx.attr_ints("split")) sizes.push_back(v);
    explicit_sizes = true;
  } else if (ctx.has_input(1)) {
    const ValueType& st = ctx.input_type(1);
    const bool empty = st.rank_known && st.shape.size() == 1 && st.shape[0].known() && st.shape[0].value() == 0;
    if (!empty) {
      const SymShape* d = ctx.input_dims_value(1);
      if (!d) {
        // Sizes unknown: each output keeps the rank, with a fresh size along the axis.
        for (int64_t k = 0; k < n_out; ++k) {
          SymShape s = x.shape;
          s[axis] = ctx.fresh_dim();
          ctx.set_output(static_cast<size_t>(k), ValueType::of(x.dtype, s));
        }
        return;
      }
      sizes.assign(d->begin(), d->end());
      explicit_sizes = true;
    }
  }
  if (explicit_sizes) {
    if (static_cast<int64_t>(sizes.size()) != n_out)
      ctx.fail("split " + sym_shape_str(sizes) + " has " + std::to_string(sizes.size()) + " entries for " +
               std::to_string(n_out) + " outputs");
    SymDim sum(0);
    for (const auto& s : sizes) {
      if (s.known() && s.value() < 0) ctx.fail("split " + sym_shape_str(sizes) + " has a negative size");
      sum = sym_add(sum, s);
    }
    if (sum.known() && dim.known() && sum.value() != dim.value())
      ctx.fail("split " + sym_shape_str(sizes) + " sums to " + sum.str() + ", but axis " + std::to_string(axis) +
               " has size " + dim.str());
  } else if (ctx.opset() >= 18 && ctx.node().has_attr("num_outputs")) {
    const int64_t n = ctx.attr_int("num_outputs", 0);
    if (n != n_out)
      ctx.fail("num_outputs is " + std::to_string(n) + " but the node has " + std::to_string(n_out) + " outputs");
    if (n <= 0) ctx.fail("num_outputs must be positive");
    if (dim.known()) {
      const int64_t chunk = dim.value() / n + (dim.value() % n != 0 ? 1 : 0);
      const SymDim last = sym_sub(dim, sym_mul(chunk, n - 1));
      if (!last.known() || last.value() < 0)
        ctx.fail("cannot split axis " + std::to_string(axis) + " of size " + dim.str() + " into " + std::to_string(n) +
                 " chunks");
      sizes.assign(static_cast<size_t>(n), chunk);
      sizes.back() = last;
    } else {
      for (int64_t k = 0; k < n; ++k) sizes.push_back(ctx.fresh_dim());
    }
  } else {
    if (n_out <= 0) ctx.fail("has no outputs");
    if (dim.known() && dim.value() % n_out != 0)
      ctx.fail("axis " + std::to_string(axis) + " of size " + dim.str() + " cannot be split into " +
               std::to_string(n_out) + " equal parts");
    sizes.assign(static_cast<size_t>(n_out), sym_div(dim, n_out));
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    SymShape s = x.shape;
    s[axis] = sizes[k];
    ctx.set_output(k, ValueType::of(x.dtype, s));
  }
}

// The length of a slice of a dimension, when it can be stated for every value of the symbols.
SymDim slice_length(InferContext& ctx, const SymDim& dim, const SymDim& start_d, const SymDim& end_d, int64_t step) {
  // Known bounds: the kernels' own arithmetic.
  if (dim.known() && start_d.known() && end_d.known())
    return slice_range(dim.value(), start_d.value(), end_d.value(), step).len;
  // The whole axis: [0, end) with end at or past the dimension (INT64_MAX, INT_MAX, or the
  // dimension's own symbol), step 1.
  if (step == 1 && start_d.known() && start_d.value() == 0 &&
      (end_d == dim || (end_d.known() && end_d.value() >= INT_MAX)))
    return dim;
  // [0, end) of a symbolic dim from a known end k >= 0 is min(k, dim): known only when dim is.
  // A reversed whole axis: [-1, -INF) with step -1.
  if (step == -1 && start_d.known() && start_d.value() == -1 && end_d.known() && end_d.value() <= INT_MIN) return dim;
  return ctx.fresh_dim();
}

void infer_slice(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  std::vector<SymDim> starts, ends;
  std::vector<int64_t> axes, steps;
  bool has_axes = false, has_steps = false, known = true;
  if (ctx.opset() < 10) {
    for (int64_t v : ctx.attr_ints("starts")) starts.push_back(v);
    for (int64_t v : ctx.attr_ints("ends")) ends.push_back(v);
    has_axes = ctx.node().has_attr("axes");
    axes = ctx.attr_ints("axes");
  } else {
    const SymShape* s = ctx.input_dims_value(1);
    const SymShape* e = ctx.input_dims_value(2);
    if (s) starts = *s;
    if (e) ends = *e;
    known = s && e;
    if ((has_axes = ctx.has_input(3))) {
      auto a = known_ints(ctx, 3);
      if (a)
        axes = *a;
      else
        known = false;
    }
    if ((has_steps = ctx.has_input(4))) {
      auto st = known_ints(ctx, 4);
      if (st)
        steps = *st;
      else
        known = false;
    }
  }
  if (!x.rank_known) return unranked_like_input(ctx);
  const int64_t rank = rank_of(x);
  if (!known) {
    // Which axes change is unknown: the rank stays, the sizes do not.
    ctx.set_output(0, ValueType::of(x.dtype, fresh_shape(ctx, rank)));
    return;
  }
  const size_t n = starts.size();
  if (ends.size() != n)
    ctx.fail("starts has " + std::to_string(n) + " entries but ends has " + std::to_string(ends.size()));
  if (!has_axes)
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  if (!has_steps) steps.assign(n, 1);
  if (axes.size() != n)
    ctx.fail("starts has " + std::to_string(n) + " entries but axes has " + std::to_string(axes.size()));
  if (steps.size() != n)
    ctx.fail("starts has " + std::to_string(n) + " entries but steps has " + std::to_string(steps.size()));
  axes = normalize_axes(ctx, axes, rank);
  SymShape out = x.shape;
  for (size_t i = 0; i < n; ++i) {
    if (steps[i] == 0) ctx.fail("step for axis " + std::to_string(axes[i]) + " is 0");
    out[axes[i]] = slice_length(ctx, x.shape[axes[i]], starts[i], ends[i], steps[i]);
  }
  ctx.set_output(0, ValueType::of(x.dtype, out));
  // A slice of a dims value (a shape cut into pieces) is a dims value.
  const SymShape* dv = ctx.input_dims_value(0);
  if (dv && rank == 1 && n == 0) ctx.set_output_dims_value(0, *dv);
  if (dv && rank == 1 && n == 1 && out[0].known() && x.shape[0].known() && starts[0].known()) {
    const int64_t len = x.shape[0].value();
    int64_t start = starts[0].value(), step = steps[0];
    if (start < 0) start += len;
    start = step > 0 ? std::clamp<int64_t>(start, 0, len) : std::clamp<int64_t>(start, 0, len - 1);
    SymShape dims;
    for (int64_t k = 0; k < out[0].value(); ++k) dims.push_back((*dv)[static_cast<size_t>(start + k * step)]);
    ctx.set_output_dims_value(0, std::move(dims));
  }
}

void infer_tile(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (!x.rank_known) return unranked_like_input(ctx);
  const SymShape* reps = ctx.input_dims_value(1);
  if (!reps) {
    ctx.set_output(0, ValueType::of(x.dtype, fresh_shape(ctx, rank_of(x))));
    return;
  }
  if (static_cast<int64_t>(reps->size()) != rank_of(x))
    ctx.fail("repeats has " + std::to_string(reps->size()) + " entries for an input of rank " +
             std::to_string(rank_of(x)));
  SymShape out;
  for (size_t d = 0; d < reps->size(); ++d) {
    if ((*reps)[d].known() && (*reps)[d].value() < 0)
      ctx.fail("repeats " + sym_shape_str(*reps) + " has a negative entry");
    out.push_back(sym_mul(x.shape[d], (*reps)[d]));
  }
  ctx.set_output(0, ValueType::of(x.dtype, out));
}

std::string check_blocks(InferContext& ctx, const ValueType& x, int64_t b) {
  if (x.rank_known && x.shape.size() != 4) ctx.fail("input must have rank 4, got " + x.str());
  if (b <= 0) ctx.fail("blocksize must be positive, got " + std::to_string(b));
  const std::string mode = ctx.attr_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") ctx.fail("mode '" + mode + "' is not supported (expected DCR or CRD)");
  return mode;
}

void infer_depth_to_space(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const int64_t b = ctx.node().has_attr("blocksize") ? ctx.attr_int("blocksize", 0) : 0;
  check_blocks(ctx, x, b);
  if (!x.rank_known) return unranked_like_input(ctx);
  const SymDim& c = x.shape[1];
  if (b > (int64_t{1} << 20)) ctx.fail("blocksize " + std::to_string(b) + " is too large");
  if (c.known() && c.value() % (b * b) != 0)
    ctx.fail("channels " + c.str() + " are not divisible by blocksize^2 = " + std::to_string(b * b));
  ctx.set_output(
      0, ValueType::of(x.dtype, {x.shape[0], sym_div(c, b * b), sym_mul(x.shape[2], b), sym_mul(x.shape[3], b)}));
}

void infer_space_to_depth(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const int64_t b = ctx.node().has_attr("blocksize") ? ctx.attr_int("blocksize", 0) : 0;
  check_blocks(ctx, x, b);
  if (!x.rank_known) return unranked_like_input(ctx);
  if (b > (int64_t{1} << 20)) ctx.fail("blocksize " + std::to_string(b) + " is too large");
  for (int d : {2, 3})
    if (x.shape[d].known() && x.shape[d].value() % b != 0)
      ctx.fail("spatial size " + x.shape[2].str() + "x" + x.shape[3].str() + " is not divisible by blocksize " +
               std::to_string(b));
  ctx.set_output(0, ValueType::of(x.dtype, {x.shape[0], sym_mul(x.shape[1], b * b), sym_div(x.shape[2], b),
                                            sym_div(x.shape[3], b)}));
}

void infer_trilu(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (x.rank_known && x.shape.size() < 2) ctx.fail("input must have rank >= 2, got " + x.str());
  ctx.set_output(0, x);
}

// ---- Pad ---------------------------------------------------------------------------------------

void infer_pad(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const std::string mode = ctx.attr_string("mode", "constant");
  if (!(mode == "constant" || mode == "reflect" || mode == "edge" || (mode == "wrap" && ctx.opset() >= 19)))
    ctx.fail("mode '" + mode + "' is not supported");
  if (!x.rank_known) return unranked_like_input(ctx);
  const int64_t rank = rank_of(x);
  std::optional<SymShape> pads;
  if (ctx.opset() < 11) {
    const char* name = ctx.opset() < 2 ? "paddings" : "pads";
    if (!ctx.node().has_attr(name)) ctx.fail(std::string("required attribute '") + name + "' is missing");
    std::vector<int64_t> v = ctx.attr_ints(name);
    pads = SymShape(v.begin(), v.end());
  } else if (const SymShape* d = ctx.input_dims_value(1)) {
    pads = *d;
  }
  std::vector<int64_t> axes;
  if (ctx.opset() >= 18 && ctx.has_input(3)) {
    auto a = known_ints(ctx, 3);
    if (!a) pads.reset();
    if (a) axes = normalize_axes(ctx, *a, rank);
  } else {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  if (!pads) {
    ctx.set_output(0, ValueType::of(x.dtype, fresh_shape(ctx, rank)));
    return;
  }
  const size_t na = axes.size();
  if (pads->size() != 2 * na)
    ctx.fail("pads " + sym_shape_str(*pads) + " must have " + std::to_string(2 * na) + " entries (begin and end for " +
             std::to_string(na) + " axes)");
  for (const auto& p : *pads)
    if (p.known() && (p.value() > (int64_t{1} << 40) || p.value() < -(int64_t{1} << 40)))
      ctx.fail("pads " + sym_shape_str(*pads) + " are out of range");
  SymShape out = x.shape;
  for (size_t i = 0; i < na; ++i) {
    const SymDim o = sym_add(sym_add(x.shape[axes[i]], (*pads)[i]), (*pads)[na + i]);
    if (o.known() && o.value() < 0)
      ctx.fail("pads " + sym_shape_str(*pads) + " crop more than the size " + x.shape[axes[i]].str() + " of axis " +
               std::to_string(axes[i]));
    out[axes[i]] = o;
  }
  ctx.set_output(0, ValueType::of(x.dtype, out));
}

// ---- Gather / scatter --------------------------------------------------------------------------

void infer_gather(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& idx = ctx.input_type(1);
  if (idx.dtype != DType::Undefined && idx.dtype != DType::Int32 && idx.dtype != DType::Int64)
    ctx.fail("indices must be int32 or int64, got " + dtype_name(idx.dtype));
  if (!x.rank_known || !idx.rank_known) return unranked_like_input(ctx);
  if (x.shape.empty()) ctx.fail("data must have rank >= 1");
  const int64_t axis = normalize_axis(ctx, ctx.attr_int("axis", 0), rank_of(x));
  SymShape out(x.shape.begin(), x.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), x.shape.begin() + axis + 1, x.shape.end());
  ctx.set_output(0, ValueType::of(x.dtype, out));
  // Gathering from a dims value (picking dimensions out of a Shape).
  const SymShape* dv = ctx.input_dims_value(0);
  auto ind = known_ints(ctx, 1);
  if (dv && ind && x.shape.size() == 1 && idx.shape.size() <= 1) {
    const int64_t n = static_cast<int64_t>(dv->size());
    SymShape dims;
    for (int64_t i : *ind) {
      if (i < -n || i >= n)
        ctx.fail("index " + std::to_string(i) + " is out of range for a dimension of size " + std::to_string(n));
      dims.push_back((*dv)[static_cast<size_t>(i < 0 ? i + n : i)]);
    }
    ctx.set_output_dims_value(0, std::move(dims));
  } else if (ind && x.shape[axis].known()) {
    const int64_t n = x.shape[axis].value();
    for (int64_t i : *ind)
      if (i < -n || i >= n)
        ctx.fail("index " + std::to_string(i) + " is out of range for a dimension of size " + std::to_string(n));
  }
}

void infer_gather_elements(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& idx = ctx.input_type(1);
  if (x.rank_known && idx.rank_known) {
    if (x.shape.empty()) ctx.fail("data must have rank >= 1");
    normalize_axis(ctx, ctx.attr_int("axis", 0), rank_of(x));
    if (idx.shape.size() != x.shape.size()) ctx.fail("indices " + idx.str() + " must have the rank of data " + x.str());
  }
  ctx.set_output(0, idx.rank_known ? ValueType::of(x.dtype, idx.shape) : ValueType::unranked(x.dtype));
}

void infer_gather_nd(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& idx = ctx.input_type(1);
  if (!x.rank_known || !idx.rank_known) return unranked_like_input(ctx);
  const int64_t b = ctx.opset() >= 12 ? ctx.attr_int("batch_dims", 0) : 0;
  const int64_t r = rank_of(x), q = rank_of(idx);
  if (r < 1 || q < 1) ctx.fail("data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(r, q))
    ctx.fail("batch_dims " + std::to_string(b) + " must be in [0, " + std::to_string(std::min(r, q)) + ")");
  const SymDim& kd = idx.shape.back();
  if (!kd.known()) return unranked_like_input(ctx);
  const int64_t k = kd.value();
  if (k > r - b)
    ctx.fail("index tuples of length " + std::to_string(k) + " exceed data " + x.str() + " with batch_dims " +
             std::to_string(b));
  for (int64_t d = 0; d < b; ++d)
    merge_dims(ctx, idx.shape[d], x.shape[d], "batch dimension " + std::to_string(d) + " of data and indices");
  SymShape out(idx.shape.begin(), idx.shape.end() - 1);
  out.insert(out.end(), x.shape.begin() + b + k, x.shape.end());
  ctx.set_output(0, ValueType::of(x.dtype, out));
}

void infer_scatter(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& u = ctx.input_type(2);
  if (x.dtype != DType::Undefined && u.dtype != DType::Undefined && u.dtype != x.dtype)
    ctx.fail("updates " + u.str() + " must have the element type of data " + x.str());
  ctx.set_output(0, x);
}

// ---- Constant and friends ----------------------------------------------------------------------

void infer_constant(InferContext& ctx) {
  const ir::Node& n = ctx.node();
  for (const char* a : {"value_string", "value_strings"})
    if (n.has_attr(a)) ctx.fail(std::string("attribute '") + a + "' (string constants) is not supported");
  if (n.has_attr("sparse_value")) ctx.fail("attribute 'sparse_value' (sparse constants) is not supported");
  int count = 0;
  for (const char* a : {"value", "value_float", "value_floats", "value_int", "value_ints"}) count += n.has_attr(a);
  if (count != 1) ctx.fail("exactly one value attribute is required, found " + std::to_string(count));
  if (const Tensor* t = n.attr_tensor("value")) {
    ctx.set_output(0, ValueType::of(t->dtype(), SymShape(t->shape().begin(), t->shape().end())));
  } else if (n.has_attr("value_float")) {
    ctx.set_output(0, ValueType::of(DType::Float32, {}));
  } else if (n.has_attr("value_floats")) {
    ctx.set_output(0, ValueType::of(DType::Float32, {static_cast<int64_t>(n.attr_floats("value_floats").size())}));
  } else if (n.has_attr("value_int")) {
    ctx.set_output(0, ValueType::of(DType::Int64, {}));
  } else {
    ctx.set_output(0, ValueType::of(DType::Int64, {static_cast<int64_t>(n.attr_ints("value_ints").size())}));
  }
}

void infer_constant_of_shape(InferContext& ctx) {
  const Tensor* v = ctx.node().attr_tensor("value");
  if (v && v->numel() != 1) ctx.fail("attribute 'value' must hold exactly one element, it is " + v->describe());
  const DType dtype = v ? v->dtype() : DType::Float32;
  const ValueType& s = ctx.input_type(0);
  if (s.dtype != DType::Undefined && !is_integer(s.dtype))
    ctx.fail("input 'shape' must be an integer tensor, got " + dtype_name(s.dtype));
  const SymShape* d = ctx.input_dims_value(0);
  if (!d) {
    if (s.rank_known && s.shape.size() == 1 && s.shape[0].known())
      ctx.set_output(0, ValueType::of(dtype, fresh_shape(ctx, s.shape[0].value())));
    else
      ctx.set_output(0, ValueType::unranked(dtype));
    return;
  }
  for (const auto& x : *d)
    if (x.known() && x.value() < 0) ctx.fail("shape " + sym_shape_str(*d) + " has a negative dimension");
  ctx.set_output(0, ValueType::of(dtype, *d));
  // A small integer fill is itself a dims value (e.g. a vector of ones used as a shape).
  if (d->size() == 1 && (*d)[0].known() && (*d)[0].value() <= 64 && (dtype == DType::Int64 || dtype == DType::Int32))
    ctx.set_output_dims_value(0, SymShape(static_cast<size_t>((*d)[0].value()), SymDim(v->as_int64(0))));
}

void infer_range(InferContext& ctx) {
  const DType t = ctx.input_type(0).dtype;
  for (size_t i = 1; i < 3; ++i) {
    const DType u = ctx.input_type(i).dtype;
    if (t != DType::Undefined && u != DType::Undefined && u != t)
      ctx.fail("start, limit and delta must have one element type, got " + dtype_name(t) + " and " + dtype_name(u));
  }
  for (size_t i = 0; i < 3; ++i) {
    const ValueType& v = ctx.input_type(i);
    if (v.rank_known) {
      const SymDim n = sym_product(v.shape);
      if (n.known() && n.value() != 1)
        ctx.fail(std::string("input '") +
                 (i == 0   ? "start"
                  : i == 1 ? "limit"
                           : "delta") +
                 "' must be a scalar, got " + v.str());
    }
  }
  auto s = known_doubles(ctx, 0), l = known_doubles(ctx, 1), d = known_doubles(ctx, 2);
  if (s && l && d && s->size() == 1 && l->size() == 1 && d->size() == 1) {
    const double delta = (*d)[0];
    if (delta == 0) ctx.fail("delta is 0");
    const double count = std::ceil(((*l)[0] - (*s)[0]) / delta);
    if (std::isnan(count)) ctx.fail("range bounds are not finite");
    if (count > static_cast<double>(int64_t{1} << 40))
      ctx.fail("range of " + std::to_string(count) + " elements is too large");
    const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
    ctx.set_output(0, ValueType::of(t, {n}));
    return;
  }
  // Range(0, n, 1) over a size n: n elements. A symbolic limit is a size (taken from a shape,
  // never negative) unless it is a difference.
  const SymShape* ld = ctx.input_dims_value(1);
  if (s && d && s->size() == 1 && d->size() == 1 && (*s)[0] == 0 && (*d)[0] == 1 && ld && ld->size() == 1 &&
      !(*ld)[0].known() && (*ld)[0].symbol().find('-') == std::string::npos) {
    ctx.set_output(0, ValueType::of(t, {(*ld)[0]}));
    return;
  }
  ctx.set_output(0, ValueType::of(t, {ctx.fresh_dim()}));
}

void infer_dropout(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  ctx.set_output(0, x);
  if (ctx.num_outputs() > 1) {
    const DType mask = ctx.opset() >= 10 ? DType::Bool : x.dtype;
    ctx.set_output(1, x.rank_known ? ValueType::of(mask, x.shape) : ValueType::unranked(mask));
  }
}

void infer_one_hot(InferContext& ctx) {
  const ValueType& ind = ctx.input_type(0);
  const ValueType& values = ctx.input_type(2);
  if (values.rank_known) {
    const SymDim n = sym_product(values.shape);
    if (n.known() && n.value() != 2) ctx.fail("values must hold [off_value, on_value], got " + values.str());
  }
  if (!ind.rank_known) {
    ctx.set_output(0, ValueType::unranked(values.dtype));
    return;
  }
  const int64_t r = rank_of(ind);
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < -r - 1 || axis > r)
    ctx.fail("axis " + std::to_string(axis) + " is out of range for indices of rank " + std::to_string(r));
  if (axis < 0) axis += r + 1;
  SymDim depth = ctx.fresh_dim();
  if (auto dv = known_doubles(ctx, 1); dv && dv->size() == 1) {
    if (!((*dv)[0] >= 0) || (*dv)[0] > static_cast<double>(int64_t{1} << 40))
      ctx.fail("depth " + std::to_string((*dv)[0]) + " is not a valid size");
    depth = static_cast<int64_t>((*dv)[0]);
  } else if (const SymShape* dd = ctx.input_dims_value(1); dd && dd->size() == 1) {
    depth = (*dd)[0];
  }
  SymShape out = ind.shape;
  out.insert(out.begin() + axis, depth);
  ctx.set_output(0, ValueType::of(values.dtype, out));
}

void infer_non_zero(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const SymDim rank = x.rank_known ? SymDim(rank_of(x)) : ctx.fresh_dim();
  ctx.set_output(0, ValueType::of(DType::Int64, {rank, ctx.fresh_dim()}));
}

// Compress: the condition's true entries (data) give the size along the axis.
void infer_compress(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& c = ctx.input_type(1);
  if (c.dtype != DType::Bool && c.dtype != DType::Undefined) ctx.fail("condition must be bool, got " + c.str());
  if (!ctx.node().has_attr("axis")) return ctx.set_output(0, ValueType::of(x.dtype, {ctx.fresh_dim()}));
  if (!x.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
  SymShape out = x.shape;
  out[static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", 0), rank_of(x)))] = ctx.fresh_dim();
  ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
}

// Unique: the number of distinct values (slices) is data; inverse_indices has one entry per
// element (slice along the axis).
void infer_unique(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const SymDim u = ctx.fresh_dim();
  const bool has_axis = ctx.node().has_attr("axis");
  SymDim n = ctx.fresh_dim();
  if (!has_axis) {
    ctx.set_output(0, ValueType::of(x.dtype, {u}));
    if (x.rank_known) n = sym_product(x.shape);
  } else if (x.rank_known) {
    const size_t a = static_cast<size_t>(normalize_axis(ctx, ctx.attr_int("axis", 0), rank_of(x)));
    SymShape out = x.shape;
    n = out[a];
    out[a] = u;
    ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
  } else {
    ctx.set_output(0, ValueType::unranked(x.dtype));
  }
  const auto wanted = [&](size_t i) { return ctx.num_outputs() > i && !ctx.node().outputs[i].empty(); };
  if (wanted(1)) ctx.set_output(1, ValueType::of(DType::Int64, {u}));
  if (wanted(2)) ctx.set_output(2, ValueType::of(DType::Int64, {n}));
  if (wanted(3)) ctx.set_output(3, ValueType::of(DType::Int64, {u}));
}

// CenterCropPad: the listed axes take the sizes of the shape input (when known).
void infer_center_crop_pad(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (!x.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
  const int64_t rank = rank_of(x);
  std::vector<int64_t> axes = ctx.attr_ints("axes");
  if (!ctx.node().has_attr("axes"))
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  const SymShape* sizes = ctx.input_dims_value(1);
  if (sizes && sizes->size() != axes.size())
    ctx.fail("shape has " + std::to_string(sizes->size()) + " values for " + std::to_string(axes.size()) + " axes");
  SymShape out = x.shape;
  for (size_t i = 0; i < axes.size(); ++i)
    out[static_cast<size_t>(normalize_axis(ctx, axes[i], rank))] = sizes ? (*sizes)[i] : ctx.fresh_dim();
  ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
}

// Col2Im: [N, C * prod(block_shape), L] -> [N, C, image_shape...].
void infer_col2im(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (x.rank_known && x.shape.size() != 3) ctx.fail("input must be [N, C * prod(block_shape), L], got " + x.str());
  const SymShape* image = ctx.input_dims_value(1);
  const auto block = known_ints(ctx, 2);
  const ValueType& it = ctx.input_type(1);
  if (!image && !(it.rank_known && it.shape.size() == 1 && it.shape[0].known()))
    return ctx.set_output(0, ValueType::unranked(x.dtype));
  SymShape out{x.rank_known ? x.shape[0] : ctx.fresh_dim(), ctx.fresh_dim()};
  if (x.rank_known && block) {
    int64_t b = 1;
    for (int64_t v : *block) b *= v;
    if (b > 0) out[1] = sym_div(x.shape[1], b);
  }
  if (image) {
    out.insert(out.end(), image->begin(), image->end());
  } else {
    for (int64_t i = 0; i < it.shape[0].value(); ++i) out.push_back(ctx.fresh_dim());
  }
  ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
}

// EyeLike: the input's 2-D shape, of type `dtype` (default the input's).
void infer_eye_like(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (x.rank_known && x.shape.size() != 2) ctx.fail("input must be 2-D, got " + x.str());
  const DType dt =
      ctx.node().has_attr("dtype") ? dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("dtype", 0))) : x.dtype;
  ctx.set_output(0, ValueType{dt, x.rank_known, x.shape});
}

// HannWindow / HammingWindow / BlackmanWindow: [size] of output_datatype (default float32).
void infer_window(InferContext& ctx) {
  const DType dt = ctx.node().has_attr("output_datatype")
                       ? dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("output_datatype", 0)))
                       : DType::Float32;
  const SymShape* size = ctx.input_dims_value(0);
  ctx.set_output(0, ValueType::of(dt, {size && size->size() == 1 ? (*size)[0] : ctx.fresh_dim()}));
}

}  // namespace

void register_tensor_inference(OpRegistry& r) {
  r.set_infer("", "Identity", 1, infer_identity);
  r.set_infer("", "Shape", 1, infer_shape);
  r.set_infer("", "Size", 1, infer_size);
  r.set_infer("", "Reshape", 1, infer_reshape);
  r.set_infer("", "Flatten", 1, infer_flatten);
  r.set_infer("", "Squeeze", 1, infer_squeeze);
  r.set_infer("", "Unsqueeze", 1, infer_unsqueeze);
  r.set_infer("", "Expand", 8, infer_expand);
  r.set_infer("", "Transpose", 1, infer_transpose);
  r.set_infer("", "Concat", 1, infer_concat);
  r.set_infer("", "Split", 1, infer_split);
  r.set_infer("", "Slice", 1, infer_slice);
  r.set_infer("", "Tile", 6, infer_tile);
  r.set_infer("", "DepthToSpace", 1, infer_depth_to_space);
  r.set_infer("", "SpaceToDepth", 1, infer_space_to_depth);
  r.set_infer("", "Trilu", 14, infer_trilu);
  r.set_infer("", "Pad", 1, infer_pad);
  r.set_infer("", "Gather", 1, infer_gather);
  r.set_infer("", "GatherElements", 11, infer_gather_elements);
  r.set_infer("", "GatherND", 11, infer_gather_nd);
  r.set_infer("", "ScatterND", 11, infer_scatter);
  r.set_infer("", "ScatterElements", 11, infer_scatter);
  r.set_infer("", "Scatter", 9, infer_scatter);
  r.set_infer("", "Constant", 1, infer_constant);
  r.set_infer("", "ConstantOfShape", 9, infer_constant_of_shape);
  r.set_infer("", "Range", 11, infer_range);
  r.set_infer("", "Dropout", 1, infer_dropout);
  r.set_infer("", "OneHot", 9, infer_one_hot);
  r.set_infer("", "NonZero", 9, infer_non_zero);
  r.set_infer("", "Compress", 9, infer_compress);
  r.set_infer("", "Unique", 11, infer_unique);
  r.set_infer("", "CenterCropPad", 18, infer_center_crop_pad);
  r.set_infer("", "Col2Im", 18, infer_col2im);
  r.set_infer("", "EyeLike", 9, infer_eye_like);
  r.set_infer("", "Upsample", 7, [](InferContext& ctx) {
    const ValueType& x = ctx.input_type(0);
    std::vector<double> scales;
    if (ctx.opset() >= 9) {
      if (const auto s = known_doubles(ctx, 1)) scales = *s;
    } else {
      for (float f : ctx.node().attr_floats("scales")) scales.push_back(f);
    }
    if (!x.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
    SymShape out;
    for (size_t d = 0; d < x.shape.size(); ++d)
      out.push_back(scales.size() == x.shape.size() && x.shape[d].known()
                        ? SymDim(static_cast<int64_t>(std::floor(static_cast<double>(x.shape[d].value()) * scales[d])))
                        : ctx.fresh_dim());
    ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
  });
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) r.set_infer("", op, 17, infer_window);
  r.set_infer("", "ReverseSequence", 10, infer_identity);
  r.set_infer("", "MelWeightMatrix", 17, [](InferContext& ctx) {
    const DType dt = ctx.node().has_attr("output_datatype")
                         ? dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("output_datatype", 0)))
                         : DType::Float32;
    const auto mel = known_ints(ctx, 0);
    const auto len = known_ints(ctx, 1);
    ctx.set_output(0, ValueType::of(dt, {len && len->size() == 1 ? SymDim((*len)[0] / 2 + 1) : ctx.fresh_dim(),
                                         mel && mel->size() == 1 ? SymDim((*mel)[0]) : ctx.fresh_dim()}));
  });
}

}  // namespace reforge::ops
