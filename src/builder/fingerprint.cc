#include "builder/fingerprint.h"

#include <cstring>
#include <map>
#include <sstream>

#include "ops/registry.h"
#include "transforms/recipe.h"

namespace reforge::build {

namespace {

bool is_graph_output(const ir::Graph& g, const std::string& v) {
  for (const auto& o : g.outputs)
    if (o.name == v) return true;
  return false;
}

// Identity(initializer) is the initializer: exporters insert such nodes when they share one
// tensor between several uses (PyTorch 1.13 does, for equal-valued weights), and omit them when
// the values differ, so the same module exports with or without them.
void bypass_initializer_identities(ir::Graph& g) {
  std::map<std::string, std::string> alias;
  std::vector<ir::Node> kept;
  for (auto& n : g.nodes) {
    if (n.op_type == "Identity" && n.domain.empty() && n.inputs.size() == 1 && n.outputs.size() == 1 &&
        g.initializers.count(n.inputs[0]) && !is_graph_output(g, n.outputs[0])) {
      alias[n.outputs[0]] = n.inputs[0];
      continue;
    }
    kept.push_back(std::move(n));
  }
  for (auto& n : kept)
    for (auto& in : n.inputs) {
      auto it = alias.find(in);
      if (it != alias.end()) in = it->second;
    }
  g.nodes = std::move(kept);
}

// An absent optional bias is a zero bias. Exporters drop all-zero biases (the dynamo exporter
// removes Gemm's C when the bias is zero), so a model exported as initialized and one exported
// after fine-tuning would differ in structure; making the zero bias explicit gives both the same
// structure and gives the refit a source to fill.
void materialize_zero_biases(ir::Graph& g) {
  for (size_t p = 0; p < g.nodes.size(); ++p) {
    ir::Node& n = g.nodes[p];
    if (!n.domain.empty() || n.inputs.size() < 2 || (n.inputs.size() > 2 && !n.inputs[2].empty())) continue;
    auto wit = g.initializers.find(n.inputs[1]);
    if (wit == g.initializers.end() || !is_float(wit->second.dtype())) continue;
    const Tensor& w = wit->second;
    int64_t channels = -1;
    if (n.op_type == "Gemm" && w.rank() == 2)
      channels = n.attr_int("transB", 0) ? w.dim(0) : w.dim(1);
    else if (n.op_type == "Conv" && w.rank() >= 3)
      channels = w.dim(0);
    else if (n.op_type == "ConvTranspose" && w.rank() >= 3)
      channels = w.dim(1) * n.attr_int("group", 1);
    if (channels < 0) continue;
    std::string name = (n.name.empty() ? n.outputs[0] : n.name) + ".zero_bias";
    while (g.initializers.count(name)) name += "_";
    g.initializers[name] = Tensor::empty(w.dtype(), {channels});
    n.inputs.resize(3);
    n.inputs[2] = name;
  }
}

}  // namespace

ir::Graph canonicalize(ir::Graph g) {
  bypass_initializer_identities(g);
  materialize_zero_biases(g);
  std::vector<size_t> order = g.topological_order();
  std::vector<ir::Node> nodes;
  nodes.reserve(order.size());
  for (size_t i : order) nodes.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(nodes);
  return g;
}

std::set<std::string> literal_initializers(const ir::Graph& g, const std::vector<std::string>& literal_names) {
  std::set<std::string> lit;
  std::map<std::string, bool> only_shape_like;
  std::set<std::string> quantized;  // integer codes and zero points of quantized weights: sources
  for (const auto& n : g.nodes)
    for (size_t s = 0; s < n.inputs.size(); ++s) {
      const std::string& in = n.inputs[s];
      if (in.empty() || !g.initializers.count(in)) continue;
      if (ops::is_quantized_input(n, s)) quantized.insert(in);
      bool sl = ops::input_role(n, s) == ops::InputRole::kShape;
      auto [it, inserted] = only_shape_like.emplace(in, sl);
      if (!inserted) it->second = it->second && sl;
    }
  for (const auto& o : g.outputs)
    if (g.initializers.count(o.name)) only_shape_like[o.name] = true;  // an output constant is structure
  for (const auto& [name, t] : g.initializers) {
    bool by_name = false;
    for (const auto& l : literal_names) by_name |= l == name;
    auto it = only_shape_like.find(name);
    const bool structural_int = !is_float(t.dtype()) && !quantized.count(name);
    if (by_name || structural_int || (it != only_shape_like.end() && it->second)) lit.insert(name);
  }
  return lit;
}

namespace {

std::string float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  std::ostringstream os;
  os << std::hex << b;
  return os.str();
}

std::string tensor_sig(const Tensor& t) {
  std::ostringstream os;
  os << t.describe() << "#" << std::hex << transforms::hash_tensor(t);
  return os.str();
}

std::string graph_sig(const ir::Graph& g);

std::string attr_str(const ir::Attribute& a) {
  std::ostringstream os;
  switch (a.type) {
    case ir::AttrType::Float:
      os << "f:" << float_bits(a.f);
      break;
    case ir::AttrType::Int:
      os << "i:" << a.i;
      break;
    case ir::AttrType::String:
      os << "s:" << a.s.size() << ":" << a.s;
      break;
    case ir::AttrType::Tensor:
      os << "t:" << tensor_sig(a.t);
      break;
    case ir::AttrType::Floats:
      os << "fs:";
      for (float f : a.floats) os << float_bits(f) << ",";
      break;
    case ir::AttrType::Ints:
      os << "is:";
      for (int64_t i : a.ints) os << i << ",";
      break;
    case ir::AttrType::Strings:
      os << "ss:";
      for (const auto& s : a.strings) os << s.size() << ":" << s << ",";
      break;
    case ir::AttrType::Tensors:
      os << "ts:";
      for (const auto& t : a.tensors) os << tensor_sig(t) << ",";
      break;
    case ir::AttrType::Graph:
      os << "g:" << (a.g ? graph_sig(*a.g) : std::string());
      break;
    default:
      os << "graphs";
      break;
  }
  return os.str();
}

// A subgraph's whole structure: its values by their own names (a subgraph's names are local),
// its nodes with their attributes (nested subgraphs recursively), and its captures.
std::string graph_sig(const ir::Graph& g) {
  std::ostringstream os;
  os << "{in:";
  for (const auto& v : g.inputs) os << v.name << ":" << dtype_name(v.dtype) << ",";
  os << " cap:";
  for (const auto& c : g.captures) os << c << ",";
  for (const auto& [name, t] : g.initializers) os << " init:" << name << "=" << tensor_sig(t);
  for (const auto& n : g.nodes) {
    os << " " << n.domain << "::" << n.op_type << "@" << n.opset << "(";
    for (const auto& i : n.inputs) os << i << ",";
    os << ")[";
    for (const auto& [k, a] : n.attrs) os << k << "=" << attr_str(a) << ";";
    os << "]->(";
    for (const auto& o : n.outputs) os << o << ",";
    os << ")";
  }
  os << " out:";
  for (const auto& v : g.outputs) os << v.name << ",";
  os << "}";
  return os.str();
}

}  // namespace

std::vector<std::string> structural_fingerprint(const ir::Graph& g, const std::set<std::string>& literals) {
  std::map<std::string, std::string> ref;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    ref[g.inputs[i].name] = "in" + std::to_string(i) + ":" + dtype_name(g.inputs[i].dtype);
  for (const auto& [name, t] : g.initializers)
    ref[name] = literals.count(name) ? "lit:" + tensor_sig(t) : "src:" + t.describe();
  std::vector<std::string> lines;
  for (size_t p = 0; p < g.nodes.size(); ++p) {
    const ir::Node& n = g.nodes[p];
    std::ostringstream os;
    os << n.domain << "::" << n.op_type << "@" << n.opset << " (";
    for (size_t s = 0; s < n.inputs.size(); ++s) {
      if (s) os << ", ";
      if (n.inputs[s].empty())
        os << "-";
      else {
        auto it = ref.find(n.inputs[s]);
        os << (it == ref.end() ? "?" : it->second);
      }
    }
    os << ") {";
    for (const auto& [k, a] : n.attrs) os << k << "=" << attr_str(a) << ";";
    os << "} -> " << n.outputs.size();
    // (Not "n" + std::to_string(p) + ...: GCC 12 warns falsely (-Wrestrict) on that inlined concat.)
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (!n.outputs[k].empty())
        ref[n.outputs[k]] = std::string(1, 'n').append(std::to_string(p)).append(".").append(std::to_string(k));
    lines.push_back(os.str());
  }
  std::ostringstream outs;
  outs << "outputs:";
  for (const auto& o : g.outputs) {
    auto it = ref.find(o.name);
    outs << " " << (it == ref.end() ? "?" : it->second);
  }
  lines.push_back(outs.str());
  return lines;
}

std::string fingerprint_difference(const std::vector<std::string>& expected, const std::vector<std::string>& actual) {
  size_t n = std::min(expected.size(), actual.size());
  for (size_t i = 0; i < n; ++i)
    if (expected[i] != actual[i])
      return "node " + std::to_string(i) + " differs:\n    plan:  " + expected[i] + "\n    model: " + actual[i];
  if (expected.size() != actual.size())
    return "the plan's model has " + std::to_string(expected.size() - 1) + " nodes, this model has " +
           std::to_string(actual.size() - 1);
  return "";
}

}  // namespace reforge::build
