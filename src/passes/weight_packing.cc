// linear-weights-packing: stores the weight of every float32 Linear layer in the packed panels
// of backends/cpu/sgemm_panels.h, the only copy of it the engine keeps.
//
// A Linear layer (passes/linear_layer.h) becomes reforge::MatMulAddPacked(X, Wp[, b]) with
// Wp = reforge::PackPanels(W) (transposed = 1 for a Gemm with transB = 1) and attribute n = N.
// PackPanels is a recipe step made by BuildState::fold, so a refit re-packs the new weights with
// the same kernel; sources keep their float32 [K, N] (or [N, K]) shape. The pass reads no
// weight value. Each plain W that no other node reads is released as soon as it is packed
// (BuildState::release_replaced), so building holds about one copy of the weights, not two.
//
// It runs in float32 plans when BuildState::pack_linear_panels is set: by default on CPUs with
// AVX2 or AVX-512 (BuildOptions::weight_packing). Without it, oneDNN and OpenBLAS re-pack W on
// every product on AVX2 CPUs, and on AVX-512 ones oneDNN's brgemm matmul keeps a second, packed
// copy of W beside the plain one.
//
// In --precision bf16 / fp16 plans, when BuildState::pack_half_panels is set (builder.cc: float16
// on every CPU that packs, bfloat16 where oneDNN has no native bfloat16 product), it packs the
// 16-bit weights that linear-weights-precision made: reforge::MatMulAdd(X, W16[, b]) becomes
// reforge::MatMulAddPacked(X, PackPanels(W16)[, b]), 16-bit panels whose products widen W in
// registers or a k block at a time (sgemm_panels.h), not a panel at a time into a float32 copy
// for OpenBLAS. The recipe is then Cast (and Transpose for a Gemm with transB = 1), PackPanels.
// The packed node keeps MatMulAdd's bf16_activations attribute (--activations bf16).
#include "passes/linear_layer.h"

namespace reforge::passes {

namespace {

// The 16-bit weight of `n` that pack_half_weights packs, or null.
const Tensor* half_weight(const BuildState& s, const ir::Node& n) {
  if (n.domain != "reforge" || n.op_type != "MatMulAdd" || n.inputs.size() < 2 || !s.is_const(n.inputs[1]))
    return nullptr;
  const Tensor& w = s.consts.at(n.inputs[1]).value;
  if ((w.dtype() != DType::BFloat16 && w.dtype() != DType::Float16) || w.rank() != 2) return nullptr;
  return &w;
}

void pack_half_weights(BuildState& s) {
  uint64_t total = 0;
  size_t weights = 0;
  for (const ir::Node& n : s.graph.nodes)
    if (const Tensor* w = half_weight(s, n)) total += w->nbytes(), ++weights;
  if (weights == 0) return;  // nothing to pack
  ProgressStep progress(s.progress, s.step, total, "bytes");
  std::map<std::string, int> uses = s.use_counts();
  for (ir::Node& n : s.graph.nodes) {
    const Tensor* w = half_weight(s, n);
    if (!w) continue;
    const std::string w16 = n.inputs[1];
    const int64_t N = w->dim(1);
    const uint64_t bytes = w->nbytes();
    std::string wp =
        fold_into(s, w16, w16 + ".panels", "reforge", "PackPanels", 1, {{"transposed", ir::int_attr("transposed", 0)}});
    progress.advance(bytes);
    std::vector<std::string> inputs = {n.inputs[0], wp};
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) inputs.push_back(n.inputs[2]);
    std::map<std::string, ir::Attribute> attrs = {{"n", ir::int_attr("n", N)}};
    if (auto a = n.attrs.find("bf16_activations"); a != n.attrs.end()) attrs.emplace(a->first, a->second);
    n = linear_node(n, "MatMulAddPacked", std::move(inputs), std::move(attrs));
    // The plain 16-bit weight is not needed once packed, nor the float32 one it was cast from.
    if (--uses[w16] == 0) {
      s.consts.erase(w16);
      if (auto it = s.cast_from.find(w16); it != s.cast_from.end()) s.release_replaced(it->second, wp);
    }
  }
}

}  // namespace

void linear_weights_packing(BuildState& s) {
  if (s.precision != plan::Precision::Fp32) {
    if (s.pack_half_panels) pack_half_weights(s);
    return;
  }
  if (!s.pack_linear_panels) return;
  uint64_t total = 0;
  size_t layers = 0;
  for (const ir::Node& n : s.graph.nodes)
    if (const std::optional<LinearLayer> l = match_linear(s, n)) total += s.consts.at(l->w).value.nbytes(), ++layers;
  if (layers == 0) return;  // no Linear layer
  ProgressStep progress(s.progress, s.step, total, "bytes");
  std::map<std::string, int> uses = s.use_counts();
  for (ir::Node& n : s.graph.nodes) {
    const std::optional<LinearLayer> l = match_linear(s, n);
    if (!l) continue;
    const uint64_t bytes = s.consts.at(l->w).value.nbytes();
    std::string wp = fold_into(s, l->w, l->w + ".panels", "reforge", "PackPanels", 1,
                               {{"transposed", ir::int_attr("transposed", l->trans_b ? 1 : 0)}});
    progress.advance(bytes);
    std::vector<std::string> inputs = {l->x, wp};
    if (!l->bias.empty()) inputs.push_back(l->bias);
    n = linear_node(n, "MatMulAddPacked", std::move(inputs), {{"n", ir::int_attr("n", l->N)}});
    // The plain W is not needed once packed (unless another node reads it, e.g. a tied embedding).
    if (--uses[l->w] == 0) s.release_replaced(l->w, wp);
  }
}

}  // namespace reforge::passes
