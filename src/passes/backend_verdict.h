// What the target backend says of a node a fusion would make: its kernel's checker and shape check
// (backends/backend.h), asked with the types that inference gives the graph as it is before the
// fusion (the fused node reads values that exist already). A fusion the backend's kernel would
// decline is not made: the unfused ops stay, and run where placement puts them, instead of a
// fused node that only the host could run. Backends whose kernel of the op has no shape check
// (the CPU) accept every node the checker accepts, and the graph is not inferred for them.
// Each refusal is recorded in BuildState::declined (shown by `build --print-passes`).
#pragma once

#include <memory>
#include <string>

#include "backends/backend.h"
#include "backends/placement.h"
#include "ops/infer_graph.h"
#include "passes/build_state.h"

namespace reforge::passes {

class BackendVerdict {
 public:
  explicit BackendVerdict(BuildState& s) : s_(s) {}

  // True when the backend's kernel would decline `fused`; the reason goes to s.declined.
  bool declines(const ir::Node& fused) {
    std::string why = why_not(fused);
    if (why.empty()) return false;
    s_.declined.push_back(fused.op_type + " at " + fused.label() + ": " + why);
    return true;
  }

  // "" when the backend's kernel runs `fused`, else its reason.
  std::string why_not(const ir::Node& fused) {
    const backends::KernelDef* k = backends::kernels().find(s_.backend, fused.domain, fused.op_type, fused.opset);
    if (!k) return "";  // the pass runs only where the backend has the op (Pass::emits)
    try {
      if (k->check)
        if (std::string why = k->check(fused); !why.empty()) return why;
      if (!k->shape_check) return "";
      if (!types_) infer();
      return k->shape_check(fused, backends::input_facts(fused, types_ok_ ? types_.get() : nullptr));
    } catch (const Error& e) {
      return e.what();
    }
  }

  // The inferred type of value `v` in the graph as it is now (inferred once, at the first call of
  // this or why_not), or null when inference did not reach it.
  const ops::ValueType* type_of(const std::string& v) {
    if (!types_) infer();
    return types_ok_ ? types_->find(v) : nullptr;
  }

 private:
  void infer() {
    types_ = std::make_unique<ops::GraphTypes>();
    ir::Graph g = s_.graph;
    for (const auto& [name, cv] : s_.consts) g.initializers.emplace(name, cv.value);
    ops::InferOptions io;
    io.require_all = false;
    try {
      *types_ = ops::infer_graph(g, io);
      types_ok_ = true;
    } catch (const Error&) {
      types_ok_ = false;  // every fact unknown: the shape checks decline
    }
  }

  BuildState& s_;
  std::unique_ptr<ops::GraphTypes> types_;
  bool types_ok_ = false;
};

}  // namespace reforge::passes
