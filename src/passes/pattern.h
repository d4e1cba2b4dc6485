// Helpers for pattern-matching fusions over the build graph: who produces a value, how many
// nodes read it, and what a scalar constant holds.
//
// A fusion may *read* a constant's value (to recognize eps, an exponent, sqrt(2)) and drop it
// from the graph only when the value cannot change later: a literal, or any constant in a build
// mode that specializes on weight values (baked, refit-identical). A refittable scalar must stay a
// node input of the fused operator, whose kernel reads it at run time (see specializable()).
#pragma once

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "passes/build_state.h"

namespace reforge::passes {

// A fused node of `op` standing for the nodes it replaces, named after `anchor` (one of them) and
// keeping its metadata.
inline ir::Node make_node(const ir::Node& anchor, const char* domain, const char* op, int opset) {
  ir::Node f;
  f.name = anchor.name.empty() ? std::string(op) : anchor.name + "/fused_" + op;
  f.op_type = op;
  f.domain = domain;
  f.opset = opset;
  f.metadata = anchor.metadata;
  return f;
}

class GraphIndex {
 public:
  explicit GraphIndex(BuildState& s) : s_(s) { rebuild(); }

  void rebuild() {
    prod_.clear();
    uses_ = s_.use_counts();
    for (size_t i = 0; i < s_.graph.nodes.size(); ++i)
      for (const auto& o : s_.graph.nodes[i].outputs)
        if (!o.empty()) prod_[o] = i;
  }

  // The node producing `v` when it is of type `op` in the default domain, not already consumed
  // by an earlier rewrite; else nullptr.
  ir::Node* producer(const std::string& v, const char* op = nullptr) {
    auto it = prod_.find(v);
    if (it == prod_.end() || dead_.count(it->second)) return nullptr;
    ir::Node& n = s_.graph.nodes[it->second];
    if (op && (n.op_type != op || !n.domain.empty())) return nullptr;
    return &n;
  }
  size_t index_of(const ir::Node* n) const { return static_cast<size_t>(n - s_.graph.nodes.data()); }

  int uses(const std::string& v) const {
    auto it = uses_.find(v);
    return it == uses_.end() ? 0 : it->second;
  }
  bool is_output(const std::string& v) const {
    for (const auto& o : s_.graph.outputs)
      if (o.name == v) return true;
    return false;
  }
  // True when `v` is read by exactly one node and is no graph output.
  bool single_use(const std::string& v) const { return uses(v) == 1 && !is_output(v); }
  // The single consumer of `v` (or nullptr when it has several or none).
  ir::Node* sole_consumer(const std::string& v) {
    if (!single_use(v)) return nullptr;
    for (size_t i = 0; i < s_.graph.nodes.size(); ++i) {
      if (dead_.count(i)) continue;
      for (const auto& in : s_.graph.nodes[i].inputs)
        if (in == v) return &s_.graph.nodes[i];
    }
    return nullptr;
  }

  bool is_const(const std::string& v) const { return !v.empty() && s_.is_const(v); }
  // The value of a one-element float or integer constant.
  std::optional<double> scalar(const std::string& v) const {
    if (!is_const(v)) return std::nullopt;
    const Tensor& t = s_.consts.at(v).value;
    if (t.numel() != 1) return std::nullopt;
    if (t.dtype() == DType::Float32) return static_cast<double>(t.data<float>()[0]);
    if (t.dtype() == DType::Float64) return t.data<double>()[0];
    if (t.dtype() == DType::Int64) return static_cast<double>(t.data<int64_t>()[0]);
    if (t.dtype() == DType::Int32) return static_cast<double>(t.data<int32_t>()[0]);
    return std::nullopt;
  }
  DType const_dtype(const std::string& v) const {
    return is_const(v) ? s_.consts.at(v).value.dtype() : DType::Undefined;
  }
  // True when a pass may rely on the constant's current value: it can never change after build.
  bool specializable(const std::string& v) const {
    if (!is_const(v)) return false;
    const ConstValue& c = s_.consts.at(v);
    return c.kind == plan::WeightKind::Literal || s_.mode == plan::BuildMode::Baked ||
           s_.mode == plan::BuildMode::RefitIdentical;
  }
  // A scalar constant close to `want` (whether or not it may change at refit).
  bool near(const std::string& v, double want, double rel = 1e-6) const {
    auto x = scalar(v);
    return x && std::fabs(*x - want) <= rel * std::fabs(want) + 1e-30;
  }
  // A specializable scalar constant close to `want` (relative tolerance: float rounding of the
  // exporter's constant).
  bool scalar_is(const std::string& v, double want, double rel = 1e-6) const {
    auto x = scalar(v);
    return x && specializable(v) && std::fabs(*x - want) <= rel * std::fabs(want) + 1e-30;
  }
  // The integer values of a constant (axes, perms), if it is an integer constant.
  std::optional<std::vector<int64_t>> ints(const std::string& v) const {
    if (!is_const(v)) return std::nullopt;
    const Tensor& t = s_.consts.at(v).value;
    if (t.dtype() != DType::Int64 && t.dtype() != DType::Int32) return std::nullopt;
    return t.to_int64_vector();
  }

  void kill(const ir::Node* n) { dead_.insert(index_of(n)); }
  bool dead(size_t i) const { return dead_.count(i) != 0; }

  // Removes the killed nodes from the graph.
  void sweep() {
    std::vector<ir::Node> kept;
    kept.reserve(s_.graph.nodes.size());
    for (size_t i = 0; i < s_.graph.nodes.size(); ++i)
      if (!dead_.count(i)) kept.push_back(std::move(s_.graph.nodes[i]));
    s_.graph.nodes = std::move(kept);
    dead_.clear();
    rebuild();
  }

 private:
  BuildState& s_;
  std::map<std::string, size_t> prod_;
  std::map<std::string, int> uses_;
  std::set<size_t> dead_;
};

// The other input of a two-input node, given one of them (or "" when `x` is not an input).
inline std::string other_input(const ir::Node& n, const std::string& x) {
  if (n.inputs.size() != 2) return "";
  if (n.inputs[0] == x) return n.inputs[1];
  if (n.inputs[1] == x) return n.inputs[0];
  return "";
}

}  // namespace reforge::passes
