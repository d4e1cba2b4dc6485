// Runs one registry op outside an engine, the way the engine does: the op's prepare step (when
// it has one) on the inputs, then the kernel, `calls` times with the same prepared state (a
// kernel that memoizes per node is hit from the second call). Returns output `output` of the
// last call. Fails the test when no kernel is registered for (domain, op, opset).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ops/registry.h"

namespace reforge::test_support {

// Runs `node` (already built; its op must be registered) the way the engine does: the op's
// prepare step on `inputs` (all taken as constants) when it has one, then the kernel `calls`
// times with that state. Returns every output of the last call.
inline std::vector<Tensor> run_node(const ir::Node& node, const std::vector<const Tensor*>& inputs, int threads = 1,
                                    int calls = 1) {
  const ops::OpDef* def = ops::OpRegistry::global().find(node.domain, node.op_type, node.opset);
  if (!def) throw Error("no kernel for " + node.op_type);
  std::shared_ptr<const void> prepared = def->prepare ? def->prepare(node, inputs) : nullptr;
  std::vector<Tensor> outputs;
  for (int i = 0; i < calls; ++i) {
    ops::KernelContext ctx(node, inputs, threads, nullptr, prepared.get());
    def->kernel(ctx);
    outputs = ctx.outputs();
  }
  return outputs;
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
