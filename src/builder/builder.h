// Builder: ir::Graph (imported) -> passes -> Plan, with provenance for every constant.
//
// The builder canonicalizes the node order, classifies every initializer as a literal or a
// source (one source per *use*), runs the named passes, and emits the plan's weight table. It
// then replays every recipe on the build-time sources and requires bit-identical results: a
// transform that cannot be replayed exactly is a build error, not a silent refit bug later.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/progress.h"
#include "ir/graph.h"
#include "plan/plan.h"

namespace reforge::build {

using WeightPacking = plan::WeightPacking;

struct BuildOptions {
  plan::BuildMode mode = plan::BuildMode::Baked;
  // The backend every node is placed on (backends/backend.h): its kernel for the node, else the
  // op's reference kernel where the backend runs those; a node with neither fails the build.
  // Passes that emit ops the backend cannot run do not run.
  std::string backend = "cpu";
  // Device backends: nodes without a device kernel run on the host, with explicit transfers
  // (backends/placement.h); without it such nodes fail the build, listed.
  bool host_fallback = false;
  // 16-bit sums of Softmax and Attention rounded after each addition, as the ONNX reference
  // (numpy on 16-bit arrays) computes them, instead of accumulated in float32 and rounded once.
  // The reference's sum stops growing once an addend falls below half its spacing (a bfloat16
  // sum of 512 ones ends at 256), so this is for reproducing the reference (conformance), not
  // for models (ops/numerics.h).
  bool reference_rounding = false;
  // Bf16 / Fp16: MatMul/Gemm weights (constant matrices) are stored in bfloat16 / float16 (pass
  // "linear-weights-precision"; the cast is a recipe step, so refit re-applies it).
  //
  // Int8 / Int4: those weights are quantized (pass "linear-weights-quantize": int8 per output
  // channel, int4 in blocks of `block_size` along K with zero points; the quantization is a recipe
  // step, so refit re-quantizes). CPU backend only.
  plan::Precision precision = plan::Precision::Fp32;
  // Int4: k per quantization block (a power of two >= 16); 0 = 32. Other precisions: must be 0.
  int64_t block_size = 0;
  // Bf16 (bf16 plans only): Linear layers round their float32 activations to bfloat16 before the
  // product (plan.h, Precision), trading accuracy for one native bfloat16 product instead of two.
  plan::Precision activations = plan::Precision::Fp32;
  WeightPacking weight_packing = WeightPacking::Auto;
  // Set: these layouts, whatever weight_packing and this CPU would choose (slow refit rebuilds in
  // the layouts a plan records). half_panels needs linear_panels.
  std::optional<plan::WeightLayouts> layouts;
  std::vector<std::string>
      individual_patterns;  // RefitIndividual: glob patterns over source names (each must match one)
  // RefitIndividual, set: the refittable sources by (consumer node position, input slot) in the
  // canonical order, in place of the patterns' verdict (which is then not checked either). A slow
  // refit rebuilds with the plan's own split: a re-export may name its initializers otherwise (an
  // exporter drops an all-zero bias, and the canonical form names it after its node), so the
  // patterns evaluated on it could choose other sources.
  std::optional<std::set<std::pair<uint32_t, uint32_t>>> refittable_positions;
  std::vector<std::string> literal_names;  // initializers to treat as literals (each must exist)
  bool strip_weights = false;              // requires a refit mode
  bool verify_recipes = true;              // replay every recipe after the build
  // Refuse a source (a float initializer that is not a literal, in every build mode) holding NaN
  // or Inf, as refit refuses such values (refit::CommitOptions::check_finite, the same scan): the
  // error names the initializer, the index and the value of the first one. Off (--allow-nonfinite):
  // what such weights then compute is the caller's business.
  bool check_finite = true;
  bool print_passes = false;             // print node/constant counts after each pass
  std::vector<std::string> skip_passes;  // glob patterns of passes not to run (each must match a pass)
  // Called as each step of the build starts ("shape inference", "pass NAME", "verifying recipes",
  // "hashing weights", "placing nodes") and as counted steps advance (weight packing, recipe
  // verification, hashing), on the building thread (core/progress.h).
  ProgressCallback progress;
  void validate() const;  // throws on inconsistent options (the model aside)
};

// Takes the graph by value: pass a temporary (or std::move) so the build owns the initializers
// and can let go of each weight once a pass has replaced it. Refuses, before any work, what it
// cannot honour (check_build_request).
plan::Plan build_plan(ir::Graph graph, const BuildOptions& options);

// Throws an Error unless a build of `canonical` (canonicalize()d, with `literals` from
// literal_initializers()) with `options` can be honoured: every node can run (the error lists
// each one that cannot, as `reforge check` does), every --literal name is an initializer, every
// --skip-pass glob matches a build pass, every --refit-individual pattern matches a source, and
// (options.check_finite) no source holds NaN or Inf. A name that matches nothing lists the
// nearest names that exist. build_plan() calls it; callers with costly work before the build
// (checkpoint binding) may call it first.
void check_build_request(const ir::Graph& canonical, const std::set<std::string>& literals,
                         const BuildOptions& options);

// True when `name` matches the glob `pattern` ('*' any run, '?' one character).
bool glob_match(const std::string& pattern, const std::string& name);

}  // namespace reforge::build
