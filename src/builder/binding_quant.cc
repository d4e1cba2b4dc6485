#include "builder/binding_quant.h"

#include <cstring>
#include <vector>

#include "ops/reforge/quant_weight.h"
#include "transforms/recipe.h"

namespace reforge::build {

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

std::optional<std::array<plan::Binding, 3>> nbits_bindings(const ir::Graph& g, const ir::Node& n,
                                                           const refit::Checkpoint& ckpt, std::string& why) {
  why.clear();
  if (n.domain != "com.microsoft" || n.op_type != "MatMulNBits") return std::nullopt;
  const int64_t K = n.attr_int("K", 0), N = n.attr_int("N", 0), block = n.attr_int("block_size", 0);
  if (n.attr_int("bits", 4) != 4 || !ops::quant::valid_block_size(block) || K <= 0 || N <= 0) {
    why = "MatMulNBits with bits " + std::to_string(n.attr_int("bits", 4)) + " and block_size " +
          std::to_string(block) + " is not the layout reforge::QuantizeWeight int4 writes";
    return std::nullopt;
  }
  if (n.inputs.size() < 4 || n.inputs[3].empty() || (n.inputs.size() > 4 && !n.inputs[4].empty())) {
    why = "only MatMulNBits with zero points and without g_idx (ONNX Runtime's asymmetric quantizer) re-derives";
    return std::nullopt;
  }
  std::array<const Tensor*, 3> want{};
  for (size_t i = 0; i < 3; ++i) {
    auto it = g.initializers.find(n.inputs[1 + i]);
    if (it == g.initializers.end()) return std::nullopt;
    want[i] = &it->second;
  }
  if (want[1]->dtype() != DType::Float32 || want[2]->dtype() != DType::UInt8) {
    why = "scales " + want[1]->describe() + " and zero points " + want[2]->describe() +
          " are not float32 and packed uint8";
    return std::nullopt;
  }
  // Every float32 checkpoint tensor of the weight's shape, either way round, is quantized; the
  // one whose B, scales and zero points all equal the model's bit for bit is the source.
  std::vector<std::pair<std::string, bool>> found;  // name, transposed
  for (const auto& [name, t] : ckpt.tensors()) {
    if (t.dtype() != DType::Float32 || t.rank() != 2) continue;
    for (bool transposed : {true, false}) {
      if (t.dim(0) != (transposed ? N : K) || t.dim(1) != (transposed ? K : N)) continue;
      std::vector<Tensor> out;
      try {
        out = transforms::evaluate_op("reforge", "QuantizeWeight", 1,
                                      {{"bits", ir::int_attr("bits", 4)},
                                       {"block_size", ir::int_attr("block_size", block)},
                                       {"transposed", ir::int_attr("transposed", transposed ? 1 : 0)}},
                                      {&t}, 3);
      } catch (const Error&) {
        continue;  // a tensor that does not quantize (NaN, Inf) is not this weight
      }
      if (same_bytes(out[0], *want[0]) && same_bytes(out[1], *want[1]) && same_bytes(out[2], *want[2]))
        found.emplace_back(name, transposed);
    }
  }
  if (found.size() != 1) {
    why = found.empty() ? "no float32 checkpoint tensor quantizes to it by reforge::QuantizeWeight int4 (block " +
                              std::to_string(block) + ")"
                        : std::to_string(found.size()) + " checkpoint tensors quantize to it";
    return std::nullopt;
  }
  const auto& [name, transposed] = found[0];
  const Tensor& w = *ckpt.find(name);
  std::array<plan::Binding, 3> b;
  for (uint32_t i = 0; i < 3; ++i) {
    b[i].status = plan::Binding::Status::Bound;
    b[i].checkpoint = {{name, w.dtype(), w.shape()}};
    plan::RecipeStep st;
    st.domain = "reforge";
    st.op_type = "QuantizeWeight";
    st.opset = 1;
    st.attrs = {{"bits", ir::int_attr("bits", 4)},
                {"block_size", ir::int_attr("block_size", block)},
                {"transposed", ir::int_attr("transposed", transposed ? 1 : 0)}};
    st.inputs = {{plan::Operand::Kind::Source, 0}};
    st.output = i;
    st.num_outputs = 3;
    b[i].steps = {st};
    static const char* const kPart[] = {"codes", "scales", "zero points"};
    b[i].note = std::string(kPart[i]) + " of reforge::QuantizeWeight int4 (block " + std::to_string(block) + ") of '" +
                name + "'" + (transposed ? "" : " ([K, N])") + ", equal bit for bit";
  }
  return b;
}

}  // namespace reforge::build
