// Attention (opsets 23, 24, 25): scaled dot-product attention with multi-head, grouped-query
// and multi-query layouts, an optional boolean or additive mask, causal and sliding-window
// masking, an internal KV cache (past/present) or an external one (nonpad_kv_seqlen), softcap,
// a selectable softmax precision and the optional qk_matmul_output debug output.
//
// Semantics follow the ONNX reference implementation (onnx/reference/ops/op_attention.py),
// including its rounding: every step that the reference performs in the input type T (Q and K
// scaled by sqrt(scale), the QK product, softcap, the bias addition, the softmax stages, the
// final product) is rounded to T here too. For float32/float64 that rounding is a no-op; for
// float16/bfloat16 it is what makes results agree with the suite to its 1e-3 tolerance, which is
// tighter than one bfloat16 ulp. Matrix products accumulate in float32 (as numpy does for both
// 16-bit types) and round once; softmax sums accumulate in float32 for float16 but round after
// every addition for bfloat16 (numpy's reduction over a custom dtype).
//
// Masking is decided per (batch, head, query, key) from four sources that all compose
// additively into the "bias": attn_mask (bool: false -> -inf; float: added), the causal
// frontier j <= i + offset, the window p - left <= j <= p + right (p = i + offset), and the
// padding j < nonpad_kv_seqlen[b]. offset is past_sequence_length with an internal cache,
// nonpad_kv_seqlen[b] - q_sequence_length with an external one, else 0. A query row whose bias
// is -inf everywhere produces zeros (Y and the mode-3 probabilities), never NaN.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/numerics.h"
#include "ops/registry.h"
#include "ops/transformer/attention_setup.h"

namespace reforge::ops {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rounds a compute-type value to storage type T and back (identity for float and double).
template <typename T>
inline compute_t<T> round_to(compute_t<T> x) {
  return to_compute<T>(from_compute<T>(x));
}

// double -> float rounding to odd: a later float -> 16-bit rounding then equals a direct,
// correctly rounded double -> 16-bit conversion (plain double -> float -> half rounds twice).
inline float float_round_odd(double d) {
  float f = static_cast<float>(d);
  if (!std::isfinite(d) || static_cast<double>(f) == d) return f;
  if (std::abs(static_cast<double>(f)) > std::abs(d)) f = std::nextafter(f, 0.0f);
  uint32_t bits = float_to_bits(f) | 1u;
  return bits_to_float(bits);
}

// Rounds a value of any precision to T (once), returned in T's compute type.
template <typename T, typename C>
inline compute_t<T> round_from(C x) {
  if constexpr (std::is_same_v<C, double> && (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>))
    return to_compute<T>(from_compute<T>(float_round_odd(x)));
  else
    return to_compute<T>(from_compute<T>(static_cast<compute_t<T>>(x)));
}

using Dims = AttentionDims;
using View = AttentionView;

inline View make_view(bool is_3d, int64_t heads, int64_t seq, int64_t size) {
  return attention_view(is_3d, heads, seq, size);
}

// Mask description after right-aligned broadcasting to [batch, q_heads, q_len, total_len].
struct MaskInfo {
  bool present = false;
  int64_t len = 0;                 // mask's own last dimension (<= total_len; the rest is -inf)
  int64_t sb = 0, sh = 0, sq = 0;  // strides, 0 where the mask broadcasts
  std::vector<float> values;       // bias values already rounded to T (bool: 0 / -inf)
  std::vector<double> values_d;    // same, for float64 T
};

struct Options {
  double sqrt_scale = 0;
  float softcap = 0;
  bool causal = false;
  int64_t left_window = -1, right_window = -1;
  int64_t mode = 0;
  bool want_qk = false;
  DType softmax_type = DType::Undefined;
  bool reference_rounding = false;  // bfloat16 sums rounded after each addition (ops/numerics.h)
};

// Softmax over one row of biased logits in precision S, then converted to T's compute type.
// `x` holds T values (compute type CT); the result overwrites `p` (CT, rounded to T). The sum
// accumulates in S's compute type and is rounded to S once, or, for bfloat16 with `reference`,
// after each addition as the ONNX reference does (ops/numerics.h).
template <typename T, typename S>
void softmax_row(const compute_t<T>* x, int64_t n, compute_t<T>* p, std::vector<compute_t<S>>& tmp, bool reference) {
  using SC = compute_t<S>;
  tmp.resize(static_cast<size_t>(n));
  SC mx = -std::numeric_limits<SC>::infinity();
  bool nan = false;
  for (int64_t j = 0; j < n; ++j) {
    SC v = round_from<S>(x[j]);
    tmp[j] = v;
    if (std::isnan(v))
      nan = true;
    else if (v > mx)
      mx = v;
  }
  if (nan) mx = std::numeric_limits<SC>::quiet_NaN();  // numpy's max propagates NaN
  SC safe = std::isinf(mx) && mx < 0 ? SC(0) : mx;
  SC sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    SC e = round_to<S>(std::exp(round_to<S>(tmp[j] - safe)));
    tmp[j] = e;
    if constexpr (std::is_same_v<S, bfloat16>)
      sum = reference ? round_to<S>(sum + e) : sum + e;
    else
      sum += e;
  }
  sum = round_to<S>(sum);
  if (sum == SC(0)) sum = 1;
  for (int64_t j = 0; j < n; ++j) {
    SC q = round_to<S>(tmp[j] / sum);
    p[j] = round_from<T>(q);
  }
}

template <typename T>
void run_attention(KernelContext& ctx, const Dims& d, const Options& o, const MaskInfo& mask,
                   const std::vector<int64_t>& nonpad) {
  using CT = compute_t<T>;
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  const bool has_past = ctx.has_input(4);

  // present_key / present_value: past ++ new, always 4D [B, Hkv, L, D]. Built even when not
  // requested because the attention loops read K and V from them (a Tensor copy shares storage,
  // so filling pk fills the output).
  Shape pk_shape{d.batch, d.kv_heads, d.total_len, d.head_size};
  Shape pv_shape{d.batch, d.kv_heads, d.total_len, d.v_head_size};
  Tensor pk = ctx.output_wanted(1) ? ctx.allocate_output(1, q.dtype(), pk_shape) : Tensor::empty(q.dtype(), pk_shape);
  Tensor pv = ctx.output_wanted(2) ? ctx.allocate_output(2, q.dtype(), pv_shape) : Tensor::empty(q.dtype(), pv_shape);
  auto fill_cache = [&](Tensor& dst, const Tensor& cur, int past_index, int64_t size) {
    T* out = dst.mutable_data<T>();
    const T* past = has_past ? ctx.input(past_index).data<T>() : nullptr;
    const T* src = cur.data<T>();
    View cv = make_view(d.is_3d, d.kv_heads, d.kv_len, size);
    for (int64_t b = 0; b < d.batch; ++b)
      for (int64_t h = 0; h < d.kv_heads; ++h) {
        T* row = out + ((b * d.kv_heads + h) * d.total_len) * size;
        if (past) std::copy_n(past + ((b * d.kv_heads + h) * d.past_len) * size, d.past_len * size, row);
        for (int64_t s = 0; s < d.kv_len; ++s)
          std::copy_n(src + b * cv.sb + h * cv.sh + s * cv.ss, size, row + (d.past_len + s) * size);
      }
  };
  fill_cache(pk, k, 4, d.head_size);
  fill_cache(pv, v, 5, d.v_head_size);

  const CT scale_t = round_from<T>(o.sqrt_scale);
  const int64_t kn = d.batch * d.kv_heads * d.total_len;
  std::vector<CT> ks(static_cast<size_t>(kn * d.head_size));
  std::vector<CT> vs(static_cast<size_t>(kn * d.v_head_size));
  {
    const T* pkd = pk.data<T>();
    const T* pvd = pv.data<T>();
    for (size_t i = 0; i < ks.size(); ++i) ks[i] = round_to<T>(to_compute(pkd[i]) * scale_t);
    for (size_t i = 0; i < vs.size(); ++i) vs[i] = to_compute(pvd[i]);
  }

  Shape y_shape =
      d.is_3d ? Shape{d.batch, d.q_len, d.q_heads * d.v_head_size} : Shape{d.batch, d.q_heads, d.q_len, d.v_head_size};
  T* y = ctx.allocate_output(0, q.dtype(), y_shape).template mutable_data<T>();
  T* qk_out = nullptr;
  if (o.want_qk)
    qk_out = ctx.allocate_output(3, q.dtype(), {d.batch, d.q_heads, d.q_len, d.total_len}).template mutable_data<T>();

  const View qv = make_view(d.is_3d, d.q_heads, d.q_len, d.head_size);
  const View yv = make_view(d.is_3d, d.q_heads, d.q_len, d.v_head_size);
  const T* qd = q.data<T>();
  const int64_t group = d.q_heads / d.kv_heads;
  const int64_t L = d.total_len;
  const CT softcap_t = round_to<T>(static_cast<CT>(o.softcap));
  const CT neg_inf = -std::numeric_limits<CT>::infinity();
  const int64_t work = d.batch * d.q_heads;

  const int threads =
      work > 1 && work * d.q_len * L * (d.head_size + d.v_head_size) > (1 << 16) ? omp_get_max_threads() : 1;
  parallel_tasks(work, threads, [&](int64_t bh) {
    const int64_t b = bh / d.q_heads, h = bh % d.q_heads, kvh = h / group;
    const CT* kb = ks.data() + ((b * d.kv_heads + kvh) * L) * d.head_size;
    const CT* vb = vs.data() + ((b * d.kv_heads + kvh) * L) * d.v_head_size;
    int64_t offset = has_past ? d.past_len : (nonpad.empty() ? 0 : nonpad[b] - d.q_len);
    std::vector<CT> qs(static_cast<size_t>(d.head_size)), raw(L), capped(L), biased(L), prob(L);
    std::vector<float> acc(static_cast<size_t>(d.v_head_size));
    std::vector<double> acc_d(static_cast<size_t>(d.v_head_size));
    std::vector<float> tmp_f;
    std::vector<double> tmp_d;
    for (int64_t i = 0; i < d.q_len; ++i) {
      const T* qrow = qd + b * qv.sb + h * qv.sh + i * qv.ss;
      for (int64_t e = 0; e < d.head_size; ++e) qs[e] = round_to<T>(to_compute(qrow[e]) * scale_t);
      bool any_open = false;
      for (int64_t j = 0; j < L; ++j) {
        const CT* krow = kb + j * d.head_size;
        CT dot = 0;
        for (int64_t e = 0; e < d.head_size; ++e) dot += qs[e] * krow[e];
        CT s = round_to<T>(dot);
        raw[j] = s;
        if (o.softcap > 0) {
          s = round_to<T>(s / softcap_t);
          s = round_to<T>(std::tanh(s));
          s = round_to<T>(s * softcap_t);
        }
        capped[j] = s;
        // Bias for (b, h, i, j).
        CT bias = 0;
        if (mask.present) {
          if (j >= mask.len) {
            bias = neg_inf;
          } else {
            int64_t mi = b * mask.sb + h * mask.sh + i * mask.sq + j;
            if constexpr (std::is_same_v<CT, double>)
              bias = mask.values_d[mi];
            else
              bias = mask.values[mi];
          }
        }
        bool allowed = true;
        const int64_t diff = i + offset - j;
        if (o.causal && diff < 0) allowed = false;
        if (o.left_window >= 0 && diff > o.left_window) allowed = false;
        if (o.right_window >= 0 && -diff > o.right_window) allowed = false;
        if (!nonpad.empty() && j >= nonpad[b]) allowed = false;
        if (!allowed) bias = bias + neg_inf;
        if (!(std::isinf(bias) && bias < 0)) any_open = true;
        biased[j] = round_to<T>(s + bias);
      }
      if (L > 0) {
        switch (o.softmax_type) {
          case DType::Float32:
            softmax_row<T, float>(biased.data(), L, prob.data(), tmp_f, o.reference_rounding);
            break;
          case DType::Float16:
            softmax_row<T, float16>(biased.data(), L, prob.data(), tmp_f, o.reference_rounding);
            break;
          case DType::BFloat16:
            softmax_row<T, bfloat16>(biased.data(), L, prob.data(), tmp_f, o.reference_rounding);
            break;
          default:
            softmax_row<T, double>(biased.data(), L, prob.data(), tmp_d, o.reference_rounding);
            break;
        }
      }
      if (!any_open) std::fill(prob.begin(), prob.end(), CT(0));
      if (qk_out) {
        T* out = qk_out + ((b * d.q_heads + h) * d.q_len + i) * L;
        const std::vector<CT>& src = o.mode == 0 ? raw : o.mode == 1 ? capped : o.mode == 2 ? biased : prob;
        for (int64_t j = 0; j < L; ++j) out[j] = from_compute<T>(src[j]);
      }
      // Y row = P · V, accumulated in float32 (float64 for double) and rounded once.
      T* yrow = y + b * yv.sb + h * yv.sh + i * yv.ss;
      if constexpr (std::is_same_v<CT, double>) {
        std::fill(acc_d.begin(), acc_d.end(), 0.0);
        for (int64_t j = 0; j < L; ++j) {
          const double pj = prob[j];
          const CT* vrow = vb + j * d.v_head_size;
          for (int64_t e = 0; e < d.v_head_size; ++e) acc_d[e] += pj * vrow[e];
        }
        for (int64_t e = 0; e < d.v_head_size; ++e) yrow[e] = from_compute<T>(acc_d[e]);
      } else {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < L; ++j) {
          const float pj = prob[j];
          const CT* vrow = vb + j * d.v_head_size;
          for (int64_t e = 0; e < d.v_head_size; ++e) acc[e] += pj * vrow[e];
        }
        for (int64_t e = 0; e < d.v_head_size; ++e) yrow[e] = from_compute<T>(acc[e]);
      }
    }
  });
}

// Reads attn_mask, checks it broadcasts to [B, Hq, Sq, L] (last dim may be shorter) and converts
// it to bias values rounded to Q's type.
MaskInfo read_mask(const KernelContext& ctx, const Dims& d, DType qtype) {
  MaskInfo m;
  const AttentionMaskShape ms = attention_mask_shape(ctx, d);
  if (!ms.present) return m;
  const Tensor& t = ctx.input(3);
  m.present = true;
  m.len = ms.len;
  m.sq = ms.sq;
  m.sh = ms.sh;
  m.sb = ms.sb;
  const int64_t n = t.numel();
  std::vector<double> vals(static_cast<size_t>(n));
  if (t.dtype() == DType::Bool) {
    const bool* p = t.data<bool>();
    for (int64_t i = 0; i < n; ++i) vals[i] = p[i] ? 0.0 : -std::numeric_limits<double>::infinity();
  } else {
    dispatch_float(t.dtype(), [&](auto tag) {
      using M = typename decltype(tag)::type;
      const M* p = t.data<M>();
      for (int64_t i = 0; i < n; ++i) vals[i] = static_cast<double>(to_compute(p[i]));
    });
  }
  if (qtype == DType::Float64) {
    m.values_d = std::move(vals);
  } else {
    m.values.resize(static_cast<size_t>(n));
    dispatch_float(qtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, double>)
        for (int64_t i = 0; i < n; ++i) m.values[i] = round_from<T>(vals[i]);
    });
  }
  return m;
}

void attention_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& q = ctx.input(0);
  const Dims d = attention_dims(ctx);
  check_nonpad_kv_seqlen(ctx, d);

  std::vector<int64_t> nonpad;
  if (ctx.has_input(6)) {
    nonpad = ctx.input(6).to_int64_vector();
    // Lengths beyond +-2^40 behave like +-2^40 (everything or nothing valid) and keep the
    // offset arithmetic below far from overflow.
    for (int64_t& n : nonpad) n = std::clamp<int64_t>(n, -(int64_t{1} << 40), int64_t{1} << 40);
  }

  Options o;
  const double scale = ctx.node().has_attr("scale") ? static_cast<double>(ctx.attr_float("scale", 0))
                                                    : 1.0 / std::sqrt(static_cast<double>(d.head_size));
  REFORGE_CHECK(scale >= 0 && std::isfinite(scale), where, ": scale ", scale, " must be nonnegative and finite");
  o.sqrt_scale = std::sqrt(scale);
  o.softcap = ctx.attr_float("softcap", 0.0f);
  o.causal = ctx.attr_int("is_causal", 0) != 0;
  o.left_window = ctx.attr_int("left_window_size", -1);
  o.right_window = ctx.attr_int("right_window_size", -1);
  o.mode = ctx.attr_int("qk_matmul_output_mode", 0);
  o.want_qk = ctx.output_wanted(3);
  o.reference_rounding = reference_rounding(ctx.node());
  o.softmax_type = ctx.node().has_attr("softmax_precision")
                       ? dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("softmax_precision", 1)))
                       : q.dtype();

  MaskInfo mask = read_mask(ctx, d, q.dtype());
  dispatch_float(
      q.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        run_attention<T>(ctx, d, o, mask, nonpad);
      },
      "Attention");
}

}  // namespace

void register_attention(OpRegistry& r) { r.add({"", "Attention", 23, INT_MAX, attention_kernel, attention_check}); }

}  // namespace reforge::ops
