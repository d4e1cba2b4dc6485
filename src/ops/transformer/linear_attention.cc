// LinearAttention (opset 27): recurrent linear attention over packed [B, T, H * D] inputs.
//
// query [B, T, Hq * dk], key [B, T, Hkv * dk], value [B, T, Hkv * dv]; optional past_state
// [B, Hkv, dk, dv] (zeros when absent), decay g [B, T, Hkv * dk] (per key row) or [B, T, Hkv]
// (per head), beta [B, T, Hkv] or [B, T, 1]. Per step t and KV head, with S the [dk, dv] state:
//   linear:      S = S + k v^T
//   gated:       S = exp(g) S + k v^T
//   delta:       S = S + k (beta (v - S^T k))^T
//   gated_delta: S' = exp(g) S, then S = S' + k (beta (v - S'^T k))^T   (the default)
// exp(g) scales the rows of S. Each query head h reads the state of KV head h / (Hq / Hkv):
// o = scale * S^T q, scale defaulting to 1 / sqrt(dk). Outputs: [B, T, Hq * dv] and the final
// state [B, Hkv, dk, dv]. Sums run in double; outputs are rounded once.
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

enum class Rule { Linear, Gated, Delta, GatedDelta };

std::string check_linear_attention(const ir::Node& node) {
  const std::string r = node.attr_string("update_rule", "gated_delta");
  if (r != "linear" && r != "gated" && r != "delta" && r != "gated_delta")
    return "update_rule must be 'linear', 'gated', 'delta' or 'gated_delta', got '" + r + "'";
  if (!node.has_attr("q_num_heads") || !node.has_attr("kv_num_heads"))
    return "the q_num_heads and kv_num_heads attributes are required";
  return "";
}

void linear_attention_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const std::string why = check_linear_attention(ctx.node());
  REFORGE_CHECK(why.empty(), label, ": ", why);
  const std::string rs = ctx.attr_string("update_rule", "gated_delta");
  const Rule rule = rs == "linear"  ? Rule::Linear
                    : rs == "gated" ? Rule::Gated
                    : rs == "delta" ? Rule::Delta
                                    : Rule::GatedDelta;
  const bool gated = rule == Rule::Gated || rule == Rule::GatedDelta;
  const bool delta = rule == Rule::Delta || rule == Rule::GatedDelta;
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  const int64_t hq = ctx.attr_int("q_num_heads", 0), hkv = ctx.attr_int("kv_num_heads", 0);
  REFORGE_CHECK(hkv >= 1 && hq >= hkv && hq % hkv == 0, label, ": q_num_heads (", hq,
                ") must be a positive multiple of kv_num_heads (", hkv, ")");
  REFORGE_CHECK(q.rank() == 3 && k.rank() == 3 && v.rank() == 3, label, ": query, key and value must be 3-D");
  const int64_t B = q.dim(0), T = q.dim(1);
  REFORGE_CHECK(q.dim(2) % hq == 0 && v.dim(2) % hkv == 0, label, ": query ", q.describe(), " and value ", v.describe(),
                " must split into ", hq, " and ", hkv, " heads");
  const int64_t dk = q.dim(2) / hq, dv = v.dim(2) / hkv, group = hq / hkv;
  REFORGE_CHECK(k.shape() == (Shape{B, T, hkv * dk}) && v.dim(0) == B && v.dim(1) == T, label, ": key ", k.describe(),
                " must be [", B, ", ", T, ", ", hkv * dk, "] and value [", B, ", ", T, ", ...]");
  const Tensor* past = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  if (past)
    REFORGE_CHECK(past->shape() == (Shape{B, hkv, dk, dv}), label, ": past_state must be [", B, ", ", hkv, ", ", dk,
                  ", ", dv, "], got ", past->describe());
  const Tensor* decay = ctx.has_input(4) ? &ctx.input(4) : nullptr;
  const Tensor* beta = ctx.has_input(5) ? &ctx.input(5) : nullptr;
  REFORGE_CHECK(!gated || decay, label, ": update_rule '", rs, "' needs the decay input");
  REFORGE_CHECK(!delta || beta, label, ": update_rule '", rs, "' needs the beta input");
  int64_t decay_per_head = 0;  // decay values per KV head: dk (per row) or 1
  if (gated) {
    REFORGE_CHECK(decay->rank() == 3 && decay->dim(0) == B && decay->dim(1) == T &&
                      (decay->dim(2) == hkv * dk || decay->dim(2) == hkv),
                  label, ": decay must be [", B, ", ", T, ", ", hkv * dk, "] or [", B, ", ", T, ", ", hkv, "], got ",
                  decay->describe());
    decay_per_head = decay->dim(2) / hkv;
  }
  int64_t beta_heads = 0;
  if (delta) {
    REFORGE_CHECK(
        beta->rank() == 3 && beta->dim(0) == B && beta->dim(1) == T && (beta->dim(2) == hkv || beta->dim(2) == 1),
        label, ": beta must be [", B, ", ", T, ", ", hkv, "] or [", B, ", ", T, ", 1], got ", beta->describe());
    beta_heads = beta->dim(2);
  }
  const double scale = ctx.node().has_attr("scale") && ctx.attr_float("scale", 0.0f) != 0.0f
                           ? static_cast<double>(ctx.attr_float("scale", 0.0f))
                           : 1.0 / std::sqrt(static_cast<double>(dk));
  Tensor& out = ctx.allocate_output_uninit(0, q.dtype(), Shape{B, T, hq * dv});
  dispatch_float(
      q.dtype(),
      [&](auto tag) {
        using T_ = typename decltype(tag)::type;
        auto rd = [](const Tensor& t, int64_t i) {
          return dispatch_float(t.dtype(), [&](auto tg) {
            using U = typename decltype(tg)::type;
            return static_cast<double>(to_compute(t.data<U>()[i]));
          });
        };
        std::vector<double> S(static_cast<size_t>(B * hkv * dk * dv), 0.0);
        if (past)
          for (size_t i = 0; i < S.size(); ++i) S[i] = rd(*past, static_cast<int64_t>(i));
        std::vector<double> kv(static_cast<size_t>(dk)), vv(static_cast<size_t>(dv)), diff(static_cast<size_t>(dv));
        T_* os = out.mutable_data<T_>();
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < hkv; ++h) {
              double* s = S.data() + (b * hkv + h) * dk * dv;
              for (int64_t i = 0; i < dk; ++i) kv[static_cast<size_t>(i)] = rd(k, (b * T + t) * hkv * dk + h * dk + i);
              for (int64_t j = 0; j < dv; ++j) vv[static_cast<size_t>(j)] = rd(v, (b * T + t) * hkv * dv + h * dv + j);
              if (gated)
                for (int64_t i = 0; i < dk; ++i) {
                  const int64_t di = decay_per_head == 1 ? 0 : i;
                  const double e = std::exp(rd(*decay, (b * T + t) * hkv * decay_per_head + h * decay_per_head + di));
                  for (int64_t j = 0; j < dv; ++j) s[i * dv + j] *= e;
                }
              if (delta) {
                const double bt = rd(*beta, (b * T + t) * beta_heads + (beta_heads == 1 ? 0 : h));
                for (int64_t j = 0; j < dv; ++j) {
                  double r = 0;
                  for (int64_t i = 0; i < dk; ++i) r += s[i * dv + j] * kv[static_cast<size_t>(i)];
                  diff[static_cast<size_t>(j)] = bt * (vv[static_cast<size_t>(j)] - r);
                }
              } else {
                diff = vv;
              }
              for (int64_t i = 0; i < dk; ++i)
                for (int64_t j = 0; j < dv; ++j)
                  s[i * dv + j] += kv[static_cast<size_t>(i)] * diff[static_cast<size_t>(j)];
              for (int64_t g = 0; g < group; ++g) {
                const int64_t qh = h * group + g;
                for (int64_t j = 0; j < dv; ++j) {
                  double o = 0;
                  for (int64_t i = 0; i < dk; ++i) o += rd(q, (b * T + t) * hq * dk + qh * dk + i) * s[i * dv + j];
                  os[(b * T + t) * hq * dv + qh * dv + j] = from_compute<T_>(static_cast<compute_t<T_>>(scale * o));
                }
              }
            }
        if (ctx.output_wanted(1)) {
          Tensor& st = ctx.allocate_output_uninit(1, q.dtype(), Shape{B, hkv, dk, dv});
          T_* ss = st.mutable_data<T_>();
          for (size_t i = 0; i < S.size(); ++i) ss[i] = from_compute<T_>(static_cast<compute_t<T_>>(S[i]));
        }
      },
      label.c_str());
}

}  // namespace

void register_linear_attention(OpRegistry& r) {
  r.add({"", "LinearAttention", 27, INT_MAX, linear_attention_kernel, check_linear_attention});
}

}  // namespace reforge::ops
