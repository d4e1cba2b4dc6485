// Shared pieces of the control-flow family (If, Loop, Scan): running a subgraph and moving slices
// of tensors in and out of it.
//
// A subgraph runs on the host, node by node in topological order, with each op's reference kernel
// from the registry (nested If/Loop/Scan included). Its inputs are bound by position, its
// captures (ir/subgraph.h) to the node's captured inputs by position. A Body is made once per
// kernel call (order and kernels resolved once) and run once per iteration.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "ops/registry.h"

namespace reforge::ops::control {

// The graph attribute `name` of the node; throws an Error naming the node when it is absent or
// not a graph.
const ir::Graph& subgraph(const ir::Node& node, const std::string& name);

// The node's captured inputs that belong to graph attribute `name`, in the order of that
// subgraph's captures.
std::vector<const Tensor*> captured_inputs(const KernelContext& ctx, const std::string& name);

// Every reason a node of the subgraph (recursively) cannot run, as "node 'x' (Op): reason", or
// "" when all can.
std::string why_body_unsupported(const ir::Graph& body);

// True when some node of the subgraph (recursively) may draw random numbers or is unknown.
bool body_draws_random(const ir::Graph& body);

class Body {
 public:
  // `where` names the owning node and attribute in errors.
  Body(const ir::Graph& graph, std::string where, int threads);
  const ir::Graph& graph() const { return graph_; }
  // Runs the subgraph; `inputs` and `captured` must match its inputs and captures in count (an
  // absent optional input is null). Returns its outputs in order.
  std::vector<Tensor> run(const std::vector<const Tensor*>& inputs, const std::vector<const Tensor*>& captured) const;

 private:
  struct Step {
    const ir::Node* node;
    const OpDef* def;
  };
  const ir::Graph& graph_;
  std::string where_;
  int threads_;
  std::vector<Step> steps_;
};

// Slice `index` of `t` along `axis` (that axis removed), copied.
Tensor slice_along(const Tensor& t, int64_t axis, int64_t index);
// The parts (each of one shape and dtype) stacked along a new axis `axis` of the result; with
// `reverse` the last part comes first. `what` names the values in errors.
Tensor stack_along(const std::vector<Tensor>& parts, int64_t axis, bool reverse, const std::string& what);
// A bool or numeric one-element tensor as a bool; `what` names it in errors.
bool scalar_condition(const Tensor& t, const std::string& what);

}  // namespace reforge::ops::control
