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

#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "plan/plan_io.h"
#include "runtime/engine.h"
#include "runtime/plan_engine.h"
#include "support/engine_for.h"

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
  runtime::Engine e = test_support::engine_for(graph(w1));
  const Tensor y1 = e.run(in)[0];
  e.replace_constants({{"w", w2}});
  const Tensor y2 = e.run(in)[0];
  const Tensor fresh = test_support::engine_for(graph(w2)).run(in)[0];
  ASSERT_EQ(y2.nbytes(), fresh.nbytes());
  EXPECT_EQ(std::memcmp(y2.raw(), fresh.raw(), y2.nbytes()), 0);
  EXPECT_NE(std::memcmp(y1.raw(), y2.raw(), y1.nbytes()), 0);
}

// The two conv passes on a hand-made graph: Relu and residual Add fold into FusedConv; a value
// goes channels-last only when every reader is a convolution (a Mul reader or being a graph output
// keeps it NCHW); the built plan computes what the unoptimized graph computes.
TEST(ConvFusion, PassesOnHandMadeGraph) {
  auto random = [](Shape s, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-0.5f, 0.5f);
    Tensor t = Tensor::empty(DType::Float32, s);
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
    return t;
  };
  ir::Graph g;
  g.opsets = {{"", 17}};
  g.inputs = {{"x", DType::Float32, false, {}}};
  g.outputs = {{"y1", DType::Float32, false, {}}, {"y2", DType::Float32, false, {}}, {"y3", DType::Float32, false, {}}};
  auto node = [&](const std::string& name, const std::string& op, std::vector<std::string> in, std::string out) {
    ir::Node n;
    n.name = name, n.op_type = op, n.opset = 17, n.inputs = std::move(in), n.outputs = {std::move(out)};
    if (op == "Conv") n.attrs["pads"] = ir::ints_attr("pads", {1, 1, 1, 1});
    g.nodes.push_back(n);
    return &g.nodes.back();
  };
  node("c1", "Conv", {"x", "w1", "b1"}, "c1");
  node("r1", "Relu", {"c1"}, "r1");
  node("c2", "Conv", {"r1", "w2", "b2"}, "c2")->attrs.erase("pads");
  node("a2", "Add", {"c2", "r1"}, "a2");
  node("r2", "Relu", {"a2"}, "y1");
  node("m", "Mul", {"r1", "two"}, "y2");
  node("c4", "Conv", {"x", "w4"}, "c4");
  node("c5", "Conv", {"c4", "w5", "b5"}, "y3");
  g.initializers = {{"w1", random({16, 8, 3, 3}, 1)},
                    {"b1", random({16}, 2)},
                    {"w2", random({16, 16, 1, 1}, 3)},
                    {"b2", random({16}, 4)},
                    {"w4", random({8, 8, 3, 3}, 5)},
                    {"w5", random({4, 8, 3, 3}, 6)},
                    {"b5", random({4}, 7)}};
  float two = 2.0f;
  g.initializers["two"] = Tensor::copy_of(DType::Float32, {}, &two);
  const std::map<std::string, Tensor> in = {{"x", random({2, 8, 10, 10}, 8)}};
  const auto want = test_support::engine_for(g).run(in);

  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  plan::Plan p = build::build_plan(g, o);
  std::map<std::string, const ir::Node*> by_name;
  for (const auto& n : p.graph.nodes) by_name[n.name] = &n;
  EXPECT_EQ(count_ops(p.graph, "Relu"), 0u);
  EXPECT_EQ(count_ops(p.graph, "Add"), 0u);
  EXPECT_EQ(count_ops(p.graph, "FusedConv"), 4u);
  ASSERT_TRUE(by_name.count("c1") && by_name.count("c2") && by_name.count("c4") && by_name.count("c5"));
  EXPECT_EQ(by_name["c1"]->attr_string("activation", ""), "Relu");
  EXPECT_FALSE(by_name["c1"]->has_attr("y_layout"));  // r1 is also read by the Mul
  EXPECT_EQ(by_name["c2"]->inputs.size(), 4u);        // Z = r1
  EXPECT_FALSE(by_name["c2"]->has_attr("y_layout"));  // y1 is a graph output
  EXPECT_EQ(by_name["c4"]->attr_string("y_layout", ""), "NHWC");
  EXPECT_EQ(by_name["c5"]->attr_string("x_layout", ""), "NHWC");
  EXPECT_FALSE(by_name["c5"]->has_attr("y_layout"));

  runtime::PlanEngine e(std::move(p));
  const auto got = e.run(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].shape(), want[i].shape()) << i;
    for (int64_t k = 0; k < got[i].numel(); ++k) ASSERT_NEAR(got[i].as_double(k), want[i].as_double(k), 1e-4) << i;
  }
}
