// CommitOptions::skip_unchanged (refit/refitter.h): a refit whose new weights change only some
// matrices replays only the recipes that read them; the engine weights equal a fresh build of the
// new model bit for bit, and so do the outputs; the weights left alone keep their storage; the
// hashes the refit records let the next one compare (the same weights again: nothing replayed;
// back to the first: only the changed ones); a plan whose engine holds no weights (stripped) is
// given all of them; a NaN in a value given is refused as without skipping (the values are read
// once, for their hash and their finiteness).
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "builder/binding.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "onnx/importer.h"
#include "refit/refit_from.h"
#include "refit/refitter.h"
#include "refit/safetensors.h"
#include "runtime/plan_engine.h"
#include "support/engine_checks.h"
#include "support/plan_round_trip.h"
#include "support/synthetic_llama.h"
#include "transforms/recipe.h"

using namespace reforge;

namespace {

// `g` with the first `count` matrices (rank-2 initializers, in name order) scaled by 1.5.
ir::Graph with_changed_matrices(ir::Graph g, size_t count, std::vector<std::string>* changed) {
  for (auto& [name, t] : g.initializers) {
    if (changed->size() == count) break;
    if (t.rank() != 2 || t.dtype() != DType::Float32) continue;
    Tensor c = Tensor::empty(DType::Float32, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) c.mutable_data<float>()[i] = t.data<float>()[i] * 1.5f;
    t = c;
    changed->push_back(name);
  }
  return g;
}

refit::CommitReport refit_to(runtime::PlanEngine& engine, const ir::Graph& model, bool skip) {
  refit::Refitter r(engine);
  for (const auto& [id, v] : build::read_sources_from_onnx(engine.plan(), model)) r.set_source(id, v);
  refit::CommitOptions o;
  o.skip_unchanged = skip;
  return r.commit(o);
}

// The derived engine weights that read one of the sources named by `names`.
std::set<std::string> readers(const plan::Plan& p, const std::vector<std::string>& names) {
  std::set<std::string> out;
  for (const auto& w : p.weights) {
    if (w.kind != plan::WeightKind::Derived) continue;
    for (uint32_t s : w.sources)
      for (const auto& n : p.sources[s].names)
        for (const auto& c : names)
          if (n == c) out.insert(w.name);
  }
  return out;
}

void expect_fresh(const runtime::PlanEngine& engine, const plan::Plan& fresh, const std::string& what) {
  for (const auto& w : fresh.weights)
    EXPECT_TRUE(transforms::bit_equal(engine.weight(w.name), w.data)) << what << ": engine weight " << w.name;
  const auto in = synth::synthetic_llama_inputs(5);
  const auto got = engine.run(in);
  const auto want = runtime::PlanEngine(fresh).run(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(transforms::bit_equal(got[i], want[i])) << what << ": output " << i;
}

TEST(RefitSkipUnchanged, ReplaysOnlyTheRecipesOfChangedSources) {
  for (plan::Precision precision : {plan::Precision::Fp32, plan::Precision::Bf16}) {
    SCOPED_TRACE(plan::precision_name(precision));
    synth::LlamaSpec spec;
    spec.seq = 5;
    spec.share_norms = false;
    const ir::Graph ga = synth::synthetic_llama(spec);
    std::vector<std::string> changed;
    const ir::Graph gb = with_changed_matrices(ga, 2, &changed);
    ASSERT_EQ(changed.size(), 2u);
    build::BuildOptions o;
    o.mode = plan::BuildMode::Refit;
    o.precision = precision;
    const plan::Plan fresh_a = build::build_plan(ga, o), fresh_b = build::build_plan(gb, o);
    runtime::PlanEngine engine(test_support::round_trip(fresh_a));
    const std::set<std::string> touched = readers(engine.plan(), changed);
    ASSERT_FALSE(touched.empty());
    size_t derived = 0;
    std::map<std::string, const void*> storage;
    for (const auto& w : engine.plan().weights)
      if (w.kind == plan::WeightKind::Derived) ++derived, storage[w.name] = engine.weight(w.name).raw();
    ASSERT_LT(touched.size(), derived);

    const refit::CommitReport to_b = refit_to(engine, gb, true);
    EXPECT_EQ(to_b.sources_unchanged, to_b.sources_set - 2);
    EXPECT_EQ(to_b.weights_replayed, touched.size());
    expect_fresh(engine, fresh_b, "A -> B");
    for (const auto& [name, raw] : storage)
      if (!touched.count(name)) EXPECT_EQ(engine.weight(name).raw(), raw) << name << " was made again";

    const refit::CommitReport again = refit_to(engine, gb, true);
    EXPECT_EQ(again.sources_unchanged, again.sources_set);
    EXPECT_EQ(again.weights_replayed, 0u);
    expect_fresh(engine, fresh_b, "B -> B");

    const refit::CommitReport back = refit_to(engine, ga, true);
    EXPECT_EQ(back.sources_unchanged, back.sources_set - 2);
    EXPECT_EQ(back.weights_replayed, touched.size());
    expect_fresh(engine, fresh_a, "B -> A");

    const refit::CommitReport full = refit_to(engine, gb, false);
    EXPECT_EQ(full.sources_unchanged, 0u);
    EXPECT_EQ(full.weights_replayed, derived);
    expect_fresh(engine, fresh_b, "A -> B without skip_unchanged");
  }
}

TEST(RefitSkipUnchanged, AStrippedPlanIsGivenEveryWeight) {
  synth::LlamaSpec spec;
  spec.seq = 5;
  spec.share_norms = false;
  const ir::Graph ga = synth::synthetic_llama(spec);
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  const plan::Plan fresh = build::build_plan(ga, o);
  o.strip_weights = true;
  runtime::PlanEngine engine(test_support::round_trip(build::build_plan(ga, o)));
  size_t derived = 0;
  for (const auto& w : engine.plan().weights) derived += w.kind == plan::WeightKind::Derived;
  const refit::CommitReport rep = refit_to(engine, ga, true);
  EXPECT_EQ(rep.weights_replayed, derived);
  expect_fresh(engine, fresh, "stripped, attached");
}

// The values are read once for their hash and their finiteness: a NaN in a changed matrix is
// refused, naming the source and the element, and the engine keeps A.
TEST(RefitSkipUnchanged, ANonFiniteValueIsRefused) {
  synth::LlamaSpec spec;
  spec.seq = 5;
  spec.share_norms = false;
  const ir::Graph ga = synth::synthetic_llama(spec);
  std::vector<std::string> changed;
  ir::Graph gb = with_changed_matrices(ga, 1, &changed);
  ASSERT_EQ(changed.size(), 1u);
  Tensor& m = gb.initializers.at(changed[0]);
  const int64_t cols = m.shape()[1];
  m.mutable_data<float>()[cols + 2] = std::numeric_limits<float>::quiet_NaN();  // element [1, 2]
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  const plan::Plan fresh_a = build::build_plan(ga, o);
  runtime::PlanEngine engine(test_support::round_trip(fresh_a));
  for (bool skip : {true, false}) {
    SCOPED_TRACE(skip ? "skip_unchanged" : "every value");
    const std::string err = test_support::error_of([&] { refit_to(engine, gb, skip); });
    EXPECT_NE(err.find("'" + changed[0] + "'"), std::string::npos) << err;
    EXPECT_NE(err.find("[1, 2]"), std::string::npos) << err;
    EXPECT_NE(err.find("non-finite"), std::string::npos) << err;
    expect_fresh(engine, fresh_a, "after the refused refit");
  }
}

}  // namespace

// A plan bound to a real `transformers` checkpoint, whose Linear matrices the checkpoint stores
// transposed (set as their transposes' matrices, hashed as the values they stand for): refit to B
// (every weight whose bytes change is replayed, not those of the tensors B shares with A), to B
// again (nothing replayed), back to A; each equal to the plan refit without skipping.
TEST(RefitSkipUnchanged, CheckpointMatricesGivenTransposed) {
  const std::filesystem::path dir = std::filesystem::path(REFORGE_SOURCE_DIR) / "models" / "hf" / "llama_decode";
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  const plan::Plan p = test_support::round_trip(build::build_plan_with_checkpoint(
      onnx::import_model_file((dir / "A" / "model.onnx").string()), o,
      refit::Checkpoint::open((dir / "checkpoint_A.safetensors").string()), {}));
  runtime::PlanEngine engine(p), plain(p);
  auto refit_file = [](runtime::PlanEngine& e, const std::string& which, bool skip) {
    refit::RefitRequest req;
    req.files = {(std::filesystem::path(REFORGE_SOURCE_DIR) / "models" / "hf" / "llama_decode" /
                  ("checkpoint_" + which + ".safetensors"))
                     .string()};
    req.commit.skip_unchanged = skip;
    return refit::refit_from(e, req).commit;
  };
  size_t derived = 0;
  for (const auto& w : p.weights) derived += w.kind == plan::WeightKind::Derived;
  auto expect_same = [&](const std::string& what) {
    for (const auto& w : p.weights)
      if (w.kind == plan::WeightKind::Derived)
        EXPECT_TRUE(transforms::bit_equal(engine.weight(w.name), plain.weight(w.name))) << what << ": " << w.name;
  };
  // The weights whose bytes differ between A and B must be replayed; checkpoint B keeps some of A's
  // tensors (the norms' ones), whose weights need not be.
  std::map<std::string, Tensor> weights_a;
  for (const auto& w : p.weights)
    if (w.kind == plan::WeightKind::Derived) weights_a[w.name] = plain.weight(w.name);
  const refit::CommitReport to_b = refit_file(engine, "B", true);
  refit_file(plain, "B", false);
  size_t differing = 0;
  for (const auto& [name, t] : weights_a) differing += !transforms::bit_equal(plain.weight(name), t);
  EXPECT_GT(to_b.sources_unchanged, 0u);
  EXPECT_GE(to_b.weights_replayed, differing);
  EXPECT_LT(to_b.weights_replayed, derived);
  expect_same("A -> B");
  const refit::CommitReport again = refit_file(engine, "B", true);
  EXPECT_EQ(again.sources_unchanged, again.sources_set);
  EXPECT_EQ(again.weights_replayed, 0u);
  expect_same("B -> B");
  const refit::CommitReport back = refit_file(engine, "A", true);
  refit_file(plain, "A", false);
  EXPECT_EQ(back.weights_replayed, to_b.weights_replayed);
  expect_same("B -> A");
  const refit::CommitReport a_again = refit_file(engine, "A", true);
  EXPECT_EQ(a_again.weights_replayed, 0u);
}
