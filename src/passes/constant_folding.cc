// constant-folding: evaluates every node whose inputs are all constants, with the registry
// kernel, and records the evaluation as a recipe step (see BuildState::fold). Expressions that
// mix weights and literals (Transpose(W), Cast(W), Mul(W, 0.5), Reshape(W, shape)) become
// derived engine weights that a refit recomputes; expressions of literals only become literals.
#include "ops/registry.h"
#include "passes/build_state.h"

namespace reforge::passes {

namespace {
// Only default-domain ops fold, and only deterministic ones (the registry says which): a folded
// random draw would be one sample baked into every run.
bool foldable(const ir::Node& n) { return n.domain.empty() && ops::is_deterministic(n); }
constexpr size_t kMaxGrowthBytes = size_t{64} << 20;
}  // namespace

void constant_folding(BuildState& s) {
  std::vector<ir::Node> kept;
  kept.reserve(s.graph.nodes.size());
  for (auto& n : s.graph.nodes) {
    std::vector<std::string> ins = n.inputs;
    while (!ins.empty() && ins.back().empty()) ins.pop_back();
    bool all_const = foldable(n);
    size_t in_bytes = 0;
    for (const auto& i : ins) {
      if (i.empty() || !s.is_const(i)) {
        all_const = false;
        break;
      }
      in_bytes += s.consts.at(i).value.nbytes();
    }
    if (!all_const) {
      kept.push_back(std::move(n));
      continue;
    }
    std::vector<ConstValue> outs;
    try {
      outs = s.fold_all(n.domain, n.op_type, n.opset, n.attrs, ins, n.outputs.size());
    } catch (Error& e) {
      throw e.with_context("while folding constant " + n.label());
    }
    size_t out_bytes = 0;
    for (const auto& o : outs) out_bytes += o.value.nbytes();
    if (out_bytes > kMaxGrowthBytes && out_bytes > 2 * in_bytes) {
      kept.push_back(std::move(n));
      continue;
    }
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (!n.outputs[k].empty()) s.consts[n.outputs[k]] = std::move(outs[k]);
  }
  s.graph.nodes = std::move(kept);
}

void eliminate_dead_code(BuildState& s) {
  for (bool changed = true; changed;) {
    changed = false;
    auto uses = s.use_counts();
    std::vector<ir::Node> kept;
    for (auto& n : s.graph.nodes) {
      bool live = false;
      for (const auto& o : n.outputs) live |= !o.empty() && uses.count(o);
      if (live)
        kept.push_back(std::move(n));
      else
        changed = true;
    }
    s.graph.nodes = std::move(kept);
  }
  auto uses = s.use_counts();
  for (auto it = s.consts.begin(); it != s.consts.end();) {
    if (uses.count(it->first))
      ++it;
    else
      it = s.consts.erase(it);
  }
}

}  // namespace reforge::passes
