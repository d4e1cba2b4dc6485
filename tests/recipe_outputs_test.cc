// Folding a multi-output node whose inputs derive from sources (constant-folding in a refittable
// build) records a recipe step that takes one output of the op. Replay must evaluate the op with
// as many outputs as the node had: Split cannot split into fewer parts than it was given, and
// LayerNormalization computes Y differently when Mean/InvStdDev are not requested, so a replay
// asking for one output was an error (Split) or not bit-identical (LayerNormalization). Found by
// `reforge conformance --mode refit --initializers all`.
#include <gtest/gtest.h>

#include <random>

#include "builder/builder.h"
#include "plan/plan_io.h"
#include "plan_test_util.h"
#include "runtime/plan_engine.h"
#include "transforms/recipe.h"

using namespace reforge;

namespace {

Tensor random_f(Shape s, uint32_t seed) {
  Tensor t = Tensor::empty(DType::Float32, std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2, 2);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
  return t;
}

ir::Graph graph_with(ir::Node n, const std::string& used_output) {
  ir::Graph g;
  g.name = "recipe_outputs_test";
  g.ir_version = 10;
  g.opsets = {{"", 18}};
  g.inputs.push_back({"x", DType::Float32, false, {}});
  n.name = "folded";
  n.opset = 18;
  g.nodes.push_back(std::move(n));
  ir::Node add;
  add.name = "add";
  add.op_type = "Add";
  add.opset = 18;
  add.inputs = {"x", used_output};
  add.outputs = {"y"};
  g.nodes.push_back(std::move(add));
  g.outputs.push_back({"y", DType::Float32, false, {}});
  return g;
}

// Builds `g` refittable, checks the derived weight's recipe step asks for `outputs` outputs,
// survives the plan file round trip, replays bit for bit, and that the reloaded plan runs.
void check(const ir::Graph& g, uint32_t output, uint32_t outputs, const Tensor& x) {
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  plan::Plan p = build::build_plan(g, o);  // verifies every recipe by replay
  const plan::WeightEntry* w = nullptr;
  for (const auto& e : p.weights)
    if (e.kind == plan::WeightKind::Derived && !e.recipe.steps.empty()) w = &e;
  ASSERT_NE(w, nullptr);
  const plan::RecipeStep& st = w->recipe.steps.back();
  EXPECT_EQ(st.output, output);
  EXPECT_EQ(st.num_outputs, outputs);

  plan::Plan back = plan_test::parse_bytes(plan::serialize_plan(p));
  plan_test::expect_plan_eq(p, back);
  std::vector<Tensor> sources;
  for (const auto& s : back.sources) sources.push_back(g.initializers.at(s.names.at(0)));
  Tensor replayed = transforms::replay_recipe(w->recipe, sources, back.literals);
  plan_test::expect_tensor_eq(replayed, w->data, w->name);

  runtime::PlanEngine reloaded(std::move(back));
  runtime::PlanEngine built(std::move(p));
  plan_test::expect_tensor_eq(reloaded.run({{"x", x}})[0], built.run({{"x", x}})[0], "y");
}

TEST(RecipeOutputs, SplitReplaysWithAllItsOutputs) {
  ir::Node split;
  split.op_type = "Split";
  split.inputs = {"w"};
  split.outputs = {"w0", "w1", "w2"};
  split.attrs["num_outputs"] = ir::int_attr("num_outputs", 3);
  ir::Graph g = graph_with(split, "w1");
  g.initializers["w"] = random_f({6}, 1);
  check(g, 1, 3, random_f({2}, 2));
}

TEST(RecipeOutputs, LayerNormalizationReplaysBitForBitWithMeanAndInvStdDev) {
  ir::Node ln;
  ln.op_type = "LayerNormalization";
  ln.inputs = {"w", "scale", "bias"};
  ln.outputs = {"n", "mean", "inv_std"};
  ln.attrs["axis"] = ir::int_attr("axis", -1);
  ir::Graph g = graph_with(ln, "n");
  g.initializers["w"] = random_f({3, 5}, 3);
  g.initializers["scale"] = random_f({5}, 4);
  g.initializers["bias"] = random_f({5}, 5);
  check(g, 0, 3, random_f({3, 5}, 6));
}

// Sets every "num_outputs" in the metadata to `v`; returns how many it set.
int set_num_outputs(plan_test::json& j, int v) {
  int n = 0;
  if (j.is_object()) {
    for (auto& [k, x] : j.items()) {
      if (k == "num_outputs") {
        x = v;
        ++n;
      } else {
        n += set_num_outputs(x, v);
      }
    }
  } else if (j.is_array()) {
    for (auto& x : j) n += set_num_outputs(x, v);
  }
  return n;
}

TEST(RecipeOutputs, PlanFileKeepsTheOutputCountAndRefusesOneThatOmitsTheOutput) {
  plan::Plan p = plan_test::sample_plan();
  p.weights[0].recipe.steps[0].num_outputs = 2;  // output 0 of two
  std::string bytes = plan::serialize_plan(p);
  plan_test::expect_plan_eq(p, plan_test::parse_bytes(bytes));
  // A single-output step writes no field (the reader's default: output + 1).
  plan::Plan single = plan_test::parse_bytes(plan::serialize_plan(plan_test::sample_plan()));
  EXPECT_EQ(single.weights[0].recipe.steps[0].num_outputs, 1u);
  plan_test::json meta = plan_test::metadata_of(bytes);
  ASSERT_EQ(set_num_outputs(meta, 0), 1);
  std::string bad = plan_test::with_metadata(bytes, meta.dump());
  std::string err = plan_test::error_of([&] { plan_test::parse_bytes(bad); });
  EXPECT_NE(err.find("num_outputs"), std::string::npos) << err;
  EXPECT_NE(err.find("do not include output 0"), std::string::npos) << err;
}

}  // namespace
