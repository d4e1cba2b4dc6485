// Shape and type inference of the transformer op family (ops/infer.h): Attention (23+),
// RotaryEmbedding (23+), RMSNormalization (23+), Resize (10+), GridSample (16+), AffineGrid (20+),
// NonMaxSuppression and RoiAlign (10+), TensorScatter (24+), CausalConvWithState and
// LinearAttention (27+), SwiGLU (28+) and ONNX Runtime's GroupQueryAttention,
// SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization, following the ONNX operator definitions and the checks
// their kernels make.
#include "ops/infer.h"

#include <algorithm>
#include <cmath>

#include "ops/registry.h"

namespace reforge::ops {
namespace {

int64_t rank_of(const ValueType& t) { return static_cast<int64_t>(t.shape.size()); }

void require_float(InferContext& ctx, const ValueType& t, const char* what) {
  if (t.dtype != DType::Undefined && !is_float(t.dtype))
    ctx.fail(std::string(what) + " must be a float tensor, got " + dtype_name(t.dtype));
}

// A dimension divided by a head count, failing when both are known and do not divide.
SymDim per_head(InferContext& ctx, const SymDim& hidden, int64_t heads, const std::string& what) {
  if (hidden.known() && hidden.value() % heads != 0)
    ctx.fail(what + " " + hidden.str() + " is not divisible by " + std::to_string(heads) + " heads");
  return sym_div(hidden, heads);
}

// Attention (opsets 23+): Y [B, Hq, Sq, Dv] (4D) or [B, Sq, Hq * Dv] (3D); present_key
// [B, Hkv, P + Skv, D]; present_value [B, Hkv, P + Skv, Dv]; qk_matmul_output [B, Hq, Sq, P + Skv].
void infer_attention(InferContext& ctx) {
  const ValueType& q = ctx.input_type(0);
  const ValueType& k = ctx.input_type(1);
  const ValueType& v = ctx.input_type(2);
  require_float(ctx, q, "Q");
  for (const ValueType* t : {&k, &v})
    if (q.dtype != DType::Undefined && t->dtype != DType::Undefined && t->dtype != q.dtype)
      ctx.fail("Q, K and V must share one type, got " + q.str() + ", " + k.str() + ", " + v.str());
  const int64_t mode = ctx.attr_int("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) ctx.fail("qk_matmul_output_mode " + std::to_string(mode) + " is not one of 0, 1, 2, 3");
  const DType dt = q.dtype;
  auto all_unranked = [&] {
    for (size_t i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, ValueType::unranked(dt));
  };
  if (!q.rank_known || !k.rank_known || !v.rank_known) return all_unranked();
  if (!(rank_of(q) == rank_of(k) && rank_of(q) == rank_of(v) && (rank_of(q) == 3 || rank_of(q) == 4)))
    ctx.fail("Q, K and V must all be 3D or all 4D, got " + q.str() + ", " + k.str() + ", " + v.str());
  const bool is_3d = rank_of(q) == 3;
  SymDim batch = merge_dims(ctx, q.shape[0], k.shape[0], "Q and K batch sizes");
  batch = merge_dims(ctx, batch, v.shape[0], "Q and V batch sizes");
  SymDim q_heads, kv_heads, q_len, kv_len, head, v_head;
  if (is_3d) {
    if (!ctx.node().has_attr("q_num_heads") || !ctx.node().has_attr("kv_num_heads"))
      ctx.fail("3D Q/K/V need the q_num_heads and kv_num_heads attributes");
    const int64_t hq = ctx.attr_int("q_num_heads", 0), hkv = ctx.attr_int("kv_num_heads", 0);
    if (hq <= 0 || hkv <= 0)
      ctx.fail("q_num_heads (" + std::to_string(hq) + ") and kv_num_heads (" + std::to_string(hkv) +
               ") must be positive");
    q_heads = hq;
    kv_heads = hkv;
    q_len = q.shape[1];
    kv_len = merge_dims(ctx, k.shape[1], v.shape[1], "K and V sequence lengths");
    head = per_head(ctx, q.shape[2], hq, "Q hidden size");
    head = merge_dims(ctx, head, per_head(ctx, k.shape[2], hkv, "K hidden size"), "Q and K head sizes");
    v_head = per_head(ctx, v.shape[2], hkv, "V hidden size");
  } else {
    q_heads = q.shape[1];
    kv_heads = merge_dims(ctx, k.shape[1], v.shape[1], "K and V head counts");
    q_len = q.shape[2];
    kv_len = merge_dims(ctx, k.shape[2], v.shape[2], "K and V sequence lengths");
    head = merge_dims(ctx, q.shape[3], k.shape[3], "Q and K head sizes");
    v_head = v.shape[3];
    if (ctx.node().has_attr("q_num_heads"))
      q_heads = merge_dims(ctx, q_heads, ctx.attr_int("q_num_heads", 0), "q_num_heads and Q's heads");
    if (ctx.node().has_attr("kv_num_heads"))
      kv_heads = merge_dims(ctx, kv_heads, ctx.attr_int("kv_num_heads", 0), "kv_num_heads and K's heads");
  }
  if (q_heads.known() && kv_heads.known() &&
      (kv_heads.value() <= 0 || q_heads.value() <= 0 || q_heads.value() % kv_heads.value() != 0))
    ctx.fail("q_num_heads " + q_heads.str() + " must be a positive multiple of kv_num_heads " + kv_heads.str());
  const bool has_pk = ctx.has_input(4), has_pv = ctx.has_input(5);
  if (has_pk != has_pv) ctx.fail("past_key and past_value must be given together");
  SymDim past(0);
  if (has_pk) {
    const ValueType& pk = ctx.input_type(4);
    const ValueType& pv = ctx.input_type(5);
    if (pk.rank_known && pk.shape.size() != 4) ctx.fail("past_key must be 4D, got " + pk.str());
    if (pv.rank_known && pv.shape.size() != 4) ctx.fail("past_value must be 4D, got " + pv.str());
    if (pk.rank_known && pv.rank_known) {
      past = merge_dims(ctx, pk.shape[2], pv.shape[2], "past_key and past_value lengths");
      merge_dims(ctx, pk.shape[0], batch, "past_key batch size");
      merge_dims(ctx, pk.shape[1], kv_heads, "past_key heads");
      merge_dims(ctx, pk.shape[3], head, "past_key head size");
      merge_dims(ctx, pv.shape[3], v_head, "past_value head size");
    } else {
      past = ctx.fresh_dim();
    }
  }
  if (ctx.has_input(6) && has_pk) ctx.fail("nonpad_kv_seqlen cannot be combined with past_key/past_value");
  const SymDim total = sym_add(past, kv_len);
  if (is_3d)
    ctx.set_output(0, ValueType::of(dt, {batch, q_len, sym_mul(q_heads, v_head)}));
  else
    ctx.set_output(0, ValueType::of(dt, {batch, q_heads, q_len, v_head}));
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType::of(dt, {batch, kv_heads, total, head}));
  if (ctx.num_outputs() > 2) ctx.set_output(2, ValueType::of(dt, {batch, kv_heads, total, v_head}));
  if (ctx.num_outputs() > 3) ctx.set_output(3, ValueType::of(dt, {batch, q_heads, q_len, total}));
}

void infer_rotary_embedding(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (x.rank_known && x.shape.size() != 3 && x.shape.size() != 4) ctx.fail("input must be 3D or 4D, got " + x.str());
  for (size_t i : {1, 2}) {
    const ValueType& c = ctx.input_type(i);
    if (x.dtype != DType::Undefined && c.dtype != DType::Undefined && c.dtype != x.dtype)
      ctx.fail("cos_cache and sin_cache must have the input's type " + dtype_name(x.dtype) + ", got " + c.str());
  }
  if (x.rank_known && x.shape.size() == 3) {
    const int64_t heads = ctx.attr_int("num_heads", 0);
    if (heads <= 0) ctx.fail("3D input needs a positive num_heads attribute, got " + std::to_string(heads));
    if (x.shape[2].known() && x.shape[2].value() % heads != 0)
      ctx.fail("hidden size " + x.shape[2].str() + " is not divisible by num_heads " + std::to_string(heads));
  }
  ctx.set_output(0, x);
}

void infer_rms_normalization(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& scale = ctx.input_type(1);
  if (x.rank_known) {
    const int64_t rank = rank_of(x);
    if (rank < 1) ctx.fail("X must have rank >= 1");
    const int64_t axis = ctx.attr_int("axis", -1);
    if (axis < -rank || axis >= rank)
      ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
    if (scale.rank_known) {
      if (rank_of(scale) > rank) ctx.fail("scale " + scale.str() + " does not broadcast to X " + x.str());
      for (int64_t i = 0; i < rank_of(scale); ++i) {
        const SymDim& sd = scale.shape[rank_of(scale) - 1 - i];
        const SymDim& xd = x.shape[rank - 1 - i];
        if (sd.known() && xd.known() && sd.value() != 1 && sd.value() != xd.value())
          ctx.fail("scale " + scale.str() + " does not broadcast to X " + x.str());
      }
    }
  }
  ctx.set_output(0, x.rank_known ? ValueType::of(scale.dtype, x.shape) : ValueType::unranked(scale.dtype));
}

// reforge::AddRmsNorm(X, scale, R) -> (Y, S): Y as RMSNormalization of X; S = X + R, R of X's
// type and shape.
void infer_add_rms_norm(InferContext& ctx) {
  infer_rms_normalization(ctx);
  const ValueType& x = ctx.input_type(0);
  const ValueType& r = ctx.input_type(2);
  if (x.dtype != DType::Undefined && r.dtype != DType::Undefined && r.dtype != x.dtype)
    ctx.fail("the residual " + r.str() + " is not of X's type " + x.str());
  if (x.rank_known && r.rank_known) {
    if (r.shape.size() != x.shape.size()) ctx.fail("the residual " + r.str() + " is not of X's shape " + x.str());
    for (size_t i = 0; i < x.shape.size(); ++i) merge_dims(ctx, x.shape[i], r.shape[i], "X and the residual");
  }
  ctx.set_output(1, x.rank_known ? ValueType::of(x.dtype, x.shape) : ValueType::unranked(x.dtype));
}

// True when optional input i is given with at least one element (an empty tensor means absent).
bool given_nonempty(InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return false;
  const ValueType& t = ctx.input_type(i);
  if (!t.rank_known) return true;
  const SymDim n = sym_product(t.shape);
  return !(n.known() && n.value() == 0);
}

void infer_resize(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const std::string mode = ctx.attr_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    ctx.fail("mode '" + mode + "' is not one of nearest, linear, cubic");
  if (!x.rank_known) {
    ctx.set_output(0, ValueType::unranked(x.dtype));
    return;
  }
  const int64_t rank = rank_of(x);
  std::vector<int64_t> axes;
  if (ctx.opset() >= 18 && ctx.node().has_attr("axes")) {
    for (int64_t a : ctx.attr_ints("axes")) {
      const int64_t n = normalize_axis(ctx, a, rank);
      if (std::find(axes.begin(), axes.end(), n) != axes.end())
        ctx.fail("axis " + std::to_string(n) + " appears twice in axes");
      axes.push_back(n);
    }
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  const size_t naxes = axes.size();
  const bool has_scales = ctx.opset() < 11 ? true : given_nonempty(ctx, 2);
  const bool has_sizes = ctx.opset() >= 11 && given_nonempty(ctx, 3);
  if (!has_scales && !has_sizes) ctx.fail("one of scales and sizes must be given (non-empty)");
  if (has_scales && has_sizes) ctx.fail("only one of scales and sizes may be given");
  SymShape out = x.shape;
  if (has_sizes) {
    const SymShape* sz = ctx.input_dims_value(3);
    if (!sz) {
      for (int64_t a : axes) out[a] = ctx.fresh_dim();
      ctx.set_output(0, ValueType::of(x.dtype, out));
      return;
    }
    if (sz->size() != naxes)
      ctx.fail("sizes must be an integer vector of length " + std::to_string(naxes) + ", got " + sym_shape_str(*sz));
    for (size_t i = 0; i < naxes; ++i) {
      if ((*sz)[i].known() && (*sz)[i].value() < 0)
        ctx.fail("sizes[" + std::to_string(i) + "] = " + (*sz)[i].str() + " is negative");
      out[axes[i]] = (*sz)[i];
    }
    const std::string policy = ctx.opset() >= 18 ? ctx.attr_string("keep_aspect_ratio_policy", "stretch") : "stretch";
    if (policy != "stretch" && naxes > 0) {
      // One scale for every axis: the smallest (not_larger) or largest (not_smaller) of the
      // per-axis ratios, then each size rounded from it, as the kernel does.
      bool known = true;
      for (size_t i = 0; i < naxes; ++i) known &= (*sz)[i].known() && x.shape[axes[i]].known();
      if (!known) {
        for (int64_t a : axes) out[a] = ctx.fresh_dim();
      } else {
        std::vector<double> scale(naxes);
        for (size_t i = 0; i < naxes; ++i) {
          const int64_t in = x.shape[axes[i]].value();
          scale[i] = in > 0 ? static_cast<double>((*sz)[i].value()) / static_cast<double>(in) : 1.0;
        }
        double s = scale[0];
        for (double v : scale) s = policy == "not_larger" ? std::min(s, v) : std::max(s, v);
        for (int64_t a : axes) {
          const double o = s * static_cast<double>(x.shape[a].value()) + 0.5;
          if (!(o < 4.0e18)) ctx.fail("sizes give an output dimension that is too large");
          out[a] = static_cast<int64_t>(o);
        }
      }
    }
  } else {
    auto scales = known_doubles(ctx, ctx.opset() < 11 ? 1 : 2);
    if (!scales) {
      for (int64_t a : axes) out[a] = ctx.fresh_dim();
      ctx.set_output(0, ValueType::of(x.dtype, out));
      return;
    }
    if (scales->size() != naxes)
      ctx.fail("scales must be a float vector of length " + std::to_string(naxes) + ", got " +
               std::to_string(scales->size()) + " values");
    for (size_t i = 0; i < naxes; ++i) {
      const double s = (*scales)[i];
      if (!(s > 0 && std::isfinite(s)))
        ctx.fail("scales[" + std::to_string(i) + "] = " + std::to_string(s) + " must be positive and finite");
      const SymDim& in = x.shape[axes[i]];
      if (s == 1.0)
        out[axes[i]] = in;
      else if (s == std::floor(s) && s < 1e9)  // an integer factor: exact for every size
        out[axes[i]] = sym_mul(in, static_cast<int64_t>(s));
      else if (in.known() && s * static_cast<double>(in.value()) < 4.0e18)
        out[axes[i]] = static_cast<int64_t>(s * static_cast<double>(in.value()));
      else if (in.known())
        ctx.fail("scales[" + std::to_string(i) + "] = " + std::to_string(s) +
                 " gives an output dimension that is too large");
      else
        out[axes[i]] = ctx.fresh_dim();
    }
  }
  ctx.set_output(0, ValueType::of(x.dtype, out));
}

// GridSample: [N, C] of X followed by the grid's output spatial dimensions.
void infer_grid_sample(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& g = ctx.input_type(1);
  if (!g.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
  if (g.shape.size() < 3) ctx.fail("grid must be [N, out spatial..., r], got " + g.str());
  if (x.rank_known && x.shape.size() != g.shape.size())
    ctx.fail("X " + x.str() + " and grid " + g.str() + " must have the same rank");
  SymShape out{x.rank_known ? merge_dims(ctx, x.shape[0], g.shape[0], "batch dimension") : g.shape[0],
               x.rank_known ? x.shape[1] : ctx.fresh_dim()};
  out.insert(out.end(), g.shape.begin() + 1, g.shape.end() - 1);
  ctx.set_output(0, ValueType::of(x.dtype, std::move(out)));
}

// AffineGrid: size [N, C, (D,) H, W] gives grid [N, (D,) H, W, 2 or 3].
void infer_affine_grid(InferContext& ctx) {
  const ValueType& theta = ctx.input_type(0);
  const SymShape* size = ctx.input_dims_value(1);
  const ValueType& st = ctx.input_type(1);
  int64_t len = -1;
  if (size)
    len = static_cast<int64_t>(size->size());
  else if (st.rank_known && st.shape.size() == 1 && st.shape[0].known())
    len = st.shape[0].value();
  if (len < 0) return ctx.set_output(0, ValueType::unranked(theta.dtype));
  if (len != 4 && len != 5) ctx.fail("size must have 4 or 5 values, got " + std::to_string(len));
  SymShape out{size ? (*size)[0] : ctx.fresh_dim()};
  for (int64_t i = 2; i < len; ++i) out.push_back(size ? (*size)[static_cast<size_t>(i)] : ctx.fresh_dim());
  out.push_back(len - 2);
  ctx.set_output(0, ValueType::of(theta.dtype, std::move(out)));
}

// NonMaxSuppression: int64 [selected, 3]; how many are selected depends on the data.
void infer_non_max_suppression(InferContext& ctx) {
  const ValueType& b = ctx.input_type(0);
  if (b.rank_known && (b.shape.size() != 3 || (b.shape[2].known() && b.shape[2].value() != 4)))
    ctx.fail("boxes must be [batches, boxes, 4], got " + b.str());
  ctx.set_output(0, ValueType::of(DType::Int64, {ctx.fresh_dim(), 3}));
}

// com.microsoft GroupQueryAttention: output [B, S, num_heads * D]; present_key and present_value
// [B, kv_num_heads, max(total_sequence_length, P), D] (D from query's width: num_heads, or
// num_heads + 2 * kv_num_heads when Q, K and V are packed). The present length is a number when
// both are known, total_sequence_length without a past, else a size of its own.
void infer_group_query_attention(InferContext& ctx) {
  const ValueType& q = ctx.input_type(0);
  const int64_t hq = ctx.attr_int("num_heads", 0), hkv = ctx.attr_int("kv_num_heads", 0);
  if (hq <= 0 || hkv <= 0 || hq % hkv != 0)
    ctx.fail("num_heads (" + std::to_string(hq) + ") must be a positive multiple of kv_num_heads (" +
             std::to_string(hkv) + ")");
  const bool packed = !ctx.has_input(1);
  if (!q.rank_known) {
    for (size_t i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, ValueType::unranked(q.dtype));
    return;
  }
  if (q.shape.size() != 3) ctx.fail("query must be [batch, sequence, hidden], got " + q.str());
  const SymDim head = per_head(ctx, q.shape[2], packed ? hq + 2 * hkv : hq, "query's hidden size");
  ctx.set_output(0, ValueType::of(q.dtype, {q.shape[0], q.shape[1], sym_mul(head, hq)}));
  SymDim length = ctx.fresh_dim();
  const SymShape* total = ctx.has_input(6) ? ctx.input_dims_value(6) : nullptr;
  const bool total_known = total && total->size() == 1;
  if (!ctx.has_input(3)) {
    if (total_known) length = (*total)[0];
  } else if (const ValueType& past = ctx.input_type(3); past.rank_known && past.shape.size() == 4) {
    if (total_known && (*total)[0].known() && past.shape[2].known())
      length = std::max((*total)[0].value(), past.shape[2].value());
  }
  for (size_t i : {size_t{1}, size_t{2}})
    if (i < ctx.num_outputs() && !ctx.node().outputs[i].empty())
      ctx.set_output(i, ValueType::of(q.dtype, {q.shape[0], hkv, length, head}));
}

// SimplifiedLayerNormalization: Y of scale's type and X's shape; inv_std_var float32, X's shape
// with the dimensions from axis on 1.
void infer_simplified_layer_norm(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& scale = ctx.input_type(1);
  if (!x.rank_known) {
    ctx.set_output(0, ValueType::unranked(scale.dtype));
    if (ctx.num_outputs() > 1 && !ctx.node().outputs[1].empty()) ctx.set_output(1, ValueType::unranked(DType::Float32));
    return;
  }
  const int64_t rank = rank_of(x);
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < -rank || axis >= rank)
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  ctx.set_output(0, ValueType::of(scale.dtype, x.shape));
  if (ctx.num_outputs() > 1 && !ctx.node().outputs[1].empty()) {
    SymShape stat = x.shape;
    for (int64_t d = axis; d < rank; ++d) stat[static_cast<size_t>(d)] = 1;
    ctx.set_output(1, ValueType::of(DType::Float32, stat));
  }
}

// com.microsoft SkipSimplifiedLayerNormalization: output and input_skip_bias_sum of input's type
// and shape; mean and inv_std_var float32, input's shape with the last dimension 1.
void infer_skip_simplified_layer_norm(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  if (x.rank_known && x.shape.size() != 2 && x.shape.size() != 3)
    ctx.fail("input must be [batch, sequence, hidden] or [sequence, hidden], got " + x.str());
  SymShape stat = x.shape;
  if (!stat.empty()) stat.back() = 1;
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    if (ctx.node().outputs[i].empty()) continue;
    const DType dt = i == 1 || i == 2 ? DType::Float32 : x.dtype;
    ctx.set_output(i, !x.rank_known ? ValueType::unranked(dt) : ValueType::of(dt, i == 1 || i == 2 ? stat : x.shape));
  }
}

}  // namespace

void register_transformer_inference(OpRegistry& r) {
  r.set_infer("com.microsoft", "GroupQueryAttention", 1, infer_group_query_attention);
  r.set_infer("", "SimplifiedLayerNormalization", 1, infer_simplified_layer_norm);
  r.set_infer("com.microsoft", "SkipSimplifiedLayerNormalization", 1, infer_skip_simplified_layer_norm);
  r.set_infer("", "Attention", 23, infer_attention);
  r.set_infer("", "RotaryEmbedding", 23, infer_rotary_embedding);
  r.set_infer("", "RMSNormalization", 23, infer_rms_normalization);
  r.set_infer("reforge", "AddRmsNorm", 1, infer_add_rms_norm);
  r.set_infer("", "Resize", 10, infer_resize);
  r.set_infer("", "GridSample", 16, infer_grid_sample);
  r.set_infer("", "AffineGrid", 20, infer_affine_grid);
  r.set_infer("", "NonMaxSuppression", 10, infer_non_max_suppression);
  r.set_infer("", "SwiGLU", 28, [](InferContext& ctx) {
    const ValueType& a = ctx.input_type(0);
    const ValueType& b = ctx.input_type(1);
    if (a.dtype != b.dtype && a.dtype != DType::Undefined && b.dtype != DType::Undefined)
      ctx.fail("a " + a.str() + " and b " + b.str() + " must have the same type");
    ctx.set_output(0, a);
  });
  r.set_infer("", "CausalConvWithState", 27, [](InferContext& ctx) {
    const ValueType& x = ctx.input_type(0);
    const ValueType& w = ctx.input_type(1);
    if (x.rank_known && x.shape.size() != 3) ctx.fail("input must be [batch, channels, length], got " + x.str());
    if (w.rank_known && w.shape.size() != 3) ctx.fail("weight must be [channels, 1, k], got " + w.str());
    ctx.set_output(0, x);
    if (ctx.num_outputs() > 1 && !ctx.node().outputs[1].empty()) {
      const SymDim state = w.rank_known ? sym_sub(w.shape[2], 1) : ctx.fresh_dim();
      ctx.set_output(
          1, x.rank_known ? ValueType::of(x.dtype, {x.shape[0], x.shape[1], state}) : ValueType::unranked(x.dtype));
    }
  });
  r.set_infer("", "LinearAttention", 27, [](InferContext& ctx) {
    const ValueType& q = ctx.input_type(0);
    const ValueType& v = ctx.input_type(2);
    const int64_t hq = ctx.attr_int("q_num_heads", 0), hkv = ctx.attr_int("kv_num_heads", 0);
    if (hkv < 1 || hq < hkv || hq % hkv != 0)
      ctx.fail("q_num_heads (" + std::to_string(hq) + ") must be a positive multiple of kv_num_heads (" +
               std::to_string(hkv) + ")");
    if (!q.rank_known || !v.rank_known || q.shape.size() != 3 || v.shape.size() != 3) {
      ctx.set_output(0, ValueType::unranked(q.dtype));
      if (ctx.num_outputs() > 1 && !ctx.node().outputs[1].empty()) ctx.set_output(1, ValueType::unranked(q.dtype));
      return;
    }
    const SymDim dv = sym_div(v.shape[2], hkv), dk = sym_div(q.shape[2], hq);
    ctx.set_output(0, ValueType::of(q.dtype, {q.shape[0], q.shape[1], sym_mul(dv, hq)}));
    if (ctx.num_outputs() > 1 && !ctx.node().outputs[1].empty())
      ctx.set_output(1, ValueType::of(q.dtype, {q.shape[0], hkv, dk, dv}));
  });
  r.set_infer("", "RoiAlign", 10, [](InferContext& ctx) {
    const ValueType& x = ctx.input_type(0);
    const ValueType& rois = ctx.input_type(1);
    if (x.rank_known && x.shape.size() != 4) ctx.fail("X must be [N, C, H, W], got " + x.str());
    ctx.set_output(
        0, ValueType::of(x.dtype, {rois.rank_known && rois.shape.size() == 2 ? rois.shape[0] : ctx.fresh_dim(),
                                   x.rank_known ? x.shape[1] : ctx.fresh_dim(), ctx.attr_int("output_height", 1),
                                   ctx.attr_int("output_width", 1)}));
  });
  r.set_infer("", "TensorScatter", 24, [](InferContext& ctx) { ctx.set_output(0, ctx.input_type(0)); });
}

}  // namespace reforge::ops
