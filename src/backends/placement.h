// Placement: which backend runs each node, and the transfers between host and device memory.
//
// A graph built for a host backend (cpu) runs every node there; nothing moves. For a device
// backend (cuda):
// - Every node runs on the device, with two exceptions, each shown per node in the plan
//   (`inspect --nodes`) and counted in the build summary:
//   * shape computation: a node whose every output is read only as structure (an input of role
//     kShape: Reshape's shape, Slice's starts, Expand's shape, ...), directly or through other
//     such nodes, runs on the host, as TensorRT computes shape tensors on the host. Shape and
//     Size read only their input's dimensions, so they run on the host without a copy.
//   * host fallback: a node the device backend has no kernel for runs on the host only when the
//     user allows it (PlaceOptions::host_fallback, `--allow-cpu-fallback`); otherwise placement
//     fails listing every such node. A node whose device kernel declines it counts as one without
//     a kernel: its checker refuses the attributes, or its shape check (backends/backend.h:
//     ShapeCheckFn) refuses the input shapes the graph's shape inference gives, with the sizes
//     symbolic where the model's are.
// - A value lives where its producer runs (graph inputs and engine weights on the host). Every
//   input slot wants its consumer's memory, except structure inputs (kShape), which are always
//   read on the host, and the inputs of Shape and Size, which any memory serves. Where a value
//   is not where a slot wants it, placement inserts reforge::ToDevice or reforge::ToHost (one per
//   value and direction), run by the device backend. Graph outputs are delivered on the host.
//   A device backend's ToDevice kernel has a prepare step that uploads an engine weight it reads
//   (PrepareContext::upload) and returns the device tensor (a `const Tensor`): the engine keeps
//   that tensor as the weight when the upload is its only reader (runtime/weight_store.h).
//
// The builder places the optimized graph; lower_without_passes (conformance --raw, tests) places
// an imported one. Both call place_graph, so both run the same transfers.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "ops/infer_graph.h"

namespace reforge::backends {

struct PlaceOptions {
  std::string backend = "cpu";  // where nodes run
  bool host_fallback = false;   // device backends: run nodes without a device kernel on the host
  std::string subject;          // what errors call the graph ("model 'x'"); "" for none
  // The values of constants the graph reads but does not hold as initializers (the builder's
  // engine weights): shape inference for the kernels' shape checks reads their types and the
  // contents of small integer ones. Null: the graph's initializers are all there is.
  const std::map<std::string, Tensor>* constants = nullptr;
};

struct PlaceResult {
  std::vector<std::string> node_backend;  // per node of the placed graph
  size_t shape_nodes_on_host = 0;         // device builds: shape computation on the host
  size_t fallback_nodes = 0;              // device builds: nodes without a device kernel, on the host
  size_t transfers = 0;                   // ToDevice/ToHost nodes inserted
};

// The host backend that runs shape computation and fallback nodes of device builds.
inline constexpr const char* kHostBackend = "cpu";

// Places every node of `graph` and inserts the transfers (see above); the graph is changed in
// place. Throws an Error listing every node that cannot run where it must: on a host backend,
// each node the backend cannot run; on a device backend, each node with no device kernel
// (unless host_fallback, and then each of those the host cannot run either).
PlaceResult place_graph(ir::Graph& graph, const PlaceOptions& options);

// Per node: whether it is shape computation (every output read only as structure, directly or
// through other shape computation; deterministic; runnable on the host).
std::vector<bool> shape_computation(const ir::Graph& graph);

// The facts of `node`'s inputs for a kernel's shape check, from the graph's inferred `types`
// (null: none known). Points into `types`.
InputFacts input_facts(const ir::Node& node, const ops::GraphTypes* types);

// True for reforge::ToDevice / reforge::ToHost.
bool is_transfer(const ir::Node& node);

}  // namespace reforge::backends
