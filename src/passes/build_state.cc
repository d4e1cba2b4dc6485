#include "passes/build_state.h"

#include <algorithm>

#include "core/file_pages.h"
#include "transforms/recipe.h"

namespace reforge::passes {

std::string BuildState::fresh_name(const std::string& base) {
  for (;;) {
    std::string n = base + "#" + std::to_string(next_id++);
    if (!consts.count(n)) {
      bool used = false;
      for (const auto& node : graph.nodes)
        for (const auto& o : node.outputs) used |= o == n;
      if (!used) return n;
    }
  }
}

namespace {

// Appends `v`'s recipe steps to `r` and returns the operand for `v` inside `r`.
plan::Operand splice(BuildState& s, plan::Recipe& r, const ConstValue& v) {
  if (v.kind != plan::WeightKind::Derived) {
    s.literals.push_back(v.value);
    return {plan::Operand::Kind::Literal, static_cast<uint32_t>(s.literals.size() - 1)};
  }
  uint32_t offset = static_cast<uint32_t>(r.steps.size());
  for (plan::RecipeStep st : v.recipe.steps) {
    for (auto& o : st.inputs)
      if (o.kind == plan::Operand::Kind::Step) o.index += offset;
    r.steps.push_back(std::move(st));
  }
  plan::Operand res = v.recipe.result;
  if (res.kind == plan::Operand::Kind::Step) res.index += offset;
  return res;
}

}  // namespace

std::vector<ConstValue> BuildState::fold_all(const std::string& domain, const std::string& op_type, int opset,
                                             const std::map<std::string, ir::Attribute>& attrs,
                                             const std::vector<std::string>& inputs, size_t num_outputs) {
  std::vector<const Tensor*> ins;
  bool any_derived = false, all_literal = true;
  for (const auto& name : inputs) {
    const ConstValue& c = consts.at(name);
    ins.push_back(&c.value);
    any_derived |= c.kind == plan::WeightKind::Derived;
    all_literal &= c.kind == plan::WeightKind::Literal;
  }
  std::vector<Tensor> outs = transforms::evaluate_op(domain, op_type, opset, attrs, ins, num_outputs);
  std::vector<ConstValue> result(num_outputs);
  for (size_t k = 0; k < num_outputs; ++k) {
    ConstValue& cv = result[k];
    cv.value = std::move(outs[k]);
    cv.kind = any_derived   ? plan::WeightKind::Derived
              : all_literal ? plan::WeightKind::Literal
                            : plan::WeightKind::Baked;
    if (!any_derived) continue;
    plan::RecipeStep step;
    step.domain = domain;
    step.op_type = op_type;
    step.opset = opset;
    step.attrs = attrs;
    step.output = static_cast<uint32_t>(k);
    step.num_outputs = static_cast<uint32_t>(num_outputs);
    for (const auto& name : inputs) {
      const ConstValue& c = consts.at(name);
      step.inputs.push_back(splice(*this, cv.recipe, c));
      cv.sources.insert(c.sources.begin(), c.sources.end());
    }
    cv.recipe.steps.push_back(std::move(step));
    cv.recipe.result = {plan::Operand::Kind::Step, static_cast<uint32_t>(cv.recipe.steps.size() - 1)};
  }
  return result;
}

ConstValue BuildState::fold(const std::string& domain, const std::string& op_type, int opset,
                            const std::map<std::string, ir::Attribute>& attrs, const std::vector<std::string>& inputs,
                            size_t num_outputs, size_t output) {
  return std::move(fold_all(domain, op_type, opset, attrs, inputs, num_outputs)[output]);
}

std::map<std::string, int> BuildState::use_counts() const {
  std::map<std::string, int> uses;
  for (const auto& n : graph.nodes)
    for (const auto& i : n.inputs)
      if (!i.empty()) ++uses[i];
  for (const auto& o : graph.outputs) ++uses[o.name];
  return uses;
}

void BuildState::release_replaced(const std::string& value, const std::vector<std::string>& made) {
  auto it = consts.find(value);
  if (it == consts.end()) return;
  // The source whose own value this is: its key is the constant's name until the builder renames.
  uint32_t id = 0;
  while (id < sources.size() && sources[id].key != value) ++id;
  if (id == sources.size()) return;  // not a source's own value (a literal, or made by a pass)
  consts.erase(it);
  for (const auto& [name, cv] : consts)
    if (std::find(made.begin(), made.end(), name) == made.end() && cv.sources.count(id))
      return;  // another constant's recipe still reads it
  for (const std::string& m : made) verify_recipe(m, consts.at(m));
  // A caller that keeps the imported model (a refit's verify rebuild, a build bound to a
  // checkpoint) keeps its mappings alive: the pages of a memory-mapped source go now, not with
  // the model.
  const Tensor& v = source_values[id];
  if (v.defined()) release_file_pages(v.raw(), v.nbytes());
  source_values[id] = Tensor();
}

void BuildState::verify_recipe(const std::string& name, ConstValue& cv) const {
  if (cv.kind != plan::WeightKind::Derived || cv.verified) return;
  if (!transforms::bit_equal(transforms::replay_recipe(cv.recipe, source_values, literals), cv.value))
    fail("build verification failed: replaying the recipe of engine weight '", name,
         "' does not reproduce it bit for bit (this is a bug in a pass)");
  cv.verified = true;
}

const std::vector<Pass>& default_passes() {
  static const std::vector<Pass> passes = {
      {"fuse-dequantize-matmul", false, fuse_dequantize_matmul, {{"reforge", "MatMulQuant", 1}}},
      {"constant-folding", false, constant_folding},
      {"fold-batchnorm-into-conv", false, fold_batchnorm_into_conv},
      {"fuse-layer-norm", false, fuse_layer_norm, {{"", "LayerNormalization", 17}}},
      {"fuse-rms-norm", false, fuse_rms_norm, {{"reforge", "RmsNorm", 1}}},
      {"fuse-rms-norm-cast", false, fuse_rms_norm_cast, {{"", "RMSNormalization", 23}}},
      {"fuse-add-rms-norm", false, fuse_add_rms_norm, {{"reforge", "AddRmsNorm", 1}}},
      {"fuse-gelu", false, fuse_gelu, {{"reforge", "Gelu", 1}}},
      {"fuse-silu", false, fuse_silu, {{"reforge", "Silu", 1}, {"reforge", "SiluMul", 1}}},
      {"fuse-rotary", false, fuse_rotary, {{"reforge", "Rotary", 1}}},
      {"fuse-attention", false, fuse_attention, {{"reforge", "Attention", 1}}},
      {"fuse-conv-activation", false, fuse_conv_activation, {{"reforge", "FusedConv", 1}}},
      {"conv-channels-last", false, conv_channels_last, {{"reforge", "FusedConv", 1}, {"reforge", "MaxPool", 1}}},
      {"conv-residual-inplace", false, conv_residual_inplace, {{"reforge", "FusedConv", 1}}},
      {"fuse-matmul-add", false, fuse_matmul_add, {{"reforge", "MatMulAdd", 1}}},
      {"linear-weights-precision", false, linear_weights_precision, {{"reforge", "MatMulAdd", 1}}},
      {"linear-weights-quantize", false, linear_weights_quantize, {{"reforge", "MatMulQuant", 1}}},
      {"linear-weights-packing",
       false,
       linear_weights_packing,
       {{"reforge", "PackPanels", 1}, {"reforge", "MatMulAddPacked", 1}}},
      {"group-matmuls", false, group_matmuls, {{"reforge", "MatMulGroup", 1}}},
      {"transpose-linear-weights", false, transpose_linear_weights, {{"reforge", "MatMulGroup", 1}}},
      {"eliminate-dead-code", false, eliminate_dead_code},
  };
  return passes;
}

}  // namespace reforge::passes
