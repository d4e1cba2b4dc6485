// Whole-graph inference (ops/infer_graph.h).
#include "ops/infer_graph.h"

#include <cstdint>

#include "ops/registry.h"

namespace reforge::ops {
namespace {

// Integer tensors of rank 0 or 1 with at most this many elements have their contents followed.
constexpr int64_t kMaxDimsValue = 64;
// Nodes whose inputs are all constants are folded (their kernel run) when the inputs hold at
// most this many elements in all: shape arithmetic on constants, not weight transforms.
constexpr int64_t kMaxFoldElements = 4096;

bool is_shape_int(DType t) { return t == DType::Int64 || t == DType::Int32; }

SymShape dims_of_constant(const Tensor& t) {
  SymShape d;
  d.reserve(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    d.push_back(SymDim(t.as_int64(i)));
  }
  return d;
}

ValueType type_of(const Tensor& t) {
  SymShape s(t.shape().begin(), t.shape().end());
  return ValueType::of(t.dtype(), std::move(s));
}

// True when the concrete tensor `t` is one of the values `v` describes.
bool compatible(const ValueType& v, const Tensor& t) {
  if (v.dtype != DType::Undefined && v.dtype != t.dtype()) return false;
  if (!v.rank_known) return true;
  if (static_cast<int64_t>(v.shape.size()) != t.rank()) return false;
  for (size_t d = 0; d < v.shape.size(); ++d)
    if (v.shape[d].known() && v.shape[d].value() != t.shape()[d]) return false;
  return true;
}

class NodeContext final : public InferContext {
 public:
  NodeContext(const ir::Node& node, GraphTypes& g, int& next_symbol) : node_(node), g_(g), next_symbol_(next_symbol) {}
  const ir::Node& node() const override { return node_; }
  size_t num_inputs() const override { return node_.inputs.size(); }
  bool has_input(size_t i) const override { return i < node_.inputs.size() && !node_.inputs[i].empty(); }
  const ValueType& input_type(size_t i) const override {
    if (!has_input(i)) fail("input " + std::to_string(i) + " is required");
    auto it = g_.types.find(node_.inputs[i]);
    if (it == g_.types.end()) fail("input '" + node_.inputs[i] + "' has no inferred type");
    return it->second;
  }
  const Tensor* input_constant(size_t i) const override {
    if (!has_input(i)) return nullptr;
    auto it = g_.constants.find(node_.inputs[i]);
    return it == g_.constants.end() ? nullptr : &it->second;
  }
  const SymShape* input_dims_value(size_t i) const override {
    if (!has_input(i)) return nullptr;
    auto it = g_.dims_values.find(node_.inputs[i]);
    return it == g_.dims_values.end() ? nullptr : &it->second;
  }
  void set_output(size_t i, ValueType type) override {
    if (i >= node_.outputs.size())
      fail("inference set output " + std::to_string(i) + " of " + std::to_string(node_.outputs.size()));
    if (node_.outputs[i].empty()) return;
    g_.types[node_.outputs[i]] = std::move(type);
  }
  void set_output_dims_value(size_t i, SymShape dims) override {
    if (i >= node_.outputs.size() || node_.outputs[i].empty()) return;
    if (static_cast<int64_t>(dims.size()) > kMaxDimsValue) return;
    g_.dims_values[node_.outputs[i]] = std::move(dims);
  }
  SymDim fresh_dim() override { return SymDim::symbol("unk_" + std::to_string(next_symbol_++)); }
  [[noreturn]] void fail(const std::string& message) const override { ::reforge::fail(node_.label(), ": ", message); }

 private:
  const ir::Node& node_;
  GraphTypes& g_;
  int& next_symbol_;
};

// Records value `name` as a constant when its type is an integer tensor of rank 0 or 1 and its
// contents (dims value) are all known numbers.
void materialize_dims_value(const std::string& name, GraphTypes& g) {
  auto d = g.dims_values.find(name);
  auto t = g.types.find(name);
  if (d == g.dims_values.end() || t == g.types.end()) return;
  const ValueType& vt = t->second;
  if (!is_shape_int(vt.dtype) || !vt.fully_known() || vt.shape.size() > 1) return;
  const int64_t n = vt.shape.empty() ? 1 : vt.shape[0].value();
  if (n != static_cast<int64_t>(d->second.size())) return;
  for (const auto& x : d->second)
    if (!x.known()) return;
  Tensor c = Tensor::empty(vt.dtype, Shape(vt.shape.size(), n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = d->second[static_cast<size_t>(i)].value();
    if (vt.dtype == DType::Int64) {
      c.mutable_data<int64_t>()[i] = v;
    } else {
      if (v < INT32_MIN || v > INT32_MAX) return;
      c.mutable_data<int32_t>()[i] = static_cast<int32_t>(v);
    }
  }
  g.constants[name] = std::move(c);
}

// Runs the node's kernel when every input is a small constant and the op is deterministic.
void try_fold(const ir::Node& node, const OpDef& def, GraphTypes& g) {
  if (!def.kernel || !is_deterministic(node)) return;
  std::vector<const Tensor*> inputs;
  int64_t elements = 0;
  for (const auto& name : node.inputs) {
    if (name.empty()) {
      inputs.push_back(nullptr);
      continue;
    }
    auto it = g.constants.find(name);
    if (it == g.constants.end()) return;
    elements += it->second.numel();
    inputs.push_back(&it->second);
  }
  if (elements > kMaxFoldElements) return;
  KernelContext kc(node, inputs, 1);
  try {
    def.kernel(kc);
  } catch (const Error&) {
    return;  // the inference already checked what it could; a run will report the rest
  }
  for (size_t i = 0; i < node.outputs.size() && i < kc.outputs().size(); ++i) {
    if (node.outputs[i].empty() || !kc.outputs()[i].defined()) continue;
    const Tensor& t = kc.outputs()[i];
    // The kernel is the truth: an inference that contradicts it is a bug of that inference.
    ValueType& inferred = g.types[node.outputs[i]];
    if (!compatible(inferred, t))
      fail(node.label(), ": internal error: inference gives output ", i, " the type ", inferred.str(),
           " but evaluating the node gives ", dtype_name(t.dtype()), shape_str(t.shape()));
    inferred = type_of(t);
    g.constants[node.outputs[i]] = t;
    if (is_shape_int(t.dtype()) && t.rank() <= 1 && t.numel() <= kMaxDimsValue)
      g.dims_values[node.outputs[i]] = dims_of_constant(t);
  }
}

}  // namespace

GraphTypes infer_graph(const ir::Graph& graph, const InferOptions& options) {
  GraphTypes g;
  for (const auto& [name, t] : graph.initializers) {
    if (!t.defined()) continue;
    g.types[name] = type_of(t);
    if (!t.on_host()) continue;  // a weight held in device memory: known by its type only
    g.constants[name] = t;
    if (is_shape_int(t.dtype()) && t.rank() <= 1 && t.numel() <= kMaxDimsValue)
      g.dims_values[name] = dims_of_constant(t);
  }
  int next_symbol = 0;
  for (const auto& in : graph.inputs) {
    const Shape* fixed = nullptr;
    if (options.input_shapes) {
      auto it = options.input_shapes->find(in.name);
      if (it != options.input_shapes->end()) fixed = &it->second;
    }
    const Tensor* value = nullptr;
    if (options.input_values) {
      auto it = options.input_values->find(in.name);
      if (it != options.input_values->end() && it->second.defined()) value = &it->second;
    }
    if (value) {
      g.types[in.name] = type_of(*value);
      g.constants[in.name] = *value;
      if (is_shape_int(value->dtype()) && value->rank() <= 1 && value->numel() <= kMaxDimsValue)
        g.dims_values[in.name] = dims_of_constant(*value);
    } else if (fixed) {
      g.types[in.name] = ValueType::of(in.dtype, SymShape(fixed->begin(), fixed->end()));
    } else if (in.has_shape) {
      SymShape s;
      for (const auto& d : in.shape)
        s.push_back(d.fixed()          ? SymDim(d.value)
                    : d.symbol.empty() ? SymDim::symbol("unk_" + std::to_string(next_symbol++))
                                       : SymDim::symbol(d.symbol));
      g.types[in.name] = ValueType::of(in.dtype, std::move(s));
    } else {
      g.types[in.name] = ValueType::unranked(in.dtype);
    }
  }
  const auto& registry = OpRegistry::global();
  for (size_t idx : graph.topological_order()) {
    const ir::Node& node = graph.nodes[idx];
    const OpDef* def = registry.find(node.domain, node.op_type, node.opset);
    if (!def || !def->infer) {
      if (options.require_all) fail(node.label(), ": no shape inference for ", node.op_type, " at opset ", node.opset);
      for (const auto& o : node.outputs)
        if (!o.empty()) g.types[o] = ValueType::unranked(DType::Undefined);
      if (def) try_fold(node, *def, g);  // small constant inputs still give exact outputs
      continue;
    }
    NodeContext ctx(node, g, next_symbol);
    def->infer(ctx);
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (!node.outputs[i].empty() && !g.types.count(node.outputs[i]))
        ctx.fail("inference gave no type for output " + std::to_string(i) + " ('" + node.outputs[i] + "')");
    try_fold(node, *def, g);
    // A shape value whose every element is known is a constant like any other: nodes reading it
    // (a Cast to float feeding Range, arithmetic on sizes) fold, so that with one input signature
    // fixed every size that does not depend on data comes out as a number.
    for (const auto& o : node.outputs)
      if (!o.empty() && !g.constants.count(o)) materialize_dims_value(o, g);
  }
  return g;
}

}  // namespace reforge::ops
