// The Refitter's defaults are as strict as the CLI: a commit must cover every refittable source
// (set equality) unless it asks to be incremental; an incremental commit re-hashes the values
// the engine keeps for the sources it does not set; refit-identical plans check every source;
// NaN/Inf in any source is refused, naming the source and the index, unless
// CommitOptions::check_finite is off (the CLI's --allow-nonfinite). Each refusal leaves the
// engine exactly as it was.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "onnx/proto/onnx.pb.h"
#include "plan/plan_io.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/cli.h"
#include "support/engine_checks.h"
#include "support/llama_fixture.h"
#include "transforms/recipe.h"

using namespace reforge;
namespace fs = std::filesystem;
using test_support::error_of;
using test_support::kLlamaA;
using test_support::kLlamaB;
using test_support::kModels;
using test_support::llama_inputs;
using test_support::llama_plan;
using test_support::weight_snapshot;

namespace {

// Same buffers as before (a failed commit swapped nothing in).
void expect_unchanged(const runtime::PlanEngine& e, const std::map<std::string, Tensor>& before) {
  for (const auto& [name, t] : before) {
    Tensor now = e.weight(name);
    ASSERT_EQ(t.defined(), now.defined()) << name;
    if (t.defined()) {
      EXPECT_EQ(t.raw(), now.raw()) << name << " was replaced";
    }
  }
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A derived weight whose recipe is its source itself (no steps): the engine weight is the
// source's value, so the engine holds that source's bytes. Returns the weight's index.
size_t identity_weight(const plan::Plan& p, size_t skip = SIZE_MAX) {
  for (size_t i = 0; i < p.weights.size(); ++i) {
    const auto& w = p.weights[i];
    if (i != skip && w.kind == plan::WeightKind::Derived && w.recipe.steps.empty() &&
        w.recipe.result.kind == plan::Operand::Kind::Source && w.dtype == DType::Float32 && w.sources.size() == 1)
      return i;
  }
  return SIZE_MAX;
}

uint32_t matrix_source(const plan::Plan& p, uint32_t avoid = UINT32_MAX) {
  for (size_t i = 0; i < p.sources.size(); ++i)
    if (i != avoid && p.sources[i].refittable && p.sources[i].shape.size() == 2 && p.sources[i].dtype == DType::Float32)
      return static_cast<uint32_t>(i);
  return UINT32_MAX;
}

Tensor copy_of(const Tensor& t) { return Tensor::copy_of(t.dtype(), t.shape(), t.raw()); }

}  // namespace

TEST(RefitStrict, PartialCommitIsRefusedNamingTheMissingSources) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit));
  auto out_a = e.run(llama_inputs());
  auto before = weight_snapshot(e);
  auto src_b = build::read_sources_from_onnx(e.plan(), kLlamaB);
  ASSERT_GT(src_b.size(), 3u);
  const uint32_t skip1 = src_b.begin()->first, skip2 = std::prev(src_b.end())->first;
  refit::Refitter r(e);
  for (const auto& [id, t] : src_b)
    if (id != skip1 && id != skip2) r.set_source(id, t);
  EXPECT_EQ(r.unset().size(), 2u);
  std::string err = error_of([&] { r.commit(); });
  EXPECT_TRUE(contains(err, "2 of " + std::to_string(src_b.size()) + " refittable source(s)")) << err;
  EXPECT_TRUE(contains(err, e.plan().sources[skip1].key)) << err;
  EXPECT_TRUE(contains(err, e.plan().sources[skip2].key)) << err;
  EXPECT_TRUE(contains(err, "incremental")) << err;
  expect_unchanged(e, before);
  EXPECT_TRUE(transforms::bit_equal(e.run(llama_inputs())[0], out_a[0]));
  // The complete set commits.
  r.set_source(skip1, src_b.at(skip1));
  r.set_source(skip2, src_b.at(skip2));
  EXPECT_TRUE(r.unset().empty());
  r.commit();
  EXPECT_FALSE(transforms::bit_equal(e.run(llama_inputs())[0], out_a[0]));
}

// Incremental in two halves == one complete refit == a fresh build from B, bit for bit.
TEST(RefitStrict, IncrementalCommitInPartsEqualsAFreshBuild) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit));
  auto src_b = build::read_sources_from_onnx(e.plan(), kLlamaB);
  refit::CommitOptions inc;
  inc.incremental = true;
  refit::Refitter r(e);
  size_t half = 0;
  for (const auto& [id, t] : src_b)
    if (half++ % 2 == 0) r.set_source(id, t);
  r.commit(inc);
  for (const auto& [id, t] : src_b) r.set_source(id, t);  // all again: the other half and the first, unchanged
  r.commit(inc);
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  runtime::PlanEngine fresh(build::build_plan(reforge::onnx::import_model_file(kLlamaB), o));
  for (const auto& w : e.plan().weights)
    EXPECT_TRUE(transforms::bit_equal(e.weight(w.name), fresh.weight(w.name))) << w.name;
  EXPECT_TRUE(transforms::bit_equal(e.run(llama_inputs())[0], fresh.run(llama_inputs())[0]));
}

// The engine's value of a source that an incremental commit leaves alone no longer matches what
// it was given: refused, naming the source; a complete refit replaces it.
TEST(RefitStrict, IncrementalCommitCatchesACorruptedUntouchedSource) {
  for (bool after_refit : {false, true}) {
    SCOPED_TRACE(after_refit ? "after a refit" : "as built");
    runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit));
    auto src_b = build::read_sources_from_onnx(e.plan(), kLlamaB);
    refit::Refitter r(e);
    if (after_refit) {
      for (const auto& [id, t] : src_b) r.set_source(id, t);
      r.commit();
    }
    const size_t wi = identity_weight(e.plan());
    ASSERT_NE(wi, SIZE_MAX);
    const auto& w = e.plan().weights[wi];
    const uint32_t victim = w.sources[0];
    const uint32_t other = matrix_source(e.plan(), victim);
    ASSERT_NE(other, UINT32_MAX);
    // An uncorrupted engine takes the incremental commit.
    refit::CommitOptions inc;
    inc.incremental = true;
    r.set_source(other, src_b.at(other));
    r.commit(inc);
    Tensor held = e.weight(w.name);  // shares the engine's buffer
    held.mutable_data<float>()[0] += 1.0f;
    auto before = weight_snapshot(e);
    r.set_source(other, src_b.at(other));
    std::string err = error_of([&] { r.commit(inc); });
    EXPECT_TRUE(contains(err, e.plan().sources[victim].key)) << err;
    EXPECT_TRUE(contains(err, "not set in this incremental refit")) << err;
    expect_unchanged(e, before);
    // A complete refit does not depend on the engine's values: it goes through.
    for (const auto& [id, t] : src_b) r.set_source(id, t);
    r.commit();
    EXPECT_TRUE(transforms::bit_equal(e.weight(w.name), src_b.at(victim).reshaped(w.shape)));
  }
}

// Refit-identical: every source, set or kept, must be the build-time one.
TEST(RefitStrict, RefitIdenticalChecksEverySource) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::RefitIdentical));
  auto src_a = build::read_sources_from_onnx(e.plan(), kLlamaA);
  auto src_b = build::read_sources_from_onnx(e.plan(), kLlamaB);
  refit::CommitOptions inc;
  inc.incremental = true;
  refit::Refitter r(e);
  // The build-time values, complete or incremental: accepted.
  for (const auto& [id, t] : src_a) r.set_source(id, t);
  r.commit();
  const size_t wi = identity_weight(e.plan());
  ASSERT_NE(wi, SIZE_MAX);
  const auto& w = e.plan().weights[wi];
  uint32_t other = UINT32_MAX;  // a source whose B value differs from A's
  for (const auto& [id, t] : src_a)
    if (id != w.sources[0] && !transforms::bit_equal(t, src_b.at(id))) other = id;
  ASSERT_NE(other, UINT32_MAX);
  r.set_source(other, src_a.at(other));
  r.commit(inc);
  // Another value in the commit: refused.
  auto before = weight_snapshot(e);
  r.set_source(other, src_b.at(other));
  std::string err = error_of([&] { r.commit(inc); });
  EXPECT_TRUE(contains(err, "refit-identical")) << err;
  EXPECT_TRUE(contains(err, e.plan().sources[other].key)) << err;
  expect_unchanged(e, before);
  r.clear();
  // A source outside the commit that no longer holds the build-time bytes: refused too.
  Tensor held = e.weight(w.name);
  const float saved = held.data<float>()[0];
  held.mutable_data<float>()[0] = saved + 1.0f;
  r.set_source(other, src_a.at(other));
  err = error_of([&] { r.commit(inc); });
  EXPECT_TRUE(contains(err, e.plan().sources[w.sources[0]].key)) << err;
  expect_unchanged(e, before);
  held.mutable_data<float>()[0] = saved;
  r.commit(inc);
}

// A stripped engine has no values to keep: an incremental commit must still supply every
// source of every stripped weight, and says which are missing.
TEST(RefitStrict, StrippedEngineIncrementalCommitNeedsEverySource) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit, true));
  auto src_b = build::read_sources_from_onnx(e.plan(), kLlamaB);
  refit::CommitOptions inc;
  inc.incremental = true;
  refit::Refitter r(e);
  const uint32_t skip = src_b.begin()->first;
  for (const auto& [id, t] : src_b)
    if (id != skip) r.set_source(id, t);
  std::string err = error_of([&] { r.commit(inc); });
  EXPECT_TRUE(contains(err, "have no value")) << err;
  EXPECT_TRUE(contains(err, e.plan().sources[skip].key)) << err;
  r.set_source(skip, src_b.at(skip));
  r.commit(inc);
  EXPECT_TRUE(e.missing_sources().empty());
}

// NaN, +Inf and -Inf in a source: refused by default, naming the source, the index and the
// value, engine unchanged; accepted with check_finite off.
TEST(RefitStrict, NonFiniteSourceIsRefusedNamingSourceAndIndex) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float bad_value : {nan, inf, -inf}) {
    runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit));
    auto out_a = e.run(llama_inputs());
    auto src_b = build::read_sources_from_onnx(e.plan(), kLlamaB);
    const uint32_t id = matrix_source(e.plan());
    const auto& s = e.plan().sources[id];
    const int64_t cols = s.shape[1], flat = cols + 3;  // element [1, 3]
    Tensor bad = copy_of(src_b.at(id));
    bad.mutable_data<float>()[flat] = bad_value;
    auto before = weight_snapshot(e);
    refit::Refitter r(e);
    for (const auto& [i, t] : src_b) r.set_source(i, i == id ? bad : t);
    std::string err = error_of([&] { r.commit(); });
    SCOPED_TRACE(err);
    EXPECT_TRUE(contains(err, s.key));
    EXPECT_TRUE(contains(err, std::isnan(bad_value) ? "NaN" : bad_value > 0 ? "holds inf" : "holds -inf"));
    EXPECT_TRUE(contains(err, "[1, 3]"));
    EXPECT_TRUE(contains(err, "flat index " + std::to_string(flat)));
    EXPECT_TRUE(contains(err, "--allow-nonfinite"));
    expect_unchanged(e, before);
    EXPECT_TRUE(transforms::bit_equal(e.run(llama_inputs())[0], out_a[0]));
    // Incremental commits check too.
    refit::CommitOptions inc;
    inc.incremental = true;
    r.clear();
    r.set_source(id, bad);
    EXPECT_TRUE(contains(error_of([&] { r.commit(inc); }), "flat index " + std::to_string(flat)));
    expect_unchanged(e, before);
    // Opting out: accepted.
    refit::CommitOptions allow;
    allow.check_finite = false;
    for (const auto& [i, t] : src_b) r.set_source(i, i == id ? bad : t);
    EXPECT_EQ(error_of([&] { r.commit(allow); }), "");
  }
}

// Float16 sources get the same check (its own exponent mask).
TEST(RefitStrict, NonFiniteFloat16SourceIsRefused) {
  ir::Graph g;
  g.name = "f16";
  g.ir_version = 10;
  g.opsets = {{"", 18}};
  g.inputs.push_back({"x", DType::Float16, false, {}});
  g.outputs.push_back({"y", DType::Float16, false, {}});
  Tensor w = Tensor::empty(DType::Float16, {4});
  for (int i = 0; i < 4; ++i) w.mutable_data<float16>()[i] = float16(1.0f + i);
  g.initializers["w"] = w;
  ir::Node n;
  n.name = "add";
  n.op_type = "Add";
  n.opset = 18;
  n.inputs = {"x", "w"};
  n.outputs = {"y"};
  g.nodes.push_back(n);
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  runtime::PlanEngine e(build::build_plan(g, o));
  Tensor bad = copy_of(w);
  bad.mutable_data<uint16_t>()[2] = 0x7c00;  // +inf
  refit::Refitter r(e);
  r.set("w", bad);
  std::string err = error_of([&] { r.commit(); });
  EXPECT_TRUE(contains(err, "'w'")) << err;
  EXPECT_TRUE(contains(err, "flat index 2")) << err;
  bad.mutable_data<uint16_t>()[2] = 0x7bff;  // 65504, the largest finite float16
  r.set("w", bad);
  r.commit();
}

// Slow refit (a rebuild from the new model): a NaN shows in the derived engine weights, which
// are checked the same way.
TEST(RefitStrict, SlowRefitRefusesNonFiniteWeights) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit));
  ir::Graph gb = reforge::onnx::import_model_file(kLlamaB);
  const uint32_t id = matrix_source(e.plan());
  const std::string init = e.plan().sources[id].names.at(0);
  ASSERT_TRUE(gb.initializers.count(init)) << init;
  Tensor bad = copy_of(gb.initializers[init]);
  bad.mutable_data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  gb.initializers[init] = bad;
  plan::Plan fresh = build::rebuild_from_onnx(e.plan(), gb);
  auto before = weight_snapshot(e);
  refit::Refitter r(e);
  std::string err = error_of([&] { r.commit_rebuilt(fresh); });
  EXPECT_TRUE(contains(err, "NaN")) << err;
  EXPECT_TRUE(contains(err, "of the rebuilt plan")) << err;
  EXPECT_TRUE(contains(err, e.plan().sources[id].key)) << err;
  expect_unchanged(e, before);
  refit::CommitOptions allow;
  allow.check_finite = false;
  r.commit_rebuilt(fresh, allow);
}

// A plan saved after a refit and loaded again: the engine takes the recorded hashes of the
// weights whose bytes are a source's own, so an incremental refit finds those values intact,
// and still catches one corrupted after the load.
TEST(RefitStrict, ReloadedRefitPlanTakesIncrementalRefits) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit));
  auto src_b = build::read_sources_from_onnx(e.plan(), kLlamaB);
  refit::Refitter r(e);
  for (const auto& [id, t] : src_b) r.set_source(id, t);
  r.commit();
  auto owner = std::make_shared<std::string>(plan::serialize_plan(e.current_plan(false)));
  runtime::PlanEngine loaded(plan::parse_plan(owner, owner->data(), owner->size()));
  const size_t wi = identity_weight(loaded.plan());
  ASSERT_NE(wi, SIZE_MAX);
  const auto& w = loaded.plan().weights[wi];
  const uint32_t other = matrix_source(loaded.plan(), w.sources[0]);
  refit::Refitter r2(loaded);
  refit::CommitOptions inc;
  inc.incremental = true;
  r2.set_source(other, src_b.at(other));
  r2.commit(inc);
  Tensor held = loaded.weight(w.name);
  held.mutable_data<float>()[1] *= 2.0f;
  held.mutable_data<float>()[1] += 1.0f;
  r2.set_source(other, src_b.at(other));
  std::string err = error_of([&] { r2.commit(inc); });
  EXPECT_TRUE(contains(err, loaded.plan().sources[w.sources[0]].key)) << err;
}

// The CLI: `refit` refuses a new ONNX model with a NaN weight, naming it, and writes nothing;
// --allow-nonfinite accepts it.
TEST(RefitStrict, CliRefusesNonFiniteUnlessAllowed) {
  const fs::path dir = fs::temp_directory_path() / ("reforge_refit_strict_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  plan::write_plan(llama_plan(plan::BuildMode::Refit, true), (dir / "a.plan").string());
  ::onnx::ModelProto m;
  {
    std::ifstream f(kLlamaB, std::ios::binary);
    ASSERT_TRUE(m.ParseFromIstream(&f));
  }
  std::string victim;
  for (auto& t : *m.mutable_graph()->mutable_initializer()) {
    if (t.data_type() != ::onnx::TensorProto::FLOAT || t.dims_size() != 2 || !t.has_raw_data()) continue;
    std::string raw = t.raw_data();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(raw.data() + 7 * sizeof(float), &nan, sizeof nan);
    t.set_raw_data(raw);
    victim = t.name();
    break;
  }
  ASSERT_FALSE(victim.empty());
  {
    std::ofstream f(dir / "bad.onnx", std::ios::binary);
    ASSERT_TRUE(m.SerializeToOstream(&f));
  }
  auto reforge = [&](const std::string& args) {
    auto r = test_support::run_cli(args);
    return std::make_pair(WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1, r.output);
  };
  const std::string plan_a = (dir / "a.plan").string(), bad = (dir / "bad.onnx").string(),
                    out = (dir / "out.plan").string();
  auto [rc, log] = reforge("refit " + plan_a + " --weights " + bad + " -o " + out);
  EXPECT_NE(rc, 0) << log;
  EXPECT_TRUE(contains(log, victim)) << log;
  EXPECT_TRUE(contains(log, "flat index 7")) << log;
  EXPECT_FALSE(fs::exists(out));
  std::tie(rc, log) = reforge("refit " + plan_a + " --weights " + bad + " --slow -o " + out);
  EXPECT_NE(rc, 0) << log;
  EXPECT_TRUE(contains(log, "NaN")) << log;
  EXPECT_FALSE(fs::exists(out));
  std::tie(rc, log) = reforge("refit " + plan_a + " --weights " + bad + " --allow-nonfinite -o " + out);
  EXPECT_EQ(rc, 0) << log;
  EXPECT_TRUE(fs::exists(out));
  // run: the same default and the same opt-out.
  const std::string ids = (kModels / "llama/inputs/b1_s7/input_ids.npy").string();
  std::tie(rc, log) = reforge("run " + plan_a + " --weights " + bad + " --input input_ids=" + ids);
  EXPECT_NE(rc, 0) << log;
  EXPECT_TRUE(contains(log, "flat index 7")) << log;
  std::tie(rc, log) = reforge("run " + plan_a + " --weights " + bad + " --allow-nonfinite --input input_ids=" + ids);
  EXPECT_EQ(rc, 0) << log;
  fs::remove_all(dir);
}
