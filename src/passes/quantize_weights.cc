// linear-weights-quantize: with --precision int8 or int4, stores the weight matrix of every Linear
// layer quantized, and multiplies it with reforge::MatMulQuant.
//
// A Linear layer (passes/linear_layer.h) becomes reforge::MatMulQuant(X, Q, scales, zero_points,
// b) with (Q, scales[, zero_points]) = reforge::QuantizeWeight(W) (transposed = 1 for a Gemm with
// transB = 1): int8 symmetric per output channel, or int4 asymmetric in blocks of
// BuildState::block_size along K (ops/reforge/quant_weight.h has the rules and layouts). Each of
// the two or three engine weights is a recipe of one QuantizeWeight step made by
// BuildState::fold_all, so a refit re-quantizes the new float32 weights with the same kernel;
// sources keep their float32 type and shape. The pass reads no weight value (the quantization is
// a recipe step, not a decision), so it runs in every build mode.
//
// Activations, the bias and the sums stay float32. The float32 W is released once quantized
// (unless another node, such as a tied embedding's Gather, still reads it).
#include "passes/linear_layer.h"

namespace reforge::passes {

void linear_weights_quantize(BuildState& s) {
  if (!plan::is_quantized(s.precision)) return;
  const int64_t bits = s.precision == plan::Precision::Int8 ? 8 : 4;
  const int64_t block = bits == 4 ? s.block_size : 0;
  std::map<std::string, int> uses = s.use_counts();
  for (ir::Node& n : s.graph.nodes) {
    const std::optional<LinearLayer> l = match_linear(s, n);
    if (!l) continue;
    const std::map<std::string, ir::Attribute> qattrs = {
        {"bits", ir::int_attr("bits", bits)},
        {"block_size", ir::int_attr("block_size", block)},
        {"transposed", ir::int_attr("transposed", l->trans_b ? 1 : 0)}};
    const size_t outputs = bits == 4 ? 3 : 2;
    std::vector<ConstValue> made = s.fold_all("reforge", "QuantizeWeight", 1, qattrs, {l->w}, outputs);
    static const char* const kSuffix[] = {".q", ".scales", ".zero_points"};
    std::vector<std::string> names;
    for (size_t k = 0; k < outputs; ++k) {
      names.push_back(s.fresh_name(l->w + (bits == 8 ? ".int8" : ".int4") + kSuffix[k]));
      s.consts[names.back()] = std::move(made[k]);
    }
    std::vector<std::string> inputs = {l->x, names[0], names[1], bits == 4 ? names[2] : std::string()};
    if (!l->bias.empty()) inputs.push_back(l->bias);
    while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
    n = linear_node(n, "MatMulQuant", std::move(inputs),
                    {{"bits", ir::int_attr("bits", bits)},
                     {"block_size", ir::int_attr("block_size", block)},
                     {"K", ir::int_attr("K", l->K)},
                     {"N", ir::int_attr("N", l->N)}});
    if (--uses[l->w] == 0) s.release_replaced(l->w, names);
  }
}

}  // namespace reforge::passes
