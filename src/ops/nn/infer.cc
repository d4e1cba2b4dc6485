// Shape and type inference of the nn family (ops/infer.h): MatMul, Gemm, Conv, ConvTranspose,
// reforge::FusedConv, the pools (with reforge::MaxPool and LpPool), BatchNormalization,
// InstanceNormalization, LayerNormalization, LpNormalization, LRN,
// MeanVarianceNormalization, GroupNormalization and RNN/GRU/LSTM.
//
// Spatial sizes follow the kernels' own geometry (ops/conv_geometry.cc, conv_transpose.cc):
// explicit pads, auto_pad SAME_UPPER/SAME_LOWER/VALID, strides, dilations, ceil_mode (a last
// window that would start in the end padding is dropped), output_padding and output_shape. A
// symbolic spatial size stays the same symbol where the output size equals the input size
// (stride 1 with "same" padding); any other size of a symbol is a fresh symbol. FusedConv and
// reforge::MaxPool read and write activations in the layouts their attributes name (NHWC, or
// the CPU's blocked NCHWc): their shapes are the physical ones those layouts store.
#include <algorithm>
#include <string>
#include <vector>

#include "ops/nn/activation_layout.h"
#include "ops/nn/conv.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

void require_same_dtype(const InferContext& ctx, size_t a, size_t b, const char* what) {
  if (!ctx.has_input(a) || !ctx.has_input(b)) return;
  const DType da = ctx.input_type(a).dtype, db = ctx.input_type(b).dtype;
  if (da != DType::Undefined && db != DType::Undefined && da != db)
    ctx.fail(std::string(what) + " have different element types (" + dtype_name(da) + " and " + dtype_name(db) + ")");
}

bool differ(const SymDim& a, const SymDim& b) { return a.known() && b.known() && a.value() != b.value(); }

// ---- MatMul, Gemm ----

void matmul(InferContext& ctx) {
  require_same_dtype(ctx, 0, 1, "operands");
  const ValueType& a = ctx.input_type(0);
  const ValueType& b = ctx.input_type(1);
  if (!a.rank_known || !b.rank_known) return ctx.set_output(0, ValueType::unranked(a.dtype));
  if (a.shape.empty() || b.shape.empty()) ctx.fail("operands must have rank >= 1, got " + a.str() + " and " + b.str());
  // A 1-D A is a row [1, K], a 1-D B a column [K, 1]; the added dimension is removed again.
  SymShape as = a.shape, bs = b.shape;
  if (as.size() == 1) as.insert(as.begin(), SymDim(1));
  if (bs.size() == 1) bs.push_back(SymDim(1));
  const SymDim& k_a = as[as.size() - 1];
  const SymDim& k_b = bs[bs.size() - 2];
  if (differ(k_a, k_b)) ctx.fail("inner dimensions differ: " + a.str() + " x " + b.str());
  SymShape out = broadcast_shapes(ctx, SymShape(as.begin(), as.end() - 2), SymShape(bs.begin(), bs.end() - 2));
  if (a.shape.size() > 1) out.push_back(as[as.size() - 2]);
  if (b.shape.size() > 1) out.push_back(bs.back());
  ctx.set_output(0, ValueType::of(a.dtype, std::move(out)));
}

void gemm(InferContext& ctx) {
  require_same_dtype(ctx, 0, 1, "A and B");
  require_same_dtype(ctx, 0, 2, "A and C");
  const ValueType& a = ctx.input_type(0);
  const ValueType& b = ctx.input_type(1);
  if (!a.rank_known || !b.rank_known) return ctx.set_output(0, ValueType::unranked(a.dtype));
  if (a.shape.size() != 2 || b.shape.size() != 2) ctx.fail("A and B must be 2-D, got " + a.str() + " and " + b.str());
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const SymDim m = a.shape[ta ? 1 : 0], k = a.shape[ta ? 0 : 1];
  const SymDim kb = b.shape[tb ? 1 : 0], n = b.shape[tb ? 0 : 1];
  if (differ(k, kb))
    ctx.fail("inner dimensions differ: op(A) is " + m.str() + "x" + k.str() + ", op(B) is " + kb.str() + "x" + n.str());
  if (ctx.has_input(2)) {
    const ValueType& c = ctx.input_type(2);
    if (c.rank_known) {
      if (c.shape.size() > 2) ctx.fail("C must have rank <= 2, got " + c.str());
      // C broadcasts unidirectionally to [M, N].
      const SymShape mn = {m, n};
      for (size_t i = 0; i < c.shape.size(); ++i) {
        const SymDim& cd = c.shape[i];
        const SymDim& od = mn[2 - c.shape.size() + i];
        if (differ(cd, od) && cd.value() != 1)
          ctx.fail("C " + c.str() + " does not broadcast to [" + m.str() + "," + n.str() + "]");
      }
    }
  }
  ctx.set_output(0, ValueType::of(a.dtype, {m, n}));
}

// ---- spatial geometry ----

std::vector<int64_t> ints_or(const InferContext& ctx, const char* name, size_t len, int64_t def) {
  std::vector<int64_t> v = ctx.attr_ints(name, {});
  if (v.empty()) return std::vector<int64_t>(len, def);
  if (v.size() != len)
    ctx.fail(std::string("attribute '") + name + "' has " + std::to_string(v.size()) + " values, expected " +
             std::to_string(len));
  return v;
}

// The output sizes of a sliding window over `in` (Conv, the pools): the rules of
// nn::resolve_window, on symbolic sizes.
SymShape window_out(InferContext& ctx, const SymShape& in, const std::vector<int64_t>& kernel, bool ceil_mode) {
  const size_t n = in.size();
  if (n < 1) ctx.fail("input needs at least one spatial dimension (rank >= 3)");
  if (kernel.size() != n)
    ctx.fail("kernel has " + std::to_string(kernel.size()) + " spatial dims, input has " + std::to_string(n));
  const std::vector<int64_t> strides = ints_or(ctx, "strides", n, 1);
  const std::vector<int64_t> dilations = ints_or(ctx, "dilations", n, 1);
  std::vector<int64_t> pads = ints_or(ctx, "pads", 2 * n, 0);
  const std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  if (!same && auto_pad != "VALID" && auto_pad != "NOTSET" && !auto_pad.empty())
    ctx.fail("auto_pad '" + auto_pad + "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  if (auto_pad == "VALID") std::fill(pads.begin(), pads.end(), 0);
  SymShape out(n);
  for (size_t i = 0; i < n; ++i) {
    if (kernel[i] < 1) ctx.fail("kernel dimension " + std::to_string(i) + " is " + std::to_string(kernel[i]));
    if (strides[i] < 1 || dilations[i] < 1) ctx.fail("strides and dilations must be positive");
    if (pads[i] < 0 || pads[i + n] < 0) ctx.fail("pads must be non-negative");
    const int64_t span = (kernel[i] - 1) * dilations[i] + 1;
    const int64_t s = strides[i];
    if (same) {
      out[i] = in[i].known() ? SymDim((in[i].value() + s - 1) / s) : s == 1 ? in[i] : ctx.fresh_dim();
      continue;
    }
    if (!in[i].known()) {
      out[i] = s == 1 && pads[i] + pads[i + n] + 1 == span ? in[i] : ctx.fresh_dim();
      continue;
    }
    const int64_t room = in[i].value() + pads[i] + pads[i + n] - span;
    if (room < 0)
      ctx.fail("window of extent " + std::to_string(span) + " does not fit spatial dimension " + std::to_string(i) +
               " of size " + in[i].str() + " with pads " + std::to_string(pads[i]) + "+" + std::to_string(pads[i + n]));
    int64_t o = room / s + 1;
    if (ceil_mode && auto_pad != "VALID") {
      if (room % s != 0) ++o;
      // A last window that would start inside the end padding is dropped.
      if ((o - 1) * s >= in[i].value() + pads[i]) --o;
    }
    out[i] = o;
  }
  return out;
}

// Activation layouts of FusedConv and reforge::MaxPool ("NCHW", "NHWC", "NCHWc").
nn::ActLayout layout_of(const InferContext& ctx, const char* attr, const char* def) {
  const std::string s = ctx.attr_string(attr, def);
  if (s == "NHWC") return nn::ActLayout::Nhwc;
  if (s == "NCHWc") return nn::native_activation_layout().layout;
  if (s != "NCHW") ctx.fail(std::string(attr) + " '" + s + "' is not one of NCHW, NHWC, NCHWc");
  return nn::ActLayout::Nchw;
}

// The [N, C, H, W] shape of an activation of stored shape `s` in layout `l`.
SymShape logical(InferContext& ctx, const SymShape& s, nn::ActLayout l) {
  if (l == nn::ActLayout::Nchw) {
    if (s.size() != 4) ctx.fail("expected a 2-D activation [N, C, H, W], got " + sym_shape_str(s));
    return s;
  }
  if (l == nn::ActLayout::Nhwc) {
    if (s.size() != 4) ctx.fail("layout NHWC needs [N, H, W, C], got " + sym_shape_str(s));
    return {s[0], s[3], s[1], s[2]};
  }
  const int64_t b = nn::native_activation_layout().block;
  if (s.size() != 5 || differ(s[4], b))
    ctx.fail("layout NCHWc needs [N, C/" + std::to_string(b) + ", H, W, " + std::to_string(b) + "], got " +
             sym_shape_str(s));
  return {s[0], s[1].known() ? SymDim(s[1].value() * b) : ctx.fresh_dim(), s[2], s[3]};
}

// The stored shape of an [N, C, H, W] activation in layout `l`.
SymShape physical(InferContext& ctx, const SymShape& s, nn::ActLayout l) {
  if (l == nn::ActLayout::Nhwc) return {s[0], s[2], s[3], s[1]};
  if (l == nn::ActLayout::Blocked) {
    const int64_t b = nn::native_activation_layout().block;
    if (s[1].known() && s[1].value() % b != 0)
      ctx.fail("layout NCHWc needs channels (" + s[1].str() + ") in multiples of " + std::to_string(b));
    return {s[0], s[1].known() ? SymDim(s[1].value() / b) : ctx.fresh_dim(), s[2], s[3], b};
  }
  return s;
}

// ---- Conv, FusedConv, ConvTranspose ----

}  // namespace

// The NCHW output shape of a convolution of X (logical shape `xs`) with W and the bias at input
// `bias_slot` (SIZE_MAX: none).
SymShape nn::conv_infer_shape(InferContext& ctx, const SymShape& xs, const ValueType& w, size_t bias_slot) {
  if (xs.size() < 3) ctx.fail("X must be [N, C, spatial...], got " + sym_shape_str(xs));
  if (!w.rank_known) ctx.fail("W has no known rank");
  if (w.shape.size() != xs.size()) ctx.fail("W " + w.str() + " must have the rank of X " + sym_shape_str(xs));
  const size_t nsp = xs.size() - 2;
  if (nsp > 3) ctx.fail("only 1-D, 2-D and 3-D convolutions are supported, got " + std::to_string(nsp));
  const int64_t group = ctx.attr_int("group", 1);
  if (group < 1) ctx.fail("group must be positive, got " + std::to_string(group));
  const SymDim& c = xs[1];
  const SymDim& m = w.shape[0];
  if (c.known() && w.shape[1].known() && c.value() != w.shape[1].value() * group)
    ctx.fail("X has " + c.str() + " channels but W " + w.str() + " with group " + std::to_string(group) + " expects " +
             std::to_string(w.shape[1].value() * group));
  if (m.known() && m.value() % group != 0)
    ctx.fail(m.str() + " output channels are not divisible by group " + std::to_string(group));
  if (bias_slot != SIZE_MAX && ctx.has_input(bias_slot)) {
    const ValueType& bias = ctx.input_type(bias_slot);
    if (bias.rank_known && (bias.shape.size() != 1 || differ(bias.shape[0], m)))
      ctx.fail("bias " + bias.str() + " must be [" + m.str() + "]");
  }
  SymShape out = {xs[0], m};
  std::vector<int64_t> kernel;
  for (size_t i = 0; i < nsp; ++i) {
    const SymDim& k = w.shape[i + 2];
    if (!k.known()) {
      // Kernel sizes that are data: the spatial sizes cannot be named.
      for (size_t j = 0; j < nsp; ++j) out.push_back(ctx.fresh_dim());
      return out;
    }
    kernel.push_back(k.value());
  }
  const std::vector<int64_t> k_attr = ctx.attr_ints("kernel_shape", {});
  if (!k_attr.empty() && k_attr != kernel) ctx.fail("kernel_shape attribute does not match W " + w.str());
  const SymShape sp = window_out(ctx, SymShape(xs.begin() + 2, xs.end()), kernel, false);
  out.insert(out.end(), sp.begin(), sp.end());
  return out;
}

namespace {

SymShape conv_shape(InferContext& ctx, const SymShape& xs, const ValueType& w) {
  return nn::conv_infer_shape(ctx, xs, w, 2);
}

void conv(InferContext& ctx) {
  require_same_dtype(ctx, 0, 1, "X and W");
  require_same_dtype(ctx, 0, 2, "X and bias");
  const ValueType& x = ctx.input_type(0);
  if (!x.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
  ctx.set_output(0, ValueType::of(x.dtype, conv_shape(ctx, x.shape, ctx.input_type(1))));
}

void fused_conv(InferContext& ctx) {
  require_same_dtype(ctx, 0, 1, "X and W");
  const ValueType& x = ctx.input_type(0);
  const nn::ActLayout xl = layout_of(ctx, "x_layout", "NCHW");
  const nn::ActLayout yl = layout_of(ctx, "y_layout", "NCHW");
  if (!x.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
  if (xl == nn::ActLayout::Nchw && yl == nn::ActLayout::Nchw)
    return ctx.set_output(0, ValueType::of(x.dtype, conv_shape(ctx, x.shape, ctx.input_type(1))));
  const SymShape y = conv_shape(ctx, logical(ctx, x.shape, xl), ctx.input_type(1));
  ctx.set_output(0, ValueType::of(x.dtype, physical(ctx, y, yl)));
}

void conv_transpose(InferContext& ctx) {
  require_same_dtype(ctx, 0, 1, "X and W");
  const ValueType& x = ctx.input_type(0);
  const ValueType& w = ctx.input_type(1);
  if (!x.rank_known || !w.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
  if (x.shape.size() < 3 || x.shape.size() > 5)
    ctx.fail("X must be [N, C, spatial...] with 1 to 3 spatial dims, got " + x.str());
  if (w.shape.size() != x.shape.size()) ctx.fail("W " + w.str() + " must have the rank of X " + x.str());
  const int64_t group = ctx.attr_int("group", 1);
  if (group < 1) ctx.fail("group must be positive, got " + std::to_string(group));
  const SymDim& cin = x.shape[1];
  if (differ(w.shape[0], cin))
    ctx.fail("W " + w.str() + " must have " + cin.str() + " input channels (X is " + x.str() + ")");
  if (cin.known() && cin.value() % group != 0)
    ctx.fail(cin.str() + " input channels are not divisible by group " + std::to_string(group));
  const SymDim m = w.shape[1].known() ? SymDim(w.shape[1].value() * group) : ctx.fresh_dim();
  if (ctx.has_input(2)) {
    const ValueType& bias = ctx.input_type(2);
    if (bias.rank_known && (bias.shape.size() != 1 || differ(bias.shape[0], m)))
      ctx.fail("bias " + bias.str() + " must be [" + m.str() + "]");
  }
  const size_t nsp = x.shape.size() - 2;
  const std::vector<int64_t> strides = ints_or(ctx, "strides", nsp, 1);
  const std::vector<int64_t> dilations = ints_or(ctx, "dilations", nsp, 1);
  const std::vector<int64_t> out_pad = ints_or(ctx, "output_padding", nsp, 0);
  std::vector<int64_t> out_shape_attr = ctx.attr_ints("output_shape", {});
  if (out_shape_attr.size() == nsp + 2) out_shape_attr.erase(out_shape_attr.begin(), out_shape_attr.begin() + 2);
  if (!out_shape_attr.empty() && out_shape_attr.size() != nsp)
    ctx.fail("output_shape has " + std::to_string(out_shape_attr.size()) + " values for " + std::to_string(nsp) +
             " spatial dims");
  const std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" && auto_pad != "VALID" &&
      !auto_pad.empty())
    ctx.fail("auto_pad '" + auto_pad + "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  const bool same = (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") && !ctx.node().has_attr("pads");
  std::vector<int64_t> pads = ints_or(ctx, "pads", 2 * nsp, 0);
  if (auto_pad == "VALID") std::fill(pads.begin(), pads.end(), 0);
  SymShape out = {x.shape[0], m};
  for (size_t i = 0; i < nsp; ++i) {
    if (strides[i] < 1 || dilations[i] < 1) ctx.fail("strides and dilations must be positive");
    if (out_pad[i] < 0) ctx.fail("output_padding must be non-negative, got " + std::to_string(out_pad[i]));
    if (!out_shape_attr.empty()) {
      out.push_back(out_shape_attr[i]);
      continue;
    }
    const SymDim& in = x.shape[i + 2];
    const SymDim& k = w.shape[i + 2];
    if (!k.known()) {
      out.push_back(ctx.fresh_dim());
      continue;
    }
    if (k.value() < 1) ctx.fail("W has an empty kernel dimension: " + w.str());
    const int64_t span = (k.value() - 1) * dilations[i] + 1;
    if (same) {
      out.push_back(in.known() ? SymDim(in.value() * strides[i]) : strides[i] == 1 ? in : ctx.fresh_dim());
      continue;
    }
    if (pads[i] < 0 || pads[i + nsp] < 0) ctx.fail("pads must be non-negative");
    // out = stride * (in - 1) + output_padding + span - pads
    const int64_t extra = out_pad[i] + span - pads[i] - pads[i + nsp];
    if (!in.known()) {
      out.push_back(strides[i] == 1 && extra == 1 ? in : ctx.fresh_dim());
      continue;
    }
    const int64_t o = strides[i] * (in.value() - 1) + extra;
    if (o < 0) ctx.fail("output spatial dimension " + std::to_string(i) + " would be " + std::to_string(o));
    out.push_back(o);
  }
  ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
}

// ---- pools ----

std::vector<int64_t> pool_kernel(const InferContext& ctx, size_t nsp) {
  const std::vector<int64_t> k = ctx.attr_ints("kernel_shape", {});
  if (k.empty()) ctx.fail("the kernel_shape attribute is required");
  if (k.size() != nsp)
    ctx.fail("kernel_shape has " + std::to_string(k.size()) + " values but the input has " + std::to_string(nsp) +
             " spatial dimensions");
  return k;
}

void pool(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (!x.rank_known) {
    ctx.set_output(0, ValueType::unranked(x.dtype));
    if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType::unranked(DType::Int64));
    return;
  }
  if (x.shape.size() < 3 || x.shape.size() > 5)
    ctx.fail("X must be [N, C, spatial...] with 1 to 3 spatial dims, got " + x.str());
  const SymShape in(x.shape.begin() + 2, x.shape.end());
  const SymShape sp = window_out(ctx, in, pool_kernel(ctx, in.size()), ctx.attr_int("ceil_mode", 0) != 0);
  SymShape out = {x.shape[0], x.shape[1]};
  out.insert(out.end(), sp.begin(), sp.end());
  ctx.set_output(0, ValueType::of(x.dtype, out));
  // MaxPool's Indices: int64 of the output's shape.
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType::of(DType::Int64, std::move(out)));
}

void max_pool_layout(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const std::string layout = ctx.attr_string("layout", "NHWC");
  if (layout != "NHWC" && layout != "NCHWc") ctx.fail("layout must be 'NHWC' or 'NCHWc', got '" + layout + "'");
  const nn::ActLayout l = layout_of(ctx, "layout", "NHWC");
  if (!x.rank_known) {
    ctx.set_output(0, ValueType::unranked(x.dtype));
    if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType::unranked(DType::Int64));
    return;
  }
  const SymShape xs = logical(ctx, x.shape, l);
  const SymShape sp = window_out(ctx, {xs[2], xs[3]}, pool_kernel(ctx, 2), ctx.attr_int("ceil_mode", 0) != 0);
  const SymShape out = physical(ctx, {xs[0], xs[1], sp[0], sp[1]}, l);
  ctx.set_output(0, ValueType::of(x.dtype, out));
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType::of(DType::Int64, out));
}

void global_pool(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (!x.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
  if (x.shape.size() < 3) ctx.fail("X must be [N, C, spatial...], got " + x.str());
  SymShape out(x.shape.begin(), x.shape.begin() + 2);
  out.resize(x.shape.size(), SymDim(1));
  ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
}

// ---- normalizations ----

// The channel count of X [N, C, ...], when known.
const SymDim* channels(const ValueType& x) { return x.rank_known && x.shape.size() >= 2 ? &x.shape[1] : nullptr; }

void batch_norm(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (x.rank_known && x.shape.size() < 2) ctx.fail("X must be [N, C, ...], got " + x.str());
  const SymDim* c = channels(x);
  for (size_t i = 1; i < 5; ++i) {
    const ValueType& p = ctx.input_type(i);
    if (p.dtype != DType::Undefined && !is_float(p.dtype)) ctx.fail("parameter " + p.str() + " must be a float tensor");
    // Per channel: [C] (opsets before 9 also allow per-activation parameters).
    if (ctx.opset() >= 9 && c && p.rank_known && p.shape.size() == 1 && differ(p.shape[0], *c))
      ctx.fail("parameter " + p.str() + " must have " + c->str() + " elements (X is " + x.str() + ")");
  }
  ctx.set_output(0, x);
  const bool training = ctx.opset() >= 14 && ctx.attr_int("training_mode", 0) != 0;
  for (size_t i = 1; i < ctx.num_outputs(); ++i) {
    if (ctx.node().outputs[i].empty()) continue;
    if (!training || i > 2) ctx.fail("training outputs are only supported with training_mode=1 from opset 14");
    ctx.set_output(i, ctx.input_type(i + 2));  // running_mean, running_var: as input_mean, input_var
  }
}

void instance_norm(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (x.rank_known && x.shape.size() < 3) ctx.fail("X must be [N, C, spatial...], got " + x.str());
  const SymDim* c = channels(x);
  for (size_t i = 1; i < 3; ++i) {
    const ValueType& p = ctx.input_type(i);
    if (c && p.fully_known()) {
      int64_t n = 1;
      for (const auto& d : p.shape) n *= d.value();
      if (differ(SymDim(n), *c)) ctx.fail("scale and B must have " + c->str() + " elements, got " + p.str());
    }
  }
  ctx.set_output(0, x);
}

void layer_norm(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const DType stash = dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("stash_type", 1)));
  if (!is_float(stash))
    ctx.fail("stash_type " + std::to_string(ctx.attr_int("stash_type", 1)) + " is not a float type");
  ctx.set_output(0, x);
  if (!x.rank_known) {
    for (size_t i = 1; i < ctx.num_outputs() && i < 3; ++i) ctx.set_output(i, ValueType::unranked(stash));
    return;
  }
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t axis = normalize_axis(ctx, ctx.attr_int("axis", -1), rank);
  // Mean and InvStdDev: X's leading dimensions, 1 from `axis` on.
  SymShape stat(x.shape.begin(), x.shape.begin() + axis);
  stat.resize(x.shape.size(), SymDim(1));
  for (size_t i = 1; i < ctx.num_outputs() && i < 3; ++i) ctx.set_output(i, ValueType::of(stash, stat));
}

// MaxUnpool: the output_shape input when known, else (in - 1) * stride + kernel - pads.
void max_unpool(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (ctx.has_input(2)) {
    if (const SymShape* v = ctx.input_dims_value(2)) return ctx.set_output(0, ValueType::of(x.dtype, *v));
    const ValueType& os = ctx.input_type(2);
    if (os.rank_known && os.shape.size() == 1 && os.shape[0].known()) {
      SymShape out;
      for (int64_t i = 0; i < os.shape[0].value(); ++i) out.push_back(ctx.fresh_dim());
      return ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
    }
    return ctx.set_output(0, ValueType::unranked(x.dtype));
  }
  if (!x.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
  if (x.shape.size() < 3) ctx.fail("X must be [N, C, spatial...], got " + x.str());
  const size_t nsp = x.shape.size() - 2;
  const std::vector<int64_t> k = pool_kernel(ctx, nsp);
  const std::vector<int64_t> s = ctx.attr_ints("strides", std::vector<int64_t>(nsp, 1));
  const std::vector<int64_t> pads = ctx.attr_ints("pads", std::vector<int64_t>(2 * nsp, 0));
  if (s.size() != nsp || pads.size() != 2 * nsp) ctx.fail("strides and pads do not match the spatial rank");
  SymShape out{x.shape[0], x.shape[1]};
  for (size_t i = 0; i < nsp; ++i)
    out.push_back(sym_add(sym_mul(sym_sub(x.shape[i + 2], 1), s[i]), k[i] - pads[i] - pads[i + nsp]));
  ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
}

// ---- RNN / GRU / LSTM ----

// Y [seq, dirs, batch, hidden] ([batch, seq, dirs, hidden] with layout 1); Y_h and Y_c
// [dirs, batch, hidden] ([batch, dirs, hidden]).
void recurrent(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const std::string dir = ctx.attr_string("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    ctx.fail("direction must be 'forward', 'reverse' or 'bidirectional', got '" + dir + "'");
  const int64_t dirs = dir == "bidirectional" ? 2 : 1;
  const int64_t layout = ctx.attr_int("layout", 0);
  if (layout != 0 && layout != 1) ctx.fail("layout must be 0 or 1, got " + std::to_string(layout));
  if (x.rank_known && x.shape.size() != 3) ctx.fail("X must have rank 3, got " + x.str());
  const int64_t gates = ctx.node().op_type == "RNN" ? 1 : ctx.node().op_type == "GRU" ? 3 : 4;
  SymDim hidden = ctx.fresh_dim();
  if (ctx.node().has_attr("hidden_size")) {
    hidden = ctx.attr_int("hidden_size", 0);
  } else if (const ValueType& w = ctx.input_type(1); w.rank_known && w.shape.size() == 3 && w.shape[1].known()) {
    hidden = w.shape[1].value() / gates;
  }
  const SymDim seq = x.rank_known ? x.shape[layout ? 1 : 0] : ctx.fresh_dim();
  const SymDim batch = x.rank_known ? x.shape[layout ? 0 : 1] : ctx.fresh_dim();
  const SymShape state = layout ? SymShape{batch, dirs, hidden} : SymShape{dirs, batch, hidden};
  const auto wanted = [&](size_t i) { return ctx.num_outputs() > i && !ctx.node().outputs[i].empty(); };
  if (wanted(0))
    ctx.set_output(
        0, ValueType::of(x.dtype, layout ? SymShape{batch, seq, dirs, hidden} : SymShape{seq, dirs, batch, hidden}));
  if (wanted(1)) ctx.set_output(1, ValueType::of(x.dtype, state));
  if (wanted(2)) ctx.set_output(2, ValueType::of(x.dtype, state));
}

}  // namespace

void register_nn_inference(OpRegistry& r) {
  r.set_infer("", "MatMul", 1, matmul);
  r.set_infer("", "Gemm", 1, gemm);
  r.set_infer("", "Conv", 1, conv);
  r.set_infer("reforge", "FusedConv", 1, fused_conv);
  r.set_infer("", "ConvTranspose", 1, conv_transpose);
  r.set_infer("", "MaxPool", 1, pool);
  r.set_infer("reforge", "MaxPool", 1, max_pool_layout);
  r.set_infer("", "AveragePool", 1, pool);
  r.set_infer("", "LpPool", 2, pool);
  r.set_infer("", "MaxUnpool", 9, max_unpool);
  for (const char* op : {"RNN", "GRU", "LSTM"}) r.set_infer("", op, 7, recurrent);
  r.set_infer("", "LRN", 1, [](InferContext& ctx) {
    const ValueType& x = ctx.input_type(0);
    if (x.rank_known && x.shape.size() < 2) ctx.fail("X must be [N, C, ...], got " + x.str());
    ctx.set_output(0, x);
  });
  r.set_infer("", "DeformConv", 19, [](InferContext& ctx) {
    const ValueType& x = ctx.input_type(0);
    const ValueType& w = ctx.input_type(1);
    const ValueType& off = ctx.input_type(2);
    if (x.rank_known && x.shape.size() != 4) ctx.fail("only 2-D DeformConv is supported, got X " + x.str());
    ctx.set_output(0,
                   ValueType::of(x.dtype, {x.rank_known ? x.shape[0] : ctx.fresh_dim(),
                                           w.rank_known && w.shape.size() == 4 ? w.shape[0] : ctx.fresh_dim(),
                                           off.rank_known && off.shape.size() == 4 ? off.shape[2] : ctx.fresh_dim(),
                                           off.rank_known && off.shape.size() == 4 ? off.shape[3] : ctx.fresh_dim()}));
  });
  r.set_infer("", "GroupNormalization", 18, [](InferContext& ctx) {
    const ValueType& x = ctx.input_type(0);
    if (x.rank_known && x.shape.size() < 2) ctx.fail("X must be [N, C, ...], got " + x.str());
    ctx.set_output(0, x);
  });
  r.set_infer("", "MeanVarianceNormalization", 9, [](InferContext& ctx) { ctx.set_output(0, ctx.input_type(0)); });
  r.set_infer("", "LpNormalization", 1, [](InferContext& ctx) {
    const ValueType& x = ctx.input_type(0);
    if (x.rank_known) normalize_axis(ctx, ctx.attr_int("axis", -1), static_cast<int64_t>(x.shape.size()));
    ctx.set_output(0, x);
  });
  r.set_infer("", "GlobalAveragePool", 1, global_pool);
  r.set_infer("", "GlobalMaxPool", 1, global_pool);
  r.set_infer("", "BatchNormalization", 1, batch_norm);
  r.set_infer("", "InstanceNormalization", 1, instance_norm);
  r.set_infer("", "LayerNormalization", 17, layer_norm);
}

}  // namespace reforge::ops
