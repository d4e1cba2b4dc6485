// Inference over a whole graph: the type, symbolic shape and (for small integer values) the
// known contents of every value, node by node with the registry's InferFn (ops/infer.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/infer.h"

namespace reforge::ops {

// Whether every op of the registry has an inference (tests/infer_test.cc,
// InferRegistry.EveryEntryHasAnInference, holds it to that). The builder, `reforge check` and the
// conformance harness then infer with require_all: an op without inference is an error, not a
// value of unknown type that nothing checks.
inline constexpr bool kEveryOpInferred = true;

struct InferOptions {
  // Fixes the graph inputs' shapes (one input signature): every dimension then comes out as a
  // number unless it depends on data. Inputs not named keep their declared shapes.
  const std::map<std::string, Shape>* input_shapes = nullptr;
  // Fixes the values of some graph inputs too (their shapes then come from these tensors): they
  // are followed as constants, e.g. to check inference against one run of the graph.
  const std::map<std::string, Tensor>* input_values = nullptr;
  // A node whose op has no inference: an Error (true) or outputs of unknown type (false).
  bool require_all = true;
};

struct GraphTypes {
  std::map<std::string, ValueType> types;       // every value: inputs, initializers, node outputs
  std::map<std::string, SymShape> dims_values;  // small integer values whose elements are known
  std::map<std::string, Tensor> constants;      // initializers, Constant outputs, folded values
  const ValueType* find(const std::string& name) const {
    auto it = types.find(name);
    return it == types.end() ? nullptr : &it->second;
  }
};

// Infers `graph` in topological order. Throws an Error naming the node whose inference fails
// (an inconsistent shape, a missing input type) or, with require_all, that has none.
GraphTypes infer_graph(const ir::Graph& graph, const InferOptions& options = {});

}  // namespace reforge::ops
