// ONNX Runtime's com.microsoft GroupQueryAttention and SkipSimplifiedLayerNormalization and its
// SimplifiedLayerNormalization (ops/transformer/group_query_attention.cc, simplified_norm.cc)
// against ONNX Runtime's CPU outputs: the one-node models of tests/data/genai_ops (written with
// ORT's outputs by scripts/models/make_genai_ops.py), each built for the CPU, serialized and
// loaded, run, and compared element by element (NaN in a reference marks what ORT leaves
// unspecified: the rows of right padding). Then what the ops refuse, naming the node and the
// attribute or input, before any data exists (`reforge check`'s verdict) and at run time.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "ops/registry.h"
#include "runtime/plan_engine.h"
#include "support/make_tensor.h"
#include "support/plan_round_trip.h"
#include "transforms/recipe.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

const fs::path kCases = fs::path(REFORGE_SOURCE_DIR) / "tests/data/genai_ops";

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kCases)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class GenaiOps : public ::testing::TestWithParam<std::string> {};

TEST_P(GenaiOps, MatchOnnxRuntime) {
  const fs::path dir = kCases / GetParam();
  const nlohmann::json c = nlohmann::json::parse(std::ifstream(dir / "case.json"));
  const double tol = c["tolerance"].get<double>();
  runtime::PlanEngine engine(
      test_support::round_trip(build::build_plan(onnx::import_model_file((dir / "model.onnx").string()), {})));
  std::map<std::string, Tensor> feed;
  for (size_t i = 0; i < c["inputs"].size(); ++i)
    feed[c["inputs"][i].get<std::string>()] = read_npy((dir / ("in_" + std::to_string(i) + ".npy")).string());
  const std::vector<Tensor> got = engine.run(feed);
  ASSERT_EQ(got.size(), c["outputs"].size());
  for (size_t o = 0; o < got.size(); ++o) {
    const std::string name = c["outputs"][o].get<std::string>();
    const Tensor want = read_npy((dir / ("out_" + std::to_string(o) + ".npy")).string());
    ASSERT_EQ(got[o].dtype(), want.dtype()) << name;
    ASSERT_EQ(got[o].shape(), want.shape()) << name << ": " << got[o].describe() << " vs " << want.describe();
    int64_t compared = 0;
    double worst = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double w = want.as_double(i), g = got[o].as_double(i);
      if (std::isnan(w)) continue;  // unspecified
      ++compared;
      worst = std::max(worst, std::abs(g - w) / (1 + std::abs(w)));
      ASSERT_NEAR(g, w, tol * (1 + std::abs(w))) << name << "[" << i << "]";
    }
    EXPECT_GT(compared, 0) << name;
    std::printf("  %s %s: %lld elements, largest error %.3g (tolerance %.3g)\n", GetParam().c_str(), name.c_str(),
                static_cast<long long>(compared), worst, tol);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GenaiOps, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

ir::Node gqa_node(std::map<std::string, ir::Attribute> attrs, std::vector<std::string> inputs = {}) {
  ir::Node n;
  n.name = "attn";
  n.op_type = "GroupQueryAttention";
  n.domain = "com.microsoft";
  n.opset = 1;
  n.inputs = inputs.empty() ? std::vector<std::string>{"qkv", "", "", "pk", "pv", "sk", "total"} : inputs;
  n.outputs = {"y", "present_k", "present_v"};
  n.attrs = {{"num_heads", ir::int_attr("num_heads", 4)}, {"kv_num_heads", ir::int_attr("kv_num_heads", 2)}};
  for (auto& [k, v] : attrs) n.attrs[k] = v;
  return n;
}

std::string verdict(const ir::Node& n) { return ops::OpRegistry::global().why_unsupported(n); }

}  // namespace

// What GroupQueryAttention does not implement is refused by name before any data exists.
TEST(GenaiOpsRefusals, GroupQueryAttentionNamesWhatItDoesNotRun) {
  EXPECT_EQ(verdict(gqa_node({})), "");
  EXPECT_NE(verdict(gqa_node({{"smooth_softmax", ir::int_attr("smooth_softmax", 1)}})).find("smooth_softmax"),
            std::string::npos);
  EXPECT_NE(verdict(gqa_node({{"k_quant_type", ir::string_attr("k_quant_type", "PER_TENSOR")}})).find("k_quant_type"),
            std::string::npos);
  EXPECT_NE(verdict(gqa_node({{"kv_cache_bit_width", ir::int_attr("kv_cache_bit_width", 8)}})).find("kv_cache_bit_width"),
            std::string::npos);
  EXPECT_NE(verdict(gqa_node({{"qk_output", ir::int_attr("qk_output", 1)}})).find("qk_output"), std::string::npos);
  EXPECT_NE(verdict(gqa_node({{"sliding_window_cache", ir::int_attr("sliding_window_cache", 1)}}))
                .find("sliding_window_cache"),
            std::string::npos);
  EXPECT_NE(verdict(gqa_node({{"num_heads", ir::int_attr("num_heads", 3)}})).find("multiple of kv_num_heads"),
            std::string::npos);
  EXPECT_NE(verdict(gqa_node({{"causal", ir::int_attr("causal", 0)},
                              {"local_window_size", ir::int_attr("local_window_size", 4)}}))
                .find("local_window_size"),
            std::string::npos);
  EXPECT_NE(verdict(gqa_node({{"do_rotary", ir::int_attr("do_rotary", 1)}})).find("cos_cache"), std::string::npos);
  const std::vector<std::pair<size_t, std::string>> inputs = {
      {9, "position_ids"}, {10, "attention_bias"}, {11, "head_sink"}, {12, "k_scale"}, {16, "query_seqlens"}};
  for (const auto& [slot, name] : inputs) {
    std::vector<std::string> in = {"qkv", "", "", "pk", "pv", "sk", "total"};
    in.resize(slot + 1);
    in[slot] = "x";
    EXPECT_NE(verdict(gqa_node({}, in)).find(name), std::string::npos) << name;
  }
  ir::Node sln;
  sln.op_type = "SimplifiedLayerNormalization";
  sln.opset = 1;
  sln.inputs = {"x", "s"};
  sln.outputs = {"y"};
  EXPECT_EQ(verdict(sln), "");
  sln.attrs["stash_type"] = ir::int_attr("stash_type", 11);
  EXPECT_NE(verdict(sln).find("stash_type"), std::string::npos);
}

// At run time: inputs that do not fit are refused naming the node and what is wrong.
TEST(GenaiOpsRefusals, GroupQueryAttentionChecksItsInputs) {
  using test_support::make;
  const ir::Node n = gqa_node({});
  auto run = [&](const Tensor& qkv, const Tensor& pk, const Tensor& sk, int32_t total) {
    const Tensor t = make<int32_t>({}, {total});
    std::vector<const Tensor*> in = {&qkv, nullptr, nullptr, &pk, &pk, &sk, &t};
    try {
      transforms::evaluate_op("com.microsoft", "GroupQueryAttention", 1, n.attrs, in, 3);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const Tensor qkv = Tensor::empty(DType::Float32, {1, 1, 8 * 8});  // head size 8
  const Tensor pk = Tensor::empty(DType::Float32, {1, 2, 3, 8});
  EXPECT_EQ(run(qkv, pk, make<int32_t>({1}, {3}), 4), "");
  EXPECT_NE(run(qkv, pk, make<int32_t>({1}, {9}), 4).find("seqlens_k[0] = 9"), std::string::npos);
  EXPECT_NE(run(qkv, pk, make<int64_t>({1}, {3}), 4).find("seqlens_k must be int32"), std::string::npos);
  EXPECT_NE(run(qkv, Tensor::empty(DType::Float32, {1, 2, 3, 4}), make<int32_t>({1}, {3}), 4).find("past_key must be"),
            std::string::npos);
  EXPECT_NE(run(Tensor::empty(DType::Float32, {1, 1, 60}), pk, make<int32_t>({1}, {3}), 4).find("hidden size 60"),
            std::string::npos);
  const std::string e = run(Tensor::empty(DType::Float32, {2, 3, 64}), Tensor::empty(DType::Float32, {2, 2, 3, 8}),
                            make<int32_t>({2}, {5, 5}), 6);
  EXPECT_NE(e.find("needs a batch of 1"), std::string::npos) << e;
  EXPECT_NE(e.find("GroupQueryAttention"), std::string::npos) << e;
}
