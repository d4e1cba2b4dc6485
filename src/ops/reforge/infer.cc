// Shape and type inference of the "reforge" domain (ops/infer.h): the recipe transforms
// (BnFoldWeight, BnFoldBias, PackPanels) and the fused kernels the passes emit (MatMulAdd,
// MatMulGroup, MatMulAddPacked, QuantizeWeight, QdqWeight, Int4Unpack, MatMulQuant, RmsNorm, Silu, SiluMul, Gelu, Attention,
// Rotary).
//
// A fused op computes exactly the subgraph it replaces, and its kernel falls back to that
// subgraph for the inputs its fast path does not take; so its output type is the type of the
// replaced subgraph, and that is what these functions derive, op by op of the subgraph
// (ops/fused_transformer.cc documents each one).
#include "ops/infer.h"

#include <algorithm>

#include "ops/reforge/panels.h"
#include "ops/reforge/qdq_weight.h"
#include "ops/reforge/quant_weight.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

int64_t rank_of(const ValueType& t) { return static_cast<int64_t>(t.shape.size()); }

bool is_linear_weight_type(DType t) { return t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16; }

void require_dtype(InferContext& ctx, const ValueType& t, DType want, const std::string& what) {
  if (t.dtype != DType::Undefined && t.dtype != want)
    ctx.fail(what + " must be " + dtype_name(want) + ", got " + t.str());
}

// A per-channel vector of `channels` entries with the weight's type (BatchNorm parameters).
void check_channel_vector(InferContext& ctx, size_t i, const ValueType& w, const SymDim& channels, const char* what) {
  const ValueType& t = ctx.input_type(i);
  if (w.dtype != DType::Undefined && t.dtype != DType::Undefined && t.dtype != w.dtype)
    ctx.fail(std::string(what) + " is " + t.str() + ", expected " + dtype_name(w.dtype) + "[" + channels.str() + "]");
  if (!t.rank_known) return;
  if (t.shape.size() != 1)
    ctx.fail(std::string(what) + " is " + t.str() + ", expected " + dtype_name(w.dtype) + "[" + channels.str() + "]");
  merge_dims(ctx, t.shape[0], channels, std::string(what) + " length and the channel count");
}

// W'[m, ...] = W[m, ...] * scale[m] / sqrt(var[m] + eps): W's type.
void infer_bn_fold_weight(InferContext& ctx) {
  const ValueType& w = ctx.input_type(0);
  if (w.rank_known) {
    if (w.shape.empty()) ctx.fail("weight must have an output-channel axis");
    check_channel_vector(ctx, 1, w, w.shape[0], "scale");
    check_channel_vector(ctx, 2, w, w.shape[0], "variance");
  }
  ctx.set_output(0, w);
}

// B'[m] = (B[m] - mean[m]) * scale[m] / sqrt(var[m] + eps) + bias[m]: B's type.
void infer_bn_fold_bias(InferContext& ctx) {
  const ValueType& b = ctx.input_type(0);
  if (b.rank_known) {
    if (b.shape.size() != 1) ctx.fail("conv bias must be a vector, got " + b.str());
    for (size_t k = 1; k < 5; ++k) check_channel_vector(ctx, k, b, b.shape[0], "BatchNormalization parameter");
  }
  ctx.set_output(0, b);
}

// Y = X W (+ b): X [..., K] float32, W [K, N] -> float32 [..., N].
void infer_matmul_add(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& w = ctx.input_type(1);
  require_dtype(ctx, x, DType::Float32, "input");
  if (w.dtype != DType::Undefined && !is_linear_weight_type(w.dtype))
    ctx.fail("weight must be a float32, bfloat16 or float16 matrix, got " + w.str());
  if (w.rank_known && w.shape.size() != 2)
    ctx.fail("weight must be a float32, bfloat16 or float16 matrix, got " + w.str());
  if (!x.rank_known || !w.rank_known) {
    ctx.set_output(0, ValueType::unranked(DType::Float32));
    return;
  }
  if (x.shape.empty()) ctx.fail("input " + x.str() + " does not match the weight " + w.str());
  merge_dims(ctx, x.shape.back(), w.shape[0], "input " + x.str() + " and weight " + w.str() + " inner dimensions");
  if (ctx.has_input(2)) {
    const ValueType& b = ctx.input_type(2);
    require_dtype(ctx, b, DType::Float32, "bias");
    if (b.rank_known &&
        (b.shape.size() != 1 || (b.shape[0].known() && w.shape[1].known() && b.shape[0].value() != w.shape[1].value())))
      ctx.fail("bias " + b.str() + " does not match the weight " + w.str());
  }
  SymShape out = x.shape;
  out.back() = w.shape[1];
  ctx.set_output(0, ValueType::of(DType::Float32, out));
}

// W [K, N] (or [N, K] transposed) -> panels [ceil(N / 16), K, 16] of W's type.
void infer_pack_panels(InferContext& ctx) {
  const ValueType& w = ctx.input_type(0);
  if (w.dtype != DType::Undefined && !is_linear_weight_type(w.dtype))
    ctx.fail("weight must be a float32, bfloat16 or float16 matrix, got " + w.str());
  if (!w.rank_known) {
    ctx.set_output(0, ValueType::of(w.dtype, {ctx.fresh_dim(), ctx.fresh_dim(), kPanelWidth}));
    return;
  }
  if (w.shape.size() != 2) ctx.fail("weight must be a float32, bfloat16 or float16 matrix, got " + w.str());
  const bool transposed = ctx.attr_int("transposed", 0) != 0;
  const SymDim k = w.shape[transposed ? 1 : 0], n = w.shape[transposed ? 0 : 1];
  // ceil(N / 16) panels, written so that no size overflows.
  const SymDim panels = n.known() ? SymDim(n.value() / kPanelWidth + (n.value() % kPanelWidth != 0))
                                  : sym_div(sym_add(n, kPanelWidth - 1), kPanelWidth);
  ctx.set_output(0, ValueType::of(w.dtype, {panels, k, kPanelWidth}));
}

// Y = X W (+ b) with W packed: X [..., K] float32 -> float32 [..., n].
// QuantizeWeight(W [K, N] or [N, K]) -> (Q, scales[, zero_points]), the layouts of
// ops/reforge/quant_weight.h; a W of unknown shape gives outputs of known types and unknown shapes.
void infer_quantize_weight(InferContext& ctx) {
  const ValueType& w = ctx.input_type(0);
  require_dtype(ctx, w, DType::Float32, "weight");
  const int64_t bits = ctx.attr_int("bits", 8), block = ctx.attr_int("block_size", 0);
  if (bits != 8 && bits != 4) ctx.fail("bits " + std::to_string(bits) + " is not 8 or 4");
  if (bits == 8 && block != 0) ctx.fail("int8 weights take block_size 0, not " + std::to_string(block));
  if (bits == 4 && !quant::valid_block_size(block))
    ctx.fail("block_size " + std::to_string(block) + " is not a power of two >= 16");
  const DType qt = bits == 8 ? DType::Int8 : DType::UInt8;
  if (w.rank_known && w.shape.size() != 2) ctx.fail("weight must be a matrix, got " + w.str());
  const bool known = w.rank_known && w.shape[0].known() && w.shape[1].known();
  if (!known) {
    ctx.set_output(0, ValueType::unranked(qt));
    ctx.set_output(1, ValueType::unranked(DType::Float32));
    if (bits == 4 && ctx.num_outputs() > 2) ctx.set_output(2, ValueType::unranked(DType::UInt8));
    return;
  }
  const bool t = ctx.attr_int("transposed", 0) != 0;
  const int64_t K = w.shape[t ? 1 : 0].value(), N = w.shape[t ? 0 : 1].value();
  if (K <= 0 || N <= 0) ctx.fail("weight " + w.str() + " is empty");
  const quant::QuantShape qs = quant::quant_shape(bits, block, K, N, ctx.node().label());
  SymShape qshape;
  for (int64_t d : qs.q_shape()) qshape.push_back(d);
  ctx.set_output(0, ValueType::of(qt, qshape));
  ctx.set_output(1, ValueType::of(DType::Float32, {qs.num_scales()}));
  if (bits == 4 && ctx.num_outputs() > 2) ctx.set_output(2, ValueType::of(DType::UInt8, {qs.num_zero_points()}));
}

// QdqWeight(codes, scale[, zero_point]) -> (Q, scales[, zero_points]): the MatMulQuant layout of a
// DequantizeLinear weight (ops/reforge/qdq_weight.h); codes or a scale of unknown shape give
// outputs of known types and unknown shapes.
void infer_qdq_weight(InferContext& ctx) {
  const ValueType& c = ctx.input_type(0);
  const ValueType& s = ctx.input_type(1);
  const bool int4 = c.dtype == DType::Int4 || c.dtype == DType::UInt4;
  const DType qt = int4 ? DType::UInt8 : DType::Int8;
  auto known = [](const ValueType& t) {
    if (!t.rank_known) return false;
    for (const SymDim& d : t.shape)
      if (!d.known()) return false;
    return true;
  };
  if (!known(c) || !known(s)) {
    ctx.set_output(0, ValueType::unranked(qt));
    ctx.set_output(1, ValueType::unranked(DType::Float32));
    if (ctx.num_outputs() > 2) ctx.set_output(2, ValueType::unranked(DType::UInt8));
    return;
  }
  Shape cs, ss;
  for (const SymDim& d : c.shape) cs.push_back(d.value());
  for (const SymDim& d : s.shape) ss.push_back(d.value());
  quant::QdqForm f;
  const std::string why = quant::qdq_form(c.dtype, cs, s.dtype, ss, ctx.attr_int("axis", 1),
                                          ctx.attr_int("block_size", 0), ctx.attr_int("transposed", 0) != 0, f);
  if (!why.empty()) ctx.fail("no MatMulQuant form: " + why);
  SymShape qshape;
  for (int64_t d : f.target.q_shape()) qshape.push_back(d);
  ctx.set_output(0, ValueType::of(qt, qshape));
  ctx.set_output(1, ValueType::of(DType::Float32, {f.target.num_scales()}));
  if (ctx.num_outputs() > 2) ctx.set_output(2, ValueType::of(DType::UInt8, {f.target.num_zero_points()}));
}

// Int4Unpack(Q [N, n_blocks, blob], scales, zero_points) -> uint4 codes [K, N] (transposed: [N, K]),
// float32 scale and uint4 zero point [n_blocks, N] ([N, n_blocks]).
void infer_int4_unpack(InferContext& ctx) {
  const ValueType& q = ctx.input_type(0);
  require_dtype(ctx, q, DType::UInt8, "Q");
  const int64_t K = ctx.attr_int("K", 0);
  const bool t = ctx.attr_int("transposed", 0) != 0;
  if (!q.rank_known || q.shape.size() != 3) {
    ctx.set_output(0, ValueType::unranked(DType::UInt4));
    ctx.set_output(1, ValueType::unranked(DType::Float32));
    ctx.set_output(2, ValueType::unranked(DType::UInt4));
    return;
  }
  const SymDim n = q.shape[0], b = q.shape[1];
  ctx.set_output(0, ValueType::of(DType::UInt4, t ? SymShape{n, SymDim(K)} : SymShape{SymDim(K), n}));
  ctx.set_output(1, ValueType::of(DType::Float32, t ? SymShape{n, b} : SymShape{b, n}));
  ctx.set_output(2, ValueType::of(DType::UInt4, t ? SymShape{n, b} : SymShape{b, n}));
}

// MatMulQuant(X [..., K], Q, scales[, zero_points][, bias]) -> float32 [..., N] (attributes K, N).
void infer_matmul_quant(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  require_dtype(ctx, x, DType::Float32, "input");
  const int64_t K = ctx.attr_int("K", 0), N = ctx.attr_int("N", 0);
  const int64_t bits = ctx.attr_int("bits", 8);
  if (K <= 0 || N <= 0)
    ctx.fail("attributes K = " + std::to_string(K) + ", N = " + std::to_string(N) + " are not sizes");
  const quant::QuantShape qs = quant::quant_shape(bits, ctx.attr_int("block_size", 0), K, N, ctx.node().label());
  const ValueType& q = ctx.input_type(1);
  const DType qt = bits == 8 ? DType::Int8 : DType::UInt8;
  require_dtype(ctx, q, qt, "quantized weight");
  if (q.rank_known) {
    const Shape want = qs.q_shape();
    if (q.shape.size() != want.size()) ctx.fail("quantized weight " + q.str() + " is not " + shape_str(want));
    for (size_t i = 0; i < want.size(); ++i) merge_dims(ctx, q.shape[i], want[i], "quantized weight " + q.str());
  }
  require_dtype(ctx, ctx.input_type(2), DType::Float32, "scales");
  if (ctx.has_input(3)) require_dtype(ctx, ctx.input_type(3), DType::UInt8, "zero points");
  if (ctx.has_input(4)) {
    const ValueType& b = ctx.input_type(4);
    require_dtype(ctx, b, DType::Float32, "bias");
    if (b.rank_known && (b.shape.size() != 1 || (b.shape[0].known() && b.shape[0].value() != N)))
      ctx.fail("bias " + b.str() + " does not match N = " + std::to_string(N));
  }
  if (!x.rank_known) {
    ctx.set_output(0, ValueType::unranked(DType::Float32));
    return;
  }
  if (x.shape.empty()) ctx.fail("input " + x.str() + " does not match K = " + std::to_string(K));
  merge_dims(ctx, x.shape.back(), K, "input " + x.str() + " and the quantized weight's K");
  SymShape out = x.shape;
  out.back() = N;
  ctx.set_output(0, ValueType::of(DType::Float32, out));
}

void infer_matmul_add_packed(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& wp = ctx.input_type(1);
  require_dtype(ctx, x, DType::Float32, "input");
  if (!ctx.node().has_attr("n")) ctx.fail("required attribute 'n' is missing");
  const int64_t n = ctx.attr_int("n", 0);
  if (n <= 0 || n > (int64_t{1} << 40)) ctx.fail("attribute n = " + std::to_string(n) + " is not a valid size");
  if (wp.dtype != DType::Undefined && !is_linear_weight_type(wp.dtype))
    ctx.fail("packed weight " + wp.str() + " must be float32, bfloat16 or float16");
  if (wp.rank_known) {
    if (wp.shape.size() != 3) ctx.fail("packed weight " + wp.str() + " must have rank 3");
    merge_dims(ctx, wp.shape[2], kPanelWidth, "packed weight " + wp.str() + " panel width");
    merge_dims(ctx, wp.shape[0], panel_floats(1, n) / kPanelWidth,
               "packed weight " + wp.str() + " panel count for " + std::to_string(n) + " columns");
  }
  if (!x.rank_known) {
    ctx.set_output(0, ValueType::unranked(DType::Float32));
    return;
  }
  if (x.shape.empty()) ctx.fail("input " + x.str() + " does not match the packed weight " + wp.str());
  if (wp.rank_known) merge_dims(ctx, x.shape.back(), wp.shape[1], "input " + x.str() + " and packed weight rows");
  if (ctx.has_input(2)) {
    const ValueType& b = ctx.input_type(2);
    if (b.rank_known && (b.shape.size() != 1 || (b.shape[0].known() && b.shape[0].value() != n)))
      ctx.fail("bias " + b.str() + " does not match the " + std::to_string(n) + " columns of the packed weight");
  }
  SymShape out = x.shape;
  out.back() = n;
  ctx.set_output(0, ValueType::of(DType::Float32, out));
}

// RmsNorm(X, W?, ...): float32, X's shape (W broadcasts along the last axis).
void infer_rms_norm(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  require_dtype(ctx, x, DType::Float32, "X");
  if (x.rank_known && x.shape.empty()) ctx.fail("X must be a float32 tensor of rank >= 1, got " + x.str());
  if (ctx.has_input(1) && x.rank_known) {
    const ValueType& w = ctx.input_type(1);
    if (w.rank_known) {
      const SymDim n = sym_product(w.shape);
      const SymDim& last = x.shape.back();
      if (rank_of(w) > rank_of(x) || (n.known() && last.known() && n.value() != 1 && n.value() != last.value()))
        ctx.fail("weight " + w.str() + " does not broadcast along the last axis of X " + x.str());
    }
  }
  ctx.set_output(0, x.rank_known ? ValueType::of(DType::Float32, x.shape) : ValueType::unranked(DType::Float32));
}

// Silu(X) and Gelu(X, constants...): X's type.
void infer_same_as_input(InferContext& ctx) { ctx.set_output(0, ctx.input_type(0)); }

// A transfer changes where the bytes live, nothing else: the type and any known contents pass.
void infer_transfer(InferContext& ctx) {
  ctx.set_output(0, ctx.input_type(0));
  if (const SymShape* d = ctx.input_dims_value(0)) ctx.set_output_dims_value(0, *d);
}

void infer_gelu(InferContext& ctx) {
  const std::string a = ctx.attr_string("approximate", "none");
  if (a != "none" && a != "tanh") ctx.fail("approximate '" + a + "' is not supported (expected 'none' or 'tanh')");
  ctx.set_output(0, ctx.input_type(0));
}

// SiluMul(X, U) = X * sigmoid(X) * U: U broadcasts as in Mul.
void infer_silu_mul(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& u = ctx.input_type(1);
  if (!x.rank_known || !u.rank_known) {
    ctx.set_output(0, ValueType::unranked(x.dtype));
    return;
  }
  ctx.set_output(0, ValueType::of(x.dtype, broadcast_shapes(ctx, x.shape, u.shape)));
}

SymShape permuted(const SymShape& s, std::initializer_list<size_t> perm) {
  SymShape out;
  for (size_t p : perm) out.push_back(s[p]);
  return out;
}

// Unsqueeze(2) -> Expand(input ei) -> Reshape(input ri): the repeat_kv of grouped-query attention.
SymShape repeat_kv(InferContext& ctx, const SymShape& x, size_t ei, size_t ri) {
  SymShape u = x;
  u.insert(u.begin() + 2, SymDim(1));
  const SymShape* target = ctx.input_dims_value(ei);
  const SymShape e = target ? broadcast_shapes(ctx, u, *target) : SymShape{};
  const SymShape* spec = ctx.input_dims_value(ri);
  if (!spec) {
    // The reshape's target is not known: the rank is (its length), the sizes are not.
    SymShape out;
    const ValueType& st = ctx.input_type(ri);
    const int64_t rank = st.rank_known && st.shape.size() == 1 && st.shape[0].known() ? st.shape[0].value() : 4;
    for (int64_t i = 0; i < rank; ++i) out.push_back(ctx.fresh_dim());
    return out;
  }
  return reshape_shape(ctx, e, target != nullptr, *spec, ctx.attr_int("kv_allowzero", 0) != 0);
}

// reforge::Attention: Y = softmax(mask(scale(Q K^T))) V with the layouts and options of
// ops/fused_transformer.cc, typed as that subgraph is.
void infer_fused_attention(InferContext& ctx) {
  const ValueType& q = ctx.input_type(0);
  const ValueType& k = ctx.input_type(1);
  const ValueType& v = ctx.input_type(2);
  auto layout = [&](const char* attr, bool allow_bhds) {
    const std::string l = ctx.attr_string(attr, "bhsd");
    if (l != "bhsd" && l != "bshd" && !(allow_bhds && l == "bhds"))
      ctx.fail(std::string(attr) + " '" + l + "' is not supported");
    return l;
  };
  const std::string ql = layout("q_layout", false), kl = layout("k_layout", true), vl = layout("v_layout", false),
                    ol = layout("out_layout", false);
  const std::string scale_op = ctx.attr_string("scale_op", "none");
  if (scale_op != "none" && scale_op != "mul" && scale_op != "div" && scale_op != "mul_qk")
    ctx.fail("scale_op '" + scale_op + "' is not supported");
  const std::string mask_mode = ctx.attr_string("mask_mode", "none");
  if (mask_mode != "none" && mask_mode != "add" && mask_mode != "where_fill_true" && mask_mode != "where_fill_false")
    ctx.fail("mask_mode '" + mask_mode + "' is not supported");
  const DType dt = q.dtype;
  if (!q.rank_known || !k.rank_known || !v.rank_known) {
    ctx.set_output(0, ValueType::unranked(dt));
    return;
  }
  auto need4 = [&](const ValueType& t, const std::string& l, const char* what) {
    if (l == "bshd" && t.shape.size() != 4)  // bhsd and bhds take any rank >= 2, as MatMul does
      ctx.fail(std::string(what) + " in layout " + l + " must be 4D, got " + t.str());
  };
  need4(q, ql, "Q");
  need4(k, kl, "K");
  need4(v, vl, "V");
  SymShape qs = ql == "bshd" ? permuted(q.shape, {0, 2, 1, 3}) : q.shape;
  SymShape ks = ctx.has_input(6) ? repeat_kv(ctx, k.shape, 6, 7) : k.shape;
  if (kl == "bhsd") {
    if (ks.size() < 2) ctx.fail("K must have rank >= 2, got " + sym_shape_str(ks));
    std::swap(ks[ks.size() - 1], ks[ks.size() - 2]);
  } else if (kl == "bshd") {
    if (ks.size() != 4) ctx.fail("K in layout bshd must be 4D, got " + sym_shape_str(ks));
    ks = permuted(ks, {0, 2, 3, 1});
  }
  if (scale_op == "mul_qk") {  // Q * scale and K^T * k_scale before the product
    const ValueType& cq = ctx.input_type(3);
    const ValueType& ck = ctx.input_type(10);
    if (cq.rank_known) qs = broadcast_shapes(ctx, qs, cq.shape);
    if (ck.rank_known) ks = broadcast_shapes(ctx, ks, ck.shape);
  }
  SymShape s = matmul_shape(ctx, qs, ks);
  if (scale_op == "mul" || scale_op == "div") {
    const ValueType& c = ctx.input_type(3);
    if (c.rank_known) s = broadcast_shapes(ctx, s, c.shape);
  }
  if (mask_mode != "none") {
    const ValueType& m = ctx.input_type(4);
    if (m.rank_known) s = broadcast_shapes(ctx, s, m.shape);
    if (mask_mode != "add") {
      const ValueType& f = ctx.input_type(5);
      if (f.rank_known) s = broadcast_shapes(ctx, s, f.shape);
    }
  }
  SymShape vs = vl == "bshd" ? permuted(v.shape, {0, 2, 1, 3}) : v.shape;
  if (ctx.has_input(8)) vs = repeat_kv(ctx, vs, 8, 9);
  SymShape y = matmul_shape(ctx, s, vs);
  if (ol == "bshd") {
    if (y.size() != 4) ctx.fail("output layout bshd needs a 4D result, got " + sym_shape_str(y));
    y = permuted(y, {0, 2, 1, 3});
  }
  ctx.set_output(0, ValueType::of(dt, y));
}

// The length of X[..., start:end] along an axis of size dim, for known bounds (1-element inputs).
SymDim bound_slice(InferContext& ctx, const SymDim& dim, size_t start_i, size_t end_i) {
  auto s = known_ints(ctx, start_i), e = known_ints(ctx, end_i);
  if (!s || !e || s->size() != 1 || e->size() != 1) return ctx.fresh_dim();
  int64_t start = (*s)[0], end = (*e)[0];
  if (!dim.known()) {
    if (start == 0 && end >= (int64_t{1} << 31)) return dim;  // the whole axis
    return ctx.fresh_dim();
  }
  const int64_t n = dim.value();
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, 0, n);
  return end > start ? end - start : 0;
}

// reforge::Rotary: Y = X * cos + concat(-X[hi], X[lo]) * sin, X in [B,H,S,D] after the layout's
// transpose.
void infer_fused_rotary(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& cos = ctx.input_type(1);
  const ValueType& sin = ctx.input_type(2);
  const std::vector<int64_t> axes = ctx.attr_ints("axes", {-1, -1, -1});
  if (axes.size() != 3) ctx.fail("axes must have 3 values");
  if (!x.rank_known || !cos.rank_known || !sin.rank_known) {
    ctx.set_output(0, ValueType::unranked(x.dtype));
    return;
  }
  SymShape xs = x.shape;
  if (ctx.attr_string("layout", "bhsd") == "bshd") {
    if (xs.size() != 4) ctx.fail("X in layout bshd must be 4D, got " + x.str());
    xs = permuted(xs, {0, 2, 1, 3});
  }
  const int64_t rank = static_cast<int64_t>(xs.size());
  const int64_t a0 = normalize_axis(ctx, axes[0], rank), a1 = normalize_axis(ctx, axes[1], rank),
                a2 = normalize_axis(ctx, axes[2], rank);
  SymShape hi = xs, lo = xs;
  hi[a0] = bound_slice(ctx, xs[a0], 3, 4);
  lo[a1] = bound_slice(ctx, xs[a1], 5, 6);
  if (hi.size() != lo.size()) ctx.fail("the rotated halves have different ranks");
  SymShape cat = hi;
  for (int64_t d = 0; d < rank; ++d)
    if (d != a2) cat[d] = merge_dims(ctx, hi[d], lo[d], "the rotated halves outside the concatenation axis");
  cat[a2] = sym_add(hi[a2], lo[a2]);
  const SymShape mc = broadcast_shapes(ctx, xs, cos.shape);
  const SymShape ms = broadcast_shapes(ctx, cat, sin.shape);
  ctx.set_output(0, ValueType::of(x.dtype, broadcast_shapes(ctx, mc, ms)));
}

// MatMulGroup(X, W1, ..., Wn) -> (Y1, ..., Yn): Yi = MatMul(X, Wi), each Wi a matrix of X's type
// (stored [Ni, K] with transposed = 1).
void infer_matmul_group(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const bool t = ctx.attr_int("transposed", 0) != 0;
  if (ctx.num_inputs() < 2 || ctx.num_inputs() != ctx.num_outputs() + 1)
    ctx.fail("takes X and one weight per output, got " + std::to_string(ctx.num_inputs()) + " inputs for " +
             std::to_string(ctx.num_outputs()) + " outputs");
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    const ValueType& w = ctx.input_type(i);
    if (x.dtype != DType::Undefined && w.dtype != DType::Undefined && w.dtype != x.dtype)
      ctx.fail("weight " + std::to_string(i) + " " + w.str() + " is not of the input's type " + x.str());
    if (w.rank_known && w.shape.size() != 2) ctx.fail("weight " + std::to_string(i) + " " + w.str() + " is not a matrix");
    if (!x.rank_known || !w.rank_known) {
      ctx.set_output(i - 1, ValueType::unranked(x.dtype));
      continue;
    }
    if (x.shape.empty()) ctx.fail("input " + x.str() + " does not match the weight " + w.str());
    merge_dims(ctx, x.shape.back(), w.shape[t ? 1 : 0], "input " + x.str() + " and weight " + w.str() + " inner dimensions");
    SymShape out = x.shape;
    out.back() = w.shape[t ? 0 : 1];
    ctx.set_output(i - 1, ValueType::of(x.dtype, out));
  }
}

}  // namespace

void register_reforge_inference(OpRegistry& r) {
  r.set_infer("reforge", "MatMulGroup", 1, infer_matmul_group);
  r.set_infer("reforge", "BnFoldWeight", 1, infer_bn_fold_weight);
  r.set_infer("reforge", "BnFoldBias", 1, infer_bn_fold_bias);
  r.set_infer("reforge", "MatMulAdd", 1, infer_matmul_add);
  r.set_infer("reforge", "PackPanels", 1, infer_pack_panels);
  r.set_infer("reforge", "MatMulAddPacked", 1, infer_matmul_add_packed);
  r.set_infer("reforge", "QuantizeWeight", 1, infer_quantize_weight);
  r.set_infer("reforge", "QdqWeight", 1, infer_qdq_weight);
  r.set_infer("reforge", "Int4Unpack", 1, infer_int4_unpack);
  r.set_infer("reforge", "MatMulQuant", 1, infer_matmul_quant);
  r.set_infer("reforge", "RmsNorm", 1, infer_rms_norm);
  r.set_infer("reforge", "Silu", 1, infer_same_as_input);
  r.set_infer("reforge", "SiluMul", 1, infer_silu_mul);
  r.set_infer("reforge", "Gelu", 1, infer_gelu);
  r.set_infer("reforge", "Attention", 1, infer_fused_attention);
  r.set_infer("reforge", "Rotary", 1, infer_fused_rotary);
  r.set_infer("reforge", "ToDevice", 1, infer_transfer);
  r.set_infer("reforge", "ToHost", 1, infer_transfer);
}

}  // namespace reforge::ops
