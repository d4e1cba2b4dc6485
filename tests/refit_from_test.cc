// The library's refit entry points (refit/refit_from.h, build/onnx_refit.h) and the engine's
// weight transaction (runtime/plan_engine.h), on the committed Llama-style model: a plan built
// from the dynamo export with weights A, refit to B
//   - through build::refit_from from B's re-exported ONNX with verify (fast and slow compared bit
//     for bit before the commit), and by the slow path alone;
//   - through refit::refit_from (runtime only) from checkpoint B (the plan bound to checkpoint A),
//     and from caller tensors;
// each time matching PyTorch's outputs for B within 1e-4. Then the refusals: an inconsistent
// request, or an engine-side update that names what the plan lacks, leaves the engine unchanged.
#include "refit/refit_from.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>

#include "builder/binding.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "refit/safetensors.h"
#include "runtime/plan_engine.h"
#include "support/engine_checks.h"
#include "support/plan_round_trip.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::derived_weight_hashes;
using test_support::error_of;
using test_support::round_trip;
namespace fs = std::filesystem;

namespace {

const fs::path kLlama = fs::path(REFORGE_SOURCE_DIR) / "models" / "llama";

std::string onnx_of(const char* weights) { return (kLlama / "dynamo" / weights / "model.onnx").string(); }

// max |out - reference B| over both input sets.
double max_diff_to_b(const runtime::PlanEngine& e) {
  double m = 0;
  for (const char* set : {"b1_s7", "b2_s5"}) {
    auto outs = e.run({{"input_ids", read_npy((kLlama / "inputs" / set / "input_ids.npy").string())}});
    Tensor ref = read_npy((kLlama / "reference" / "B" / set / "logits.npy").string());
    EXPECT_EQ(outs.at(0).shape(), ref.shape()) << set;
    for (int64_t k = 0; k < ref.numel() && k < outs[0].numel(); ++k)
      m = std::max(m, std::fabs(ref.as_double(k) - outs[0].as_double(k)));
  }
  return m;
}

plan::Plan build_a(bool strip) {
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  o.strip_weights = strip;
  return round_trip(build::build_plan(onnx::import_model_file(onnx_of("A")), o));
}

}  // namespace

// "Refit with verify" from C++: fast refit staged, a rebuild from B compared with it bit for bit,
// then one commit; the outputs are PyTorch's for B.
TEST(RefitFrom, OnnxVerifyMatchesFrameworkB) {
  for (bool strip : {true, false}) {
    SCOPED_TRACE(strip ? "stripped" : "full");
    runtime::PlanEngine e(build_a(strip));
    refit::RefitRequest req;
    req.files = {onnx_of("B")};
    req.mode = refit::RefitMode::Verify;
    refit::RefitReport rep = build::refit_from(e, req);
    EXPECT_EQ(rep.from, "onnx");
    EXPECT_EQ(rep.mode, refit::RefitMode::Verify);
    EXPECT_GT(rep.commit.sources_set, 0u);
    EXPECT_GT(rep.commit.weights_replayed, 0u);
    size_t derived = 0;
    for (const auto& w : e.plan().weights) derived += w.kind == plan::WeightKind::Derived;
    EXPECT_EQ(rep.verified, derived);
    EXPECT_NE(rep.summary().find("fast == slow for all"), std::string::npos) << rep.summary();
    EXPECT_LE(max_diff_to_b(e), 1e-4);
  }
}

// The slow path alone (a rebuild with the plan's options) gives the fast path's weights.
TEST(RefitFrom, OnnxSlowEqualsFast) {
  runtime::PlanEngine fast(build_a(true)), slow(build_a(true));
  refit::RefitRequest req;
  req.files = {onnx_of("B")};
  build::refit_from(fast, req);
  req.mode = refit::RefitMode::Slow;
  EXPECT_EQ(build::refit_from(slow, req).mode, refit::RefitMode::Slow);
  EXPECT_EQ(derived_weight_hashes(fast), derived_weight_hashes(slow));
  EXPECT_LE(max_diff_to_b(slow), 1e-4);
}

// A checkpoint refit through the runtime-only entry point: the plan is bound to checkpoint A at
// build time and refit from checkpoint B.
TEST(RefitFrom, CheckpointMatchesFrameworkB) {
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  o.strip_weights = true;
  plan::Plan p = round_trip(
      build::build_plan_with_checkpoint(onnx::import_model_file(onnx_of("A")), o,
                                        refit::Checkpoint::open((kLlama / "checkpoint_A.safetensors").string()), {}));
  runtime::PlanEngine e(std::move(p));
  refit::RefitRequest req;
  req.files = {(kLlama / "checkpoint_B.safetensors").string()};
  // A checkpoint has one way to refit; verify needs an ONNX model. Refused, engine unchanged.
  req.mode = refit::RefitMode::Verify;
  EXPECT_NE(error_of([&] { refit::refit_from(e, req); }).find("needs a re-exported ONNX model"), std::string::npos);
  EXPECT_FALSE(e.missing_sources().empty());
  req.mode = refit::RefitMode::Fast;
  refit::RefitReport rep = refit::refit_from(e, req);
  EXPECT_EQ(rep.from, "checkpoint");
  EXPECT_GT(rep.commit.sources_set, 0u);
  EXPECT_TRUE(e.missing_sources().empty());
  EXPECT_LE(max_diff_to_b(e), 1e-4);
}

// Caller tensors by source key, through the runtime entry point; then the incremental form
// with one source; the runtime entry point refuses an ONNX model, naming the build side.
TEST(RefitFrom, CallerTensors) {
  runtime::PlanEngine e(build_a(true));
  refit::RefitRequest onnx;
  onnx.files = {onnx_of("B")};
  EXPECT_NE(error_of([&] { refit::refit_from(e, onnx); }).find("build::refit_from"), std::string::npos);

  const auto sources = build::read_sources_from_onnx(e.plan(), onnx_of("B"));
  refit::RefitRequest req;
  for (const auto& [id, t] : sources) req.tensors[e.plan().sources[id].key] = t;
  req.tensors.erase(req.tensors.begin());
  // One source short: a complete refit names it and changes nothing.
  EXPECT_NE(error_of([&] { refit::refit_from(e, req); }).find("were not given a value"), std::string::npos);
  EXPECT_FALSE(e.missing_sources().empty());
  for (const auto& [id, t] : sources) req.tensors[e.plan().sources[id].key] = t;
  EXPECT_EQ(refit::refit_from(e, req).from, "tensors");
  EXPECT_LE(max_diff_to_b(e), 1e-4);

  // Incremental: the same value for one source leaves every engine weight as it was.
  const auto before = derived_weight_hashes(e);
  refit::RefitRequest one;
  one.tensors[e.plan().sources[sources.begin()->first].key] = sources.begin()->second;
  one.commit.incremental = true;
  EXPECT_EQ(refit::refit_from(e, one).commit.sources_set, 1u);
  EXPECT_EQ(derived_weight_hashes(e), before);
}

// The engine's transaction checks names, kinds, dtypes and shapes before anything changes.
TEST(RefitFrom, WeightUpdateValidatesBeforeCommit) {
  runtime::PlanEngine e(build_a(false));
  const auto before = derived_weight_hashes(e);
  const plan::WeightEntry* derived = nullptr;
  for (const auto& w : e.plan().weights)
    if (w.kind == plan::WeightKind::Derived && !derived) derived = &w;
  ASSERT_NE(derived, nullptr);

  runtime::WeightUpdate unknown;
  unknown.set_weight(derived->name, e.weight(derived->name));
  unknown.set_weight("no.such.weight", e.weight(derived->name));
  EXPECT_NE(error_of([&] { e.commit(unknown); }).find("'no.such.weight' is not an engine weight"), std::string::npos);

  runtime::WeightUpdate wrong_shape;
  wrong_shape.set_weight(derived->name,
                         Tensor::empty(derived->dtype, {derived->shape.empty() ? 2 : derived->shape[0] + 1}));
  EXPECT_NE(error_of([&] { e.validate(wrong_shape); }).find("the plan expects"), std::string::npos);
  EXPECT_NE(error_of([&] { e.commit(wrong_shape); }).find("the plan expects"), std::string::npos);
  EXPECT_EQ(derived_weight_hashes(e), before);

  // A valid update: the weight changes, at once.
  Tensor zeros = Tensor::empty(derived->dtype, derived->shape);
  runtime::WeightUpdate ok;
  ok.set_weight(derived->name, zeros);
  e.validate(ok);
  e.commit(ok);
  EXPECT_TRUE(transforms::bit_equal(e.weight(derived->name), zeros));
}

// Verify still compares every replayed weight with the rebuild, now that it stages the rebuilt
// tensors: a plan whose recipes of two like engine weights are swapped (each replays the other's
// sources, same dtype and shape) refits fast without complaint, but verify refuses, naming one of
// the two, and leaves the engine as it was.
TEST(RefitFrom, VerifyRefusesAFastRefitThatDiffersFromTheRebuild) {
  plan::Plan p = build_a(false);
  size_t a = p.weights.size(), b = p.weights.size();
  for (size_t i = 0; i < p.weights.size() && b == p.weights.size(); ++i)
    for (size_t j = i + 1; j < p.weights.size(); ++j) {
      const auto &wi = p.weights[i], &wj = p.weights[j];
      if (wi.kind != plan::WeightKind::Derived || wj.kind != plan::WeightKind::Derived || wi.recipe.steps.empty() ||
          wi.recipe.steps.size() != wj.recipe.steps.size() || wi.dtype != wj.dtype || wi.shape != wj.shape ||
          wi.sources == wj.sources)
        continue;
      a = i, b = j;
      break;
    }
  ASSERT_LT(b, p.weights.size()) << "no two derived weights of the same dtype, shape and recipe length";
  std::swap(p.weights[a].recipe, p.weights[b].recipe);
  std::swap(p.weights[a].sources, p.weights[b].sources);
  const std::string name_a = p.weights[a].name, name_b = p.weights[b].name;

  runtime::PlanEngine e(p);
  const auto before = derived_weight_hashes(e);
  refit::RefitRequest req;
  req.files = {onnx_of("B")};
  req.mode = refit::RefitMode::Verify;
  const std::string err = error_of([&] { build::refit_from(e, req); });
  EXPECT_NE(err.find("differs between fast refit and a fresh build"), std::string::npos) << err;
  EXPECT_TRUE(err.find("'" + name_a + "'") != std::string::npos || err.find("'" + name_b + "'") != std::string::npos)
      << err;
  EXPECT_EQ(derived_weight_hashes(e), before);
  req.mode = refit::RefitMode::Fast;
  EXPECT_EQ(build::refit_from(e, req).mode, refit::RefitMode::Fast);
  EXPECT_NE(derived_weight_hashes(e), before);
}

// CommitOptions::replayed sees every replayed engine weight once and stages what it returns; a
// returned tensor of another shape, or a throw, refuses the refit with the engine unchanged.
TEST(RefitFrom, ReplayedHookStagesWhatItReturns) {
  runtime::PlanEngine e(build_a(false));
  const auto before = derived_weight_hashes(e);
  const auto sources = build::read_sources_from_onnx(e.plan(), onnx_of("B"));
  auto refitter = [&] {
    auto r = std::make_unique<refit::Refitter>(e);
    for (const auto& [id, t] : sources) r->set_source(id, t);
    return r;
  };
  const refit::StagedRefit reference = refitter()->stage();

  std::map<std::string, Tensor> returned;
  refit::CommitOptions o;
  o.replayed = [&](const std::string& name, Tensor t) {
    EXPECT_FALSE(returned.count(name)) << name << " replayed twice";
    return returned[name] = t.clone();
  };
  const refit::StagedRefit staged = refitter()->stage(o);
  ASSERT_EQ(returned.size(), reference.update.weights().size());
  for (const auto& [name, t] : reference.update.weights()) {
    const Tensor* mine = staged.update.weight(name);
    ASSERT_NE(mine, nullptr) << name;
    EXPECT_EQ(mine->raw(), returned.at(name).raw()) << name << ": not the tensor the hook returned";
    EXPECT_TRUE(transforms::bit_equal(*mine, t)) << name;
  }

  const std::string last = std::prev(reference.update.weights().end())->first;
  o.replayed = [&](const std::string& name, Tensor t) {
    return name == last ? Tensor::empty(t.dtype(), {t.numel() + 1}) : t;
  };
  EXPECT_NE(error_of([&] { refitter()->commit(o); }).find("engine weight '" + last + "' came back from"),
            std::string::npos);
  o.replayed = [&](const std::string& name, Tensor t) -> Tensor {
    if (name == last) fail("refused by the hook");
    return t;
  };
  EXPECT_NE(error_of([&] { refitter()->commit(o); }).find("refused by the hook"), std::string::npos);
  EXPECT_EQ(derived_weight_hashes(e), before);
}

// Refitter::stage validates and replays without touching the engine; commit(staged) applies it.
// (refit_from's verify compares the staged weights with a rebuild in between.)
TEST(RefitFrom, StagedRefitChangesNothingUntilCommitted) {
  runtime::PlanEngine e(build_a(false));
  const auto before = derived_weight_hashes(e);
  refit::Refitter r(e);
  for (const auto& [id, t] : build::read_sources_from_onnx(e.plan(), onnx_of("B"))) r.set_source(id, t);
  refit::StagedRefit staged = r.stage();
  EXPECT_EQ(derived_weight_hashes(e), before);
  EXPECT_GT(staged.update.weights().size(), 0u);
  EXPECT_EQ(r.pending(), staged.report.sources_set);
  r.commit(std::move(staged));
  EXPECT_EQ(r.pending(), 0u);
  EXPECT_NE(derived_weight_hashes(e), before);
  EXPECT_LE(max_diff_to_b(e), 1e-4);
}

// A state dict in memory (checkpoint names) refits through the plan's bindings as the file does;
// it cannot be combined with files.
TEST(RefitFrom, CheckpointTensorsInMemoryMatchFrameworkB) {
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  o.strip_weights = true;
  runtime::PlanEngine e(round_trip(
      build::build_plan_with_checkpoint(onnx::import_model_file(onnx_of("A")), o,
                                        refit::Checkpoint::open((kLlama / "checkpoint_A.safetensors").string()), {})));
  refit::RefitRequest req;
  const auto b = refit::Checkpoint::open((kLlama / "checkpoint_B.safetensors").string());
  for (const auto& [name, t] : b.tensors()) req.checkpoint_tensors[name] = t.clone();
  req.files = {(kLlama / "checkpoint_B.safetensors").string()};
  EXPECT_NE(error_of([&] { refit::refit_from(e, req); }).find("either as files, as tensors or as checkpoint tensors"),
            std::string::npos);
  req.files.clear();
  refit::RefitReport rep = refit::refit_from(e, req);
  EXPECT_EQ(rep.from, "checkpoint");
  EXPECT_TRUE(e.missing_sources().empty());
  EXPECT_LE(max_diff_to_b(e), 1e-4);
}

// own_values: after the commit the engine shares no memory with the given tensors, so the caller
// may overwrite them (a training loop's next step) without changing the engine; without it the
// identity weights alias them, and overwriting them changes the engine's weights.
TEST(RefitFrom, OwnValuesLeavesTheCallersBuffersFree) {
  for (bool own : {true, false}) {
    SCOPED_TRACE(own ? "own_values" : "aliasing");
    runtime::PlanEngine e(build_a(true));
    refit::RefitRequest req;
    for (const auto& [id, t] : build::read_sources_from_onnx(e.plan(), onnx_of("B")))
      req.tensors[e.plan().sources[id].key] = t.clone();  // the caller's buffers
    req.commit.own_values = own;
    refit::RefitReport rep = refit::refit_from(e, req);
    EXPECT_LE(max_diff_to_b(e), 1e-4);
    if (own) {
      EXPECT_GT(rep.commit.bytes_copied, 0u);
      EXPECT_LT(rep.commit.bytes_copied, rep.commit.bytes_in);  // transformed weights are new already
    } else {
      EXPECT_EQ(rep.commit.bytes_copied, 0u);
    }
    const auto hashes = derived_weight_hashes(e);
    for (auto& [key, t] : req.tensors) std::memset(t.mutable_raw(), 0, t.nbytes());
    if (own) {
      EXPECT_EQ(derived_weight_hashes(e), hashes);
      EXPECT_LE(max_diff_to_b(e), 1e-4);
    } else {
      EXPECT_NE(derived_weight_hashes(e), hashes);  // the engine's weights were the caller's bytes
    }
    // An incremental refit re-hashes the values the engine keeps: its own copies are intact.
    if (own) {
      refit::RefitRequest one;
      const auto sources = build::read_sources_from_onnx(e.plan(), onnx_of("B"));
      one.tensors[e.plan().sources[sources.begin()->first].key] = sources.begin()->second;
      one.commit.incremental = true;
      EXPECT_EQ(refit::refit_from(e, one).commit.sources_set, 1u);
      EXPECT_LE(max_diff_to_b(e), 1e-4);
    }
  }
}
