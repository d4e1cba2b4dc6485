// Weight-transforming fusions. Both keep full provenance: the new weights are made by
// BuildState::fold with reforge-domain operators (src/ops/reforge/reforge_ops.cc), so a refit replays
// the same kernels.
//
// fold-batchnorm-into-conv: Conv(X, W, B) -> BatchNormalization(scale, bias, mean, var) becomes
//   Conv(X, W', B') with W' = BnFoldWeight(W, scale, var), B' = BnFoldBias(B, scale, bias, mean, var).
// fuse-matmul-add: MatMul(X, W) -> Add(., b) with constant W and a bias along the last axis
//   becomes reforge::MatMulAdd(X, W, b), one kernel with the bias added in its epilogue.
#include "passes/build_state.h"

namespace reforge::passes {

namespace {

std::map<std::string, size_t> producers(const ir::Graph& g) {
  std::map<std::string, size_t> p;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) p[o] = i;
  return p;
}

bool is_graph_output(const ir::Graph& g, const std::string& v) {
  for (const auto& o : g.outputs)
    if (o.name == v) return true;
  return false;
}

}  // namespace

void fold_batchnorm_into_conv(BuildState& s) {
  auto uses = s.use_counts();
  auto prod = producers(s.graph);
  std::vector<bool> erase(s.graph.nodes.size(), false);
  for (size_t bi = 0; bi < s.graph.nodes.size(); ++bi) {
    ir::Node& bn = s.graph.nodes[bi];
    if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || bn.inputs.size() < 5) continue;
    if (bn.attr_int("training_mode", 0) != 0) continue;
    bool extra_outputs = false;
    for (size_t k = 1; k < bn.outputs.size(); ++k) extra_outputs |= !bn.outputs[k].empty();
    if (extra_outputs) continue;
    bool params_const = true;
    for (size_t k = 1; k < 5; ++k) params_const &= s.is_const(bn.inputs[k]);
    if (!params_const) continue;
    auto pit = prod.find(bn.inputs[0]);
    if (pit == prod.end() || erase[pit->second]) continue;
    ir::Node& conv = s.graph.nodes[pit->second];
    if (conv.op_type != "Conv" || !conv.domain.empty() || conv.inputs.size() < 2 || !s.is_const(conv.inputs[1]))
      continue;
    if (conv.inputs.size() > 2 && !conv.inputs[2].empty() && !s.is_const(conv.inputs[2])) continue;
    if (uses[conv.outputs[0]] != 1 || is_graph_output(s.graph, conv.outputs[0])) continue;
    const Tensor& w = s.consts.at(conv.inputs[1]).value;
    if (!is_float(w.dtype()) || w.rank() < 3) continue;
    std::string bias = conv.inputs.size() > 2 ? conv.inputs[2] : "";
    if (bias.empty()) {
      bias = s.fresh_name(conv.outputs[0] + ".zero_bias");
      ConstValue z;
      z.value = Tensor::empty(w.dtype(), {w.dim(0)});
      z.kind = plan::WeightKind::Literal;
      s.consts[bias] = std::move(z);
    }
    std::map<std::string, ir::Attribute> attrs = {
        {"epsilon", ir::float_attr("epsilon", bn.attr_float("epsilon", 1e-5f))}};
    std::string wname = s.fresh_name(conv.inputs[1] + ".bn_folded");
    std::string bname = s.fresh_name(bn.outputs[0] + ".bn_folded_bias");
    s.consts[wname] = s.fold("reforge", "BnFoldWeight", 1, attrs, {conv.inputs[1], bn.inputs[1], bn.inputs[4]}, 1, 0);
    s.consts[bname] =
        s.fold("reforge", "BnFoldBias", 1, attrs, {bias, bn.inputs[1], bn.inputs[2], bn.inputs[3], bn.inputs[4]}, 1, 0);
    conv.inputs.resize(3);
    conv.inputs[1] = wname;
    conv.inputs[2] = bname;
    conv.outputs[0] = bn.outputs[0];
    erase[bi] = true;
  }
  std::vector<ir::Node> kept;
  for (size_t i = 0; i < s.graph.nodes.size(); ++i)
    if (!erase[i]) kept.push_back(std::move(s.graph.nodes[i]));
  s.graph.nodes = std::move(kept);
}

void fuse_matmul_add(BuildState& s) {
  auto uses = s.use_counts();
  auto prod = producers(s.graph);
  std::vector<bool> erase(s.graph.nodes.size(), false);
  for (size_t ai = 0; ai < s.graph.nodes.size(); ++ai) {
    ir::Node& add = s.graph.nodes[ai];
    if (add.op_type != "Add" || !add.domain.empty() || add.inputs.size() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const std::string& mm_out = add.inputs[side];
      const std::string& b = add.inputs[1 - side];
      if (!s.is_const(b)) continue;
      auto pit = prod.find(mm_out);
      if (pit == prod.end() || erase[pit->second]) continue;
      ir::Node& mm = s.graph.nodes[pit->second];
      if (mm.op_type != "MatMul" || !mm.domain.empty() || !s.is_const(mm.inputs[1])) continue;
      if (uses[mm_out] != 1 || is_graph_output(s.graph, mm_out)) continue;
      const Tensor& w = s.consts.at(mm.inputs[1]).value;
      const Tensor& bias = s.consts.at(b).value;
      if (w.rank() != 2 || w.dtype() != DType::Float32 || bias.dtype() != DType::Float32) continue;
      // The bias must be a vector along the last axis: shape [N].
      bool ok = bias.rank() >= 1 && bias.shape().back() == w.dim(1);
      for (int64_t d = 0; ok && d + 1 < bias.rank(); ++d) ok = bias.dim(d) == 1;
      if (!ok || bias.rank() != 1) continue;
      ir::Node fused;
      fused.name = mm.name.empty() ? add.name : mm.name;
      fused.op_type = "MatMulAdd";
      fused.domain = "reforge";
      fused.opset = 1;
      fused.inputs = {mm.inputs[0], mm.inputs[1], b};
      fused.outputs = {add.outputs[0]};
      fused.metadata = mm.metadata;
      mm = std::move(fused);
      erase[ai] = true;
      break;
    }
  }
  std::vector<ir::Node> kept;
  for (size_t i = 0; i < s.graph.nodes.size(); ++i)
    if (!erase[i]) kept.push_back(std::move(s.graph.nodes[i]));
  s.graph.nodes = std::move(kept);
}

}  // namespace reforge::passes
