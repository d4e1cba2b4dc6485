// linear-weights-precision: with --precision bf16 or fp16, stores the weight matrix of every
// Linear layer in bfloat16 or float16.
//
// A Linear layer is MatMul(X, W), reforge::MatMulAdd(X, W, b), or Gemm(A, B, C) with transA = 0,
// alpha = 1 and C absent or a constant [N] bias with beta = 1; W (B) a constant float32 matrix.
// The layer becomes reforge::MatMulAdd(X, W16[, b]) with W16 = Cast(W, to = bfloat16 | float16)
// (after Transpose(B) for a Gemm with transB = 1); linear-weights-packing may then pack W16 in
// panels (passes/weight_packing.cc). Both transforms are recipe steps made by
// BuildState::fold, so a refit replays them on the new float32 weights: sources keep their
// float32 type and shape, only the engine weight is 16-bit. Biases and accumulation stay
// float32, and so do the activations, unless the build asks for bfloat16 ones
// (BuildOptions::activations): each MatMulAdd then carries bf16_activations = 1 and rounds X.
// The pass specializes on no weight value (it reads dtypes and shapes); it only refuses, for
// float16, a weight the cast overflowed.
//
// The cast is ONNX's Cast: round to nearest even, and a float32 value beyond float16's range
// (|x| >= 65520, which does not round to 65504) becomes +-inf, as numpy's astype does. An
// infinite weight would make the layer's outputs inf or NaN, so an fp16 build fails here naming
// the weight, and a refit that would overflow one is refused by the prepare step of MatMulAdd or
// MatMulAddPacked (backends/cpu/matmul_add.cc), which runs inside the refit transaction.
#include <cmath>

#include "core/error.h"
#include "passes/linear_layer.h"

namespace reforge::passes {

namespace {

// Cast(w) to the plan's 16-bit type. `source` names the weight in errors.
std::string to_half(BuildState& s, const std::string& w, const std::string& source) {
  const bool fp16 = s.precision == plan::Precision::Fp16;
  const DType to = fp16 ? DType::Float16 : DType::BFloat16;
  std::string name = fold_into(s, w, w + (fp16 ? ".fp16" : ".bf16"), "", "Cast", 19,
                               {{"to", ir::int_attr("to", static_cast<int64_t>(to))}});
  if (fp16) {
    const Tensor& in = s.consts.at(w).value;
    const Tensor& out = s.consts.at(name).value;
    const float* x = in.data<float>();
    const uint16_t* h = static_cast<const uint16_t*>(out.raw());
    for (int64_t i = 0; i < out.numel(); ++i)
      if ((h[i] & 0x7fffu) == 0x7c00u && std::isfinite(x[i]))
        fail("--precision fp16: weight '", source, "' has the value ", x[i], " (element ", i,
             "), beyond float16's range (+-65504); it would become inf. Build with --precision bf16 or fp32");
  }
  return name;
}

}  // namespace

void linear_weights_precision(BuildState& s) {
  if (s.precision != plan::Precision::Bf16 && s.precision != plan::Precision::Fp16) return;
  std::map<std::string, int> uses = s.use_counts();
  for (ir::Node& n : s.graph.nodes) {
    const std::optional<LinearLayer> l = match_linear(s, n);
    if (!l) continue;
    std::string w = l->w;
    if (l->trans_b) w = fold_into(s, w, w + ".t", "", "Transpose", 13, {{"perm", ir::ints_attr("perm", {1, 0})}});
    const std::string w16 = to_half(s, w, l->w);
    if (w != l->w) s.consts.erase(w);  // the transposed copy, folded into w16 and read by no node
    std::vector<std::string> inputs = {l->x, w16};
    if (!l->bias.empty()) inputs.push_back(l->bias);
    std::map<std::string, ir::Attribute> attrs;
    if (s.bf16_activations) attrs["bf16_activations"] = ir::int_attr("bf16_activations", 1);
    n = linear_node(n, "MatMulAdd", std::move(inputs), std::move(attrs));
    // Once no node reads the float32 W, the build lets go of it (one float32 weight at a time is
    // held, not the model): now, or once linear-weights-packing has packed w16.
    if (--uses[l->w] == 0) {
      if (s.pack_half_panels)
        s.cast_from[w16] = l->w;
      else
        s.release_replaced(l->w, w16);
    }
  }
}

}  // namespace reforge::passes
