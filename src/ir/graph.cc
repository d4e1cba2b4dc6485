#include "ir/graph.h"

#include <queue>
#include <set>
#include <unordered_map>

namespace reforge::ir {

const ValueInfo* find_value_info(const std::vector<ValueInfo>& infos, const std::string& name) {
  for (const auto& v : infos)
    if (v.name == name) return &v;
  return nullptr;
}

namespace {
const char* attr_type_name(AttrType t) {
  switch (t) {
    case AttrType::Float:
      return "float";
    case AttrType::Int:
      return "int";
    case AttrType::String:
      return "string";
    case AttrType::Tensor:
      return "tensor";
    case AttrType::Graph:
      return "graph";
    case AttrType::Floats:
      return "floats";
    case AttrType::Ints:
      return "ints";
    case AttrType::Strings:
      return "strings";
    case AttrType::Tensors:
      return "tensors";
    case AttrType::Graphs:
      return "graphs";
    default:
      return "undefined";
  }
}
}  // namespace

Attribute int_attr(const std::string& name, int64_t v) {
  Attribute a;
  a.name = name;
  a.type = AttrType::Int;
  a.i = v;
  return a;
}

Attribute float_attr(const std::string& name, float v) {
  Attribute a;
  a.name = name;
  a.type = AttrType::Float;
  a.f = v;
  return a;
}

Attribute string_attr(const std::string& name, const std::string& v) {
  Attribute a;
  a.name = name;
  a.type = AttrType::String;
  a.s = v;
  return a;
}

Attribute ints_attr(const std::string& name, std::vector<int64_t> v) {
  Attribute a;
  a.name = name;
  a.type = AttrType::Ints;
  a.ints = std::move(v);
  return a;
}

Attribute tensor_attr(const std::string& name, Tensor v) {
  Attribute a;
  a.name = name;
  a.type = AttrType::Tensor;
  a.t = std::move(v);
  return a;
}

const Attribute* Node::attr(const std::string& n) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? nullptr : &it->second;
}

static const Attribute& expect(const Node& node, const Attribute& a, AttrType t) {
  if (a.type != t)
    fail(node.label(), ": attribute '", a.name, "' has type ", attr_type_name(a.type), ", expected ",
         attr_type_name(t));
  return a;
}

int64_t Node::attr_int(const std::string& n, int64_t def) const {
  const Attribute* a = attr(n);
  return a ? expect(*this, *a, AttrType::Int).i : def;
}

int64_t Node::attr_int(const std::string& n) const {
  const Attribute* a = attr(n);
  if (!a) fail(label(), ": required attribute '", n, "' is missing");
  return expect(*this, *a, AttrType::Int).i;
}

float Node::attr_float(const std::string& n, float def) const {
  const Attribute* a = attr(n);
  return a ? expect(*this, *a, AttrType::Float).f : def;
}

std::string Node::attr_string(const std::string& n, const std::string& def) const {
  const Attribute* a = attr(n);
  return a ? expect(*this, *a, AttrType::String).s : def;
}

std::vector<int64_t> Node::attr_ints(const std::string& n, std::vector<int64_t> def) const {
  const Attribute* a = attr(n);
  return a ? expect(*this, *a, AttrType::Ints).ints : def;
}

std::vector<float> Node::attr_floats(const std::string& n, std::vector<float> def) const {
  const Attribute* a = attr(n);
  return a ? expect(*this, *a, AttrType::Floats).floats : def;
}

const Tensor* Node::attr_tensor(const std::string& n) const {
  const Attribute* a = attr(n);
  return a ? &expect(*this, *a, AttrType::Tensor).t : nullptr;
}

std::string Node::label() const {
  std::string nm = !name.empty() ? name : (!outputs.empty() ? outputs[0] : std::string("?"));
  return "node '" + nm + "' (" + (domain.empty() ? "" : domain + "::") + op_type + ")";
}

std::vector<size_t> Graph::topological_order() const {
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& o : nodes[i].outputs) {
      if (o.empty()) continue;
      if (!producer.emplace(o, i).second)
        fail("value '", o, "' is produced by more than one node (", nodes[i].label(), ")");
    }
  std::set<std::string> available;
  for (const auto& in : inputs) available.insert(in.name);
  for (const auto& [n, t] : initializers) available.insert(n);
  for (const auto& c : captures) available.insert(c);
  std::vector<size_t> pending(nodes.size(), 0);
  std::vector<std::vector<size_t>> consumers(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::set<size_t> deps;
    for (const auto& in : nodes[i].inputs) {
      if (in.empty() || available.count(in)) continue;
      auto it = producer.find(in);
      if (it == producer.end())
        fail(nodes[i].label(), ": input '", in, "' is not a graph input, an initializer or any node's output");
      deps.insert(it->second);
    }
    pending[i] = deps.size();
    for (size_t d : deps) consumers[d].push_back(i);
  }
  // Kahn's algorithm; the queue keeps file order among ready nodes so the order is canonical.
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<size_t> order;
  order.reserve(nodes.size());
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t c : consumers[i])
      if (--pending[c] == 0) ready.push(c);
  }
  if (order.size() != nodes.size()) {
    for (size_t i = 0; i < nodes.size(); ++i)
      if (pending[i] != 0) fail("graph has a cycle through ", nodes[i].label());
  }
  return order;
}

}  // namespace reforge::ir
