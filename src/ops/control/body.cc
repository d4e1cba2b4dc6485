#include "ops/control/body.h"

#include <cstring>
#include <unordered_map>
#include <utility>

#include "ir/subgraph.h"

namespace reforge::ops::control {

const ir::Graph& subgraph(const ir::Node& node, const std::string& name) {
  const ir::Attribute* a = node.attr(name);
  if (!a || a->type != ir::AttrType::Graph || !a->g) fail(node.label(), ": graph attribute '", name, "' is required");
  return *a->g;
}

std::vector<const Tensor*> captured_inputs(const KernelContext& ctx, const std::string& name) {
  const ir::Node& node = ctx.node();
  size_t next = ir::num_declared_inputs(node);
  for (const auto& [key, a] : node.attrs) {
    if (a.type != ir::AttrType::Graph || !a.g) continue;
    if (key == name) {
      std::vector<const Tensor*> out;
      for (size_t c = 0; c < a.g->captures.size(); ++c, ++next) {
        if (!ctx.has_input(next))
          fail(node.label(), ": captured input ", next, " ('", a.g->captures[c], "' of '", name, "') is absent");
        out.push_back(&ctx.input(next));
      }
      return out;
    }
    next += a.g->captures.size();
  }
  fail(node.label(), ": graph attribute '", name, "' is required");
}

std::string why_body_unsupported(const ir::Graph& body) {
  std::string out;
  for (const auto& n : body.nodes) {
    const std::string why = OpRegistry::global().why_unsupported(n);
    const OpDef* def = OpRegistry::global().find(n.domain, n.op_type, n.opset);
    std::string reason = !why.empty() ? why : (def && !def->kernel ? "no reference kernel" : "");
    if (reason.empty()) continue;
    if (!out.empty()) out += "; ";
    out += "in subgraph '" + body.name + "': " + n.label() + ": " + reason;
  }
  return out;
}

bool body_draws_random(const ir::Graph& body) {
  for (const auto& n : body.nodes)
    if (!is_deterministic(n)) return true;
  return false;
}

Body::Body(const ir::Graph& graph, std::string where, int threads)
    : graph_(graph), where_(std::move(where)), threads_(threads) {
  try {
    for (size_t idx : graph.topological_order()) {
      const ir::Node& n = graph.nodes[idx];
      const std::string why = OpRegistry::global().why_unsupported(n);
      if (!why.empty()) fail(n.label(), ": ", why);
      const OpDef* def = OpRegistry::global().find(n.domain, n.op_type, n.opset);
      if (!def || !def->kernel) fail(n.label(), ": no reference kernel");
      steps_.push_back({&n, def});
    }
  } catch (Error& e) {
    throw e.with_context("in " + where_);
  }
}

std::vector<Tensor> Body::run(const std::vector<const Tensor*>& inputs,
                              const std::vector<const Tensor*>& captured) const {
  if (inputs.size() != graph_.inputs.size())
    fail(where_, ": the subgraph has ", graph_.inputs.size(), " inputs, the node gives it ", inputs.size());
  if (captured.size() != graph_.captures.size())
    fail(where_, ": the subgraph captures ", graph_.captures.size(), " values, the node gives it ", captured.size());
  std::unordered_map<std::string, Tensor> values;
  for (size_t i = 0; i < captured.size(); ++i) values[graph_.captures[i]] = *captured[i];
  for (const auto& [name, t] : graph_.initializers) values[name] = t;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i]) values[graph_.inputs[i].name] = *inputs[i];
  for (const auto& step : steps_) {
    const ir::Node& n = *step.node;
    std::vector<const Tensor*> ins;
    ins.reserve(n.inputs.size());
    for (const auto& name : n.inputs) {
      if (name.empty()) {
        ins.push_back(nullptr);
        continue;
      }
      auto it = values.find(name);
      if (it == values.end()) fail(where_, ": ", n.label(), ": input '", name, "' has no value");
      ins.push_back(&it->second);
    }
    KernelContext kc(n, std::move(ins), threads_);
    try {
      step.def->kernel(kc);
    } catch (Error& e) {
      throw e.with_context("in " + where_);
    }
    for (size_t i = 0; i < n.outputs.size() && i < kc.outputs().size(); ++i)
      if (!n.outputs[i].empty()) values[n.outputs[i]] = std::move(kc.outputs()[i]);
  }
  std::vector<Tensor> out;
  out.reserve(graph_.outputs.size());
  for (const auto& o : graph_.outputs) {
    auto it = values.find(o.name);
    if (it == values.end() || !it->second.defined()) fail(where_, ": subgraph output '", o.name, "' was not produced");
    out.push_back(it->second);
  }
  return out;
}

namespace {

// (outer, count, inner bytes) of `shape` around `axis`.
void split_at(const Shape& shape, int64_t axis, size_t esize, int64_t& outer, int64_t& count, size_t& inner) {
  outer = 1;
  inner = esize;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[static_cast<size_t>(d)];
  count = shape[static_cast<size_t>(axis)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= static_cast<size_t>(shape[d]);
}

}  // namespace

Tensor slice_along(const Tensor& t, int64_t axis, int64_t index) {
  REFORGE_CHECK(axis >= 0 && axis < t.rank() && index >= 0 && index < t.dim(axis), "internal error: slice ", index,
                " of axis ", axis, " of ", t.describe());
  int64_t outer, count;
  size_t inner;
  split_at(t.shape(), axis, dtype_size(t.dtype()), outer, count, inner);
  Shape s = t.shape();
  s.erase(s.begin() + axis);
  Tensor out = Tensor::uninitialized(t.dtype(), s);
  const auto* src = static_cast<const unsigned char*>(t.raw());
  auto* dst = static_cast<unsigned char*>(out.mutable_raw());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + static_cast<size_t>(o) * inner, src + (static_cast<size_t>(o * count + index)) * inner, inner);
  return out;
}

Tensor stack_along(const std::vector<Tensor>& parts, int64_t axis, bool reverse, const std::string& what) {
  REFORGE_CHECK(!parts.empty(), "internal error: stacking no parts");
  const Tensor& first = parts.front();
  for (size_t i = 1; i < parts.size(); ++i)
    if (parts[i].dtype() != first.dtype() || parts[i].shape() != first.shape())
      fail(what, ": iteration ", i, " gives ", parts[i].describe(), ", iteration 0 gave ", first.describe(),
           " (scan outputs must keep one shape)");
  if (axis < 0 || axis > first.rank()) fail(what, ": axis ", axis, " is out of range for ", first.rank() + 1, " dims");
  Shape s = first.shape();
  s.insert(s.begin() + axis, static_cast<int64_t>(parts.size()));
  Tensor out = Tensor::uninitialized(first.dtype(), s);
  int64_t outer, count;
  size_t inner;
  split_at(s, axis, dtype_size(first.dtype()), outer, count, inner);
  auto* dst = static_cast<unsigned char*>(out.mutable_raw());
  for (int64_t k = 0; k < count; ++k) {
    const Tensor& p = parts[static_cast<size_t>(reverse ? count - 1 - k : k)];
    const auto* src = static_cast<const unsigned char*>(p.raw());
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + static_cast<size_t>(o * count + k) * inner, src + static_cast<size_t>(o) * inner, inner);
  }
  return out;
}

bool scalar_condition(const Tensor& t, const std::string& what) {
  if (t.numel() != 1) fail(what, " must have one element, got ", t.describe());
  return t.as_double(0) != 0;
}

}  // namespace reforge::ops::control
