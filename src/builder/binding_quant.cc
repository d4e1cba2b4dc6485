#include "builder/binding_quant.h"

#include <array>
#include <cstring>
#include <vector>

#include "ops/reforge/quant_weight.h"
#include "transforms/recipe.h"

namespace reforge::build {

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::map<std::string, ir::Attribute> quantize_attrs(int64_t block, bool transposed) {
  return {{"bits", ir::int_attr("bits", 4)},
          {"block_size", ir::int_attr("block_size", block)},
          {"transposed", ir::int_attr("transposed", transposed ? 1 : 0)}};
}

// A weight quantized in 4-bit blocks: K x N, the block, and how the model lays the three out.
struct Int4Weight {
  int64_t K = 0, N = 0, block = 0;
  bool unpacked = false;                // DequantizeLinear's uint4 layout (Int4Unpack), else MatMulNBits'
  bool unpack_t = false;                // unpacked: codes [N, K] (axis 1)
  std::array<const Tensor*, 3> want{};  // codes, scales, zero points as the model holds them
  std::array<size_t, 3> slots{};        // their input slots
};

// The model's values computed from checkpoint tensor `w` ([N, K] when `transposed`).
std::vector<Tensor> derive(const Int4Weight& q, const Tensor& w, bool transposed) {
  std::vector<Tensor> out =
      transforms::evaluate_op("reforge", "QuantizeWeight", 1, quantize_attrs(q.block, transposed), {&w}, 3);
  if (!q.unpacked) return out;
  return transforms::evaluate_op(
      "reforge", "Int4Unpack", 1,
      {{"K", ir::int_attr("K", q.K)}, {"transposed", ir::int_attr("transposed", q.unpack_t)}},
      {&out[0], &out[1], &out[2]}, 3);
}

std::optional<std::map<size_t, plan::Binding>> bind_int4(const Int4Weight& q, const refit::Checkpoint& ckpt,
                                                         std::string& why) {
  // Every float32 checkpoint tensor of the weight's shape, either way round, is quantized; the one
  // that gives all three of the model's values bit for bit is the source.
  std::vector<std::pair<std::string, bool>> found;  // name, transposed ([N, K])
  for (const auto& [name, t] : ckpt.tensors()) {
    if (t.dtype() != DType::Float32 || t.rank() != 2) continue;
    for (bool transposed : {true, false}) {
      if (t.dim(0) != (transposed ? q.N : q.K) || t.dim(1) != (transposed ? q.K : q.N)) continue;
      std::vector<Tensor> out;
      try {
        out = derive(q, t, transposed);
      } catch (const Error&) {
        continue;  // a tensor that does not quantize (NaN, Inf) is not this weight
      }
      if (same_bytes(out[0], *q.want[0]) && same_bytes(out[1], *q.want[1]) && same_bytes(out[2], *q.want[2]))
        found.emplace_back(name, transposed);
    }
  }
  if (found.size() != 1) {
    why = found.empty() ? "no float32 checkpoint tensor quantizes to it by reforge::QuantizeWeight int4 (block " +
                              std::to_string(q.block) + ")"
                        : std::to_string(found.size()) + " checkpoint tensors quantize to it";
    return std::nullopt;
  }
  const auto& [name, transposed] = found[0];
  const Tensor& w = *ckpt.find(name);
  std::map<size_t, plan::Binding> bindings;
  static const char* const kPart[] = {"codes", "scales", "zero points"};
  for (uint32_t i = 0; i < 3; ++i) {
    plan::Binding& b = bindings[q.slots[i]];
    b.status = plan::Binding::Status::Bound;
    b.checkpoint = {{name, w.dtype(), w.shape()}};
    // QuantizeWeight's outputs 0..2 as steps 0..2 (one output per step), then Int4Unpack of them.
    for (uint32_t k = 0; k < (q.unpacked ? 3u : 1u); ++k) {
      plan::RecipeStep st;
      st.domain = "reforge";
      st.op_type = "QuantizeWeight";
      st.opset = 1;
      st.attrs = quantize_attrs(q.block, transposed);
      st.inputs = {{plan::Operand::Kind::Source, 0}};
      st.output = q.unpacked ? k : i;
      st.num_outputs = 3;
      b.steps.push_back(std::move(st));
    }
    if (q.unpacked) {
      plan::RecipeStep st;
      st.domain = "reforge";
      st.op_type = "Int4Unpack";
      st.opset = 1;
      st.attrs = {{"K", ir::int_attr("K", q.K)}, {"transposed", ir::int_attr("transposed", q.unpack_t)}};
      st.inputs = {{plan::Operand::Kind::Step, 0}, {plan::Operand::Kind::Step, 1}, {plan::Operand::Kind::Step, 2}};
      st.output = i;
      st.num_outputs = 3;
      b.steps.push_back(std::move(st));
    }
    b.note = std::string(kPart[i]) + " of reforge::QuantizeWeight int4 (block " + std::to_string(q.block) + ") of '" +
             name + "'" + (transposed ? "" : " ([K, N])") + (q.unpacked ? ", unpacked" : "") + ", equal bit for bit";
  }
  return bindings;
}

}  // namespace

std::optional<std::map<size_t, plan::Binding>> quantized_bindings(const ir::Graph& g, const ir::Node& n,
                                                                  const refit::Checkpoint& ckpt, std::string& why) {
  why.clear();
  auto init = [&](size_t slot) -> const Tensor* {
    if (n.inputs.size() <= slot || n.inputs[slot].empty()) return nullptr;
    auto it = g.initializers.find(n.inputs[slot]);
    return it == g.initializers.end() ? nullptr : &it->second;
  };
  Int4Weight q;
  if (n.domain == "com.microsoft" && n.op_type == "MatMulNBits") {
    q.K = n.attr_int("K", 0);
    q.N = n.attr_int("N", 0);
    q.block = n.attr_int("block_size", 0);
    if (n.attr_int("bits", 4) != 4 || !ops::quant::valid_block_size(q.block) || q.K <= 0 || q.N <= 0) {
      why = "MatMulNBits with bits " + std::to_string(n.attr_int("bits", 4)) + " and block_size " +
            std::to_string(q.block) + " is not the layout reforge::QuantizeWeight int4 writes";
      return std::nullopt;
    }
    if (!init(3) || (n.inputs.size() > 4 && !n.inputs[4].empty())) {
      why = "only MatMulNBits with zero points and without g_idx (ONNX Runtime's asymmetric quantizer) re-derives";
      return std::nullopt;
    }
    q.slots = {1, 2, 3};
  } else if (n.domain.empty() && n.op_type == "DequantizeLinear") {
    const Tensor* codes = init(0);
    const Tensor* zp = init(2);
    const int64_t block = n.attr_int("block_size", 0);
    if (!codes || codes->dtype() != DType::UInt4 || codes->rank() != 2 || !zp || zp->dtype() != DType::UInt4 ||
        !ops::quant::valid_block_size(block)) {
      why =
          "only uint4 codes with uint4 zero points in blocks of a power of two >= 16 (ONNX Runtime's asymmetric "
          "4-bit quantizer in QDQ format) re-derive";
      return std::nullopt;
    }
    int64_t axis = n.attr_int("axis", 1);
    if (axis < 0) axis += 2;
    if (axis != 0 && axis != 1) return std::nullopt;
    q.unpacked = true;
    q.unpack_t = axis == 1;  // blocks run along K: K is the axis
    q.K = codes->dim(axis);
    q.N = codes->dim(1 - axis);
    q.block = block;
    q.slots = {0, 1, 2};
  } else {
    return std::nullopt;
  }
  for (size_t i = 0; i < 3; ++i) {
    q.want[i] = init(q.slots[i]);
    if (!q.want[i]) return std::nullopt;
  }
  if (q.want[1]->dtype() != DType::Float32) {
    why = "scales " + q.want[1]->describe() + " are not float32";
    return std::nullopt;
  }
  return bind_int4(q, ckpt, why);
}

}  // namespace reforge::build
