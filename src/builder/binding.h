// Binding: which framework-checkpoint tensors (and which transforms of them) each source is.
//
// Decided at build time by exact value, never by name or tolerance. Every checkpoint tensor is
// indexed by a hash (XXH3, seeded by the byte count) of a fixed sample of its elements in each
// form an exporter may have turned it into: as is (identity or reshape), 2-D transposed, cast to
// each float type the model uses, and transposed then cast (O(1) per tensor, no full read); a
// source is bound when one form's bytes all equal it. A source no indexed form matches is tried
// as a concatenation of checkpoint tensors (fused QKV), then by the derived forms of
// build/binding_search.h: slices at any offset and gathers along any axis (position tables cut
// to the exported length, relative-position buckets), broadcasts (Expand), permutations, widening
// casts, size-1 axes anywhere. Each candidate is confirmed bit for bit, so a hash collision
// cannot bind: identity (and reshape) by memcmp, a 2-D transpose by a tiled, parallel comparison
// that never materializes the transposed copy (ops::transpose_equals), everything else by
// replaying the binding with the refit's own code (transforms::apply_binding).
//
// Equal values are no evidence of identity. A value that equals several checkpoint tensors
// (exporters merge equal initializers: unit norm weights, zero biases), or one all-equal tensor
// (a zero bias whose own tensor is missing would find another layer's), is decided per use by a
// proven rule: the candidate of the consumer's module (the innermost scope of node metadata
// `pkg.torch.onnx.name_scopes`, or of a node name like `/layers.0/input_norm/Mul`, that owns
// checkpoint tensors), else, for an initializer of one use, the candidate of its own name. When
// nothing decides the source is unbound, naming the candidates; when the module holds several
// the build fails listing them; `--bind` settles either.
// A name match whose values differ is never a binding: that source is unbound. It is a *fold*
// only where the graph shows one (a Conv/Gemm/MatMul weight that is its checkpoint tensor scaled
// per output channel: BatchNorm folded by the exporter; the other weights of that node), which
// counts as evidence of the right checkpoint; otherwise it is a *mismatch* (B's checkpoint where
// A's belongs), which counts against the under-half rule below and is reported as that.
// An input that a quantizer wrote (ops::is_quantized_input: integer codes, scales, zero points of
// a model quantized by another tool) is not bound either, since a float checkpoint cannot
// re-derive it exactly: the build fails listing them (unless allow_partial: then they are
// unbound). The exception is a weight that reforge::QuantizeWeight of one checkpoint tensor
// reproduces bit for bit (build/binding_quant.h: ONNX Runtime's asymmetric 4-bit quantizer, as
// MatMulNBits or in QDQ format): it is bound to that step, which a checkpoint refit replays.
//
// A float initializer that no checkpoint tensor derives is never kept by guess. It is a
// *constant* (plan::Binding::Status::Constant: a checkpoint refit gives it its build-time value)
// only when build/literal_proof.h proves it structural (all-equal, a causal or padding mask, an
// integer arange) or recomputes it from the configuration (rotary and sinusoidal tables, float
// aranges); a weight input of a parametric op never is. Everything else is *unbound*: the plan
// builds, and a checkpoint refit of it is refused naming the source (an ONNX refit still works).
// The user can declare structure with --literal, which makes a plan literal as without a
// checkpoint. Constants stay sources, so binding never changes what an ONNX refit accepts.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "builder/builder.h"
#include "ir/graph.h"
#include "plan/plan.h"
#include "refit/safetensors.h"

namespace reforge::build {

struct BindOptions {
  // Key -> checkpoint tensor name; settles ambiguities, never overrides values (the tensor must
  // equal the source under a supported transform, else the build fails naming both). A key is a
  // source key NAME@POS:SLOT (one use), NAME@* (every use of the initializer, explicitly), or a
  // bare initializer NAME, only for an initializer of one use: the uses of a merged initializer
  // may be different tensors, so a bare name of one is refused, listing its source keys. A key
  // that matches no refittable initializer or source is an error.
  std::map<std::string, std::string> binds;
  // Literals the user declared (--literal, "literals" of a bind file): with `strict`, each must
  // also be structural or proven (build/literal_proof.h).
  std::set<std::string> user_literals;
  bool strict = false;
  // Build even when the checkpoint binds under half of the weight sources, folds counted as
  // bound (by default that fails: it is most likely another model's checkpoint, or, where
  // same-name tensors hold other values, another checkpoint of this model).
  bool allow_partial = false;
  // Adds the bind key -> checkpoint tensor, `where` saying where it was given ("--bind", "bind
  // file 'b.json'"). A key bound already to another tensor is an error naming both: the later
  // one must not silently win.
  void add_bind(const std::string& key, const std::string& tensor, const std::string& where);

 private:
  std::map<std::string, std::string> bind_origin_;  // key -> where it was given
};

struct BindResult {
  std::map<std::pair<uint32_t, uint32_t>, plan::Binding> bindings;  // by (node position, slot)
  size_t bound = 0, unbound = 0;                                    // uses; the rest are constants
  double index_ms = 0, match_ms = 0;
  size_t checkpoint_bytes = 0;
};

// Binds every non-literal initializer use of `canonical` (a canonicalize()d graph).
BindResult bind_checkpoint(const ir::Graph& canonical, const std::set<std::string>& literals,
                           const refit::Checkpoint& ckpt, const BindOptions& options);

// build_plan() with every source bound to `ckpt` (plan::Source::binding).
plan::Plan build_plan_with_checkpoint(const ir::Graph& graph, BuildOptions options, const refit::Checkpoint& ckpt,
                                      const BindOptions& bind_options, BindResult* result = nullptr);

// A bind file: {"ONNX_NAME": "CKPT_NAME", ..., "literals": ["ONNX_NAME", ...]}.
struct BindFile {
  std::map<std::string, std::string> binds;
  std::vector<std::string> literals;
};
BindFile read_bind_file(const std::string& path);
// The same from the file's text; `what` names it in errors ("bind file 'x.json'").
BindFile parse_bind_file(const std::string& text, const std::string& what);

// Module scopes of a node, outermost first, from its metadata or its name.
std::vector<std::string> node_scopes(const ir::Node& n);

}  // namespace reforge::build
