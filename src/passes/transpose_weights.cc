// transpose-linear-weights: where the target's weight layouts ask for it
// (WeightLayouts::linear_transposed: the CUDA backend), each 16-bit product by a constant matrix
// stores the matrix transposed, [N, K], as torch.nn.Linear holds it. A decoding step multiplies
// one row by every matrix; with the matrix [N, K] a warp reads whole rows of it and adds across
// its lanes (backends/cuda/gemv.h), where [K, N] needs the blocks of one column range to add
// their partial sums through memory. Prompts run on cuBLASLt either way (its transposed form).
//
// MatMul(X, W) with W a constant bfloat16 / float16 matrix of X's type, W [K, N] with K X's last
// dimension, becomes reforge::MatMulGroup(X, Wt) with transposed = 1; a MatMulGroup (made by
// group-matmuls) keeps its products and takes transposed = 1 with every weight transposed. Wt =
// Transpose(W) is made by BuildState::fold, a recipe step, so a refit replays it (on the device
// where the refit replays there). A matrix read by other nodes too (tied embeddings) stays as well.
#include <map>
#include <string>

#include "passes/backend_verdict.h"
#include "passes/linear_layer.h"
#include "passes/pattern.h"

namespace reforge::passes {

namespace {

bool is_half_matrix(const BuildState& s, const std::string& w) {
  auto it = s.consts.find(w);
  if (it == s.consts.end()) return false;
  const Tensor& t = it->second.value;
  return t.rank() == 2 && (t.dtype() == DType::BFloat16 || t.dtype() == DType::Float16);
}

}  // namespace

void transpose_linear_weights(BuildState& s) {
  if (!s.transpose_linear_weights) return;
  BackendVerdict verdict(s);
  std::map<std::string, int> uses = s.use_counts();
  std::map<std::string, std::string> transposed;  // W -> Wt, each made once
  auto transpose = [&](const std::string& w) {
    auto it = transposed.find(w);
    if (it != transposed.end()) return it->second;
    const std::string t = fold_into(s, w, w + ".t", "", "Transpose", 13, {{"perm", ir::ints_attr("perm", {1, 0})}});
    transposed[w] = t;
    return t;
  };
  std::vector<std::pair<size_t, ir::Node>> replace;
  for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
    const ir::Node& n = s.graph.nodes[i];
    const bool matmul = n.domain.empty() && n.op_type == "MatMul" && n.inputs.size() == 2 && !n.inputs[0].empty();
    const bool group = n.domain == "reforge" && n.op_type == "MatMulGroup" &&
                       !(n.attrs.count("transposed") && n.attrs.at("transposed").i != 0);
    if (!matmul && !group) continue;
    const ops::ValueType* xt = verdict.type_of(n.inputs[0]);
    if (!xt || !xt->rank_known || xt->shape.empty() || !xt->shape.back().known()) continue;
    bool fit = true;
    for (size_t j = 1; j < n.inputs.size() && fit; ++j) {
      const std::string& w = n.inputs[j];
      fit = is_half_matrix(s, w) && s.consts.at(w).value.dtype() == xt->dtype &&
            s.consts.at(w).value.dim(0) == xt->shape.back().value();
    }
    if (!fit) continue;
    ir::Node f = group ? n : make_node(n, "reforge", "MatMulGroup", 1);
    if (!group) {
      f.name = n.name;
      f.inputs = n.inputs;
      f.outputs = n.outputs;
    }
    f.attrs["transposed"] = ir::int_attr("transposed", 1);
    std::vector<std::string> plain = f.inputs;
    for (size_t j = 1; j < f.inputs.size(); ++j) f.inputs[j] = transpose(f.inputs[j]);
    if (verdict.declines(f)) {
      // (its transposes stay unread; eliminate-dead-code drops them)
      continue;
    }
    for (size_t j = 1; j < plain.size(); ++j)
      if (--uses[plain[j]] == 0) s.release_replaced(plain[j], transposed.at(plain[j]));
    replace.emplace_back(i, std::move(f));
  }
  for (auto& [idx, f] : replace) s.graph.nodes[idx] = std::move(f);
}

}  // namespace reforge::passes
