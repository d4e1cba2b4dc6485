// Engine: runs a graph on the CPU.
//
// An Engine owns an immutable graph (nodes resolved to registry kernels once, at construction)
// and runs it for any input sizes its symbolic dimensions allow. Construction checks that every
// node is supported (listing all that are not) and that the graph is acyclic. run() validates
// the inputs (names, dtypes, ranks, fixed dimensions, consistent symbolic dimensions) before any
// kernel runs, and frees each intermediate value after its last use.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace reforge::runtime {

struct EngineOptions {
  int threads = 0;       // 0 = all cores
  bool profile = false;  // time every node (see Engine::profile)
  bool arena = true;     // serve intermediates from a planned activation arena (runtime/arena.h)
};

// Time spent in one node over all runs since the engine was made (EngineOptions::profile).
struct NodeProfile {
  std::string node;     // node name or "#index"
  std::string op_type;  // "Domain::Op" outside the ONNX domain
  int64_t calls = 0;
  double total_ms = 0;
};

class Engine {
 public:
  Engine(ir::Graph graph, EngineOptions options = {});
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  const std::vector<ir::ValueInfo>& inputs() const;
  const std::vector<ir::ValueInfo>& outputs() const;
  const ir::Graph& graph() const;

  // Runs the graph. `inputs` must name every required graph input exactly once. Returns the
  // graph outputs in declaration order. Thread-safe: concurrent calls share only immutable state.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) const;

  // Constants (engine weights). A graph initializer may be undefined (a stripped weight): the
  // engine then refuses to run until it is supplied.
  std::vector<std::string> missing_constants() const;
  Tensor constant(const std::string& name) const;  // undefined if not a constant or not set
  bool has_constant(const std::string& name) const;
  // Replaces constants all at once: runs that already started keep the old set, later runs see
  // only the new one. Every name must be a constant of the engine with the same dtype and shape
  // (checked before anything changes).
  void replace_constants(const std::map<std::string, Tensor>& values);

  // Per-node timings in execution order (empty unless EngineOptions::profile).
  std::vector<NodeProfile> profile() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Every node of `graph` that reforge cannot run, as "node 'x' (Op), opset N: reason" lines.
std::vector<std::string> unsupported_nodes(const ir::Graph& graph);

}  // namespace reforge::runtime
