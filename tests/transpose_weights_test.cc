// transpose-linear-weights (passes/transpose_weights.cc), asked for on the CPU through the build's
// layouts (a CUDA build asks for it by default): the 16-bit products by constant matrices become
// MatMulGroup nodes with transposed = 1 reading [N, K] weights made by a Transpose recipe step; the
// outputs equal the untransposed plan's within 16-bit rounding; the plan records the layout, keeps
// it through a save and load and a rebuild; and a refit gives exactly a fresh build's weights and
// outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/cuda_compare.h"
#include "support/plan_round_trip.h"
#include "transforms/recipe.h"

using namespace reforge;

namespace {

// X [2, 3, 64] by W1 [64, 32] and W2 [64, 16] (a group of two), Y1 by W3 [32, 8] (alone), and
// X by E [64, 24], which a Gather reads too (a tied matrix: kept as well as its transpose).
ir::Graph model(DType t, uint32_t seed) {
  ir::Graph g;
  g.name = "linear";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs.push_back(test_support::value_info("X", t, {2, 3, 64}));
  g.inputs.push_back(test_support::value_info("I", DType::Int64, {2}));
  g.initializers["W1"] = test_support::random_of(t, {64, 32}, seed, -1.0f, 1.0f);
  g.initializers["W2"] = test_support::random_of(t, {64, 16}, seed + 1, -1.0f, 1.0f);
  g.initializers["W3"] = test_support::random_of(t, {32, 8}, seed + 2, -1.0f, 1.0f);
  g.initializers["E"] = test_support::random_of(t, {64, 24}, seed + 3, -1.0f, 1.0f);
  g.nodes.push_back(test_support::node("Y1", "MatMul", {"X", "W1"}));
  g.nodes.push_back(test_support::node("Y2", "MatMul", {"X", "W2"}));
  g.nodes.push_back(test_support::node("Y3", "MatMul", {"Y1", "W3"}));
  g.nodes.push_back(test_support::node("Y4", "MatMul", {"X", "E"}));
  g.nodes.push_back(test_support::node("G", "Gather", {"E", "I"}));
  for (const char* y : {"Y1", "Y2", "Y3", "Y4", "G"}) {
    ir::ValueInfo v;
    v.name = y;
    g.outputs.push_back(v);
  }
  return g;
}

std::map<std::string, Tensor> feeds(DType t) {
  Tensor i = Tensor::empty(DType::Int64, {2});
  i.mutable_data<int64_t>()[0] = 5;
  i.mutable_data<int64_t>()[1] = 60;
  return {{"X", test_support::random_of(t, {2, 3, 64}, 99, -1.0f, 1.0f)}, {"I", i}};
}

build::BuildOptions transposed_options() {
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  plan::WeightLayouts l;
  l.linear_transposed = true;
  o.layouts = l;
  return o;
}

TEST(TransposeLinearWeights, SixteenBitProductsReadTransposedWeights) {
  for (DType t : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(t));
    const ir::Graph g = model(t, 10);
    const plan::Plan p = test_support::round_trip(build::build_plan(g, transposed_options()));
    EXPECT_TRUE(p.build->layouts.linear_transposed);
    std::vector<std::vector<std::string>> groups;
    for (const ir::Node& n : p.graph.nodes) {
      EXPECT_FALSE(n.domain.empty() && n.op_type == "MatMul") << n.label() << " stayed a MatMul";
      if (n.op_type != "MatMulGroup") continue;
      EXPECT_TRUE(n.attrs.count("transposed") && n.attrs.at("transposed").i == 1) << n.label();
      groups.push_back(n.outputs);
    }
    ASSERT_EQ(groups.size(), 2u);  // {Y1, Y2, Y4} (group-matmuls) and {Y3}
    EXPECT_EQ(groups[0], (std::vector<std::string>{"Y1", "Y2", "Y4"}));
    EXPECT_EQ(groups[1], (std::vector<std::string>{"Y3"}));
    // Every weight a group reads is the transpose of its source; the tied E stays for the Gather.
    int transposed = 0;
    for (const auto& w : p.weights) {
      if (w.recipe.steps.empty() || w.recipe.steps.back().op_type != "Transpose") continue;
      ++transposed;
      ASSERT_EQ(w.sources.size(), 1u);
      auto src = g.initializers.find(p.sources[w.sources[0]].names.at(0));
      ASSERT_NE(src, g.initializers.end()) << p.sources[w.sources[0]].key;
      EXPECT_EQ(w.shape, (Shape{src->second.dim(1), src->second.dim(0)})) << w.name;
    }
    EXPECT_EQ(transposed, 4);
    // Outputs within one 16-bit rounding of the plan without the pass (the sums may be added in
    // another order), the Gather's bit-equal.
    build::BuildOptions plain = transposed_options();
    plain.skip_passes = {"transpose-linear-weights"};
    const std::vector<Tensor> want = runtime::PlanEngine(build::build_plan(g, plain)).run(feeds(t));
    const std::vector<Tensor> got = runtime::PlanEngine(p).run(feeds(t));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].shape(), want[i].shape());
      for (int64_t e = 0; e < got[i].numel(); ++e) {
        const double a = got[i].as_double(e), b = want[i].as_double(e);
        EXPECT_LE(std::fabs(a - b), std::fabs(b) * (t == DType::BFloat16 ? 0x1p-7 : 0x1p-10) + 1e-3)
            << "output " << i << " element " << e;
      }
    }
    EXPECT_TRUE(transforms::bit_equal(got[4], want[4]));
  }
}

// A refit replays the Transpose steps: weights and outputs bit-equal to a fresh build of the new
// weights, for a full and a stripped plan; a rebuild from the new model keeps the layout.
TEST(TransposeLinearWeights, RefitEqualsAFreshBuild) {
  const DType t = DType::BFloat16;
  const ir::Graph ga = model(t, 10), gb = model(t, 20);
  const plan::Plan fresh_b = build::build_plan(gb, transposed_options());
  const std::vector<Tensor> out_b = runtime::PlanEngine(fresh_b).run(feeds(t));
  for (bool strip : {false, true}) {
    SCOPED_TRACE(strip ? "stripped" : "full");
    build::BuildOptions o = transposed_options();
    o.strip_weights = strip;
    runtime::PlanEngine engine(test_support::round_trip(build::build_plan(ga, o)));
    refit::Refitter r(engine);
    for (const auto& [id, v] : build::read_sources_from_onnx(engine.plan(), gb)) r.set_source(id, v);
    r.commit();
    for (const auto& w : fresh_b.weights)
      EXPECT_TRUE(transforms::bit_equal(engine.weight(w.name), w.data)) << "engine weight " << w.name;
    const std::vector<Tensor> out = engine.run(feeds(t));
    ASSERT_EQ(out.size(), out_b.size());
    for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(transforms::bit_equal(out[i], out_b[i])) << "output " << i;
  }
  const plan::Plan rebuilt = build::rebuild_from_onnx(build::build_plan(ga, transposed_options()), gb);
  EXPECT_TRUE(rebuilt.build->layouts.linear_transposed);
  const std::vector<Tensor> out = runtime::PlanEngine(rebuilt).run(feeds(t));
  for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(transforms::bit_equal(out[i], out_b[i])) << "rebuilt output " << i;
}

}  // namespace

namespace {

// A checkpoint's matrices given transposed (Refitter::set_source_transposed, as a checkpoint
// refit gives a Linear weight stored [out, in]): a recipe that transposes the value back reads
// the matrix itself, no transpose is made, and the weights equal a refit given the values.
TEST(TransposeLinearWeights, SourcesGivenTransposedAreReadAsTheyAre) {
  const DType t = DType::BFloat16;
  const ir::Graph ga = model(t, 10), gb = model(t, 20);
  runtime::PlanEngine by_matrix(build::build_plan(ga, transposed_options())),
      by_value(build::build_plan(ga, transposed_options()));
  const auto values = build::read_sources_from_onnx(by_value.plan(), gb);
  refit::Refitter rm(by_matrix), rv(by_value);
  size_t matrices = 0, read_straight = 0;
  for (const auto& [id, v] : values) {
    rv.set_source(id, v);
    const plan::Plan& p = by_matrix.plan();
    bool only_transposed = true;
    for (const auto& w : p.weights)
      if (std::find(w.sources.begin(), w.sources.end(), id) != w.sources.end())
        only_transposed = only_transposed && transforms::reads_source_transposable(w.recipe, id);
    if (v.rank() == 2) {
      rm.set_source_transposed(id, transforms::transpose_2d(v));
      ++matrices;
      read_straight += only_transposed;
    } else {
      rm.set_source(id, v);
    }
  }
  ASSERT_EQ(matrices, 5u);       // W1, W2, W3, and E once per use
  ASSERT_EQ(read_straight, 4u);  // E's use as the Gather's table is the matrix itself, transposed first
  const refit::CommitReport rep = rm.commit();
  rv.commit();
  EXPECT_EQ(rep.packed_from_transposed, read_straight);
  EXPECT_EQ(rep.transposed_first, matrices - read_straight);
  for (const auto& w : by_value.plan().weights)
    EXPECT_TRUE(transforms::bit_equal(by_matrix.weight(w.name), by_value.weight(w.name))) << w.name;
  const auto a = by_matrix.run(feeds(t)), b = by_value.run(feeds(t));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(transforms::bit_equal(a[i], b[i])) << "output " << i;
}

}  // namespace
