// Progress callbacks (core/progress.h): the steps build_plan and a refit report, in order, and the
// counts of the counted ones (weight packing, recipe verification, hashing, recipe replay) against
// sizes derived by hand from the model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "plan/plan_io.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/synthetic_llama.h"

using namespace reforge;

namespace {

struct Recorded {
  std::string step;
  uint64_t done, total;
  std::string unit;
};

ProgressCallback recorder(std::vector<Recorded>& events) {
  return [&events](const Progress& p) { events.push_back({p.step, p.done, p.total, p.unit}); };
}

// The events of `step`, in order.
std::vector<Recorded> of_step(const std::vector<Recorded>& events, const std::string& step) {
  std::vector<Recorded> out;
  for (const auto& e : events)
    if (e.step == step) out.push_back(e);
  return out;
}

// A counted step: reported uncounted or at 0 first, then `done` grows by each report to `total`.
void expect_counts_to(const std::vector<Recorded>& events, const std::string& step, uint64_t total,
                      const std::string& unit) {
  SCOPED_TRACE(step);
  const std::vector<Recorded> ev = of_step(events, step);
  ASSERT_GE(ev.size(), 2u);
  uint64_t last = 0;
  bool counted = false;
  for (const auto& e : ev) {
    if (e.total == 0) {
      EXPECT_FALSE(counted) << "an uncounted report after the counted ones";
      EXPECT_EQ(e.done, 0u);
      continue;
    }
    EXPECT_EQ(e.total, total);
    EXPECT_EQ(e.unit, unit);
    if (counted)
      EXPECT_GT(e.done, last);
    else
      EXPECT_EQ(e.done, 0u) << "a counted step starts at 0";
    counted = true;
    last = e.done;
  }
  EXPECT_EQ(last, total);
}

build::BuildOptions packed_refit() {
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  o.weight_packing = build::WeightPacking::Panels;
  return o;
}

}  // namespace

TEST(BuildProgress, StepsInOrderAndPackingCountsEveryLinearWeightsBytes) {
  synth::LlamaSpec spec;
  spec.share_norms = false;
  std::vector<Recorded> events;
  build::BuildOptions o = packed_refit();
  o.progress = recorder(events);
  plan::Plan p = build::build_plan(synth::synthetic_llama(spec), o);

  // The order of the steps as they start: inference, the passes, verification, hashing, placement.
  std::vector<std::string> starts;
  for (const auto& e : events)
    if (starts.empty() || starts.back() != e.step) starts.push_back(e.step);
  ASSERT_GE(starts.size(), 5u);
  EXPECT_EQ(starts.front(), "shape inference");
  for (size_t i = 1; i + 3 < starts.size(); ++i) EXPECT_EQ(starts[i].rfind("pass ", 0), 0u) << starts[i];
  EXPECT_EQ(starts[starts.size() - 3], "verifying recipes");
  EXPECT_EQ(starts[starts.size() - 2], "hashing weights");
  EXPECT_EQ(starts.back(), "placing nodes");
  for (const auto& s : starts) EXPECT_EQ(of_step(events, s).front().done, 0u) << s;
  std::set<std::string> unique(starts.begin(), starts.end());
  EXPECT_EQ(unique.size(), starts.size()) << "a step reported again after another one started";

  // The packed weights: per layer the q, k, v, o projections (hidden x hidden), gate and up
  // (hidden x ffn) and down (ffn x hidden), then the LM head (hidden x vocab), all float32;
  // fusing passes concatenate some of them, which keeps their bytes.
  const uint64_t per_layer = 4 * spec.hidden * spec.hidden + 3 * spec.hidden * spec.ffn;
  const uint64_t linear_bytes = 4 * (spec.layers * per_layer + spec.hidden * spec.vocab);
  EXPECT_EQ(linear_bytes, 434176u);
  expect_counts_to(events, "pass linear-weights-packing", linear_bytes, "bytes");
  // The packing pass names itself first as the builder starts it, uncounted.
  EXPECT_EQ(of_step(events, "pass linear-weights-packing").front().total, 0u);

  uint64_t plan_bytes = 0;
  for (const auto& w : p.weights) plan_bytes += w.data.nbytes();
  expect_counts_to(events, "verifying recipes", p.weights.size(), "weights");
  expect_counts_to(events, "hashing weights", plan_bytes, "bytes");
  for (const char* uncounted : {"shape inference", "placing nodes"}) {
    auto ev = of_step(events, uncounted);
    ASSERT_EQ(ev.size(), 1u) << uncounted;
    EXPECT_EQ(ev[0].total, 0u) << uncounted;
  }
}

TEST(BuildProgress, UnpackedBuildReportsNoPackingCount) {
  synth::LlamaSpec spec;
  std::vector<Recorded> events;
  build::BuildOptions o = packed_refit();
  o.weight_packing = build::WeightPacking::Plain;
  o.verify_recipes = false;
  o.progress = recorder(events);
  (void)build::build_plan(synth::synthetic_llama(spec), o);
  for (const auto& e : events) {
    EXPECT_NE(e.step, "verifying recipes");
    if (e.step == "pass linear-weights-packing") {
      EXPECT_EQ(e.total, 0u) << "nothing to pack, nothing counted";
    }
  }
}

TEST(RefitProgress, ValidationThenReplayCountingTheReplayedWeightsBytes) {
  synth::LlamaSpec sa;
  sa.share_norms = false;
  synth::LlamaSpec sb = sa;
  sb.seed = 7;
  plan::Plan p = build::build_plan(synth::synthetic_llama(sa), packed_refit());
  // A full refit replays every derived engine weight: their bytes, from the build.
  uint64_t derived_bytes = 0;
  for (const auto& w : p.weights)
    if (w.kind == plan::WeightKind::Derived) derived_bytes += w.data.nbytes();
  ASSERT_GT(derived_bytes, 434176u) << "the packed Linear weights (padded panels) and the other derived weights";
  runtime::PlanEngine e(std::move(p));
  refit::Refitter r(e);
  for (const auto& [id, t] : build::read_sources_from_onnx(e.plan(), synth::synthetic_llama(sb))) r.set_source(id, t);
  std::vector<Recorded> events;
  refit::CommitOptions co;
  co.progress = recorder(events);
  refit::CommitReport rep = r.commit(co);
  EXPECT_EQ(rep.bytes_out, derived_bytes);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().step, "validating sources");
  EXPECT_EQ(events.front().total, 0u);
  expect_counts_to(events, "replaying recipes", derived_bytes, "bytes");
  EXPECT_EQ(events.back().step, "replaying recipes");
  EXPECT_EQ(events.size(), 1 + of_step(events, "replaying recipes").size());
}

// A callback that throws stops the refit before any weight changes.
TEST(RefitProgress, ThrowingCallbackLeavesTheEngineUnchanged) {
  synth::LlamaSpec sa;
  sa.share_norms = false;
  synth::LlamaSpec sb = sa;
  sb.seed = 7;
  runtime::PlanEngine e(build::build_plan(synth::synthetic_llama(sa), packed_refit()));
  std::vector<Tensor> before;
  for (const auto& w : e.plan().weights) before.push_back(e.weight(w.name));
  refit::Refitter r(e);
  for (const auto& [id, t] : build::read_sources_from_onnx(e.plan(), synth::synthetic_llama(sb))) r.set_source(id, t);
  refit::CommitOptions co;
  co.progress = [](const Progress& p) {
    if (p.step == "replaying recipes" && p.done > 0) fail("stopped by the caller");
  };
  EXPECT_THROW(r.commit(co), Error);
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_EQ(e.weight(e.plan().weights[i].name).raw(), before[i].raw()) << e.plan().weights[i].name;
}

// write_plan: encoding, then writing counted in the file's bytes (the size on disk), then syncing;
// a callback that throws while writing leaves no file and no temporary one.
TEST(WriteProgress, WritingCountsTheFilesBytesAndAStopLeavesNoFile) {
  synth::LlamaSpec spec;
  spec.share_norms = false;
  const plan::Plan p = build::build_plan(synth::synthetic_llama(spec), packed_refit());
  // Named by the process, so that test runs at the same time (another build tree's) never share it.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("reforge_write_progress_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.plan").string();
  std::vector<Recorded> events;
  plan::write_plan(p, path, recorder(events));
  std::vector<std::string> steps;
  for (const auto& e : events)
    if (steps.empty() || steps.back() != e.step) steps.push_back(e.step);
  EXPECT_EQ(steps, (std::vector<std::string>{"encoding the plan", "writing the plan", "syncing to disk"}));
  expect_counts_to(events, "writing the plan", std::filesystem::file_size(path), "bytes");
  EXPECT_EQ(plan::read_plan(path).weights.size(), p.weights.size());

  const std::string other = (dir / "other.plan").string();
  EXPECT_THROW(plan::write_plan(p, other,
                                [](const Progress& e) {
                                  if (e.step == "writing the plan" && e.done > 0) fail("stopped by the caller");
                                }),
               Error);
  std::vector<std::string> left;
  for (const auto& f : std::filesystem::directory_iterator(dir)) left.push_back(f.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"model.plan"}) << "a stopped write left a file behind";
  std::filesystem::remove_all(dir);
}
