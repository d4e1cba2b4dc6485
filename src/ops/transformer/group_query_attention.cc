// com.microsoft GroupQueryAttention (opset 1 of that domain), as ONNX Runtime's CPU kernel computes
// it: the attention of the decoders that ONNX Runtime GenAI's model builder exports.
//
// Inputs: query [B, S, Hq * D], or Q, K and V packed along the last axis ([B, S, (Hq + 2 Hkv) * D])
// with key and value absent; key and value [B, S, Hkv * D]; past_key and past_value
// [B, Hkv, P, D] (BNSH); seqlens_k int32 [B] (each row's total length minus one); the scalar
// total_sequence_length int32; cos_cache and sin_cache [max_position, R / 2] for do_rotary.
// Outputs: output [B, S, Hq * D]; present_key and present_value [B, Hkv, T', D] with
// T' = max(total_sequence_length, P).
//
// Each row b holds T_b = seqlens_k[b] + 1 tokens after the step: its own length, so a batch of
// prompts of different lengths is right-padded. The step is a first prompt when S equals
// total_sequence_length (every row's tokens start at position 0); otherwise row b had
// P_b = T_b - S tokens before it (S > 1 is then only allowed for a batch of one). Of the S new
// rows, the first Q_b = min(S, T_b) are the row's tokens:
//   - do_rotary rotates Q and K at positions P_b + s (the first R features; interleaved pairs
//     (2i, 2i + 1) or halves (i, i + R/2)), with the caches' rows at those positions;
//   - present holds the first P_b rows of past, then the S new rows of K and V (padding too),
//     zeros after;
//   - query row s < Q_b (position p = P_b + s) attends keys j <= p (all j < T_b when causal = 0),
//     the last local_window_size of them (p - j < local_window_size) when a window is set (> 0);
//     scores are (q . k) * scale (scale 0: 1 / sqrt(D)), then softcap * tanh(x / softcap) when
//     softcap > 0, then a softmax in float32; query head h reads kv head h / (Hq / Hkv);
//   - output rows s >= Q_b (padding) are zero (ONNX Runtime leaves them unspecified).
// Arithmetic runs in float32 for float32 and float16 data (float16 data keeps the rotated query
// and the caches in float16, as ONNX Runtime does, and rounds the output once).
//
// Cache sharing (Sharing::kInPlace, past_key -> present_key, past_value -> present_value): when the
// memory handed for present already holds past at its start (a state buffer, runtime/state.h),
// each row's past moves up to its place in the longer layout, last block first, instead of being
// copied from another buffer.
//
// What ONNX Runtime's operator defines beyond that is refused by the checker, naming the
// attribute or input: position_ids, attention_bias, head_sink, k_scale/v_scale and quantized
// caches, q_norm_weight/k_norm_weight, query_seqlens, smooth_softmax, qk_output,
// sliding_window_cache.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

// Inputs ONNX Runtime's GroupQueryAttention takes after sin_cache, none of which reforge runs.
constexpr const char* kRefusedInputs[] = {"position_ids",  "attention_bias", "head_sink",    "k_scale",
                                          "v_scale",       "q_norm_weight",  "k_norm_weight", "query_seqlens"};

std::string gqa_check(const ir::Node& node) {
  if (!node.has_attr("num_heads") || !node.has_attr("kv_num_heads"))
    return "needs the attributes num_heads and kv_num_heads";
  const int64_t hq = node.attr_int("num_heads"), hkv = node.attr_int("kv_num_heads");
  if (hq <= 0 || hkv <= 0 || hq % hkv != 0)
    return str_cat("num_heads (", hq, ") must be a positive multiple of kv_num_heads (", hkv, ")");
  if (node.inputs.size() < 7)
    return str_cat("takes at least 7 inputs (query, key, value, past_key, past_value, seqlens_k, "
                   "total_sequence_length), got ",
                   node.inputs.size());
  for (size_t i = 9; i < node.inputs.size(); ++i)
    if (!node.inputs[i].empty())
      return str_cat("input ", i, " (", i - 9 < std::size(kRefusedInputs) ? kRefusedInputs[i - 9] : "unknown",
                     ") is not supported");
  if (node.attr_int("smooth_softmax", 0) != 0) return "attribute smooth_softmax = 1 is not supported";
  if (node.attr_int("qk_output", 0) != 0) return "attribute qk_output is not supported (only 0)";
  if (node.attr_int("sliding_window_cache", 0) != 0) return "attribute sliding_window_cache = 1 is not supported";
  if (node.attr_int("kv_cache_bit_width", 0) != 0) return "attribute kv_cache_bit_width (a quantized cache) is not supported";
  for (const char* q : {"k_quant_type", "v_quant_type"}) {
    const std::string t = node.attr_string(q, "NONE");
    if (t != "NONE") return str_cat("attribute ", q, " = '", t, "' (a quantized cache) is not supported");
  }
  const int64_t causal = node.attr_int("causal", 1);
  if (causal != 0 && causal != 1) return str_cat("attribute causal must be 0 or 1, got ", causal);
  const int64_t window = node.attr_int("local_window_size", -1);
  if (window < -1 || window == 0) return str_cat("attribute local_window_size must be -1 or positive, got ", window);
  if (causal == 0 && window != -1) return "attribute local_window_size must be -1 when causal is 0";
  if (node.attr_int("do_rotary", 0) != 0 && (node.inputs.size() < 9 || node.inputs[7].empty() || node.inputs[8].empty()))
    return "do_rotary = 1 needs the inputs cos_cache and sin_cache";
  const float softcap = node.attr_float("softcap", 0.0f);
  if (!(softcap >= 0) || std::isinf(softcap)) return str_cat("attribute softcap must be finite and >= 0, got ", softcap);
  return "";
}

struct Gqa {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head = 0;
  int64_t past = 0, present = 0, total = 0;
  bool packed = false, first_prompt = false;
  bool causal = true, rotary = false, interleaved = false;
  int64_t window = -1, rot = 0, max_position = 0;
  float scale = 0, softcap = 0;
  std::vector<int64_t> past_rows, valid;  // per row: P_b and Q_b
};

Gqa gqa_setup(const KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string where = node.label();
  const std::string why = gqa_check(node);
  REFORGE_CHECK(why.empty(), where, ": ", why);
  Gqa g;
  g.heads = node.attr_int("num_heads");
  g.kv_heads = node.attr_int("kv_num_heads");
  const Tensor& q = ctx.input(0);
  REFORGE_CHECK(q.dtype() == DType::Float32 || q.dtype() == DType::Float16, where,
                ": query must be float32 or float16, got ", q.describe());
  REFORGE_CHECK(q.rank() == 3, where, ": query must be [batch, sequence, hidden], got ", q.describe());
  g.batch = q.dim(0);
  g.seq = q.dim(1);
  g.packed = !ctx.has_input(1);
  REFORGE_CHECK(g.packed == !ctx.has_input(2), where, ": key and value must be both given or both absent (packed QKV)");
  const int64_t width = g.packed ? g.heads + 2 * g.kv_heads : g.heads;
  REFORGE_CHECK(q.dim(2) % width == 0 && q.dim(2) > 0, where, ": query's hidden size ", q.dim(2),
                " is not a positive multiple of ", width, g.packed ? " (num_heads + 2 * kv_num_heads, packed QKV)" : " (num_heads)");
  g.head = q.dim(2) / width;
  if (!g.packed) {
    for (size_t i : {size_t{1}, size_t{2}}) {
      const Tensor& t = ctx.input(i);
      REFORGE_CHECK(t.dtype() == q.dtype() && t.shape() == Shape({g.batch, g.seq, g.kv_heads * g.head}), where, ": ",
                    i == 1 ? "key" : "value", " must be ", dtype_name(q.dtype()), "[", g.batch, ",", g.seq, ",",
                    g.kv_heads * g.head, "], got ", t.describe());
    }
  }
  REFORGE_CHECK(ctx.has_input(3) == ctx.has_input(4), where, ": past_key and past_value must be both given or both absent");
  if (ctx.has_input(3)) {
    const Tensor& pk = ctx.input(3);
    g.past = pk.rank() == 4 ? pk.dim(2) : 0;
    for (size_t i : {size_t{3}, size_t{4}}) {
      const Tensor& t = ctx.input(i);
      REFORGE_CHECK(t.dtype() == q.dtype() && t.shape() == Shape({g.batch, g.kv_heads, g.past, g.head}), where, ": ",
                    i == 3 ? "past_key" : "past_value", " must be ", dtype_name(q.dtype()), "[", g.batch, ",",
                    g.kv_heads, ",", g.past, ",", g.head, "] (BNSH), got ", t.describe());
    }
  }
  const Tensor& sk = ctx.input(5);
  REFORGE_CHECK(sk.dtype() == DType::Int32 && sk.rank() == 1 && sk.dim(0) == g.batch, where,
                ": seqlens_k must be int32[", g.batch, "], got ", sk.describe());
  const Tensor& ts = ctx.input(6);
  REFORGE_CHECK(ts.dtype() == DType::Int32 && ts.numel() == 1 && ts.rank() <= 1, where,
                ": total_sequence_length must be one int32, got ", ts.describe());
  g.total = ts.data<int32_t>()[0];
  REFORGE_CHECK(g.total >= g.seq, where, ": total_sequence_length ", g.total, " is less than the sequence length ",
                g.seq);
  g.present = std::max(g.total, g.past);
  const bool subsequent = g.seq > 1 && g.seq != g.total;
  REFORGE_CHECK(!subsequent || g.batch == 1, where, ": a prompt of ", g.seq, " tokens after ", g.total - g.seq,
                " cached ones needs a batch of 1, got ", g.batch);
  g.first_prompt = !subsequent && g.seq == g.total;
  const int32_t* lens = sk.data<int32_t>();
  for (int64_t b = 0; b < g.batch; ++b) {
    const int64_t t = static_cast<int64_t>(lens[b]) + 1;
    REFORGE_CHECK(lens[b] >= 0 && t <= g.present, where, ": seqlens_k[", b, "] = ", lens[b], " is outside [0, ",
                  g.present, ")");
    const int64_t p = g.first_prompt ? 0 : t - g.seq;
    REFORGE_CHECK(p >= 0, where, ": seqlens_k[", b, "] = ", lens[b], " is too small for ", g.seq, " new tokens");
    REFORGE_CHECK(p <= g.past, where, ": seqlens_k[", b, "] = ", lens[b], " needs ", p,
                  " cached rows, past_key holds ", g.past);
    g.past_rows.push_back(p);
    g.valid.push_back(std::min(g.seq, t - p));
  }
  g.causal = node.attr_int("causal", 1) != 0;
  g.window = node.attr_int("local_window_size", -1);
  const float scale = node.attr_float("scale", 0.0f);
  g.scale = scale == 0.0f ? 1.0f / std::sqrt(static_cast<float>(g.head)) : scale;
  g.softcap = node.attr_float("softcap", 0.0f);
  g.rotary = node.attr_int("do_rotary", 0) != 0;
  g.interleaved = node.attr_int("rotary_interleaved", 0) != 0;
  if (g.rotary) {
    const Tensor& c = ctx.input(7);
    const Tensor& s = ctx.input(8);
    REFORGE_CHECK(c.dtype() == q.dtype() && s.dtype() == q.dtype() && c.rank() == 2 && c.shape() == s.shape(), where,
                  ": cos_cache and sin_cache must be ", dtype_name(q.dtype()), " matrices of one shape, got ",
                  c.describe(), " and ", s.describe());
    g.rot = 2 * c.dim(1);
    g.max_position = c.dim(0);
    REFORGE_CHECK(g.rot > 0 && g.rot <= g.head, where, ": cos_cache's ", c.dim(1), " columns rotate ", g.rot,
                  " features, more than the head size ", g.head);
    for (int64_t b = 0; b < g.batch; ++b)
      REFORGE_CHECK(g.past_rows[b] + g.seq <= g.max_position, where, ": row ", b, " reaches position ",
                    g.past_rows[b] + g.seq - 1, ", past cos_cache's ", g.max_position, " rows");
  }
  return g;
}

// Rotates one head's row `x` (head features) at `pos` into `y`, as ONNX Runtime's rotary embedding.
void rotate(const float* x, float* y, int64_t head, int64_t rot, bool interleaved, const float* cos, const float* sin) {
  const int64_t half = rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    const float xa = x[a], xb = x[b];
    y[a] = xa * cos[i] - xb * sin[i];
    y[b] = xb * cos[i] + xa * sin[i];
  }
  for (int64_t i = rot; i < head; ++i) y[i] = x[i];
}

template <typename T>
std::vector<float> widen(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  const T* p = t.data<T>();
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(to_compute(p[i]));
  return out;
}

template <typename T>
void run_gqa(KernelContext& ctx, const Gqa& g) {
  const int64_t B = g.batch, S = g.seq, Hq = g.heads, Hkv = g.kv_heads, D = g.head, P = g.past, L = g.present;
  // Q, K and V of the new tokens in float32, [B, S, heads, D]; K rotated where asked.
  const std::vector<float> qin = widen<T>(ctx.input(0));
  const int64_t qstride = g.packed ? (Hq + 2 * Hkv) * D : Hq * D;  // one token of query
  std::vector<float> q(static_cast<size_t>(B * S * Hq * D)), k(static_cast<size_t>(B * S * Hkv * D)),
      v(static_cast<size_t>(B * S * Hkv * D));
  std::vector<float> kin, vin;
  if (!g.packed) {
    kin = widen<T>(ctx.input(1));
    vin = widen<T>(ctx.input(2));
  }
  std::vector<float> cos, sin;
  if (g.rotary) {
    cos = widen<T>(ctx.input(7));
    sin = widen<T>(ctx.input(8));
  }
  const int64_t half = g.rot / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const float* tok = qin.data() + (b * S + s) * qstride;
      const float* ksrc = g.packed ? tok + Hq * D : kin.data() + (b * S + s) * Hkv * D;
      const float* vsrc = g.packed ? tok + (Hq + Hkv) * D : vin.data() + (b * S + s) * Hkv * D;
      float* qd = q.data() + (b * S + s) * Hq * D;
      float* kd = k.data() + (b * S + s) * Hkv * D;
      std::copy_n(vsrc, Hkv * D, v.data() + (b * S + s) * Hkv * D);
      const int64_t pos = g.past_rows[b] + s;
      if (g.rotary) {
        const float* c = cos.data() + pos * half;
        const float* sn = sin.data() + pos * half;
        for (int64_t h = 0; h < Hq; ++h) rotate(tok + h * D, qd + h * D, D, g.rot, g.interleaved, c, sn);
        for (int64_t h = 0; h < Hkv; ++h) rotate(ksrc + h * D, kd + h * D, D, g.rot, g.interleaved, c, sn);
        // The rotated query is of the data's type, as ONNX Runtime keeps it (a no-op for float32).
        for (int64_t i = 0; i < Hq * D; ++i) qd[i] = static_cast<float>(to_compute(from_compute<T>(qd[i])));
      } else {
        std::copy_n(tok, Hq * D, qd);
        std::copy_n(ksrc, Hkv * D, kd);
      }
    }

  // present = each row's past, then its new tokens, zeros after. In place when the memory handed
  // for present starts with past (the state contract): blocks move up, last first.
  const Shape present_shape{B, Hkv, L, D};
  Tensor& pk = ctx.allocate_output_uninit(1, ctx.input(0).dtype(), present_shape);
  Tensor& pv = ctx.allocate_output_uninit(2, ctx.input(0).dtype(), present_shape);
  auto fill = [&](Tensor& present, size_t past_index, const std::vector<float>& fresh) {
    T* out = present.mutable_data<T>();
    const T* past = ctx.has_input(past_index) ? ctx.input(past_index).data<T>() : nullptr;
    for (int64_t blk = B * Hkv - 1; blk >= 0; --blk) {
      const int64_t b = blk / Hkv, h = blk % Hkv, pb = g.past_rows[b];
      T* row = out + blk * L * D;
      if (pb > 0) {
        const T* src = past + blk * P * D;
        if (src != row) std::memmove(row, src, static_cast<size_t>(pb * D) * sizeof(T));
      }
      for (int64_t s = 0; s < S; ++s)
        for (int64_t e = 0; e < D; ++e)
          row[(pb + s) * D + e] = from_compute<T>(fresh[static_cast<size_t>(((b * S + s) * Hkv + h) * D + e)]);
      const int64_t used = pb + S;
      std::fill(row + used * D, row + L * D, from_compute<T>(0.0f));
    }
  };
  fill(pk, 3, k);
  fill(pv, 4, v);
  const std::vector<float> keys = widen<T>(pk), values = widen<T>(pv);

  Tensor& y = ctx.allocate_output(0, ctx.input(0).dtype(), {B, S, Hq * D});
  T* yd = y.mutable_data<T>();
  const int64_t group = Hq / Hkv;
  const int threads = B * Hq > 1 && B * Hq * S * L * D > (1 << 16) ? omp_get_max_threads() : 1;
  parallel_tasks(B * Hq, threads, [&](int64_t bh) {
    const int64_t b = bh / Hq, h = bh % Hq, kvh = h / group;
    const float* kb = keys.data() + (b * Hkv + kvh) * L * D;
    const float* vb = values.data() + (b * Hkv + kvh) * L * D;
    const int64_t pb = g.past_rows[b], tb = pb + g.valid[b];
    std::vector<float> score(static_cast<size_t>(L)), acc(static_cast<size_t>(D));
    for (int64_t s = 0; s < g.valid[b]; ++s) {
      const float* qr = q.data() + ((b * S + s) * Hq + h) * D;
      const int64_t p = pb + s;
      const int64_t hi = g.causal ? p + 1 : tb;  // keys [lo, hi)
      const int64_t lo = g.window > 0 ? std::max<int64_t>(0, p - g.window + 1) : 0;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = lo; j < hi; ++j) {
        const float* kr = kb + j * D;
        float dot = 0;
        for (int64_t e = 0; e < D; ++e) dot += qr[e] * kr[e];
        float x = dot * g.scale;
        if (g.softcap > 0) x = g.softcap * std::tanh(x / g.softcap);
        score[j] = x;
        mx = std::max(mx, x);
      }
      float sum = 0;
      for (int64_t j = lo; j < hi; ++j) sum += score[j] = std::exp(score[j] - mx);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = lo; j < hi; ++j) {
        const float w = score[j] / sum;
        const float* vr = vb + j * D;
        for (int64_t e = 0; e < D; ++e) acc[e] += w * vr[e];
      }
      T* yr = yd + ((b * S + s) * Hq + h) * D;
      for (int64_t e = 0; e < D; ++e) yr[e] = from_compute<T>(acc[e]);
    }
  });
}

void gqa_kernel(KernelContext& ctx) {
  const Gqa g = gqa_setup(ctx);
  if (ctx.input(0).dtype() == DType::Float32)
    run_gqa<float>(ctx, g);
  else
    run_gqa<float16>(ctx, g);
}

}  // namespace

void register_group_query_attention(OpRegistry& r) {
  using R = InputRole;
  OpDef d{"com.microsoft",
          "GroupQueryAttention",
          1,
          INT_MAX,
          gqa_kernel,
          gqa_check,
          nullptr,
          {R::kData, R::kData, R::kData, R::kData, R::kData, R::kData, R::kShape, R::kData, R::kData}};
  r.add(with_sharing(std::move(d), {{3, 1, Sharing::kInPlace}, {4, 2, Sharing::kInPlace}}));
}

}  // namespace reforge::ops
