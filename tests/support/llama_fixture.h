// The small Llama-style export the refit tests share (models/llama, dynamo A and B): its files,
// its first input set, a plan of A in a given build mode, and a snapshot of an engine's weights.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "runtime/plan_engine.h"

namespace reforge::test_support {

inline const std::filesystem::path kModels = std::filesystem::path(REFORGE_SOURCE_DIR) / "models";
inline const std::string kLlamaA = (kModels / "llama/dynamo/A/model.onnx").string();
inline const std::string kLlamaB = (kModels / "llama/dynamo/B/model.onnx").string();

// The first input set (b1_s7), whose references are models/llama/reference/{A,B}/b1_s7.
inline std::map<std::string, Tensor> llama_inputs() {
  return {{"input_ids", read_npy((kModels / "llama/inputs/b1_s7/input_ids.npy").string())}};
}

// A plan of weights A in `mode`, stripped if asked.
inline plan::Plan llama_plan(plan::BuildMode mode = plan::BuildMode::Refit, bool strip = false) {
  build::BuildOptions o;
  o.mode = mode;
  o.strip_weights = strip;
  return build::build_plan(reforge::onnx::import_model_file(kLlamaA), o);
}

// Every engine weight by name (the tensors themselves: a failed refit must leave the same ones).
inline std::map<std::string, Tensor> weight_snapshot(const runtime::PlanEngine& e) {
  std::map<std::string, Tensor> s;
  for (const auto& w : e.plan().weights) s[w.name] = e.weight(w.name);
  return s;
}

}  // namespace reforge::test_support
