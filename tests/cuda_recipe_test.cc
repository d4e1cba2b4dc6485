// Recipe steps on the device (transforms/device_recipe.h; skipped without a GPU): each step kind
// that runs on the CUDA backend's kernels gives the bytes of the host replay, on random values and
// on the values where conversions differ (ties, subnormals, overflow, negative zero); steps the
// device does not run (arithmetic) run on the host inside a device replay; and every recipe of
// real plans of the Llama-style export (float32, and bfloat16 whose Cast is a recipe step) replays
// on the device to the build's own weight bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "backends/backend.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "onnx/importer.h"
#include "support/cuda_compare.h"
#include "support/make_tensor.h"
#include "transforms/device_recipe.h"
#include "transforms/recipe.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

plan::Operand source(uint32_t i) { return {plan::Operand::Kind::Source, i}; }
plan::Operand literal(uint32_t i) { return {plan::Operand::Kind::Literal, i}; }
plan::Operand step(uint32_t i) { return {plan::Operand::Kind::Step, i}; }

plan::RecipeStep op(const std::string& type, int opset, std::vector<plan::Operand> inputs,
                    std::map<std::string, ir::Attribute> attrs = {}) {
  plan::RecipeStep st;
  st.op_type = type;
  st.opset = opset;
  st.inputs = std::move(inputs);
  st.attrs = std::move(attrs);
  return st;
}

plan::Recipe recipe(std::vector<plan::RecipeStep> steps) {
  plan::Recipe r;
  r.steps = std::move(steps);
  r.result = step(static_cast<uint32_t>(r.steps.size() - 1));
  return r;
}

Tensor ints(std::vector<int64_t> v) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.mutable_data<int64_t>()[i] = v[i];
  return t;
}

// Floats where conversions are decided: halfway cases of bfloat16 and float16, subnormals of
// each, values past float16's range, signed zeros, and random values.
Tensor edge_floats(int64_t n) {
  Tensor t = test_support::random_floats({n}, 11, -3.0f, 3.0f);
  float* f = t.mutable_data<float>();
  const float edges[] = {1.00390625f,     // 1 + 2^-8: a bfloat16 tie, rounds to even
                         1.01171875f,     // 1 + 3*2^-8: a tie that rounds up
                         1.00048828125f,  // 1 + 2^-11: a float16 tie
                         1e-40f,         -1e-40f,  5.96e-8f,      3.0e-8f,
                         65504.0f,       65520.0f, 70000.0f,      -70000.0f,
                         0.0f,           -0.0f,    3.3895314e38f, std::numeric_limits<float>::max()};
  for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]) && static_cast<int64_t>(i) < n; ++i) f[i] = edges[i];
  return t;
}

void expect_same(const plan::Recipe& r, const std::vector<Tensor>& sources, const std::vector<Tensor>& literals,
                 const std::string& what) {
  SCOPED_TRACE(what);
  const backends::Backend& cuda = *backends::find_backend("cuda");
  const Tensor host = transforms::replay_recipe(r, sources, literals);
  const Tensor dev = transforms::replay_recipe_on(cuda, r, sources, literals);
  EXPECT_FALSE(dev.on_host());
  EXPECT_TRUE(transforms::bit_equal(to_host(dev), host)) << "the device replay's bytes differ from the host's";
}

class CudaRecipe : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = test_support::no_gpu(); !why.empty()) GTEST_SKIP() << why;
  }
};

}  // namespace

TEST_F(CudaRecipe, EachDeviceStepKindGivesTheHostBytes) {
  const backends::Backend& cuda = *backends::find_backend("cuda");
  const Tensor m = test_support::random_floats({37, 53}, 1);
  const Tensor x4 = test_support::random_floats({2, 3, 5, 7}, 2);
  const Tensor e = edge_floats(4096);

  // Each of these runs on the device (else the test would compare the host with itself).
  const std::vector<std::pair<std::string, plan::RecipeStep>> kinds = {
      {"transpose 2-D", op("Transpose", 13, {source(0)}, {{"perm", ir::ints_attr("perm", {1, 0})}})},
      {"cast to bfloat16", op("Cast", 19, {source(0)}, {{"to", ir::int_attr("to", 16)}})},
      {"cast to float16", op("Cast", 19, {source(0)}, {{"to", ir::int_attr("to", 10)}})},
      {"slice", op("Slice", 13, {source(0), literal(0), literal(1), literal(2), literal(3)})},
      {"concat", op("Concat", 13, {source(0), source(0)}, {{"axis", ir::int_attr("axis", 1)}})},
      {"gather", op("Gather", 13, {source(0), literal(0)}, {{"axis", ir::int_attr("axis", 0)}})},
      {"expand", op("Expand", 13, {source(0), literal(0)})},
  };
  for (const auto& [what, st] : kinds) EXPECT_TRUE(transforms::runs_on_device(cuda, st)) << what;
  EXPECT_FALSE(transforms::runs_on_device(cuda, op("Mul", 14, {source(0), source(0)})))
      << "arithmetic stays on the host";

  expect_same(recipe({kinds[0].second}), {m}, {}, "transpose 2-D");
  expect_same(recipe({op("Transpose", 13, {source(0)}, {{"perm", ir::ints_attr("perm", {0, 2, 1, 3})}})}), {x4}, {},
              "transpose 4-D");
  expect_same(recipe({kinds[1].second}), {e}, {}, "cast to bfloat16");
  expect_same(recipe({kinds[2].second}), {e}, {}, "cast to float16");
  expect_same(recipe({kinds[2].second, op("Cast", 19, {step(0)}, {{"to", ir::int_attr("to", 1)}})}), {e}, {},
              "float16 back to float32");
  expect_same(recipe({kinds[3].second}), {m}, {ints({-2, 1}), ints({0, -1}), ints({0, 1}), ints({-3, 2})},
              "slice with negative and positive steps");
  expect_same(recipe({op("Concat", 13, {source(0), source(1), source(0)}, {{"axis", ir::int_attr("axis", 0)}})}),
              {m, test_support::random_floats({4, 53}, 5)}, {}, "concat along rows");
  expect_same(recipe({kinds[4].second}), {m}, {}, "concat along columns");
  expect_same(recipe({kinds[5].second}), {m}, {ints({3, -1, 0, 36, 3})}, "gather rows");
  expect_same(recipe({op("Gather", 13, {source(0), literal(0)}, {{"axis", ir::int_attr("axis", 1)}})}), {m},
              {ints({52, 0, -5})}, "gather columns");
  expect_same(recipe({kinds[6].second}), {test_support::random_floats({1, 53}, 6)}, {ints({9, 53})}, "expand");
}

// A chain with a host-only step in the middle: transpose and cast on the device, the product on
// the host, the slice on the device again.
TEST_F(CudaRecipe, HostStepsInsideADeviceReplay) {
  const Tensor m = test_support::random_floats({64, 48}, 8), scale = test_support::random_floats({64}, 9);
  const plan::Recipe r = recipe({
      op("Transpose", 13, {source(0)}, {{"perm", ir::ints_attr("perm", {1, 0})}}),
      op("Mul", 14, {step(0), source(1)}),
      op("Cast", 19, {step(1)}, {{"to", ir::int_attr("to", 16)}}),
      op("Slice", 13, {step(2), literal(0), literal(1), literal(2)}),
  });
  expect_same(r, {m, scale}, {ints({0}), ints({40}), ints({0})}, "transpose, multiply, cast, slice");
  // An identity recipe: the source itself, copied to the device.
  plan::Recipe identity;
  identity.result = source(0);
  expect_same(identity, {m}, {}, "identity");
}

// Every recipe of real CUDA plans of the Llama-style export, replayed on the device from the
// sources read out of its ONNX file, gives the build's weight bytes.
TEST_F(CudaRecipe, EveryRecipeOfARealPlanReplaysToTheBuildsBytes) {
  const fs::path model = fs::path(REFORGE_SOURCE_DIR) / "models" / "llama" / "dynamo" / "A" / "model.onnx";
  if (!fs::exists(model)) GTEST_SKIP() << "models/llama not present";
  const backends::Backend& cuda = *backends::find_backend("cuda");
  for (plan::Precision precision : {plan::Precision::Fp32, plan::Precision::Bf16}) {
    SCOPED_TRACE(precision == plan::Precision::Bf16 ? "bf16 plan" : "fp32 plan");
    build::BuildOptions o;
    o.backend = "cuda";
    o.mode = plan::BuildMode::Refit;
    o.precision = precision;
    const plan::Plan p = build::build_plan(onnx::import_model_file(model.string()), o);
    std::vector<Tensor> sources(p.sources.size());
    for (auto& [id, t] : build::read_sources_from_onnx(p, model.string())) sources[id] = t;
    size_t replayed = 0, device_steps = 0;
    for (const auto& w : p.weights) {
      if (w.kind != plan::WeightKind::Derived) continue;
      for (const auto& st : w.recipe.steps) device_steps += transforms::runs_on_device(cuda, st);
      const Tensor dev = transforms::replay_recipe_on(cuda, w.recipe, sources, p.literals);
      EXPECT_TRUE(transforms::bit_equal(to_host(dev), w.data)) << w.name;
      ++replayed;
    }
    EXPECT_GT(replayed, 0u);
    if (precision == plan::Precision::Bf16) EXPECT_GT(device_steps, 0u) << "no step of the bf16 plan ran on the device";
  }
}
