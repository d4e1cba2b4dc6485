#include "transforms/recipe.h"

#include <omp.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "backends/backend.h"
#include "ops/registry.h"

namespace reforge::transforms {

std::vector<Tensor> evaluate_op(const std::string& domain, const std::string& op_type, int opset,
                                const std::map<std::string, ir::Attribute>& attrs,
                                const std::vector<const Tensor*>& inputs, size_t num_outputs, int threads) {
  ir::Node node;
  node.op_type = op_type;
  node.domain = domain;
  node.opset = opset;
  node.name = "recipe:" + op_type;
  node.attrs = attrs;
  for (size_t i = 0; i < inputs.size(); ++i) node.inputs.push_back(inputs[i] ? "in" + std::to_string(i) : "");
  for (size_t i = 0; i < num_outputs; ++i) node.outputs.push_back("out" + std::to_string(i));
  // The host's kernel (the CPU backend's, else the op's reference), whatever backend the plan
  // targets: recipes transform weights on the host, and a replay at refit must give the bytes
  // the build recorded.
  if (!ops::OpRegistry::global().find(domain, op_type, opset))
    fail("operator ", domain.empty() ? "" : domain + "::", op_type, " (opset ", opset, ") is not available");
  const backends::Resolved kernel = backends::host_kernel(node);
  ops::KernelContext ctx(node, inputs, threads > 1 ? threads : 1);
  (*kernel.kernel)(ctx);
  for (size_t i = 0; i < num_outputs; ++i)
    if (!ctx.outputs()[i].defined()) fail(node.label(), ": kernel did not produce output ", i);
  return std::move(ctx.outputs());
}

namespace {

// Steps whose bytes do not depend on the thread count: pure data movement (every output element
// a copy of one input element, or zero padding), the element-wise Cast, and the CPU's panel
// packing. Arithmetic steps (BN folding, quantization, folded expressions) stay on one thread.
bool moves_data(const plan::RecipeStep& st) {
  if (st.domain.empty())
    return st.op_type == "Transpose" || st.op_type == "Slice" || st.op_type == "Concat" || st.op_type == "Cast" ||
           st.op_type == "Gather" || st.op_type == "Expand";
  return st.domain == "reforge" && st.op_type == "PackPanels";
}

}  // namespace

Tensor replay_recipe(const plan::Recipe& recipe, const std::vector<Tensor>& sources,
                     const std::vector<Tensor>& literals, int threads) {
  if (threads <= 0) threads = omp_get_max_threads();
  std::vector<Tensor> steps(recipe.steps.size());
  auto operand = [&](const plan::Operand& o) -> const Tensor& {
    switch (o.kind) {
      case plan::Operand::Kind::Source:
        REFORGE_ASSERT(o.index < sources.size() && sources[o.index].defined());
        return sources[o.index];
      case plan::Operand::Kind::Literal:
        REFORGE_ASSERT(o.index < literals.size());
        return literals[o.index];
      case plan::Operand::Kind::Step:
        REFORGE_ASSERT(o.index < steps.size() && steps[o.index].defined());
        return steps[o.index];
    }
    fail("internal error: bad operand");
  };
  for (size_t s = 0; s < recipe.steps.size(); ++s) {
    const plan::RecipeStep& st = recipe.steps[s];
    std::vector<const Tensor*> ins;
    for (const auto& o : st.inputs) ins.push_back(&operand(o));
    auto outs = evaluate_op(st.domain, st.op_type, st.opset, st.attrs, ins,
                            std::max<size_t>(st.num_outputs, st.output + 1), moves_data(st) ? threads : 1);
    steps[s] = std::move(outs[st.output]);
  }
  return operand(recipe.result);
}

uint64_t hash_tensor(const Tensor& t) { return XXH3_64bits(t.raw(), t.nbytes()); }

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

Tensor apply_binding(const plan::Binding& b, const std::vector<Tensor>& inputs, DType dtype, const Shape& shape,
                     int threads) {
  if (threads <= 0) threads = omp_get_max_threads();
  if (b.status == plan::Binding::Status::Constant) {
    if (b.literals.empty()) fail("binding: a constant source has no value");
    const Tensor& v = b.literals[0];
    if (v.dtype() != dtype || v.numel() != shape_numel(shape))
      fail("binding: the constant is ", v.describe(), ", the source is ", dtype_name(dtype), shape_str(shape));
    return v.reshaped(shape);
  }
  REFORGE_ASSERT(inputs.size() == b.checkpoint.size() && !inputs.empty());
  std::vector<Tensor> steps;
  auto operand = [&](const plan::Operand& o) -> const Tensor* {
    if (o.kind == plan::Operand::Kind::Source && o.index < inputs.size()) return &inputs[o.index];
    if (o.kind == plan::Operand::Kind::Step && o.index < steps.size()) return &steps[o.index];
    if (o.kind == plan::Operand::Kind::Literal && o.index < b.literals.size()) return &b.literals[o.index];
    fail("binding: bad operand ", o.index);
  };
  for (const auto& st : b.steps) {
    std::vector<const Tensor*> ins;
    for (const auto& o : st.inputs) ins.push_back(operand(o));
    steps.push_back(std::move(evaluate_op(st.domain, st.op_type, st.opset, st.attrs, ins,
                                          std::max<size_t>(st.num_outputs, st.output + 1),
                                          moves_data(st) ? threads : 1)[st.output]));
  }
  const Tensor& r = steps.empty() ? inputs[0] : steps.back();
  if (r.dtype() != dtype || r.numel() != shape_numel(shape))
    fail("binding of checkpoint tensor '", b.checkpoint[0].name, "' gives ", r.describe(), ", the source is ",
         dtype_name(dtype), shape_str(shape));
  return r.reshaped(shape);
}

}  // namespace reforge::transforms
