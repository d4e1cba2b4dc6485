#include "ir/subgraph.h"

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace reforge::ir {
namespace {

// Every value name any graph of the model defines or reads, to pick unique names for hoisted
// initializers.
void collect_names(const Graph& g, std::set<std::string>& names) {
  for (const auto& v : g.inputs) names.insert(v.name);
  for (const auto& v : g.outputs) names.insert(v.name);
  for (const auto& [name, t] : g.initializers) names.insert(name);
  for (const auto& c : g.captures) names.insert(c);
  for (const auto& n : g.nodes) {
    for (const auto& i : n.inputs) names.insert(i);
    for (const auto& o : n.outputs) names.insert(o);
    for (const auto& [key, a] : n.attrs)
      if (a.type == AttrType::Graph && a.g) collect_names(*a.g, names);
  }
}

std::string unique_name(const std::string& base, std::set<std::string>& names) {
  std::string name = base;
  for (int k = 1; names.count(name); ++k) name = base + "_" + std::to_string(k);
  names.insert(name);
  return name;
}

struct Binder {
  Graph& top;
  std::set<std::string> names;

  // Binds the subgraphs of every node of `g` (a top-level graph or a subgraph being bound).
  void bind_nodes(Graph& g) {
    for (auto& n : g.nodes) {
      if (!has_subgraphs(n)) continue;
      try {
        bind_node(n);
      } catch (Error& e) {
        throw e.with_context("in the subgraphs of " + n.label());
      }
    }
  }

  void bind_node(Node& n) {
    const size_t captured = num_captured_inputs(n);
    std::vector<std::string> declared(n.inputs.begin(), n.inputs.end() - static_cast<std::ptrdiff_t>(captured));
    std::vector<std::string> bindings;  // the new captured inputs
    size_t next = declared.size();      // the first old captured input of the next subgraph
    for (auto& [key, a] : n.attrs) {
      if (a.type != AttrType::Graph || !a.g) continue;
      auto body = std::make_shared<Graph>(*a.g);
      // The outer values the subgraph's existing captures are bound to.
      for (size_t c = 0; c < body->captures.size(); ++c) bindings.push_back(n.inputs[next++]);
      bind_nodes(*body);
      // Initializers move to the top-level graph and are captured from there.
      for (auto& [name, t] : body->initializers) {
        const std::string outer = unique_name((body->name.empty() ? key : body->name) + "." + name, names);
        top.initializers.emplace(outer, std::move(t));
        body->captures.push_back(name);
        bindings.push_back(outer);
      }
      body->initializers.clear();
      // Values read but defined nowhere in the subgraph come from an enclosing scope.
      std::set<std::string> defined(body->captures.begin(), body->captures.end());
      for (const auto& v : body->inputs) defined.insert(v.name);
      for (const auto& b : body->nodes)
        for (const auto& o : b.outputs) defined.insert(o);
      auto capture = [&](const std::string& v) {
        if (v.empty() || defined.count(v)) return;
        defined.insert(v);
        body->captures.push_back(v);
        bindings.push_back(v);
      };
      for (const auto& b : body->nodes)
        for (const auto& i : b.inputs) capture(i);
      for (const auto& o : body->outputs) capture(o.name);
      a.g = std::move(body);
    }
    declared.insert(declared.end(), bindings.begin(), bindings.end());
    n.inputs = std::move(declared);
  }
};

}  // namespace

bool has_subgraphs(const Node& n) {
  for (const auto& [key, a] : n.attrs)
    if (a.type == AttrType::Graph || a.type == AttrType::Graphs) return true;
  return false;
}

bool has_subgraphs(const Graph& g) {
  for (const auto& n : g.nodes)
    if (has_subgraphs(n)) return true;
  return false;
}

size_t num_captured_inputs(const Node& n) {
  size_t count = 0;
  for (const auto& [key, a] : n.attrs)
    if (a.type == AttrType::Graph && a.g) count += a.g->captures.size();
  if (count > n.inputs.size())
    fail(n.label(), ": its subgraphs capture ", count, " values but the node has only ", n.inputs.size(), " inputs");
  return count;
}

void bind_captures(Graph& top) {
  if (!has_subgraphs(top)) return;
  Binder b{top, {}};
  collect_names(top, b.names);
  b.bind_nodes(top);
}

}  // namespace reforge::ir
