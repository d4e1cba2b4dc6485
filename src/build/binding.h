// Binding: which framework-checkpoint tensors (and which transforms of them) each source is.
//
// Decided at build time by exact value, never by name or tolerance. Every checkpoint tensor is
// indexed by a hash (XXH3, seeded by the byte count) of a fixed sample of its elements in each
// form an exporter may have turned it into: as is (identity or reshape), 2-D transposed, cast to
// each float type the model uses, and transposed then cast (O(1) per tensor, no full read); a
// source is bound when one form's bytes all equal it. Sources with no
// such match are compared with the leading slice of tensors that are larger along one axis (a
// position table folded to its first rows). Each candidate is confirmed bit for bit, at most once,
// so a hash collision cannot bind: identity (and reshape) by memcmp, a 2-D transpose by a tiled,
// parallel comparison with the checkpoint tensor that never materializes the transposed copy
// (ops::transpose_equals, the same tiles the Transpose kernel writes), casts and slices with the
// very kernels the refit replays (refit::apply_binding).
//
// A value that equals several checkpoint tensors (exporters merge equal initializers: unit norm
// weights, zero biases) is decided per use by the consumer node's module scope (node metadata
// `pkg.torch.onnx.name_scopes`, or a node name like `/layers.0/input_norm/Mul`); when the scope
// leaves several candidates the build fails listing them, and `--bind` settles it.
// A name match whose values differ is never a binding: that source is unbound, with the reason.
// Float initializers that match nothing and share no name are kept as literals and listed.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "build/builder.h"
#include "ir/graph.h"
#include "plan/plan.h"
#include "refit/safetensors.h"

namespace reforge::build {

struct BindOptions {
  // ONNX initializer name (or source key) -> checkpoint tensor name; settles ambiguities.
  std::map<std::string, std::string> binds;
  bool strict = false;  // unbound float initializers are errors instead of listed literals
};

struct BindResult {
  std::map<std::pair<uint32_t, uint32_t>, plan::Binding> bindings;  // by (node position, slot)
  std::vector<std::string> literal_names;  // unmatched float initializers kept as literals
  std::vector<std::string> literal_lines;  // "name float32[2,3]: why" for the non-structural ones
  double index_ms = 0, match_ms = 0;
  size_t checkpoint_bytes = 0;
};

// Binds every non-literal initializer use of `canonical` (a canonicalize()d graph).
BindResult bind_checkpoint(const ir::Graph& canonical, const std::set<std::string>& literals, const refit::Checkpoint& ckpt,
                           const BindOptions& options);

// build_plan() with every source bound to `ckpt` (plan::Source::binding, Plan::binding_literals).
plan::Plan build_plan_with_checkpoint(const ir::Graph& graph, BuildOptions options, const refit::Checkpoint& ckpt,
                                      const BindOptions& bind_options, BindResult* result = nullptr);

// Reads {"ONNX_NAME": "CKPT_NAME", ...}.
std::map<std::string, std::string> read_bind_file(const std::string& path);

// Module scopes of a node, outermost first, from its metadata or its name.
std::vector<std::string> node_scopes(const ir::Node& n);

}  // namespace reforge::build
