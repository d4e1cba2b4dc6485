// Shape and type inference of the control-flow family: a subgraph is inferred as a graph of its
// own (ops/infer_graph.h) whose inputs have the types the node gives them and whose captures are
// inputs typed like the node's captured inputs (constants stay constants). The outputs take the
// subgraph's inferred types; a size the subgraph names with a symbol of its own, a size that
// differs between iterations or branches, and a count of iterations that depends on data become
// fresh symbols of the outer graph.
#include <map>
#include <string>
#include <vector>

#include "ir/subgraph.h"
#include "ops/control/body.h"
#include "ops/infer_graph.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

ir::ValueInfo info_of(const std::string& name, const ValueType& t) {
  ir::ValueInfo v;
  v.name = name;
  v.dtype = t.dtype;
  v.has_shape = t.rank_known;
  for (const auto& d : t.shape) {
    ir::Dim dim;
    if (d.known())
      dim.value = d.value();
    else
      dim.symbol = d.symbol();
    v.shape.push_back(dim);
  }
  return v;
}

// Infers subgraph `name` of the node with its inputs of types `inputs`; returns the types of its
// outputs with every symbol that is not one of the outer graph's replaced by a fresh one.
std::vector<ValueType> infer_body(InferContext& ctx, const std::string& name, const std::vector<ValueType>& inputs) {
  const ir::Node& node = ctx.node();
  const ir::Graph& body = control::subgraph(node, name);
  if (inputs.size() != body.inputs.size())
    ctx.fail(name + " has " + std::to_string(body.inputs.size()) + " inputs, the node gives it " +
             std::to_string(inputs.size()));
  ir::Graph g = body;
  g.captures.clear();
  std::map<std::string, Tensor> constants;
  std::map<std::string, bool> outer_symbols;
  auto note_symbols = [&](const ValueType& t) {
    for (const auto& d : t.shape)
      if (!d.known()) outer_symbols[d.symbol()] = true;
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    ir::ValueInfo declared = body.inputs[i];
    g.inputs[i] = info_of(declared.name, inputs[i]);
    if (inputs[i].dtype == DType::Undefined) g.inputs[i].dtype = declared.dtype;
    note_symbols(inputs[i]);
  }
  // The captured inputs of this subgraph: after the declared inputs, in attribute order.
  size_t next = ir::num_declared_inputs(node);
  for (const auto& [key, a] : node.attrs) {
    if (a.type != ir::AttrType::Graph || !a.g) continue;
    if (key != name) {
      next += a.g->captures.size();
      continue;
    }
    for (size_t c = 0; c < body.captures.size(); ++c, ++next) {
      const ValueType& t = ctx.input_type(next);
      note_symbols(t);
      g.inputs.push_back(info_of(body.captures[c], t));
      if (const Tensor* k = ctx.input_constant(next)) constants[body.captures[c]] = *k;
    }
    break;
  }
  InferOptions options;
  options.input_values = &constants;
  GraphTypes types;
  try {
    types = infer_graph(g, options);
  } catch (Error& e) {
    throw e.with_context("while inferring " + name + " of " + node.label());
  }
  std::map<std::string, SymDim> renamed;
  std::vector<ValueType> out;
  for (const auto& o : body.outputs) {
    const ValueType* t = types.find(o.name);
    ValueType v = t ? *t : ValueType::unranked(o.dtype);
    if (v.dtype == DType::Undefined) v.dtype = o.dtype;
    for (auto& d : v.shape) {
      if (d.known() || outer_symbols.count(d.symbol())) continue;
      auto it = renamed.find(d.symbol());
      if (it == renamed.end()) it = renamed.emplace(d.symbol(), ctx.fresh_dim()).first;
      d = it->second;
    }
    out.push_back(std::move(v));
  }
  return out;
}

// The type of a value that is `a` on one path and `b` on another.
ValueType merge(InferContext& ctx, const ValueType& a, const ValueType& b) {
  ValueType v;
  v.dtype = a.dtype != DType::Undefined ? a.dtype : b.dtype;
  if (!a.rank_known || !b.rank_known || a.shape.size() != b.shape.size()) return ValueType::unranked(v.dtype);
  v.rank_known = true;
  for (size_t d = 0; d < a.shape.size(); ++d)
    v.shape.push_back(a.shape[d] == b.shape[d] ? a.shape[d] : ctx.fresh_dim());
  return v;
}

ValueType with_axis(const ValueType& t, int64_t axis, SymDim size) {
  if (!t.rank_known) return t;
  ValueType v = t;
  const int64_t rank = static_cast<int64_t>(t.shape.size()) + 1;
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return ValueType::unranked(t.dtype);
  v.shape.insert(v.shape.begin() + axis, size);
  return v;
}

ValueType without_axis(InferContext& ctx, const ValueType& t, int64_t axis) {
  if (!t.rank_known) return t;
  ValueType v = t;
  axis = normalize_axis(ctx, axis, static_cast<int64_t>(t.shape.size()));
  v.shape.erase(v.shape.begin() + axis);
  return v;
}

void infer_if(InferContext& ctx) {
  const size_t n = ctx.num_outputs();
  std::vector<ValueType> result;
  if (const Tensor* c = ctx.input_constant(0); c && c->numel() == 1) {
    result = infer_body(ctx, c->as_double(0) != 0 ? "then_branch" : "else_branch", {});
  } else {
    std::vector<ValueType> t = infer_body(ctx, "then_branch", {});
    std::vector<ValueType> e = infer_body(ctx, "else_branch", {});
    if (t.size() != n || e.size() != n)
      ctx.fail("the branches have " + std::to_string(t.size()) + " and " + std::to_string(e.size()) +
               " outputs, the node has " + std::to_string(n));
    for (size_t i = 0; i < n; ++i) result.push_back(merge(ctx, t[i], e[i]));
  }
  if (result.size() != n)
    ctx.fail("the branch has " + std::to_string(result.size()) + " outputs, the node has " + std::to_string(n));
  for (size_t i = 0; i < n; ++i) ctx.set_output(i, result[i]);
}

void infer_loop(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  const size_t declared = ir::num_declared_inputs(node);
  if (declared < 2) ctx.fail("Loop takes inputs (M, cond, loop-carried values...)");
  const size_t n = declared - 2;
  if (ctx.num_outputs() < n) ctx.fail("fewer outputs than loop-carried values");
  const size_t k = ctx.num_outputs() - n;
  std::vector<ValueType> carried;
  for (size_t i = 0; i < n; ++i) carried.push_back(ctx.input_type(2 + i));
  auto body_inputs = [&](const std::vector<ValueType>& c) {
    std::vector<ValueType> in = {ValueType::of(DType::Int64, {}), ValueType::of(DType::Bool, {})};
    in.insert(in.end(), c.begin(), c.end());
    return in;
  };
  std::vector<ValueType> out = infer_body(ctx, "body", body_inputs(carried));
  if (out.size() != 1 + n + k)
    ctx.fail("body has " + std::to_string(out.size()) + " outputs, the node's outputs need " +
             std::to_string(1 + n + k));
  // A carried value whose type changes in the first iteration may change in every one: infer the
  // body once more from the merged types.
  std::vector<ValueType> merged;
  for (size_t i = 0; i < n; ++i) merged.push_back(merge(ctx, carried[i], out[1 + i]));
  if (merged != carried) {
    out = infer_body(ctx, "body", body_inputs(merged));
    for (size_t i = 0; i < n; ++i) merged[i] = merge(ctx, merged[i], out[1 + i]);
  }
  for (size_t i = 0; i < n; ++i) ctx.set_output(i, merged[i]);
  SymDim trips = ctx.fresh_dim();
  if (!ctx.has_input(1))
    if (const Tensor* m = ctx.has_input(0) ? ctx.input_constant(0) : nullptr; m && m->numel() == 1)
      trips = SymDim(std::max<int64_t>(m->as_int64(0), 0));
  for (size_t j = 0; j < k; ++j) ctx.set_output(n + j, with_axis(out[1 + n + j], 0, trips));
}

void infer_scan(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  const bool v8 = node.opset < 9;
  const size_t leading = v8 ? 1 : 0;
  const int64_t m_attr = node.attr_int("num_scan_inputs", -1);
  const size_t declared = ir::num_declared_inputs(node);
  if (m_attr < 1 || declared < leading + static_cast<size_t>(m_attr))
    ctx.fail("attribute 'num_scan_inputs' does not fit the node's inputs");
  const size_t m = static_cast<size_t>(m_attr), n = declared - leading - m;
  if (ctx.num_outputs() < n) ctx.fail("fewer outputs than state values");
  const size_t k = ctx.num_outputs() - n;
  std::vector<int64_t> in_axes = node.attr_ints("scan_input_axes", {});
  std::vector<int64_t> out_axes = node.attr_ints("scan_output_axes", {});
  if (in_axes.empty()) in_axes.assign(m, 0);
  if (out_axes.empty()) out_axes.assign(k, 0);
  if (in_axes.size() != m || out_axes.size() != k) ctx.fail("scan axes do not match the scan inputs and outputs");
  std::vector<ValueType> states, in;
  SymDim batch = ctx.fresh_dim(), length = ctx.fresh_dim();
  for (size_t i = 0; i < n; ++i) {
    const ValueType& t = ctx.input_type(leading + i);
    states.push_back(t);
    in.push_back(v8 ? without_axis(ctx, t, 0) : t);
  }
  for (size_t j = 0; j < m; ++j) {
    const ValueType& t = ctx.input_type(leading + n + j);
    if (v8) {
      if (t.rank_known && t.shape.size() >= 2) {
        if (j == 0) batch = t.shape[0], length = t.shape[1];
      }
      in.push_back(without_axis(ctx, without_axis(ctx, t, 0), 0));
    } else {
      if (t.rank_known && j == 0)
        length = t.shape[static_cast<size_t>(normalize_axis(ctx, in_axes[j], static_cast<int64_t>(t.shape.size())))];
      in.push_back(without_axis(ctx, t, in_axes[j]));
    }
  }
  std::vector<ValueType> out = infer_body(ctx, "body", in);
  if (out.size() != n + k)
    ctx.fail("body has " + std::to_string(out.size()) + " outputs, the node's outputs need " + std::to_string(n + k));
  for (size_t i = 0; i < n; ++i) {
    ValueType b = v8 ? with_axis(out[i], 0, batch) : out[i];
    ctx.set_output(i, merge(ctx, states[i], b));
  }
  for (size_t j = 0; j < k; ++j) {
    ValueType t =
        v8 ? with_axis(with_axis(out[n + j], 0, length), 0, batch) : with_axis(out[n + j], out_axes[j], length);
    ctx.set_output(n + j, t);
  }
}

}  // namespace

void register_control_inference(OpRegistry& r) {
  r.set_infer("", "If", 1, infer_if);
  r.set_infer("", "Loop", 1, infer_loop);
  r.set_infer("", "Scan", 8, infer_scan);
  r.set_infer("", "Scan", 9, infer_scan);
}

}  // namespace reforge::ops
