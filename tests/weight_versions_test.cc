// Weight versions (PlanEngine::Version): two versions of the Llama export resident in one engine,
// run alternately, each equal bit for bit to a fresh engine made from a plan holding its weights;
// they share the weights they do not change; a version is retired when nothing holds it; making
// one current takes effect for the runs that start after.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <span>

#include "builder/builder.h"
#include "onnx/importer.h"
#include "runtime/plan_engine.h"
#include "support/same_bits.h"

using namespace reforge;
using test_support::same_bits;
namespace fs = std::filesystem;

namespace {

const fs::path kLlama = fs::path(REFORGE_SOURCE_DIR) / "models/llama/dynamo/A/model.onnx";

std::map<std::string, Tensor> input(int64_t seq) {
  Tensor t = Tensor::empty(DType::Int64, {1, seq});
  for (int64_t i = 0; i < seq; ++i) t.mutable_data<int64_t>()[i] = (i * 31 + 5) % 97;
  return {{"input_ids", t}};
}

// Every derived float32 weight of the plan scaled by 0.5, and the weight that was left alone.
runtime::WeightUpdate halved(const runtime::PlanEngine& e, std::string& unchanged) {
  runtime::WeightUpdate u;
  bool skipped = false;
  for (const auto& w : e.plan().weights) {
    if (w.kind != plan::WeightKind::Derived || w.dtype != DType::Float32) continue;
    if (!skipped) {  // one weight stays shared between the versions
      skipped = true;
      unchanged = w.name;
      continue;
    }
    Tensor v = e.weight(w.name).clone();
    for (float& x : std::span<float>(v.mutable_data<float>(), static_cast<size_t>(v.numel()))) x *= 0.5f;
    u.set_weight(w.name, v);
  }
  return u;
}

TEST(WeightVersions, TwoResidentVersionsRunAlternatelyAndRetire) {
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  const plan::Plan p = build::build_plan(reforge::onnx::import_model_file(kLlama.string()), o);
  runtime::EngineOptions eo;
  eo.threads = 1;
  runtime::PlanEngine engine(p, eo);
  std::string unchanged;
  const runtime::WeightUpdate update = halved(engine, unchanged);
  ASSERT_GT(update.weights().size(), 2u);

  // The references: fresh engines from plans that hold each version's weights.
  runtime::PlanEngine fresh_a(p, eo);
  runtime::PlanEngine scratch(p, eo);
  scratch.commit(update);
  runtime::PlanEngine fresh_b(scratch.current_plan(false), eo);

  runtime::PlanEngine::Version a = engine.current_version();
  runtime::PlanEngine::Version b = engine.derive_version(a, update);
  EXPECT_EQ(engine.stats().live_weight_versions, 2);
  for (int round = 0; round < 3; ++round)
    for (int64_t seq : {5, 17}) {
      const auto in = input(seq);
      const auto want_a = fresh_a.run(in), want_b = fresh_b.run(in);
      const auto got_a = engine.run(in, a), got_b = engine.run(in, b), got_current = engine.run(in);
      EXPECT_TRUE(same_bits(got_a[0], want_a[0])) << "round " << round << ", seq " << seq;
      EXPECT_TRUE(same_bits(got_b[0], want_b[0])) << "round " << round << ", seq " << seq;
      EXPECT_TRUE(same_bits(got_current[0], want_a[0])) << "deriving a version changed the current one";
      EXPECT_FALSE(same_bits(want_a[0], want_b[0]));
    }
  // Unchanged weights are shared, not copied; changed ones are the version's own.
  const std::string changed = update.weights().begin()->first;
  const void* unchanged_in_a = engine.weight(unchanged).raw();
  const void* changed_in_a = engine.weight(changed).raw();
  engine.install_version(b);
  EXPECT_EQ(engine.weight(unchanged).raw(), unchanged_in_a);
  EXPECT_NE(engine.weight(changed).raw(), changed_in_a);
  const auto in = input(9);
  EXPECT_TRUE(same_bits(engine.run(in)[0], fresh_b.run(in)[0]));
  // Nothing holds version A any more: it is retired.
  a = runtime::PlanEngine::Version();
  EXPECT_EQ(engine.stats().live_weight_versions, 1);
  b = runtime::PlanEngine::Version();
  EXPECT_EQ(engine.stats().live_weight_versions, 1);  // the current version
}

TEST(WeightVersions, AnInvalidUpdateMakesNoVersion) {
  const plan::Plan p = build::build_plan(reforge::onnx::import_model_file(kLlama.string()), [] {
    build::BuildOptions o;
    o.mode = plan::BuildMode::Refit;
    return o;
  }());
  runtime::PlanEngine engine(p);
  runtime::WeightUpdate bad;
  bad.set_weight("no such weight", Tensor::empty(DType::Float32, {1}));
  EXPECT_THROW(engine.derive_version(engine.current_version(), bad), Error);
  EXPECT_EQ(engine.stats().live_weight_versions, 1);
}

}  // namespace
