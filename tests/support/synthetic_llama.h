// A synthetic Llama-style decoder as an ir::Graph, of any size, for the stripped-size test and
// the refit benchmark (models too large to commit). It has what makes refit hard: RMSNorm
// written as Pow/ReduceMean/Add(eps)/Sqrt/Reciprocal/Mul with Constant-node lowering constants,
// a causal mask literal, a softmax scale constant, SiLU-gated MLP, Transpose of K, and the
// norm weights of one model share one initializer (as exporters merge equal tensors) when
// `share_norms` is set.
#pragma once

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "core/tensor.h"
#include "ir/graph.h"

namespace reforge::synth {

struct LlamaSpec {
  int64_t hidden = 64, ffn = 176, layers = 2, vocab = 128, seq = 8;
  uint32_t seed = 1;
  bool share_norms = true;  // all norm weights one all-ones tensor (weights "as initialized")
};

inline ir::Graph synthetic_llama(const LlamaSpec& s) {
  ir::Graph g;
  g.name = "synthetic_llama";
  g.ir_version = 10;
  g.opsets[""] = 18;
  std::mt19937 rng(s.seed);
  std::uniform_real_distribution<float> uni(-0.05f, 0.05f);
  auto weight = [&](const std::string& name, Shape shape) {
    Tensor t = Tensor::empty(DType::Float32, std::move(shape));
    float* p = t.mutable_data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = uni(rng);
    g.initializers[name] = t;
    return name;
  };
  auto norm_weight = [&](const std::string& name) {
    if (s.share_norms) {
      if (!g.initializers.count("ones")) {
        Tensor t = Tensor::empty(DType::Float32, {s.hidden});
        for (int64_t i = 0; i < s.hidden; ++i) t.mutable_data<float>()[i] = 1.0f;
        g.initializers["ones"] = t;
      }
      return std::string("ones");
    }
    Tensor t = Tensor::empty(DType::Float32, {s.hidden});
    for (int64_t i = 0; i < s.hidden; ++i) t.mutable_data<float>()[i] = 1.0f + uni(rng);
    g.initializers[name] = t;
    return name;
  };
  int id = 0;
  auto node = [&](const std::string& op, std::vector<std::string> ins,
                  std::map<std::string, ir::Attribute> attrs = {}) {
    ir::Node n;
    n.op_type = op;
    n.opset = 18;
    n.name = "/" + op + "_" + std::to_string(id);
    n.inputs = std::move(ins);
    n.outputs = {"v" + std::to_string(id++)};
    n.attrs = std::move(attrs);
    g.nodes.push_back(n);
    return g.nodes.back().outputs[0];
  };
  auto constant = [&](Tensor t) {
    ir::Attribute a;
    a.name = "value";
    a.type = ir::AttrType::Tensor;
    a.t = std::move(t);
    return node("Constant", {}, {{"value", a}});
  };
  auto scalar = [&](float v) {
    Tensor t = Tensor::empty(DType::Float32, {});
    *t.mutable_data<float>() = v;
    return constant(t);
  };
  Tensor axes_t = Tensor::empty(DType::Int64, {1});
  *axes_t.mutable_data<int64_t>() = -1;
  auto rmsnorm = [&](const std::string& x, const std::string& w) {
    std::string p = node("Pow", {x, scalar(2.0f)});
    std::string m = node("ReduceMean", {p, constant(axes_t)});
    std::string r = node("Reciprocal", {node("Sqrt", {node("Add", {m, scalar(1e-6f)})})});
    return node("Mul", {node("Mul", {x, r}), w});
  };
  ir::Attribute perm;
  perm.name = "perm";
  perm.type = ir::AttrType::Ints;
  perm.ints = {0, 2, 1};
  Tensor mask = Tensor::empty(DType::Float32, {s.seq, s.seq});
  for (int64_t i = 0; i < s.seq; ++i)
    for (int64_t j = 0; j < s.seq; ++j) mask.mutable_data<float>()[i * s.seq + j] = j > i ? -1e9f : 0.0f;
  std::string mask_v = constant(mask);

  ir::ValueInfo in;
  in.name = "input_ids";
  in.dtype = DType::Int64;
  in.has_shape = true;
  in.shape = {ir::Dim{1, ""}, ir::Dim{s.seq, ""}};
  g.inputs.push_back(in);
  std::string x = node("Gather", {weight("embed_tokens.weight", {s.vocab, s.hidden}), "input_ids"});
  for (int64_t l = 0; l < s.layers; ++l) {
    std::string pre = "layers." + std::to_string(l) + ".";
    std::string h = rmsnorm(x, norm_weight(pre + "input_layernorm.weight"));
    std::string q = node("MatMul", {h, weight(pre + "self_attn.q_proj.weight", {s.hidden, s.hidden})});
    std::string k = node("MatMul", {h, weight(pre + "self_attn.k_proj.weight", {s.hidden, s.hidden})});
    std::string v = node("MatMul", {h, weight(pre + "self_attn.v_proj.weight", {s.hidden, s.hidden})});
    std::string sc = node("Mul", {node("MatMul", {q, node("Transpose", {k}, {{"perm", perm}})}),
                                  scalar(1.0f / std::sqrt(static_cast<float>(s.hidden)))});
    ir::Attribute axis;
    axis.name = "axis";
    axis.type = ir::AttrType::Int;
    axis.i = -1;
    std::string attn = node("Softmax", {node("Add", {sc, mask_v})}, {{"axis", axis}});
    std::string o =
        node("MatMul", {node("MatMul", {attn, v}), weight(pre + "self_attn.o_proj.weight", {s.hidden, s.hidden})});
    x = node("Add", {x, o});
    std::string h2 = rmsnorm(x, norm_weight(pre + "post_attention_layernorm.weight"));
    std::string gt = node("MatMul", {h2, weight(pre + "mlp.gate_proj.weight", {s.hidden, s.ffn})});
    std::string up = node("MatMul", {h2, weight(pre + "mlp.up_proj.weight", {s.hidden, s.ffn})});
    std::string act = node("Mul", {node("Mul", {gt, node("Sigmoid", {gt})}), up});
    x = node("Add", {x, node("MatMul", {act, weight(pre + "mlp.down_proj.weight", {s.ffn, s.hidden})})});
  }
  std::string logits =
      node("MatMul", {rmsnorm(x, norm_weight("norm.weight")), weight("lm_head.weight", {s.hidden, s.vocab})});
  g.nodes.back().outputs[0] = "logits";
  ir::ValueInfo out;
  out.name = "logits";
  out.dtype = DType::Float32;
  g.outputs.push_back(out);
  (void)logits;
  return g;
}

// Token ids [1, seq] for synthetic_llama (deterministic, below the default vocab of 128).
inline std::map<std::string, Tensor> synthetic_llama_inputs(int64_t seq) {
  Tensor ids = Tensor::empty(DType::Int64, {1, seq});
  for (int64_t i = 0; i < seq; ++i) ids.mutable_data<int64_t>()[i] = (i * 37 + 5) % 128;
  return {{"input_ids", ids}};
}

}  // namespace reforge::synth
