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
  std::vector<bool> present;
  for (const Tensor* t : inputs) present.push_back(t != nullptr);
  const ir::Node node = recipe_node(domain, op_type, opset, attrs, present, num_outputs);
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

ir::Node recipe_node(const std::string& domain, const std::string& op_type, int opset,
                     const std::map<std::string, ir::Attribute>& attrs, const std::vector<bool>& present,
                     size_t num_outputs) {
  ir::Node node;
  node.op_type = op_type;
  node.domain = domain;
  node.opset = opset;
  node.name = "recipe:" + op_type;
  node.attrs = attrs;
  for (size_t i = 0; i < present.size(); ++i) node.inputs.push_back(present[i] ? "in" + std::to_string(i) : "");
  for (size_t i = 0; i < num_outputs; ++i) node.outputs.push_back("out" + std::to_string(i));
  return node;
}

bool moves_data(const plan::RecipeStep& st) {
  if (st.domain.empty())
    return st.op_type == "Transpose" || st.op_type == "Slice" || st.op_type == "Concat" || st.op_type == "Cast" ||
           st.op_type == "Gather" || st.op_type == "Expand";
  return st.domain == "reforge" && st.op_type == "PackPanels";
}

namespace {

bool is_pack_panels(const plan::RecipeStep& st) { return st.domain == "reforge" && st.op_type == "PackPanels"; }

// A Transpose that swaps the two axes of a matrix (perm [1, 0], or none: reversed axes); whether
// its input has rank 2 is known only when it runs.
bool is_transpose_step(const plan::RecipeStep& st) {
  if (!st.domain.empty() || st.op_type != "Transpose" || st.inputs.size() != 1 || st.output != 0) return false;
  auto perm = st.attrs.find("perm");
  return perm == st.attrs.end() || perm->second.ints == std::vector<int64_t>{1, 0};
}

// PackPanels of the transpose of a matrix: the same step with `transposed` flipped, reading the
// matrix itself.
Tensor pack_transposed(const plan::RecipeStep& st, const Tensor& matrix, int threads) {
  std::map<std::string, ir::Attribute> attrs = st.attrs;
  auto t = attrs.find("transposed");
  const bool was = t != attrs.end() && t->second.i != 0;
  attrs["transposed"] = ir::int_attr("transposed", was ? 0 : 1);
  return std::move(evaluate_op(st.domain, st.op_type, st.opset, attrs, {&matrix}, 1, threads)[0]);
}

}  // namespace

Tensor transpose_2d(const Tensor& t, int threads) {
  if (threads <= 0) threads = omp_get_max_threads();
  REFORGE_CHECK(t.rank() == 2, "transpose_2d: ", t.describe(), " is not a matrix");
  return std::move(evaluate_op("", "Transpose", 13, {{"perm", ir::ints_attr("perm", {1, 0})}}, {&t}, 1, threads)[0]);
}

bool reads_source_transposable(const plan::Recipe& recipe, uint32_t source) {
  auto reads = [&](const plan::Operand& o) { return o.kind == plan::Operand::Kind::Source && o.index == source; };
  if (reads(recipe.result)) return false;
  bool any = false;
  for (const auto& st : recipe.steps)
    for (size_t i = 0; i < st.inputs.size(); ++i) {
      if (!reads(st.inputs[i])) continue;
      if (!((is_pack_panels(st) || is_transpose_step(st)) && i == 0 && st.inputs.size() == 1)) return false;
      any = true;
    }
  return any;
}

bool is_transpose_binding(const plan::Binding& b, const Shape& shape) {
  if (b.status != plan::Binding::Status::Bound || b.checkpoint.size() != 1 || b.steps.size() != 1) return false;
  const plan::RecipeStep& st = b.steps[0];
  const Shape& in = b.checkpoint[0].shape;
  return is_transpose_step(st) && st.inputs[0].kind == plan::Operand::Kind::Source && st.inputs[0].index == 0 &&
         in.size() == 2 && shape == Shape{in[1], in[0]};
}

Tensor replay_recipe(const plan::Recipe& recipe, const std::vector<Tensor>& sources,
                     const std::vector<Tensor>& literals, int threads, const std::vector<Tensor>* transposed_sources) {
  if (threads <= 0) threads = omp_get_max_threads();
  const size_t n = recipe.steps.size();
  std::vector<Tensor> steps(n);
  // Sources given transposed and read other than by PackPanels: made once, on first read.
  std::map<uint32_t, Tensor> made;
  auto given_transposed = [&](const plan::Operand& o) -> const Tensor* {
    if (o.kind != plan::Operand::Kind::Source || !transposed_sources || o.index >= transposed_sources->size() ||
        !(*transposed_sources)[o.index].defined())
      return nullptr;
    return &(*transposed_sources)[o.index];
  };
  auto operand = [&](const plan::Operand& o) -> const Tensor& {
    switch (o.kind) {
      case plan::Operand::Kind::Source:
        if (const Tensor* t = given_transposed(o)) {
          auto it = made.find(o.index);
          if (it == made.end()) it = made.emplace(o.index, transpose_2d(*t, threads)).first;
          return it->second;
        }
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
  // Transpose steps read once, by a PackPanels step as its weight, and not the result: packed
  // from their input instead (`folded`: the input, once the Transpose's turn came).
  std::vector<int> readers(n, 0);
  for (const auto& st : recipe.steps)
    for (const auto& o : st.inputs)
      if (o.kind == plan::Operand::Kind::Step && o.index < n) ++readers[o.index];
  if (recipe.result.kind == plan::Operand::Kind::Step && recipe.result.index < n) ++readers[recipe.result.index];
  std::vector<bool> packed_by_reader(n, false);
  for (const auto& st : recipe.steps)
    if (is_pack_panels(st) && st.inputs.size() == 1 && st.inputs[0].kind == plan::Operand::Kind::Step &&
        st.inputs[0].index < n)
      packed_by_reader[st.inputs[0].index] = true;
  std::vector<const Tensor*> folded(n, nullptr);
  for (size_t s = 0; s < n; ++s) {
    const plan::RecipeStep& st = recipe.steps[s];
    if (is_transpose_step(st) && readers[s] == 1 && packed_by_reader[s]) {
      const Tensor* in = given_transposed(st.inputs[0]) ? nullptr : &operand(st.inputs[0]);
      if (in && in->rank() == 2) {
        folded[s] = in;
        continue;
      }
    }
    if (is_transpose_step(st)) {
      if (const Tensor* given = given_transposed(st.inputs[0]); given && given->rank() == 2) {
        steps[s] = *given;  // the transpose of the source given as its transpose
        continue;
      }
    }
    if (is_pack_panels(st) && st.inputs.size() == 1) {
      const plan::Operand& w = st.inputs[0];
      const Tensor* matrix = w.kind == plan::Operand::Kind::Step && w.index < n ? folded[w.index] : given_transposed(w);
      if (matrix && matrix->rank() == 2) {
        steps[s] = pack_transposed(st, *matrix, threads);
        continue;
      }
    }
    std::vector<const Tensor*> ins;
    for (const auto& o : st.inputs) ins.push_back(&operand(o));
    auto outs =
        evaluate_op(st.domain, st.op_type, st.opset, st.attrs, ins, step_outputs(st), moves_data(st) ? threads : 1);
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
    steps.push_back(std::move(evaluate_op(st.domain, st.op_type, st.opset, st.attrs, ins, step_outputs(st),
                                          moves_data(st) ? threads : 1)[st.output]));
  }
  const Tensor& r = steps.empty() ? inputs[0] : steps.back();
  if (r.dtype() != dtype || r.numel() != shape_numel(shape))
    fail("binding of checkpoint tensor '", b.checkpoint[0].name, "' gives ", r.describe(), ", the source is ",
         dtype_name(dtype), shape_str(shape));
  return r.reshaped(shape);
}

}  // namespace reforge::transforms
