// Refit failures: each is a clear error naming the problem, and the engine is unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "onnx/proto/onnx.pb.h"
#include "plan/plan_io.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
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

const std::string kGpt2B = (kModels / "gpt2/dynamo/B/model.onnx").string();

void expect_unchanged(const runtime::PlanEngine& e, const std::map<std::string, Tensor>& before) {
  for (const auto& [name, t] : before) {
    Tensor now = e.weight(name);
    EXPECT_EQ(t.defined(), now.defined()) << name;
    if (t.defined() && now.defined()) {
      EXPECT_EQ(t.raw(), now.raw()) << name << " was replaced";
    }
  }
}

uint32_t first_refittable_matrix_source(const plan::Plan& p) {
  for (size_t i = 0; i < p.sources.size(); ++i)
    if (p.sources[i].refittable && p.sources[i].shape.size() == 2) return static_cast<uint32_t>(i);
  return 0;
}

}  // namespace

TEST(RefitNegative, MissingSourceOnStrippedPlanIsNamed) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit, true));
  refit::Refitter r(e);
  auto sources = build::read_sources_from_onnx(e.plan(), kLlamaB);
  uint32_t skip = sources.begin()->first;
  for (const auto& [id, t] : sources)
    if (id != skip) r.set_source(id, t);
  auto before = weight_snapshot(e);
  std::string err = error_of([&] { r.commit(); });
  EXPECT_NE(err.find(e.plan().sources[skip].key), std::string::npos) << err;
  expect_unchanged(e, before);
  // And the stripped engine still refuses to run, naming the missing sources.
  std::string run_err = error_of([&] { e.run(llama_inputs()); });
  EXPECT_NE(run_err.find("stripped"), std::string::npos) << run_err;
}

TEST(RefitNegative, UnknownNameWrongShapeWrongDtype) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit, false));
  refit::Refitter r(e);
  EXPECT_NE(error_of([&] { r.set("no.such.weight", Tensor::empty(DType::Float32, {1})); }).find("no.such.weight"),
            std::string::npos);
  uint32_t id = first_refittable_matrix_source(e.plan());
  const auto& s = e.plan().sources[id];
  Shape wrong = s.shape;
  wrong[0] += 1;
  std::string err = error_of([&] { r.set(s.key, Tensor::empty(DType::Float32, wrong)); });
  EXPECT_NE(err.find(shape_str(s.shape)), std::string::npos) << err;
  err = error_of([&] { r.set(s.key, Tensor::empty(DType::Float64, s.shape)); });
  EXPECT_NE(err.find("float64"), std::string::npos) << err;
  EXPECT_EQ(r.pending(), 0u);
}

TEST(RefitNegative, IdenticalModeRefusesOtherWeights) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::RefitIdentical, false));
  auto out_a = e.run(llama_inputs());
  auto before = weight_snapshot(e);
  refit::Refitter r(e);
  for (const auto& [id, t] : build::read_sources_from_onnx(e.plan(), kLlamaB)) r.set_source(id, t);
  std::string err = error_of([&] { r.commit(); });
  EXPECT_NE(err.find("refit-identical"), std::string::npos) << err;
  expect_unchanged(e, before);
  auto out = e.run(llama_inputs());
  EXPECT_TRUE(transforms::bit_equal(out[0], out_a[0]));
}

TEST(RefitNegative, ChangedStructureIsRefused) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit, false));
  std::string err = error_of([&] { build::read_sources_from_onnx(e.plan(), kGpt2B); });
  EXPECT_NE(err.find("structure differs"), std::string::npos) << err;
  err = error_of([&] { build::rebuild_from_onnx(e.plan(), reforge::onnx::import_model_file(kGpt2B)); });
  EXPECT_NE(err.find("structure differs"), std::string::npos) << err;
}

TEST(RefitNegative, NonFiniteValuesRefused) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit, false));
  auto before = weight_snapshot(e);
  refit::Refitter r(e);
  uint32_t id = first_refittable_matrix_source(e.plan());
  Tensor bad = Tensor::empty(DType::Float32, e.plan().sources[id].shape);
  bad.mutable_data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  for (const auto& [i, t] : build::read_sources_from_onnx(e.plan(), kLlamaB)) r.set_source(i, i == id ? bad : t);
  EXPECT_NE(error_of([&] { r.commit(); }).find("NaN"), std::string::npos);
  expect_unchanged(e, before);
}

TEST(RefitNegative, TruncatedExternalDataIsAnErrorBeforeAnyChange) {
  // Re-save llama B with its initializers in an external data file, then truncate that file.
  fs::path dir = fs::temp_directory_path() / ("reforge_refit_ext_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ::onnx::ModelProto m;
  {
    std::ifstream f(kLlamaB, std::ios::binary);
    ASSERT_TRUE(m.ParseFromIstream(&f));
  }
  std::ofstream data(dir / "weights.bin", std::ios::binary);
  size_t offset = 0;
  for (auto& t : *m.mutable_graph()->mutable_initializer()) {
    if (!t.has_raw_data() || t.raw_data().size() < 64) continue;
    data.write(t.raw_data().data(), static_cast<std::streamsize>(t.raw_data().size()));
    auto add = [&](const char* k, const std::string& v) {
      auto* e = t.add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    add("location", "weights.bin");
    add("offset", std::to_string(offset));
    add("length", std::to_string(t.raw_data().size()));
    offset += t.raw_data().size();
    t.clear_raw_data();
    t.set_data_location(::onnx::TensorProto::EXTERNAL);
  }
  data.close();
  {
    std::ofstream f(dir / "model.onnx", std::ios::binary);
    ASSERT_TRUE(m.SerializeToOstream(&f));
  }
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit, false));
  // Intact external data refits fine.
  {
    refit::Refitter r(e);
    for (const auto& [id, t] : build::read_sources_from_onnx(e.plan(), (dir / "model.onnx").string()))
      r.set_source(id, t);
    r.commit();
  }
  auto before = weight_snapshot(e);
  fs::resize_file(dir / "weights.bin", offset / 2);
  std::string err = error_of([&] { build::read_sources_from_onnx(e.plan(), (dir / "model.onnx").string()); });
  EXPECT_NE(err.find("too short"), std::string::npos) << err;
  expect_unchanged(e, before);
  fs::remove_all(dir);
}

TEST(RefitNegative, CorruptedPlanIsRefused) {
  std::string bytes = plan::serialize_plan(llama_plan(plan::BuildMode::Refit, true));
  for (size_t pos : {size_t{20}, bytes.size() / 3, bytes.size() / 2}) {
    std::string bad = bytes;
    bad[pos] = static_cast<char>(bad[pos] ^ 0x5a);
    auto owner = std::make_shared<std::string>(bad);
    EXPECT_THROW(plan::parse_plan(owner, owner->data(), owner->size()), Error) << pos;
  }
  auto owner = std::make_shared<std::string>(bytes.substr(0, bytes.size() / 2));
  EXPECT_THROW(plan::parse_plan(owner, owner->data(), owner->size()), Error);
}

TEST(RefitRegression, StrippedRefitLlamaIsNeverZeros) {
  // The bug that started reforge: a fast refit of a stripped, refittable Llama whose lowering
  // creates constants (pow exponent, eps, Range, masks, division constants) gave all zeros.
  plan::Plan p = llama_plan(plan::BuildMode::Refit, true);
  size_t literals = 0;
  for (const auto& w : p.weights) literals += w.kind == plan::WeightKind::Literal;
  EXPECT_GT(literals, 0u) << "the model should have lowering constants";
  std::string bytes = plan::serialize_plan(p);
  auto owner = std::make_shared<std::string>(std::move(bytes));
  runtime::PlanEngine e(plan::parse_plan(owner, owner->data(), owner->size()));
  refit::Refitter r(e);
  for (const auto& [id, t] : build::read_sources_from_onnx(e.plan(), kLlamaA)) r.set_source(id, t);
  r.commit();
  auto out = e.run(llama_inputs());
  build::BuildOptions o;
  runtime::PlanEngine fresh(build::build_plan(reforge::onnx::import_model_file(kLlamaA), o));
  auto want = fresh.run(llama_inputs());
  EXPECT_TRUE(transforms::bit_equal(out[0], want[0]));
  double mag = 0;
  for (int64_t i = 0; i < out[0].numel(); ++i) mag = std::max(mag, std::fabs(out[0].as_double(i)));
  EXPECT_GT(mag, 1e-2);
}

TEST(RefitIncremental, ABAGivesA) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit, false));
  auto out_a = e.run(llama_inputs());
  auto src_a = build::read_sources_from_onnx(e.plan(), kLlamaA);
  auto src_b = build::read_sources_from_onnx(e.plan(), kLlamaB);
  refit::Refitter r(e);
  for (const auto& [id, t] : src_b) r.set_source(id, t);
  r.commit();
  auto out_b = e.run(llama_inputs());
  EXPECT_FALSE(transforms::bit_equal(out_a[0], out_b[0]));
  // Back to A, changing only the sources that differ (an incremental refit).
  size_t changed = 0;
  for (const auto& [id, t] : src_a)
    if (!transforms::bit_equal(t, src_b.at(id))) {
      r.set_source(id, t);
      ++changed;
    }
  EXPECT_GT(changed, 0u);
  refit::CommitOptions inc;
  inc.incremental = true;
  r.commit(inc);
  auto out_again = e.run(llama_inputs());
  EXPECT_TRUE(transforms::bit_equal(out_a[0], out_again[0]));
}

// TorchScript merges initializers whose values are equal at export: the Llama's RMSNorm scales
// are one initializer with several uses. A refit by that name cannot tell merged parameters from
// one tied parameter, so it is refused, naming the source keys; each key refits on its own.
TEST(RefitNegative, InitializerNameWithSeveralUsesIsRefused) {
  const std::string model = (kModels / "llama/torch113_nofold_dynamic/A/model.onnx").string();
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  runtime::PlanEngine e(build::build_plan(reforge::onnx::import_model_file(model), o));
  const plan::Plan& p = e.plan();
  std::map<std::string, std::vector<uint32_t>> uses;
  for (size_t i = 0; i < p.sources.size(); ++i)
    if (p.sources[i].refittable)
      for (const auto& n : p.sources[i].names) uses[n].push_back(static_cast<uint32_t>(i));
  std::string merged;
  for (const auto& [name, ids] : uses)
    if (ids.size() > 1) merged = name;
  ASSERT_FALSE(merged.empty()) << "the TorchScript export no longer merges equal initializers";
  const std::vector<uint32_t>& ids = uses[merged];
  const plan::Source& first = p.sources[ids[0]];
  Tensor v = Tensor::empty(first.dtype, first.shape);
  refit::Refitter r(e);
  std::string err = error_of([&] { r.set(merged, v); });
  EXPECT_NE(err.find("names " + std::to_string(ids.size()) + " sources"), std::string::npos) << err;
  for (uint32_t id : ids) EXPECT_NE(err.find(p.sources[id].key), std::string::npos) << err;
  EXPECT_EQ(r.pending(), 0u);
  for (uint32_t id : ids) r.set(p.sources[id].key, v);
  EXPECT_EQ(r.pending(), ids.size());
}
