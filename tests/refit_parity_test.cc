// Refittable plans run the same kernels as baked ones: for every export in models/, the plan
// built with --refit has the baked plan's nodes (domain and op, in order), for fp32, bf16 and fp16. No
// fusion is given up for refittability, which is what keeps a refit plan's latency at the baked
// plan's (docs/benchmarks.md measures it). Inputs may differ: a fused node keeps refittable
// scalars (dynamo's float eps, GELU's 0.5) as inputs, and its kernel takes the same fast path
// while they hold the standard values.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "builder/builder.h"
#include "onnx/importer.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

const fs::path kModelsDir = fs::path(REFORGE_SOURCE_DIR) / "models";

std::vector<std::string> node_signatures(const ir::Graph& g) {
  std::vector<std::string> out;
  for (const auto& n : g.nodes) {
    out.push_back(n.domain + "::" + n.op_type);
  }
  return out;
}

TEST(RefitParity, RefitPlansRunTheBakedPlansKernels) {
  std::ifstream f(kModelsDir / "manifest.json");
  ASSERT_TRUE(f) << "models/manifest.json";
  const nlohmann::json manifest = nlohmann::json::parse(f);
  int checked = 0;
  for (const auto& e : manifest.at("exports")) {
    if (e.at("weights") != "A") continue;
    const fs::path path = kModelsDir / e.at("path").get<std::string>();
    ir::Graph g = onnx::import_model_file(path.string());
    for (plan::Precision precision : {plan::Precision::Fp32, plan::Precision::Bf16, plan::Precision::Fp16}) {
      SCOPED_TRACE(path.string() + " " + plan::precision_name(precision));
      build::BuildOptions baked, refit;
      baked.precision = refit.precision = precision;
      refit.mode = plan::BuildMode::Refit;
      auto a = node_signatures(build::build_plan(g, baked).graph);
      auto b = node_signatures(build::build_plan(g, refit).graph);
      EXPECT_EQ(a, b);
      ++checked;
    }
  }
  EXPECT_GE(checked, 60);
}

}  // namespace
