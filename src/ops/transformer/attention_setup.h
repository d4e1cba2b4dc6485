// The validation and shape arithmetic of the ONNX Attention op (opsets 23+), shared by the CPU
// reference kernel (ops/transformer/attention.cc) and the CUDA kernel (backends/cuda/attention.cu),
// so that both refuse the same inputs with the same messages and read Q, K, V, the caches and the
// mask the same way. Header-only: the CUDA compiler includes it.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"
#include "ops/registry.h"

namespace reforge::ops {

// The schema's checker (attributes only).
inline std::string attention_check(const ir::Node& node) {
  int64_t mode = node.attr_int("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) return str_cat("qk_matmul_output_mode ", mode, " is not one of 0, 1, 2, 3");
  if (node.has_attr("softmax_precision")) {
    int64_t p = node.attr_int("softmax_precision", 0);
    if (p != 1 && p != 10 && p != 11 && p != 16)
      return str_cat("softmax_precision ", p, " is not one of 1 (float), 10 (float16), 11 (double), 16 (bfloat16)");
  }
  for (const char* w : {"left_window_size", "right_window_size"}) {
    int64_t v = node.attr_int(w, -1);
    if (v < -1) return str_cat(w, " ", v, " must be -1 or nonnegative");
  }
  return "";
}

struct AttentionDims {
  int64_t batch = 0, q_heads = 0, kv_heads = 0;
  int64_t q_len = 0, kv_len = 0, past_len = 0, total_len = 0;
  int64_t head_size = 0, v_head_size = 0;
  bool is_3d = false;
};

// Strides (in elements) of a [batch, heads, seq, hidden] view over a 3D or 4D tensor.
struct AttentionView {
  int64_t sb = 0, sh = 0, ss = 0;
};

inline AttentionView attention_view(bool is_3d, int64_t heads, int64_t seq, int64_t size) {
  if (is_3d) return {seq * heads * size, size, heads * size};
  return {heads * seq * size, seq * size, size};
}

// Checks Q, K, V (one float type, all 3D with the head attributes or all 4D), the attributes and
// past_key/past_value, and gives the sizes.
inline AttentionDims attention_dims(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  REFORGE_CHECK(is_float(q.dtype()), where, ": Q must be a float tensor, got ", dtype_name(q.dtype()));
  REFORGE_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), where, ": Q, K and V must share one type, got ",
                dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), ", ", dtype_name(v.dtype()));
  REFORGE_CHECK(q.rank() == k.rank() && q.rank() == v.rank() && (q.rank() == 3 || q.rank() == 4), where,
                ": Q, K and V must all be 3D or all 4D, got ", shape_str(q.shape()), ", ", shape_str(k.shape()), ", ",
                shape_str(v.shape()));
  std::string err = attention_check(ctx.node());
  REFORGE_CHECK(err.empty(), where, ": ", err);
  AttentionDims d;
  d.is_3d = q.rank() == 3;
  d.batch = q.dim(0);
  REFORGE_CHECK(k.dim(0) == d.batch && v.dim(0) == d.batch, where,
                ": Q, K and V batch sizes differ: ", shape_str(q.shape()), ", ", shape_str(k.shape()), ", ",
                shape_str(v.shape()));
  const bool has_qh = ctx.node().has_attr("q_num_heads"), has_kvh = ctx.node().has_attr("kv_num_heads");
  if (d.is_3d) {
    REFORGE_CHECK(has_qh && has_kvh, where, ": 3D Q/K/V need the q_num_heads and kv_num_heads attributes");
    d.q_heads = ctx.attr_int("q_num_heads", 0);
    d.kv_heads = ctx.attr_int("kv_num_heads", 0);
    REFORGE_CHECK(d.q_heads > 0 && d.kv_heads > 0, where, ": q_num_heads (", d.q_heads, ") and kv_num_heads (",
                  d.kv_heads, ") must be positive");
    REFORGE_CHECK(q.dim(2) % d.q_heads == 0, where, ": Q hidden size ", q.dim(2), " is not divisible by q_num_heads ",
                  d.q_heads);
    REFORGE_CHECK(k.dim(2) % d.kv_heads == 0 && v.dim(2) % d.kv_heads == 0, where, ": K/V hidden sizes ", k.dim(2), "/",
                  v.dim(2), " are not divisible by kv_num_heads ", d.kv_heads);
    d.q_len = q.dim(1);
    d.kv_len = k.dim(1);
    REFORGE_CHECK(v.dim(1) == d.kv_len, where, ": K and V sequence lengths differ: ", shape_str(k.shape()), " vs ",
                  shape_str(v.shape()));
    d.head_size = q.dim(2) / d.q_heads;
    REFORGE_CHECK(k.dim(2) / d.kv_heads == d.head_size, where, ": Q head size ", d.head_size,
                  " differs from K head size ", k.dim(2) / d.kv_heads);
    d.v_head_size = v.dim(2) / d.kv_heads;
  } else {
    d.q_heads = q.dim(1);
    d.kv_heads = k.dim(1);
    d.q_len = q.dim(2);
    d.kv_len = k.dim(2);
    d.head_size = q.dim(3);
    d.v_head_size = v.dim(3);
    REFORGE_CHECK(v.dim(1) == d.kv_heads && v.dim(2) == d.kv_len, where, ": K ", shape_str(k.shape()), " and V ",
                  shape_str(v.shape()), " disagree on heads or sequence length");
    REFORGE_CHECK(k.dim(3) == d.head_size, where, ": Q head size ", d.head_size, " differs from K head size ",
                  k.dim(3));
    REFORGE_CHECK(!has_qh || ctx.attr_int("q_num_heads", 0) == d.q_heads, where, ": q_num_heads ",
                  ctx.attr_int("q_num_heads", 0), " contradicts Q shape ", shape_str(q.shape()));
    REFORGE_CHECK(!has_kvh || ctx.attr_int("kv_num_heads", 0) == d.kv_heads, where, ": kv_num_heads ",
                  ctx.attr_int("kv_num_heads", 0), " contradicts K shape ", shape_str(k.shape()));
  }
  REFORGE_CHECK(d.q_heads > 0 && d.kv_heads > 0 && d.q_heads % d.kv_heads == 0, where, ": q_num_heads ", d.q_heads,
                " must be a positive multiple of kv_num_heads ", d.kv_heads);
  const bool has_pk = ctx.has_input(4), has_pv = ctx.has_input(5);
  REFORGE_CHECK(has_pk == has_pv, where, ": past_key and past_value must be given together");
  if (has_pk) {
    const Tensor& pk = ctx.input(4);
    const Tensor& pv = ctx.input(5);
    REFORGE_CHECK(pk.dtype() == q.dtype() && pv.dtype() == q.dtype(), where,
                  ": past_key/past_value must have Q's type ", dtype_name(q.dtype()));
    REFORGE_CHECK(pk.rank() == 4 && pv.rank() == 4, where, ": past_key/past_value must be 4D, got ",
                  shape_str(pk.shape()), ", ", shape_str(pv.shape()));
    d.past_len = pk.dim(2);
    REFORGE_CHECK(pk.shape() == Shape({d.batch, d.kv_heads, d.past_len, d.head_size}), where, ": past_key shape ",
                  shape_str(pk.shape()), " should be [", d.batch, ",", d.kv_heads, ",", d.past_len, ",", d.head_size,
                  "]");
    REFORGE_CHECK(pv.shape() == Shape({d.batch, d.kv_heads, d.past_len, d.v_head_size}), where, ": past_value shape ",
                  shape_str(pv.shape()), " should be [", d.batch, ",", d.kv_heads, ",", d.past_len, ",", d.v_head_size,
                  "]");
  }
  d.total_len = d.past_len + d.kv_len;
  return d;
}

// attn_mask after right-aligned broadcasting to [batch, q_heads, q_len, total_len].
struct AttentionMaskShape {
  bool present = false;
  int64_t len = 0;                 // the mask's own last dimension (<= total_len; the rest is -inf)
  int64_t sb = 0, sh = 0, sq = 0;  // strides, 0 where the mask broadcasts
};

// Checks attn_mask (input 3; rank 1 to 4, bool or a float type, broadcasting to
// [B, Hq, Sq, L] with a last dimension of at most L).
inline AttentionMaskShape attention_mask_shape(const KernelContext& ctx, const AttentionDims& d) {
  AttentionMaskShape m;
  if (!ctx.has_input(3)) return m;
  const Tensor& t = ctx.input(3);
  const std::string where = ctx.node().label();
  REFORGE_CHECK(t.rank() >= 1 && t.rank() <= 4, where, ": attn_mask must have rank 1 to 4, got shape ",
                shape_str(t.shape()));
  REFORGE_CHECK(t.dtype() == DType::Bool || is_float(t.dtype()), where,
                ": attn_mask must be bool or a float type, got ", dtype_name(t.dtype()));
  Shape s(4, 1);
  for (int64_t i = 0; i < t.rank(); ++i) s[4 - t.rank() + i] = t.dim(i);
  const int64_t target[3] = {d.batch, d.q_heads, d.q_len};
  const char* names[3] = {"batch_size", "q_num_heads", "q_sequence_length"};
  for (int i = 0; i < 3; ++i)
    REFORGE_CHECK(s[i] == 1 || s[i] == target[i], where, ": attn_mask shape ", shape_str(t.shape()),
                  " does not broadcast to [", d.batch, ",", d.q_heads, ",", d.q_len, ",", d.total_len, "] (", names[i],
                  " is ", target[i], ")");
  REFORGE_CHECK(s[3] <= d.total_len, where, ": attn_mask's last dimension ", s[3],
                " exceeds the total sequence length ", d.total_len);
  m.present = true;
  m.len = s[3];
  m.sq = s[2] == 1 ? 0 : s[3];
  m.sh = s[1] == 1 ? 0 : s[2] * s[3];
  m.sb = s[0] == 1 ? 0 : s[1] * s[2] * s[3];
  return m;
}

// Checks nonpad_kv_seqlen (input 6, when given): an integer vector of length batch, not combined
// with an internal cache.
inline void check_nonpad_kv_seqlen(const KernelContext& ctx, const AttentionDims& d) {
  if (!ctx.has_input(6)) return;
  const Tensor& t = ctx.input(6);
  const std::string where = ctx.node().label();
  REFORGE_CHECK(!ctx.has_input(4), where, ": nonpad_kv_seqlen cannot be combined with past_key/past_value");
  REFORGE_CHECK(is_integer(t.dtype()) && t.rank() == 1 && t.dim(0) == d.batch, where,
                ": nonpad_kv_seqlen must be an integer vector of length batch_size ", d.batch, ", got ", t.describe());
}

}  // namespace reforge::ops
