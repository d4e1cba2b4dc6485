// fuse-dequantize-matmul: a Linear layer whose weight is DequantizeLinear(codes, scale[, zero
// point]) of constants, as ONNX Runtime's quantize_static (QDQ format) and its 4-bit weight-only
// quantizer (QDQ format) write it, runs on reforge::MatMulQuant over the integer codes instead of
// a float32 weight dequantized at build.
//
// Forms: MatMul(X, DequantizeLinear(...)) and Gemm(X, DequantizeLinear(...)[, C]) with transA = 0,
// alpha = 1 and C absent, beta = 0, or a float32 [N] vector (a constant, or DequantizeLinear of
// constants, ONNX Runtime's int32 bias) with beta = 1; transB = 1 makes the codes [N, K]. The
// weight must have a form MatMulQuant holds exactly (ops/reforge/qdq_weight.h: int8/uint8 codes
// per tensor or per output channel with symmetric zero points, int4/uint4 codes per tensor, per
// output channel or in blocks along K). The node becomes MatMulQuant(X, Q, scales[, zero points]
// [, C]) with (Q, scales[, zero points]) = reforge::QdqWeight(codes, scale[, zero point]): each
// engine weight is a recipe of that one step, so a refit from a re-quantized model re-lays the new
// codes out with the same kernel, and its sources keep the codes' type and shape. The
// DequantizeLinear goes when nothing else reads it, and with it the build's copy of the codes.
//
// The dequantized weight MatMulQuant computes equals DequantizeLinear's output element for element
// (both are float32(code - zero point) * scale), so the products differ from the float path only
// by float32 summation order.
//
// The pass runs before constant-folding, which would otherwise fold the DequantizeLinear into a
// float32 weight; everything it leaves (convolutions, Gather of quantized embeddings, forms
// MatMulQuant does not hold, a backend without MatMulQuant) is folded there, as before.
//
// Weight values: the int8 form is chosen only when the zero points are the type's centre (0 for
// int8, 128 for uint8). That is the one value the pass reads; QdqWeight checks it again at every
// refit and refuses other zero points, naming the engine weight, so a plan never runs a layout
// that does not hold its weights exactly.
#include <set>

#include "ops/reforge/qdq_weight.h"
#include "passes/linear_layer.h"

namespace reforge::passes {

namespace {

constexpr int32_t kOnnxFloat = 1;

bool is_dequantize(const ir::Node& n) { return n.domain.empty() && n.op_type == "DequantizeLinear"; }

// The inputs of the DequantizeLinear `d` (trailing absent ones dropped), when all are constants.
std::optional<std::vector<std::string>> constant_inputs(const BuildState& s, const ir::Node& d) {
  std::vector<std::string> in = d.inputs;
  while (!in.empty() && in.back().empty()) in.pop_back();
  if (in.size() < 2) return std::nullopt;
  for (const auto& i : in)
    if (i.empty() || !s.is_const(i)) return std::nullopt;
  return in;
}

// The float32 output of DequantizeLinear `d` (no output_dtype other than float32, a float32 scale).
bool float32_output(const BuildState& s, const ir::Node& d, const std::vector<std::string>& in) {
  const int64_t out = d.attr_int("output_dtype", 0);
  return (out == 0 || out == kOnnxFloat) && s.consts.at(in[1]).value.dtype() == DType::Float32;
}

// True when `c` is a float32 [N] vector: a constant, or DequantizeLinear of constants.
bool bias_vector(const BuildState& s, const std::map<std::string, size_t>& dq_of, const std::string& c, int64_t N) {
  if (s.is_const(c)) {
    const Tensor& t = s.consts.at(c).value;
    return t.dtype() == DType::Float32 && t.rank() == 1 && t.dim(0) == N;
  }
  const auto it = dq_of.find(c);
  if (it == dq_of.end()) return false;
  const ir::Node& d = s.graph.nodes[it->second];
  const auto in = constant_inputs(s, d);
  if (!in || !float32_output(s, d, *in)) return false;
  const Tensor& codes = s.consts.at((*in)[0]).value;
  return codes.rank() == 1 && codes.dim(0) == N;
}

}  // namespace

void fuse_dequantize_matmul(BuildState& s) {
  std::map<std::string, size_t> dq_of;  // output of a DequantizeLinear -> its node
  for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
    const ir::Node& n = s.graph.nodes[i];
    if (is_dequantize(n) && !n.outputs.empty() && !n.outputs[0].empty()) dq_of[n.outputs[0]] = i;
  }
  std::map<std::string, int> uses = s.use_counts();
  std::set<size_t> removed;
  for (ir::Node& n : s.graph.nodes) {
    if (!n.domain.empty() || (n.op_type != "MatMul" && n.op_type != "Gemm") || n.inputs.size() < 2) continue;
    const auto it = dq_of.find(n.inputs[1]);
    if (it == dq_of.end() || removed.count(it->second)) continue;
    const ir::Node& d = s.graph.nodes[it->second];
    const auto in = constant_inputs(s, d);
    if (!in || !float32_output(s, d, *in)) continue;
    const Tensor& codes = s.consts.at((*in)[0]).value;
    const Tensor& scale = s.consts.at((*in)[1]).value;
    bool trans_b = false;
    std::string bias;
    if (n.op_type == "Gemm") {
      if (n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.0f) != 1.0f) continue;
      trans_b = n.attr_int("transB", 0) != 0;
      if (n.inputs.size() > 2 && !n.inputs[2].empty() && n.attr_float("beta", 1.0f) != 0.0f) {
        if (n.attr_float("beta", 1.0f) != 1.0f || codes.rank() != 2) continue;
        bias = n.inputs[2];
        if (!bias_vector(s, dq_of, bias, codes.dim(trans_b ? 0 : 1))) continue;
      }
    }
    const int64_t axis = d.attr_int("axis", 1), block = d.attr_int("block_size", 0);
    ops::quant::QdqForm f;
    if (!ops::quant::qdq_form(codes.dtype(), codes.shape(), scale.dtype(), scale.shape(), axis, block, trans_b, f)
             .empty())
      continue;
    const ops::quant::QuantShape& qs = f.target;
    if (qs.bits == 8 && in->size() > 2 && !ops::quant::symmetric_zero_points(s.consts.at((*in)[2]).value)) continue;
    const size_t outputs = qs.bits == 4 ? 3 : 2;
    std::vector<ConstValue> made;
    try {
      made = s.fold_all("reforge", "QdqWeight", 1,
                        {{"axis", ir::int_attr("axis", axis)},
                         {"block_size", ir::int_attr("block_size", block)},
                         {"transposed", ir::int_attr("transposed", trans_b ? 1 : 0)}},
                        *in, outputs);
    } catch (Error& e) {
      throw e.with_context("while laying out the weight of " + n.label() + " for MatMulQuant");
    }
    static const char* const kSuffix[] = {".q", ".scales", ".zero_points"};
    std::vector<std::string> names;
    for (size_t k = 0; k < outputs; ++k) {
      names.push_back(s.fresh_name((*in)[0] + (qs.bits == 8 ? ".int8" : ".int4") + kSuffix[k]));
      s.consts[names.back()] = std::move(made[k]);
    }
    std::vector<std::string> inputs = {n.inputs[0], names[0], names[1], qs.bits == 4 ? names[2] : std::string()};
    if (!bias.empty()) inputs.push_back(bias);
    while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
    const std::string w = n.inputs[1];
    n = linear_node(n, "MatMulQuant", std::move(inputs),
                    {{"bits", ir::int_attr("bits", qs.bits)},
                     {"block_size", ir::int_attr("block_size", qs.block_size)},
                     {"K", ir::int_attr("K", qs.K)},
                     {"N", ir::int_attr("N", qs.N)}});
    if (--uses[w] > 0) continue;  // another node still reads the dequantized weight
    removed.insert(it->second);
    for (const auto& i : *in)
      if (--uses[i] == 0) s.release_replaced(i, names);
  }
  if (removed.empty()) return;
  std::vector<ir::Node> kept;
  kept.reserve(s.graph.nodes.size() - removed.size());
  for (size_t i = 0; i < s.graph.nodes.size(); ++i)
    if (!removed.count(i)) kept.push_back(std::move(s.graph.nodes[i]));
  s.graph.nodes = std::move(kept);
}

}  // namespace reforge::passes
