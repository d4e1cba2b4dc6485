// Hostile files: committed real models truncated at many points and with bytes flipped at
// random places. Importing, building and running each must end in success or a reforge::Error,
// never a crash, an abort or another exception type.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "runtime/plan_engine.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

const fs::path kModels = fs::path(REFORGE_SOURCE_DIR) / "models";

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Returns "ok", "error" or a description of anything else that was thrown.
std::string attempt(const std::string& bytes, const std::map<std::string, Tensor>& inputs) {
  try {
    ir::Graph g = reforge::onnx::import_model_bytes(bytes.data(), bytes.size());
    build::BuildOptions o;
    o.mode = plan::BuildMode::Refit;
    runtime::PlanEngine e(build::build_plan(g, o));
    e.run(inputs);
    return "ok";
  } catch (const Error&) {
    return "error";
  } catch (const std::exception& e) {
    return std::string("unexpected exception: ") + e.what();
  }
}

struct Subject {
  const char* model;
  const char* onnx;
  std::vector<std::pair<std::string, std::string>> inputs;
};

}  // namespace

TEST(CorruptModels, TruncatedAndBitFlippedModelsFailCleanly) {
  const std::vector<Subject> subjects = {
      {"llama", "llama/dynamo/A/model.onnx", {{"input_ids", "llama/inputs/b1_s7/input_ids.npy"}}},
      {"bert",
       "bert/torch113_fold_dynamic/A/model.onnx",
       {{"input_ids", "bert/inputs/b1_s7/input_ids.npy"}, {"attention_mask", "bert/inputs/b1_s7/attention_mask.npy"}}},
      {"cnn", "cnn/dynamo/A/model.onnx", {{"pixel_values", "cnn/inputs/b1/pixel_values.npy"}}},
  };
  std::mt19937 rng(20261202);
  for (const auto& s : subjects) {
    SCOPED_TRACE(s.model);
    std::string bytes = read_file(kModels / s.onnx);
    ASSERT_FALSE(bytes.empty());
    std::map<std::string, Tensor> inputs;
    for (const auto& [n, p] : s.inputs) {
      if (!fs::exists(kModels / p)) continue;
      inputs[n] = read_npy((kModels / p).string());
    }
    EXPECT_EQ(attempt(bytes, inputs), "ok") << "the intact model must run";
    int errors = 0;
    for (int k = 1; k < 40; ++k) {
      size_t cut = bytes.size() * static_cast<size_t>(k) / 40;
      std::string r = attempt(bytes.substr(0, cut), inputs);
      EXPECT_TRUE(r == "ok" || r == "error") << "truncated at " << cut << ": " << r;
      errors += r == "error";
    }
    EXPECT_GT(errors, 30) << "truncations should mostly be detected";
    // Flip bytes in the structural part (the first 20% holds most of the graph) and anywhere.
    std::uniform_int_distribution<size_t> head(0, bytes.size() / 5), any(0, bytes.size() - 1);
    std::uniform_int_distribution<int> bit(0, 7);
    for (int k = 0; k < 150; ++k) {
      std::string bad = bytes;
      size_t pos = k % 2 ? head(rng) : any(rng);
      bad[pos] = static_cast<char>(bad[pos] ^ (1 << bit(rng)));
      std::string r = attempt(bad, inputs);
      EXPECT_TRUE(r == "ok" || r == "error") << "byte " << pos << " flipped: " << r;
    }
  }
}
