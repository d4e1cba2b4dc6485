#include "runtime/lowered_graph.h"

#include <map>

#include "backends/backend.h"
#include "backends/placement.h"

namespace reforge::runtime {

namespace {

std::string node_line(const ir::Node& n, const std::string& why) {
  return n.label() + ", opset " + std::to_string(n.opset) + ": " + why;
}

void fail_listing(const std::vector<std::string>& bad) {
  std::string msg = std::to_string(bad.size()) + " node(s) cannot run:";
  for (size_t i = 0; i < bad.size() && i < 20; ++i) msg += "\n  " + bad[i];
  if (bad.size() > 20) msg += "\n  ...";
  fail(msg);
}

}  // namespace

std::vector<std::string> unsupported_nodes(const ir::Graph& graph, const std::string& backend) {
  std::vector<std::string> out;
  for (const auto& n : graph.nodes) {
    std::string why = backends::resolve(n, backend, nullptr);
    if (!why.empty()) out.push_back(node_line(n, why));
  }
  return out;
}

LoweredGraph::LoweredGraph(ir::Graph graph, std::vector<std::string> placement)
    : graph_(std::move(graph)), placement_(std::move(placement)) {
  REFORGE_CHECK(placement_.size() == graph_.nodes.size(), "internal error: placement of ", placement_.size(),
                " nodes for a graph of ", graph_.nodes.size());
  // An unknown backend is one error, not one per node.
  std::map<std::string, size_t> per_backend;
  for (const auto& b : placement_) ++per_backend[b];
  for (const auto& [name, count] : per_backend) {
    if (backends::find_backend(name)) continue;
    std::string known;
    for (const auto& n : backends::backend_names()) known += (known.empty() ? "" : ", ") + n;
    fail(count, " node(s) are placed on backend '", name,
         "', which is not registered in this reforge (registered: ", known, ")");
  }
  for (const auto& [name, count] : per_backend) {
    const backends::Backend* b = backends::find_backend(name);
    if (!b->unavailable) continue;
    if (std::string why = b->unavailable(); !why.empty())
      fail(count, " node(s) are placed on backend '", name, "', which cannot run here: ", why);
  }
  std::vector<std::string> bad;
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    std::string why = backends::resolve(graph_.nodes[i], placement_[i], nullptr);
    if (!why.empty()) bad.push_back(node_line(graph_.nodes[i], why));
  }
  if (!bad.empty()) fail_listing(bad);
}

LoweredGraph lower_without_passes(ir::Graph graph, const std::string& backend, bool host_fallback) {
  std::vector<std::string> placement = backends::place_graph(graph, {backend, host_fallback, ""}).node_backend;
  return LoweredGraph(std::move(graph), std::move(placement));
}

}  // namespace reforge::runtime
