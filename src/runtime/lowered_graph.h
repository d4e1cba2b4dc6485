// LoweredGraph: the stage between a graph and an Engine. A graph whose every node has a backend
// (its placement) and a kernel there: the backend's own kernel for the node, or the op's
// reference kernel where the backend runs those (backends/backend.h). An Engine is made only from
// a LoweredGraph, and a LoweredGraph only here: from a plan (PlanEngine, which a plan the builder
// made or the plan reader read feeds), or by lower_without_passes(), the debugging path that runs
// an imported graph as it is (`reforge conformance --raw`, tests of single ops and passes).
// Making one checks every node and lists each that cannot run where it is placed.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace reforge::runtime {

class Engine;
class PlanEngine;
class LoweredGraph;

// An imported (or hand-made) graph lowered without passes, placed on `backend` as the builder
// places (backends/placement.h: on a device backend, shape computation on the host, transfers
// inserted, and nodes without a device kernel on the host when `host_fallback`). Throws an Error
// listing every node that cannot run where it must.
LoweredGraph lower_without_passes(ir::Graph graph, const std::string& backend = "cpu", bool host_fallback = false);

class LoweredGraph {
 public:
  LoweredGraph(LoweredGraph&&) noexcept = default;
  LoweredGraph& operator=(LoweredGraph&&) noexcept = default;

  const ir::Graph& graph() const { return graph_; }
  // The backend of each node, in graph().nodes order.
  const std::vector<std::string>& placement() const { return placement_; }

 private:
  friend class Engine;
  friend class PlanEngine;
  friend LoweredGraph lower_without_passes(ir::Graph graph, const std::string& backend, bool host_fallback);

  // Checks that every node can run on its backend (throws listing every one that cannot).
  LoweredGraph(ir::Graph graph, std::vector<std::string> placement);

  ir::Graph graph_;
  std::vector<std::string> placement_;
};

// Every node of `graph` that cannot run on `backend`, as "node 'x' (Op), opset N: reason" lines.
std::vector<std::string> unsupported_nodes(const ir::Graph& graph, const std::string& backend = "cpu");

}  // namespace reforge::runtime
