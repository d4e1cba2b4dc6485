// The state the build passes share: the graph being optimized and, for every constant value
// it reads, the value and its provenance (literal, derived from sources by a recipe, or baked).
//
// Passes never create a constant without provenance: they go through fold_constant(), which
// evaluates an operator with the registry kernel and records that same call as a recipe step.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/progress.h"
#include "ir/graph.h"
#include "plan/plan.h"

namespace reforge::passes {

struct ConstValue {
  Tensor value;
  plan::WeightKind kind = plan::WeightKind::Literal;
  plan::Recipe recipe;         // for Derived: how `value` is made from sources
  std::set<uint32_t> sources;  // sources the recipe reads
  bool verified = false;       // the recipe was already replayed bit-exactly (verify_recipe)
};

struct BuildState {
  ir::Graph graph;  // graph.initializers is unused once the state is made: constants live in `consts`
  std::map<std::string, ConstValue> consts;
  std::vector<plan::Source> sources;
  std::vector<Tensor> source_values;  // build-time value of each source
  std::vector<Tensor> literals;       // recipe literal operands
  plan::BuildMode mode = plan::BuildMode::Baked;
  plan::Precision precision = plan::Precision::Fp32;
  int64_t block_size = 0;           // --precision int4: k per quantization block
  bool pack_linear_panels = false;  // linear-weights-packing runs (BuildOptions::weight_packing)
  bool pack_half_panels = false;    // linear-weights-packing packs the 16-bit weights in panels
  bool transpose_linear_weights = false;  // transpose-linear-weights runs (WeightLayouts::linear_transposed)
  bool bf16_activations = false;    // bf16 Linear layers round X to bfloat16 (BuildOptions::activations)
  std::string backend = "cpu";      // where the nodes will run (BuildOptions::backend)
  // 16-bit weight made by linear-weights-precision -> the float32 constant it was cast from, where
  // no node reads that any more: linear-weights-packing releases it once the 16-bit one is packed.
  std::map<std::string, std::string> cast_from;
  // Fusions not made because the backend's kernel would decline the fused node ("OP at NODE:
  // reason"; passes/backend_verdict.h): the unfused ops run instead.
  std::vector<std::string> declined;
  int next_id = 0;
  // BuildOptions::progress, and the step the builder reported last ("pass NAME"): a pass that
  // counts its work reports it under that name (core/progress.h).
  ProgressCallback progress;
  std::string step;

  bool is_const(const std::string& value) const { return consts.count(value) != 0; }
  // A fresh value name that no node or constant uses yet.
  std::string fresh_name(const std::string& base);
  // Evaluates `op` on constant inputs (all must be constants) with the registry kernel and
  // returns the provenance of output `output`: literal when every input is literal, derived
  // when any input is derived (recording the step in a recipe), baked otherwise.
  ConstValue fold(const std::string& domain, const std::string& op_type, int opset,
                  const std::map<std::string, ir::Attribute>& attrs, const std::vector<std::string>& inputs,
                  size_t num_outputs, size_t output);
  // Same, for several outputs at once.
  std::vector<ConstValue> fold_all(const std::string& domain, const std::string& op_type, int opset,
                                   const std::map<std::string, ir::Attribute>& attrs,
                                   const std::vector<std::string>& inputs, size_t num_outputs);
  // Number of nodes reading each value (graph outputs count as readers).
  std::map<std::string, int> use_counts() const;
  // Drops the constant `value`, a source's own value that no node reads any more because a
  // pass replaced it by `made` (made from it by fold). When no other constant is made from that
  // source either, `made`'s recipe is verified now (as the builder verifies every recipe) and
  // the build lets go of the source's value: a pass that re-lays out every weight (packing)
  // then holds one extra weight at a time, not a second copy of the model.
  void release_replaced(const std::string& value, const std::string& made) {
    release_replaced(value, std::vector<std::string>{made});
  }
  // Same, for a value replaced by several constants made from it (a quantized weight, its scales
  // and zero points): each one's recipe is verified.
  void release_replaced(const std::string& value, const std::vector<std::string>& made);
  // Replays the recipe of the derived constant `cv` (named `name` in errors) on the build-time
  // sources unless that was done already, and fails unless it reproduces `cv` bit for bit.
  void verify_recipe(const std::string& name, ConstValue& cv) const;
};

// A named pass. `reads_weight_values` passes specialize on weight values and run only in baked
// and refit-identical builds (none of the current passes does).
// An op a pass puts in the graph: (domain, op type) at opset `opset`.
struct EmittedOp {
  const char* domain;
  const char* op_type;
  int opset;
};

struct Pass {
  const char* name;
  bool reads_weight_values;
  void (*run)(BuildState&);
  // The ops this pass puts in the graph in place of others: it runs only for a backend that can
  // run all of them (build::BuildOptions::backend), so a backend without those kernels gets the
  // graph as it was.
  std::vector<EmittedOp> emits = {};
};

void fuse_dequantize_matmul(BuildState& s);  // qdq_matmul.cc
void constant_folding(BuildState& s);
void fold_batchnorm_into_conv(BuildState& s);
void fuse_conv_activation(BuildState& s);   // conv_fusion.cc
void conv_channels_last(BuildState& s);     // conv_fusion.cc
void conv_residual_inplace(BuildState& s);  // conv_fusion.cc
void fuse_matmul_add(BuildState& s);
// Transformer fusions (fusion_transformer.cc).
void fuse_rms_norm(BuildState& s);
void fuse_rms_norm_cast(BuildState& s);
void fuse_layer_norm(BuildState& s);
void fuse_gelu(BuildState& s);
void fuse_add_rms_norm(BuildState& s);
void fuse_silu(BuildState& s);
void fuse_attention(BuildState& s);
void group_matmuls(BuildState& s);  // matmul_group.cc
void transpose_linear_weights(BuildState& s);  // transpose_weights.cc
void fuse_rotary(BuildState& s);
void linear_weights_precision(BuildState& s);
void linear_weights_quantize(BuildState& s);  // quantize_weights.cc
void linear_weights_packing(BuildState& s);   // weight_packing.cc
void eliminate_dead_code(BuildState& s);

// The default pipeline, in order.
const std::vector<Pass>& default_passes();

}  // namespace reforge::passes
