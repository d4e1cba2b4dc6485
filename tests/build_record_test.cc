// The build record (plan::BuildRecord, docs/plan-format.md): the builder fills it (the options the
// Plan does not hold elsewhere, the target, the layouts it chose), the plan format round-trips
// it and still reads plans without one, and slow refit rebuilds with it: a plan built with
// --skip-pass, with bf16 weights, or with panels on a CPU level that would not choose them,
// refits slowly to the very engine weights a fast refit gives. Plus what a user sees: `reforge
// --version`, and `inspect` showing the record and the plan's inputs and outputs.
#include <sys/wait.h>

#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/simd.h"
#include "core/version.h"
#include "onnx/importer.h"
#include "plan/plan_io.h"
#include "plan_test_util.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/cli.h"
#include "support/counting_backend.h"
#include "support/plan_round_trip.h"
#include "transforms/recipe.h"

using namespace plan_test;
using reforge::test_support::round_trip;

namespace {

const std::string kRoot = REFORGE_SOURCE_DIR;
const std::string kModelA = kRoot + "/models/llama/dynamo/A/model.onnx";
const std::string kModelB = kRoot + "/models/llama/dynamo/B/model.onnx";

struct Cli {
  int rc;
  std::string out;  // stdout and stderr
};

Cli cli(const std::string& args) {
  auto r = reforge::test_support::run_cli(args);
  return {WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1, r.output};
}

BuildRecord sample_record() {
  BuildRecord r;
  r.weight_packing = WeightPacking::Panels;
  r.skip_passes = {"fuse-*", "constant-folding"};
  r.verify_recipes = false;
  r.backend = "cpu";
  r.isa = {"avx512", "bf16-matmul"};
  r.layouts = {true, false};
  return r;
}

TEST(BuildRecord, RoundTripsAndIsOptional) {
  Plan p = sample_plan();
  p.build = sample_record();
  Plan q = parse_bytes(serialize_plan(p));
  ASSERT_TRUE(q.build.has_value());
  EXPECT_TRUE(*q.build == sample_record());
  expect_plan_eq(p, q);

  // A plan an older reforge wrote has no "build" key: it loads, without a record.
  p.build.reset();
  std::string bytes = serialize_plan(p);
  EXPECT_FALSE(metadata_of(bytes).contains("build"));
  EXPECT_FALSE(parse_bytes(bytes).build.has_value());
}

TEST(BuildRecord, ReaderRefusesABadRecord) {
  Plan p = sample_plan();
  p.build = sample_record();
  std::string bytes = serialize_plan(p);
  json meta = metadata_of(bytes);
  auto error_with = [&](const json& m) { return error_of([&] { parse_bytes(with_metadata(bytes, m.dump())); }); };
  json m = meta;
  m["build"]["weight_packing"] = "spiral";
  EXPECT_NE(error_with(m).find("build.weight_packing: unknown weight packing 'spiral'"), std::string::npos);
  m = meta;
  m["build"]["layouts"] = {{"linear_panels", false}, {"half_panels", true}};
  EXPECT_NE(error_with(m).find("build.layouts: half_panels without linear_panels"), std::string::npos);
  m = meta;
  m["build"].erase("skip_passes");
  EXPECT_NE(error_with(m).find("build: missing field 'skip_passes'"), std::string::npos);
}

TEST(BuildRecord, BuilderRecordsOptionsTargetAndProducer) {
  ir::Graph g = onnx::import_model_file(kModelA);
  build::BuildOptions o;
  o.mode = BuildMode::Refit;
  o.skip_passes = {"fuse-rms-norm"};
  o.weight_packing = WeightPacking::Plain;
  Plan p = build::build_plan(g, o);
  EXPECT_EQ(p.producer, std::string("reforge ") + reforge::kVersion);
  ASSERT_TRUE(p.build.has_value());
  EXPECT_EQ(p.build->backend, "cpu");
  EXPECT_EQ(p.build->skip_passes, o.skip_passes);
  EXPECT_EQ(p.build->weight_packing, WeightPacking::Plain);
  EXPECT_FALSE(p.build->layouts.linear_panels);
  ASSERT_FALSE(p.build->isa.empty());
  const char* level = reforge::simd_level() == reforge::SimdLevel::Avx512 ? "avx512"
                      : reforge::simd_level() == reforge::SimdLevel::Avx2 ? "avx2"
                                                                          : "generic";
  EXPECT_EQ(p.build->isa[0], level);

  // Auto: the layouts this CPU chose are recorded, so a rebuild elsewhere need not choose again.
  o.weight_packing = WeightPacking::Auto;
  Plan a = build::build_plan(g, o);
  EXPECT_EQ(a.build->layouts.linear_panels, reforge::simd_level() >= reforge::SimdLevel::Avx2);
  {
    reforge::SimdOverride generic(reforge::SimdLevel::Generic);
    Plan q = build::build_plan(g, o);
    EXPECT_FALSE(q.build->layouts.linear_panels);
    EXPECT_EQ(q.build->isa[0], "generic");
  }
}

// Builds from A with `o`, saves and reloads; refits one engine fast and one slowly with B; the
// two must hold the same engine weights bit for bit, the slow one from the record (no note).
void expect_slow_equals_fast(const build::BuildOptions& o) {
  ir::Graph ga = onnx::import_model_file(kModelA), gb = onnx::import_model_file(kModelB);
  Plan built = round_trip(build::build_plan(ga, o));
  ASSERT_TRUE(built.build.has_value());
  runtime::PlanEngine fast(built), slow(built);
  refit::Refitter rf(fast);
  for (const auto& [id, t] : build::read_sources_from_onnx(fast.plan(), gb)) rf.set_source(id, t);
  rf.commit();
  std::string note;
  refit::Refitter rs(slow);
  rs.commit_rebuilt(build::rebuild_from_onnx(slow.plan(), gb, &note));
  EXPECT_EQ(note, "");
  size_t derived = 0;
  for (const auto& w : built.weights) {
    Tensor a = fast.weight(w.name), b = slow.weight(w.name);
    ASSERT_TRUE(a.defined() && b.defined()) << w.name;
    EXPECT_TRUE(transforms::bit_equal(a, b)) << "engine weight " << w.name << " differs between fast and slow refit";
    derived += w.kind == WeightKind::Derived;
  }
  EXPECT_GT(derived, 0u);
}

TEST(BuildRecord, SlowRefitOfSkippedPassesEqualsFastRefit) {
  build::BuildOptions o;
  o.mode = BuildMode::Refit;
  using Skips = std::vector<std::string>;
  for (const Skips& skip : std::vector<Skips>{{"fuse-matmul-add"}, {"fuse-*"}, {"linear-weights-packing"}}) {
    SCOPED_TRACE(skip[0]);
    o.skip_passes = skip;
    expect_slow_equals_fast(o);
  }
}

TEST(BuildRecord, SlowRefitOfBf16PlansEqualsFastRefit) {
  build::BuildOptions o;
  o.mode = BuildMode::Refit;
  o.precision = Precision::Bf16;
  expect_slow_equals_fast(o);
  o.activations = Precision::Bf16;
  expect_slow_equals_fast(o);
  // bf16 weights left float32 by skipping the precision pass: a rebuild must skip it too.
  o.activations = Precision::Fp32;
  o.skip_passes = {"linear-weights-precision"};
  expect_slow_equals_fast(o);
  {
    // Without the record the skipped pass cannot be known: the rebuild casts, and is refused.
    Plan p = build::build_plan(onnx::import_model_file(kModelA), o);
    p.build.reset();
    std::string msg = error_of([&] { build::rebuild_from_onnx(p, onnx::import_model_file(kModelB)); });
    EXPECT_NE(msg.find("does not match the rebuilt plan"), std::string::npos) << msg;
  }
  o.skip_passes.clear();
  o.weight_packing = WeightPacking::Panels;
  expect_slow_equals_fast(o);
}

// The record's layouts, not this CPU's choice: a panels plan rebuilds in panels on a CPU level
// that would not choose them (no instruction set is needed to lay out or replay panels).
TEST(BuildRecord, SlowRefitKeepsThePlansLayoutsOnAnyCpuLevel) {
  build::BuildOptions o;
  o.mode = BuildMode::Refit;
  o.weight_packing = WeightPacking::Panels;
  ir::Graph ga = onnx::import_model_file(kModelA), gb = onnx::import_model_file(kModelB);
  Plan built = round_trip(build::build_plan(ga, o));
  Plan fresh_b = build::build_plan(gb, o);
  // The same plan, recorded as Auto where this CPU chose panels.
  built.build->weight_packing = WeightPacking::Auto;
  reforge::SimdOverride generic(reforge::SimdLevel::Generic);
  Plan rebuilt = build::rebuild_from_onnx(built, gb);
  ASSERT_EQ(rebuilt.weights.size(), fresh_b.weights.size());
  for (size_t i = 0; i < rebuilt.weights.size(); ++i)
    EXPECT_TRUE(transforms::bit_equal(rebuilt.weights[i].data, fresh_b.weights[i].data)) << rebuilt.weights[i].name;
}

// A plan without a record (an older reforge's) still refits slowly, from inferred options, and
// the refit says so.
TEST(BuildRecord, SlowRefitWithoutARecordInfersAndSaysSo) {
  ir::Graph ga = onnx::import_model_file(kModelA), gb = onnx::import_model_file(kModelB);
  for (auto packing : {WeightPacking::Panels, WeightPacking::Plain})
    for (Precision precision : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
      SCOPED_TRACE(std::string(plan::weight_packing_name(packing)) + " " + plan::precision_name(precision));
      build::BuildOptions o;
      o.mode = BuildMode::Refit;
      o.weight_packing = packing;
      o.precision = precision;
      Plan built = build::build_plan(ga, o);
      Plan fresh_b = build::build_plan(gb, o);
      built.build.reset();
      built = round_trip(std::move(built));
      std::string note;
      Plan rebuilt = build::rebuild_from_onnx(built, gb, &note);
      EXPECT_NE(note.find("no build record"), std::string::npos) << note;
      ASSERT_EQ(rebuilt.weights.size(), fresh_b.weights.size());
      for (size_t i = 0; i < rebuilt.weights.size(); ++i)
        EXPECT_TRUE(transforms::bit_equal(rebuilt.weights[i].data, fresh_b.weights[i].data)) << rebuilt.weights[i].name;
    }
}

TEST(BuildRecord, SlowRefitRefusesAnotherBackend) {
  build::BuildOptions o;
  o.mode = BuildMode::Refit;
  Plan built = build::build_plan(onnx::import_model_file(kModelA), o);
  built.build->backend = "no-such-device";
  std::string msg = error_of([&] { build::rebuild_from_onnx(built, onnx::import_model_file(kModelB)); });
  EXPECT_NE(msg.find("built for backend 'no-such-device', which this reforge does not have"), std::string::npos) << msg;
}

// A plan built for another registered backend is rebuilt for that backend, as recorded.
TEST(BuildRecord, SlowRefitRebuildsForThePlansBackend) {
  test_support::register_counting_backend();
  build::BuildOptions o;
  o.mode = BuildMode::Refit;
  o.backend = test_support::kCountingBackend;
  const std::string err = error_of([&] { build::build_plan(onnx::import_model_file(kModelA), o); });
  // The counting backend runs only a few ops: the model cannot be placed on it, and the rebuild
  // of a plan recorded for it fails the same way (for the backend, not for the CPU).
  EXPECT_NE(err.find("cannot run on backend 'counting'"), std::string::npos) << err;
  o.backend = "cpu";
  Plan built = build::build_plan(onnx::import_model_file(kModelA), o);
  built.build->backend = test_support::kCountingBackend;
  const std::string msg = error_of([&] { build::rebuild_from_onnx(built, onnx::import_model_file(kModelB)); });
  EXPECT_NE(msg.find("cannot run on backend 'counting'"), std::string::npos) << msg;
}

TEST(BuildRecordCli, VersionPrintsTheProducer) {
  Cli r = cli("--version");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, std::string("reforge ") + reforge::kVersion + "\n");
}

TEST(BuildRecordCli, InspectShowsRecordInputsAndOutputs) {
  TempDir dir;
  const std::string plan_path = dir.file("m.plan");
  Cli b = cli("build " + kModelA + " -o " + plan_path + " --refit --skip-pass fuse-rms-norm");
  ASSERT_EQ(b.rc, 0) << b.out;

  Cli t = cli("inspect " + plan_path);
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find(std::string("producer: reforge ") + reforge::kVersion), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("target: cpu (built on a CPU with "), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("skipped passes: fuse-rms-norm"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("inputs:\n  input_ids  int64["), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("outputs:\n"), std::string::npos) << t.out;

  Cli j = cli("inspect --json " + plan_path);
  ASSERT_EQ(j.rc, 0) << j.out;
  json m = json::parse(j.out);
  Plan p = read_plan(plan_path, {});
  EXPECT_EQ(m["producer"], p.producer);
  EXPECT_EQ(m["build"]["backend"], "cpu");
  EXPECT_EQ(m["build"]["skip_passes"], json::array({"fuse-rms-norm"}));
  ASSERT_EQ(m["inputs"].size(), p.graph.inputs.size());
  ASSERT_EQ(m["outputs"].size(), p.graph.outputs.size());
  for (size_t i = 0; i < p.graph.inputs.size(); ++i) {
    const auto& v = p.graph.inputs[i];
    EXPECT_EQ(m["inputs"][i]["name"], v.name);
    EXPECT_EQ(m["inputs"][i]["dtype"], dtype_name(v.dtype));
    ASSERT_EQ(m["inputs"][i]["shape"].size(), v.shape.size());
    for (size_t k = 0; k < v.shape.size(); ++k) {
      const json& d = m["inputs"][i]["shape"][k];
      if (v.shape[k].fixed())
        EXPECT_EQ(d, v.shape[k].value);
      else if (!v.shape[k].symbol.empty())
        EXPECT_EQ(d, v.shape[k].symbol);
      else
        EXPECT_TRUE(d.is_null());
    }
  }
  EXPECT_EQ(m["outputs"][0]["name"], p.graph.outputs[0].name);
  EXPECT_FALSE(m.contains("values"));  // only with --values
}

// inspect --values: the plan's inferred type of every graph input and node output.
TEST(BuildRecordCli, InspectValuesListsEveryInferredType) {
  TempDir dir;
  const std::string plan_path = dir.file("m.plan");
  Cli b = cli("build " + kModelA + " -o " + plan_path);
  ASSERT_EQ(b.rc, 0) << b.out;
  Plan p = read_plan(plan_path, {});
  ASSERT_FALSE(p.values.empty());
  Cli j = cli("inspect --json --values " + plan_path);
  ASSERT_EQ(j.rc, 0) << j.out;
  json m = json::parse(j.out);
  ASSERT_EQ(m["values"].size(), p.values.size());
  for (size_t i = 0; i < p.values.size(); ++i) {
    EXPECT_EQ(m["values"][i]["name"], p.values[i].name);
    EXPECT_EQ(m["values"][i]["dtype"], dtype_name(p.values[i].dtype));
  }
  // The first values are the graph inputs, as declared.
  EXPECT_EQ(m["values"][0]["name"], p.graph.inputs[0].name);
  Cli t = cli("inspect --values " + plan_path);
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("values:\n  " + p.graph.inputs[0].name + "  int64["), std::string::npos) << t.out;
  const std::string& last = p.values.back().name;
  EXPECT_NE(t.out.find("\n  " + last + "  "), std::string::npos) << t.out;
}

}  // namespace
