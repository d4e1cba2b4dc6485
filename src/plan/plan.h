// Plan: the built, optimized engine in memory, and its serialized form.
//
// A Plan holds the optimized graph (nodes that name registry kernels), the weight table, the
// refittable sources and the recipes that turn sources into engine weights. It is what the
// builder produces, what a plan file stores, and what an Engine is made from.
//
// Provenance invariants (checked by the builder, relied on by the refitter):
//  * every constant the graph reads is one WeightEntry, and its kind says where it came from:
//    Literal (structure: shapes, axes, eps, masks; never refittable, never stripped), Derived
//    (computed from sources by `recipe`, refittable), or Baked (computed from sources that are
//    not refittable in this build mode; never stripped);
//  * a recipe is a list of steps, each an operator (a registry kernel) applied to sources,
//    literals or earlier steps; replaying it on the build-time sources gives the stored data
//    bit for bit;
//  * a source is one *use* of an ONNX initializer (consumer node position in the canonical
//    topological order, input slot), so initializers that the exporter merged because their
//    values happened to be equal are still separate sources.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace reforge::plan {

// The newest format version this reforge reads. Version 2 adds graph-valued attributes
// (subgraphs of If, Loop, Scan; docs/plan-format.md); a plan that holds none is written as
// version 1, byte for byte as before (written_format_version).
inline constexpr uint32_t kFormatVersion = 2;

enum class BuildMode { Baked, Refit, RefitIdentical, RefitIndividual };
enum class WeightKind { Literal, Derived, Baked };

// Storage precision of the Linear weights (MatMul/Gemm with a constant matrix). Bf16 / Fp16:
// those weights are cast to bfloat16 / float16 by a recipe step and multiplied with float32
// activations and accumulation.
//
// The activations a Linear layer multiplies are float32 (Fp32, the default: the product is exact
// in X and only W is rounded) or, in bf16 plans built with `--activations bf16`, rounded to
// bfloat16 first (Bf16: the rounding TensorRT's and ONNX Runtime's bf16 modes apply, and one
// bfloat16 product instead of two on CPUs that multiply bfloat16 natively). Recorded as the plan's
// `activations` and, on each such Linear node, the attribute bf16_activations = 1.
//
// Int8 / Int4: those weights are quantized by a reforge::QuantizeWeight recipe step (int8: symmetric,
// per output channel; int4: asymmetric with zero points, in blocks of Plan::block_size along K, the
// layout of ONNX Runtime's MatMulNBits; ops/reforge/quant_weight.h has the rules) and multiplied by
// reforge::MatMulQuant, which dequantizes them to float32; activations and sums stay float32.
enum class Precision { Fp32, Bf16, Fp16, Int8, Int4 };

// True for the quantized precisions (Int8, Int4).
inline bool is_quantized(Precision p) { return p == Precision::Int8 || p == Precision::Int4; }

const char* build_mode_name(BuildMode m);  // "baked", "refit", "refit-identical", "refit-individual"
const char* precision_name(Precision p);   // "fp32", "bf16", "fp16", "int8", "int4"
// True when Linear layers may take `activations` in a plan of weight `precision`: Fp32 always,
// Bf16 in bf16 plans only.
bool activations_allowed(Precision precision, Precision activations);
const char* weight_kind_name(WeightKind k);  // "literal", "derived", "baked"

// Layout of float32 Linear-layer weights in the engine (pass "linear-weights-packing"), as the
// builder is asked for it (build::BuildOptions::weight_packing).
enum class WeightPacking {
  Auto,    // Panels on CPUs with AVX2 or AVX-512 (the building CPU decides), Plain on older ones
  Panels,  // packed column panels (backends/cpu/sgemm_panels.h), re-packed by every refit
  Plain,   // W as the model stores it (oneDNN / OpenBLAS pack it per product or at load)
};
const char* weight_packing_name(WeightPacking w);  // "auto", "panels", "plain"

// The weight layouts a build chose, the options and the building CPU together (WeightPacking::Auto
// leaves the choice to the CPU). A rebuild that uses these reproduces the plan's engine weights on
// any CPU: a layout is an arrangement of bytes, every kernel that reads one has a generic (SSE2)
// variant, and the recipe steps that make them (Cast, PackPanels) give the same bytes everywhere.
struct WeightLayouts {
  bool linear_panels = false;  // float32 Linear weights in [ceil(N/16), K, 16] panels (MatMulAddPacked)
  bool half_panels = false;    // bf16 / fp16 Linear weights in panels too (only with linear_panels)
  // 16-bit products by constant matrices store the matrix transposed, [N, K] (a device's decoding
  // products read whole rows of it: reforge::MatMulGroup with transposed = 1).
  bool linear_transposed = false;
  bool operator==(const WeightLayouts&) const = default;
};

// How a plan was built, beyond the options the Plan holds itself (mode, precision, activations,
// individual_patterns, literal_names, stripped): the rest of the builder's options, the target,
// and what the build chose for it. Slow refit rebuilds with exactly these.
struct BuildRecord {
  // Options (build::BuildOptions).
  WeightPacking weight_packing = WeightPacking::Auto;
  std::vector<std::string> skip_passes;  // glob patterns of passes that did not run (--skip-pass)
  bool verify_recipes = true;            // every recipe was replayed after the build
  // Target.
  std::string backend = "cpu";
  // Device backends: nodes without a device kernel were placed on the host (--allow-cpu-fallback).
  bool host_fallback = false;
  // 16-bit Softmax/Attention sums rounded as the ONNX reference rounds them (BuildOptions).
  bool reference_rounding = false;
  // The building CPU's instruction sets that the build consulted: its vector level ("generic",
  // "avx2" or "avx512", core/simd.h) and, in bf16 builds that let the CPU choose the layout,
  // "bf16-matmul" when oneDNN multiplies bfloat16 natively there.
  std::vector<std::string> isa;
  WeightLayouts layouts;  // what the build chose (from weight_packing and `isa`)
  bool operator==(const BuildRecord&) const = default;
};

// An input of a recipe step, or a recipe's result.
struct Operand {
  enum class Kind { Source, Literal, Step };
  Kind kind = Kind::Source;
  uint32_t index = 0;  // into Plan::sources, Plan::literals, or Recipe::steps
};

struct RecipeStep {
  std::string domain;  // "" for ONNX ops; "reforge" for our own transforms (BatchNorm folding, ...)
  std::string op_type;
  int opset = 0;
  std::map<std::string, ir::Attribute> attrs;  // no graph attributes
  std::vector<Operand> inputs;                 // Operand with kind Step refers to an earlier step
  uint32_t output = 0;                         // which output of the op is taken
  // How many outputs the op is evaluated with (> output): the node's own count. Split needs it to
  // split at all, and a kernel may compute an output differently when fewer are requested
  // (LayerNormalization without Mean/InvStdDev), so replay must ask for what the build asked for.
  uint32_t num_outputs = 1;
};

struct Recipe {
  std::vector<RecipeStep> steps;
  Operand result;  // a Source (identity recipe) or the last Step
};

// How a source is found in a framework checkpoint (safetensors), decided by exact value at build
// time (build/binding.h). Replaying `steps` with transforms::evaluate_op on the named checkpoint
// tensors (and the binding's own `literals`), then reshaping to the source's shape, gives the
// source's value.
//
// Constant: the source is not derived from the checkpoint at all; it is a function of the model's
// configuration (a mask, a rotary table, an arange), decided by structure, by a recognizer that
// recomputed it, or by the user's word (`reason`). A checkpoint refit gives it `literals[0]`, its
// build-time value. The source stays a source: a refit from a re-exported ONNX still takes it
// from the new model, so checkpoint binding never changes what an ONNX refit accepts.
struct Binding {
  enum class Status { None, Bound, Unbound, Constant };
  enum class Reason { None, Structural, Proven, User };
  Status status = Status::None;  // None: the plan was built without a checkpoint
  struct Input {
    std::string name;  // checkpoint tensor name
    DType dtype = DType::Undefined;
    Shape shape;
    // Other checkpoint tensors that held exactly these bytes (same dtype and shape) at build and
    // are not all-equal: copies of one tied parameter (T5's shared.weight and
    // encoder.embed_tokens.weight). A checkpoint refit refuses a checkpoint that holds one of them
    // with other bytes than this tensor: which copy the model reads cannot be told. An all-equal
    // value (a zero bias, a unit norm weight) equal to another is no evidence of a tie.
    std::vector<std::string> ties;
  };
  std::vector<Input> checkpoint;  // Bound: tensors read; Operand Source k is checkpoint[k]
  std::vector<RecipeStep> steps;  // Bound: transforms (Slice, Gather, Transpose, Cast, Concat,
                                  // Reshape, Expand); empty = identity or reshape of
                                  // checkpoint[0]; result = last step
  std::vector<Tensor> literals;   // Operand Literal k of a step is literals[k] (gather indices,
                                  // shapes); Constant: literals[0] is the value
  Reason reason = Reason::None;   // Constant: why it is one
  std::string rule;               // Constant: the structural rule or the proof (recipe, ulps)
  std::string note;               // Bound: how it was decided; Unbound: why it is not bound
};

const char* binding_status_name(Binding::Status s);  // "none", "bound", "unbound", "constant"
const char* binding_reason_name(Binding::Reason r);  // "", "structural", "proven", "user"

struct Source {
  std::string key;                 // unique and stable: "<initializer name>@<node position>:<slot>"
  std::vector<std::string> names;  // initializer name(s) a user would recognize
  std::string consumer;            // consumer node's name
  std::string op_type;             // consumer node's op type
  uint32_t node_position = 0;      // consumer's index in the canonical topological order
  uint32_t slot = 0;               // input slot of the consumer
  DType dtype = DType::Undefined;
  Shape shape;
  uint64_t hash = 0;  // XXH3-64 of the build-time bytes
  bool refittable = true;
  Binding binding;
};

// A float initializer the user declared literal (--literal) in a build bound to a checkpoint,
// which binding derives from that checkpoint's tensors as it derives a source (`binding`, status
// Bound: the same name, a transpose, a slice...). The plan keeps the literal's value whatever a
// refit brings, so a checkpoint refit derives it from the new checkpoint and refuses a value whose
// hash differs from `hash` (as for a baked source; refit::CommitOptions::keep_baked keeps the
// plan's value instead).
struct LiteralBinding {
  std::string name;  // the initializer
  DType dtype = DType::Undefined;
  Shape shape;
  uint64_t hash = 0;  // XXH3-64 of the build-time bytes
  Binding binding;
};

struct WeightEntry {
  std::string name;  // value name the graph reads
  WeightKind kind = WeightKind::Literal;
  DType dtype = DType::Undefined;
  Shape shape;
  Recipe recipe;                  // empty (no steps, result unused) for literals
  std::vector<uint32_t> sources;  // sources the recipe reads (sorted, unique)
  uint64_t hash = 0;              // XXH3-64 of the data
  Tensor data;                    // undefined when stripped
};

struct Plan {
  uint32_t format_version = kFormatVersion;  // as read; the writer writes written_format_version()
  BuildMode mode = BuildMode::Baked;
  Precision precision = Precision::Fp32;
  Precision activations = Precision::Fp32;       // Fp32, or Bf16 (bf16 plans only)
  int64_t block_size = 0;                        // Int4: k per quantization block; else 0
  std::vector<std::string> individual_patterns;  // for RefitIndividual
  std::vector<std::string> literal_names;        // initializers the user declared literal (--literal)
  std::vector<LiteralBinding> literal_bindings;  // of those, the ones the build's checkpoint holds
  bool stripped = false;
  std::string producer;  // "reforge <version>" (core/version.h)
  // Absent in plans written before it was recorded; slow refit then infers the layouts from the
  // graph's nodes and cannot know the skipped passes.
  std::optional<BuildRecord> build;
  std::string model_name;
  ir::Graph graph;  // optimized graph; graph.initializers is empty: constants live in `weights`
  // The backend each node of `graph` runs on (graph.nodes order), as the builder's placement
  // chose it. Empty: every node on build->backend ("cpu" without a build record), which is how
  // plans written before placement was recorded read.
  std::vector<std::string> placement;
  std::vector<WeightEntry> weights;
  std::vector<Source> sources;
  std::vector<Tensor> literals;  // recipe literal operands
  // Structural fingerprint of the original model, one line per node in canonical order
  // (op type, attributes, where each input comes from, literal hashes; never initializer
  // names). Refit from ONNX compares the new model's fingerprint with this one.
  std::vector<std::string> fingerprint;
  // The element type and symbolic shape of every graph input and node output of `graph`, as
  // shape inference (ops/infer_graph.h) gives them for the optimized graph: a dimension is a size,
  // a symbol of the inputs ("batch") or one inference made for a size it cannot name ("unk_3");
  // has_shape false when the rank is unknown (a data-dependent rank, an op without inference), and
  // dtype Undefined when nothing is known. In graph order (inputs, then node outputs); empty in
  // plans written before it was recorded. Constants have theirs in `weights`.
  std::vector<ir::ValueInfo> values;
};

// The backend the plan was built for: its build record's, or "cpu" for a plan without one.
std::string backend_of(const Plan& p);

// The backend of every node of p.graph: p.placement, or its default when empty. Throws when the
// placement does not have one entry per node.
std::vector<std::string> node_backends(const Plan& p);

// The format version the writer gives `p`: 2 when its graph or a recipe step holds a graph-valued
// attribute, else 1.
uint32_t written_format_version(const Plan& p);

}  // namespace reforge::plan
