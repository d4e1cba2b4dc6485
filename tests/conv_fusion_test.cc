// The fuse-conv-activation pass on the CNN exports (every exporter variant, BatchNorm folded into
// the convolutions by the pass before it): Conv + Add + Relu become reforge::FusedConv, the plan
// still matches PyTorch, and a refit of a fused plan (the prepare step re-packs the weights)
// gives the outputs of a fresh build with the new weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "build/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "plan/plan_io.h"
#include "runtime/engine.h"
#include "runtime/plan_engine.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

const fs::path kModels = fs::path(REFORGE_SOURCE_DIR) / "models";

struct CnnExport {
  std::string id, path;
  std::map<std::string, std::string> inputs, reference;
};

std::vector<CnnExport> cnn_exports() {
  std::ifstream f(kModels / "manifest.json");
  if (!f) return {};
  nlohmann::json j = nlohmann::json::parse(f);
  std::vector<CnnExport> out;
  for (const auto& e : j.at("exports")) {
    if (e.at("model") != "cnn") continue;
    CnnExport c;
    c.id = e.at("export").get<std::string>() + "_" + e.at("weights").get<std::string>();
    c.path = (kModels / e.at("path").get<std::string>()).string();
    const auto& set = e.at("input_sets").at(0);
    for (const auto& [n, v] : set.at("inputs").items()) c.inputs[n] = (kModels / v.get<std::string>()).string();
    for (const auto& [n, v] : set.at("reference").items()) c.reference[n] = (kModels / v.get<std::string>()).string();
    out.push_back(c);
  }
  return out;
}

size_t count_ops(const ir::Graph& g, const std::string& op) {
  size_t n = 0;
  for (const auto& node : g.nodes) n += node.op_type == op;
  return n;
}

}  // namespace

TEST(ConvFusion, RewritesCnnExportsAndMatchesPyTorch) {
  const auto exports = cnn_exports();
  ASSERT_FALSE(exports.empty());
  for (const auto& c : exports) {
    SCOPED_TRACE(c.id);
    ir::Graph g = onnx::import_model_file(c.path);
    const size_t relus = count_ops(g, "Relu");
    for (plan::BuildMode mode : {plan::BuildMode::Baked, plan::BuildMode::Refit}) {
      build::BuildOptions o;
      o.mode = mode;
      plan::Plan p = build::build_plan(g, o);
      EXPECT_GT(count_ops(p.graph, "FusedConv"), 0u);
      EXPECT_LT(count_ops(p.graph, "Relu"), relus);
      EXPECT_EQ(count_ops(p.graph, "BatchNormalization"), 0u);
      size_t channels_last = 0;
      for (const auto& n : p.graph.nodes) channels_last += n.has_attr("y_layout");
      EXPECT_GT(channels_last, 0u) << "conv-channels-last kept no value NHWC";
      std::string bytes = plan::serialize_plan(p);
      auto owner = std::make_shared<std::string>(std::move(bytes));
      runtime::PlanEngine e(plan::parse_plan(owner, owner->data(), owner->size()));
      std::map<std::string, Tensor> in;
      for (const auto& [n, path] : c.inputs) in[n] = read_npy(path);
      auto outs = e.run(in);
      for (size_t i = 0; i < outs.size(); ++i) {
        Tensor ref = read_npy(c.reference.at(e.outputs()[i].name));
        ASSERT_EQ(outs[i].shape(), ref.shape());
        double worst = 0;
        for (int64_t k = 0; k < ref.numel(); ++k)
          worst = std::max(worst, std::fabs(outs[i].as_double(k) - ref.as_double(k)));
        EXPECT_LE(worst, 1e-4);
      }
    }
  }
}

// Replacing the weights of a FusedConv engine re-runs its prepare step (the packed-weight cache):
// the outputs equal those of an engine made with the new weights, bit for bit.
TEST(ConvFusion, ReplacedWeightsArePackedAgain) {
  auto random = [](Shape s, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1, 1);
    Tensor t = Tensor::empty(DType::Float32, s);
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
    return t;
  };
  auto graph = [&](const Tensor& w) {
    ir::Graph g;
    g.opsets = {{"", 17}, {"reforge", 1}};
    g.inputs = {{"x", DType::Float32, false, {}}, {"z", DType::Float32, false, {}}};
    g.outputs = {{"y", DType::Float32, false, {}}};
    ir::Node n;
    n.name = "conv";
    n.op_type = "FusedConv";
    n.domain = "reforge";
    n.opset = 1;
    n.inputs = {"x", "w", "b", "z"};
    n.outputs = {"y"};
    n.attrs["pads"] = ir::ints_attr("pads", {1, 1, 1, 1});
    n.attrs["activation"] = ir::string_attr("activation", "Relu");
    g.nodes.push_back(n);
    g.initializers["w"] = w;
    g.initializers["b"] = Tensor::empty(DType::Float32, {32});
    return g;
  };
  const Tensor w1 = random({32, 16, 3, 3}, 1), w2 = random({32, 16, 3, 3}, 2);
  const std::map<std::string, Tensor> in = {{"x", random({2, 16, 12, 12}, 3)}, {"z", random({2, 32, 12, 12}, 4)}};
  runtime::Engine e(graph(w1));
  const Tensor y1 = e.run(in)[0];
  e.replace_constants({{"w", w2}});
  const Tensor y2 = e.run(in)[0];
  const Tensor fresh = runtime::Engine(graph(w2)).run(in)[0];
  ASSERT_EQ(y2.nbytes(), fresh.nbytes());
  EXPECT_EQ(std::memcmp(y2.raw(), fresh.raw(), y2.nbytes()), 0);
  EXPECT_NE(std::memcmp(y1.raw(), y2.raw(), y1.nbytes()), 0);
}
