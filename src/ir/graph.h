// The in-memory graph (IR) that every build stage works on.
//
// A Graph is a list of Nodes that name their inputs and outputs by value name, plus initializers
// (constant tensors by name) and typed graph inputs/outputs whose dimensions may be symbolic
// ("batch", "seq"). An empty input name means "optional input not given". The IR knows nothing
// about protobuf: importers build it, passes rewrite it, the runtime executes it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace reforge::ir {

struct Graph;

enum class AttrType { Undefined, Float, Int, String, Tensor, Graph, Floats, Ints, Strings, Tensors, Graphs };

struct Attribute {
  std::string name;
  AttrType type = AttrType::Undefined;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::shared_ptr<Graph> g;
};

// Attribute factories, for passes and tests that build nodes by hand.
Attribute int_attr(const std::string& name, int64_t v);
Attribute float_attr(const std::string& name, float v);
Attribute string_attr(const std::string& name, const std::string& v);
Attribute ints_attr(const std::string& name, std::vector<int64_t> v);
Attribute tensor_attr(const std::string& name, Tensor v);

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;                // "" for the default ONNX domain ("ai.onnx" is normalized to "")
  int opset = 0;                     // the model's opset version for `domain`
  std::vector<std::string> inputs;   // "" = optional input absent
  std::vector<std::string> outputs;  // "" = optional output not wanted
  std::map<std::string, Attribute> attrs;
  std::vector<std::pair<std::string, std::string>> metadata;  // metadata_props, in file order

  bool has_attr(const std::string& n) const { return attrs.count(n) != 0; }
  // Typed getters: the defaulted forms return `def` when absent; all throw an Error naming the
  // node when the attribute exists with another type.
  int64_t attr_int(const std::string& n, int64_t def) const;
  int64_t attr_int(const std::string& n) const;
  float attr_float(const std::string& n, float def) const;
  std::string attr_string(const std::string& n, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& n, std::vector<int64_t> def = {}) const;
  std::vector<float> attr_floats(const std::string& n, std::vector<float> def = {}) const;
  const Tensor* attr_tensor(const std::string& n) const;  // nullptr if absent
  const Attribute* attr(const std::string& n) const;      // nullptr if absent
  // "node 'name' (OpType)" for error messages; uses the first output when the node has no name.
  std::string label() const;
};

// One dimension of a declared shape: a fixed size, a symbol, or unknown (neither).
struct Dim {
  int64_t value = -1;
  std::string symbol;
  bool fixed() const { return value >= 0; }
};

// "7", the symbol, or "?" for an unnamed symbolic dimension (messages).
inline std::string dim_str(const Dim& d) {
  return d.fixed() ? std::to_string(d.value) : (d.symbol.empty() ? "?" : d.symbol);
}

struct ValueInfo {
  std::string name;
  DType dtype = DType::Undefined;
  bool has_shape = false;
  std::vector<Dim> shape;
};

// The value named `name` among `infos` (graph inputs or outputs), or null.
const ValueInfo* find_value_info(const std::vector<ValueInfo>& infos, const std::string& name);

struct Graph {
  std::string name;
  int64_t ir_version = 0;
  std::map<std::string, int> opsets;  // domain -> version ("" is the default domain)
  std::vector<Node> nodes;
  std::vector<ValueInfo> inputs;  // graph inputs that are not initializers
  std::vector<ValueInfo> outputs;
  std::map<std::string, Tensor> initializers;
  std::vector<std::pair<std::string, std::string>> metadata;  // model metadata_props
  // Subgraphs only (the body of If, Loop, Scan; ir/subgraph.h): the values this graph reads from
  // enclosing scopes, by the names its nodes use. The node owning the subgraph lists the outer
  // values they are bound to, in this order, after its own inputs. Empty in a top-level graph.
  std::vector<std::string> captures;

  // Node indices in an order where every node follows its producers. Throws an Error naming a
  // node when an input is produced nowhere (not a graph input, initializer, capture or node
  // output) or the graph has a cycle.
  std::vector<size_t> topological_order() const;
};

}  // namespace reforge::ir
