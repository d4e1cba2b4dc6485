// Runs one op outside an engine, the way a CPU engine does: the host kernel (the CPU backend's
// kernel for the node, else the op's reference kernel: backends::host_kernel), its prepare step
// (when it has one) on the inputs, then the kernel, `calls` times with the same prepared state (a
// kernel that memoizes per node is hit from the second call). Returns output `output` of the
// last call. run_reference_node runs the op's reference kernel instead, for comparing the two.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "ops/registry.h"

namespace reforge::test_support {

// Runs `node` (already built; its op must be registered) the way the engine does: the op's
// prepare step on `inputs` (all taken as constants) when it has one, then the kernel `calls`
// times with that state. Returns every output of the last call.
inline std::vector<Tensor> run_kernel(const ops::KernelFn& kernel, const ops::PrepareFn* prepare, const ir::Node& node,
                                      const std::vector<const Tensor*>& inputs, int threads, int calls) {
  ops::HostPrepareContext host_context;
  std::shared_ptr<const void> prepared = prepare && *prepare ? (*prepare)(node, inputs, host_context) : nullptr;
  std::vector<Tensor> outputs;
  for (int i = 0; i < calls; ++i) {
    ops::KernelContext ctx(node, inputs, threads, nullptr, prepared.get());
    kernel(ctx);
    outputs = ctx.outputs();
  }
  return outputs;
}

inline std::vector<Tensor> run_node(const ir::Node& node, const std::vector<const Tensor*>& inputs, int threads = 1,
                                    int calls = 1) {
  const backends::Resolved r = backends::host_kernel(node);
  return run_kernel(*r.kernel, r.prepare, node, inputs, threads, calls);
}

// The op's reference kernel (ops/), whatever kernels backends have for it.
inline std::vector<Tensor> run_reference_node(const ir::Node& node, const std::vector<const Tensor*>& inputs,
                                              int threads = 1) {
  const ops::OpDef* def = ops::OpRegistry::global().find(node.domain, node.op_type, node.opset);
  if (!def || !def->kernel) throw Error("no reference kernel for " + node.op_type);
  return run_kernel(def->kernel, &def->prepare, node, inputs, threads, 1);
}

inline Tensor run_op(const std::string& domain, const std::string& op, int opset, std::vector<const Tensor*> inputs,
                     const std::vector<ir::Attribute>& attrs = {}, int threads = 1, int calls = 1, size_t output = 0) {
  ir::Node node;
  node.name = "n";
  node.op_type = op;
  node.domain = domain;
  node.opset = opset;
  for (size_t i = 0; i < inputs.size(); ++i) node.inputs.push_back(inputs[i] ? "x" + std::to_string(i) : "");
  node.outputs = {"y"};
  for (const auto& a : attrs) node.attrs[a.name] = a;
  return run_node(node, inputs, threads, calls)[output];
}

}  // namespace reforge::test_support
