// LoRA adapters: a base checkpoint plus a low-rank update of some of its matrices, merged into the
// checkpoint before the plan's bindings and recipes read it.
//
//   W' = W + scale · (B @ A)      A [r, in], B [out, r], W [out, in]
//   scale = lora_alpha / r        (lora_alpha / sqrt(r) with use_rslora), times a multiplier
//
// The merge happens on the checkpoint-form tensor (`<module>.weight`, as the framework holds it),
// so every engine weight derived from it — transposed, cast, packed, concatenated with others —
// follows by the build's own recipe code: a refit from base + adapter gives the engine weights of
// a refit from (or a fresh build bound to) the merged checkpoint, bit for bit.
//
// The arithmetic is fixed, so the same base and adapter always give the same bytes (adapters
// A -> B -> A return to A's weights exactly), on every machine:
//   * A, B and W are read as float32 (float16 and bfloat16 convert exactly);
//   * for each element, acc = +0, then for k = 0 .. r-1 in order: acc = fl32(acc + fl32(B[o,k] *
//     A[k,i])) — a product and a sum each rounded to float32 (never fused into one FMA: lora.cc is
//     compiled with -ffp-contract=off);
//   * d = fl32(acc * scale), with scale rounded once to float32 from the float64 alpha / r (or
//     alpha / sqrt(r)) times the multiplier;
//   * W' = W's dtype of fl32(W + d), rounded to nearest even (float32: that sum itself).
// Rows are merged in parallel; an element's sum always runs in the order above.
//
// What an adapter is comes from PEFT (huggingface/peft) as it saves one: a folder holding
// adapter_config.json and adapter_model.safetensors, whose tensors are named
// `base_model.model.<module>.lora_A.weight` and `.lora_B.weight`. Every tensor must be such a
// pair (the `base_model.model.` prefix may be absent); anything else — DoRA magnitudes, LoRA
// biases, embedding or convolution adapters, modules_to_save copies — is refused by name, as are
// the config features that a merge of W + scale·B·A does not express (use_dora, fan_in_fan_out,
// modules_to_save, bias, lora_bias, rank_pattern, alpha_pattern, layer_replication, use_qalora,
// target_parameters, trainable_token_indices, alora_invocation_tokens, another peft_type). A
// module whose `<module>.weight` the base checkpoint lacks is an error naming the adapter tensor.
// Runtime side: no importer, no protobuf.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "refit/safetensors.h"

namespace reforge::refit {

// What the merge needs of adapter_config.json.
struct LoraConfig {
  double alpha = 0;     // lora_alpha
  int64_t r = 0;        // the rank every pair has
  bool rslora = false;  // use_rslora: scale alpha / sqrt(r)
};

// Parses PEFT's adapter_config.json text; throws, naming `what` and the key, for a missing or
// ill-typed r or lora_alpha and for every feature listed above that the merge does not support.
LoraConfig parse_lora_config(const std::string& json_text, const std::string& what);

// Where an adapter comes from: a path (PEFT's folder, or its adapter_model.safetensors with
// adapter_config.json beside it), or tensors in memory with the config's JSON text.
struct LoraSource {
  std::string path;
  std::map<std::string, Tensor> tensors;
  std::string config_json;
  double multiplier = 1;  // times alpha / r (--lora-scale)
  bool given() const { return !path.empty() || !tensors.empty(); }
};

// One adapted module: `target` is the checkpoint tensor it changes (`<module>.weight`).
struct LoraPair {
  std::string target, a_key, b_key;
  Tensor a, b;
};

struct LoraAdapter {
  std::vector<LoraPair> pairs;  // sorted by target
  LoraConfig config;
  double multiplier = 1;
  std::string description;  // "LoRA adapter 'dir'" in errors and reports
  // alpha / r (or alpha / sqrt(r)) times the multiplier, in float64, rounded once to float32.
  float scale() const;
};

// Reads and checks an adapter: every tensor a pair's A or B, both present, of rank 2, shapes
// [r, in] and [out, r] with r the config's, float32, float16 or bfloat16.
LoraAdapter read_lora_adapter(const LoraSource& source);

// W + scale · (B @ A) by the arithmetic above, in W's dtype (float32, float16 or bfloat16).
// Throws, naming `what`, on shapes that do not fit.
Tensor merge_lora_weight(const Tensor& w, const Tensor& a, const Tensor& b, float scale, const std::string& what);

// `base` with every target of `adapter` replaced by its merge; the other tensors shared, not
// copied. Throws naming the adapter tensor whose target `base` lacks (with the nearest names it
// has), or whose shape does not fit the target's.
Checkpoint merge_lora(const Checkpoint& base, const LoraAdapter& adapter);

}  // namespace reforge::refit
