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
  const ops::OpDef* def = ops::OpRegistry::global().find(domain, op, opset);
  if (!def) throw Error("no kernel for " + op);
  std::shared_ptr<const void> prepared = def->prepare ? def->prepare(node, inputs) : nullptr;
  Tensor y;
  for (int i = 0; i < calls; ++i) {
    ops::KernelContext ctx(node, inputs, threads, nullptr, prepared.get());
    def->kernel(ctx);
    y = ctx.outputs()[output];
  }
  return y;
}

}  // namespace reforge::test_support
