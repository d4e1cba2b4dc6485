// group-matmuls: the products of one 16-bit value by several constant matrices of its type — a
// transformer layer's query, key and value projections, its gate and up projections — become one
// reforge::MatMulGroup(X, W1, ..., Wn) -> (X W1, ..., X Wn), at most kGroupMax products each, in
// the order the graph has them. A backend with a kernel for it (the CUDA backend) runs a decoding
// step's products in one launch that streams every weight (backends/cuda/gemv.h); the CPU runs
// them one after another, as the MatMuls ran (float32 Linear layers are MatMulAdd there). No weight
// changes: each stays an input of the group, so a refit reaches it as before; the group node takes
// the place of the first product, whose input and weights exist there already.
#include <map>
#include <vector>

#include "passes/backend_verdict.h"
#include "passes/pattern.h"

namespace reforge::passes {

namespace {

constexpr size_t kGroupMax = 4;

bool is_matmul(const ir::Node& n) { return n.op_type == "MatMul" && n.domain.empty() && n.inputs.size() == 2; }

}  // namespace

void group_matmuls(BuildState& s) {
  BackendVerdict verdict(s);
  GraphIndex g(s);
  // The products of each input by a constant matrix of a float type, in graph order.
  std::map<std::string, std::vector<size_t>> by_input;
  std::vector<std::string> inputs;  // in order of their first product
  for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
    const ir::Node& n = s.graph.nodes[i];
    if (g.dead(i) || !is_matmul(n) || n.inputs[0].empty() || !g.is_const(n.inputs[1])) continue;
    const Tensor& w = s.consts.at(n.inputs[1]).value;
    if (w.rank() != 2 || (w.dtype() != DType::BFloat16 && w.dtype() != DType::Float16)) continue;
    auto& list = by_input[n.inputs[0]];
    if (list.empty()) inputs.push_back(n.inputs[0]);
    list.push_back(i);
  }
  std::vector<std::pair<size_t, ir::Node>> replace;
  for (const std::string& x : inputs) {
    const ops::ValueType* xt = verdict.type_of(x);
    if (!xt || !xt->rank_known || xt->shape.empty()) continue;
    // Products of X's type whose weights have X's last dimension as rows, in runs of kGroupMax.
    std::vector<size_t> fit;
    for (size_t i : by_input[x]) {
      const Tensor& w = s.consts.at(s.graph.nodes[i].inputs[1]).value;
      const ops::SymDim& k = xt->shape.back();
      if (w.dtype() == xt->dtype && k.known() && k.value() == w.dim(0)) fit.push_back(i);
    }
    for (size_t first = 0; first + 1 < fit.size(); first += kGroupMax) {
      const size_t end = std::min(fit.size(), first + kGroupMax);
      const ir::Node& anchor = s.graph.nodes[fit[first]];
      ir::Node f = make_node(anchor, "reforge", "MatMulGroup", 1);
      f.inputs = {x};
      for (size_t j = first; j < end; ++j) {
        f.inputs.push_back(s.graph.nodes[fit[j]].inputs[1]);
        f.outputs.push_back(s.graph.nodes[fit[j]].outputs[0]);
      }
      if (f.outputs.size() < 2 || verdict.declines(f)) continue;
      for (size_t j = first + 1; j < end; ++j) g.kill(&s.graph.nodes[fit[j]]);
      replace.emplace_back(fit[first], std::move(f));
    }
  }
  for (auto& [idx, f] : replace) s.graph.nodes[idx] = std::move(f);
  g.sweep();
}

}  // namespace reforge::passes
