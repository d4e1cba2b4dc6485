// Real exported models against their framework's own outputs.
//
// models/manifest.json (written by scripts/models/) lists every export of the tiny Llama, GPT-2,
// BERT and CNN models: PyTorch 1.13 TorchScript exports (constant folding on/off x static/dynamic
// shapes, opset 17) and PyTorch 2.x dynamo exports (opset 18), each with weight set A (as
// initialized: the exporters merge equal initializers) and B (fine-tuned: nothing equal). For
// every export and every input set it applies to, this test imports the model, builds an
// Engine, runs it and compares every output's shape and values with the PyTorch reference
// (max abs diff within the manifest's tolerance, no NaN or Inf). CudaModelExport does the same
// through the whole pipeline for the GPU (build_plan for "cuda" with every pass, the plan
// serialized and parsed, PlanEngine), where a GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "runtime/engine.h"
#include "runtime/plan_engine.h"
#include "support/cuda_compare.h"
#include "support/engine_for.h"
#include "support/plan_round_trip.h"
#include "transforms/recipe.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

const fs::path kModelsDir = fs::path(REFORGE_SOURCE_DIR) / "models";

struct InputSet {
  std::string name;
  std::vector<std::pair<std::string, std::string>> inputs;     // input name -> npy path
  std::vector<std::pair<std::string, std::string>> reference;  // output name -> npy path
};

struct ExportCase {
  std::string id;     // "llama_torch113_fold_dynamic_A": the gtest parameter name
  std::string error;  // set when the manifest itself could not be read
  std::string model, export_name, weights, path;
  std::vector<std::string> input_names, output_names;
  std::vector<InputSet> sets;
  double tolerance = 0;
};

// gtest prints a failing parameter with this instead of a byte dump.
void PrintTo(const ExportCase& c, std::ostream* os) { *os << c.id; }

std::vector<std::pair<std::string, std::string>> name_paths(const nlohmann::json& obj,
                                                            const std::vector<std::string>& order) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& n : order) out.emplace_back(n, (kModelsDir / obj.at(n).get<std::string>()).string());
  return out;
}

std::vector<ExportCase> load_manifest() {
  std::vector<ExportCase> cases;
  const fs::path path = kModelsDir / "manifest.json";
  try {
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot open " + path.string() + " (run scripts/models/, see its README)");
    nlohmann::json j = nlohmann::json::parse(f);
    for (const auto& e : j.at("exports")) {
      ExportCase c;
      c.model = e.at("model").get<std::string>();
      c.export_name = e.at("export").get<std::string>();
      c.weights = e.at("weights").get<std::string>();
      c.path = (kModelsDir / e.at("path").get<std::string>()).string();
      c.input_names = e.at("inputs").get<std::vector<std::string>>();
      c.output_names = e.at("outputs").get<std::vector<std::string>>();
      c.tolerance = e.at("tolerance").at("max_abs_diff").get<double>();
      for (const auto& s : e.at("input_sets")) {
        InputSet set;
        set.name = s.at("name").get<std::string>();
        set.inputs = name_paths(s.at("inputs"), c.input_names);
        set.reference = name_paths(s.at("reference"), c.output_names);
        c.sets.push_back(std::move(set));
      }
      c.id = c.model + "_" + c.export_name + "_" + c.weights;
      cases.push_back(std::move(c));
    }
    if (cases.empty()) throw std::runtime_error(path.string() + " lists no exports");
  } catch (const std::exception& ex) {
    ExportCase c;
    c.id = "manifest";
    c.error = std::string("reading ") + path.string() + ": " + ex.what();
    cases = {c};
  }
  return cases;
}

// Compares one output; returns "" when it matches, else a message a developer can act on.
std::string compare(const Tensor& got, const Tensor& ref, double tolerance) {
  if (got.dtype() != ref.dtype()) return "dtype " + dtype_name(got.dtype()) + ", reference " + dtype_name(ref.dtype());
  if (got.shape() != ref.shape()) return "shape " + shape_str(got.shape()) + ", reference " + shape_str(ref.shape());
  if (ref.dtype() != DType::Float32) return "reference is not float32: " + ref.describe();
  const float* g = got.data<float>();
  const float* r = ref.data<float>();
  double worst = 0;
  int64_t worst_at = -1, nonfinite = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    if (!std::isfinite(g[i])) {
      if (nonfinite++ == 0) worst_at = i;
      continue;
    }
    double d = std::fabs(static_cast<double>(g[i]) - static_cast<double>(r[i]));
    if (d > worst && nonfinite == 0) {
      worst = d;
      worst_at = i;
    }
  }
  if (nonfinite > 0)
    return std::to_string(nonfinite) + " non-finite values, first at flat index " + std::to_string(worst_at);
  if (worst > tolerance)
    return "max abs diff " + std::to_string(worst) + " > " + std::to_string(tolerance) + " at flat index " +
           std::to_string(worst_at) + " (got " + std::to_string(g[worst_at]) + ", reference " +
           std::to_string(r[worst_at]) + ")";
  return "";
}

// Runs `engine` (runtime::Engine or PlanEngine) on every input set of `c` and compares each
// output with the framework's reference.
// The inputs of `set`, read from their files.
std::map<std::string, Tensor> feeds_of(const InputSet& set) {
  std::map<std::string, Tensor> feeds;
  for (const auto& [name, file] : set.inputs) feeds[name] = read_npy(file);
  return feeds;
}

// Export `c` built for `backend` with every pass (and `precision`), through a plan file.
plan::Plan plan_of(const ExportCase& c, const std::string& backend, plan::Precision precision = plan::Precision::Fp32) {
  build::BuildOptions o;
  o.backend = backend;  // every node on that backend: a node without a kernel fails the build
  o.precision = precision;
  return test_support::round_trip(build::build_plan(reforge::onnx::import_model_file(c.path), o));
}

// For each input set of `c`: `runs` runs of `engine`, each output bit-equal to `reference`'s run of
// the set; then `after(set)`.
void expect_runs_bit_equal(const ExportCase& c, const runtime::PlanEngine& reference, const runtime::PlanEngine& engine,
                           int runs, const std::function<void(const InputSet&)>& after = {}) {
  for (const auto& set : c.sets) {
    SCOPED_TRACE("input set " + set.name);
    const std::map<std::string, Tensor> feeds = feeds_of(set);
    const std::vector<Tensor> want = reference.run(feeds);
    for (int run = 0; run < runs; ++run) {
      const std::vector<Tensor> got = engine.run(feeds);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(transforms::bit_equal(got[i], want[i])) << "run " << run << ", output " << i;
    }
    if (after) after(set);
  }
}

template <typename EngineT>
void expect_reference_outputs(const EngineT& engine, const ExportCase& c) {
  for (const auto& set : c.sets) {
    SCOPED_TRACE("input set " + set.name);
    const std::map<std::string, Tensor> feeds = feeds_of(set);
    std::vector<Tensor> outputs;
    try {
      outputs = engine.run(feeds);
    } catch (const std::exception& ex) {
      ADD_FAILURE() << "run failed: " << ex.what();
      continue;
    }
    ASSERT_EQ(outputs.size(), set.reference.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      const auto& [name, file] = set.reference[i];
      const std::string problem = compare(outputs[i], read_npy(file), c.tolerance);
      EXPECT_TRUE(problem.empty()) << "output '" << name << "': " << problem;
    }
  }
}

class ModelExport : public ::testing::TestWithParam<ExportCase> {};

TEST_P(ModelExport, MatchesFrameworkReference) {
  const ExportCase& c = GetParam();
  ASSERT_TRUE(c.error.empty()) << c.error;
  SCOPED_TRACE(c.path);

  std::unique_ptr<runtime::Engine> engine;
  try {
    ir::Graph graph = reforge::onnx::import_model_file(c.path);
    const auto unsupported = runtime::unsupported_nodes(graph);
    std::string list;
    for (const auto& u : unsupported) list += "\n  " + u;
    ASSERT_TRUE(unsupported.empty()) << unsupported.size() << " unsupported nodes:" << list;
    engine = std::make_unique<runtime::Engine>(test_support::engine_for(std::move(graph)));
  } catch (const std::exception& ex) {
    FAIL() << "import/build failed: " << ex.what();
  }

  std::vector<std::string> got_inputs, got_outputs;
  for (const auto& v : engine->inputs()) got_inputs.push_back(v.name);
  for (const auto& v : engine->outputs()) got_outputs.push_back(v.name);
  ASSERT_EQ(got_inputs, c.input_names);
  ASSERT_EQ(got_outputs, c.output_names);

  expect_reference_outputs(*engine, c);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelExport, ::testing::ValuesIn(load_manifest()),
                         [](const ::testing::TestParamInfo<ExportCase>& info) { return info.param.id; });

class CudaModelExport : public ::testing::TestWithParam<ExportCase> {};

TEST_P(CudaModelExport, MatchesFrameworkReference) {
  REQUIRE_GPU();
  const ExportCase& c = GetParam();
  ASSERT_TRUE(c.error.empty()) << c.error;
  SCOPED_TRACE(c.path);
  std::unique_ptr<runtime::PlanEngine> engine;
  try {
    engine = std::make_unique<runtime::PlanEngine>(plan_of(c, "cuda"));
  } catch (const std::exception& ex) {
    FAIL() << "import/build for cuda failed: " << ex.what();
  }
  expect_reference_outputs(*engine, c);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaModelExport, ::testing::ValuesIn(load_manifest()),
                         [](const ::testing::TestParamInfo<ExportCase>& info) { return info.param.id; });

// bf16 plans on the GPU (--precision bf16: every Linear layer's weights in bfloat16, float32
// accumulation and activations): within 1e-2 of the framework's float32 reference in relative
// error (the norm of the difference over the norm of the reference), and the CUDA kernels within
// the 16-bit NMSE of 1e-4 of the CPU's bf16 plan of the same model (the same rounded weights). The
// largest difference over the largest reference magnitude is printed: bf16 weights alone move the
// bundled models' outputs by up to 1.3% of their largest value, on the CPU and the GPU alike.
class CudaModelExportBf16 : public ::testing::TestWithParam<ExportCase> {};

TEST_P(CudaModelExportBf16, WithinOnePercentOfTheFrameworkReference) {
  REQUIRE_GPU();
  const ExportCase& c = GetParam();
  ASSERT_TRUE(c.error.empty()) << c.error;
  SCOPED_TRACE(c.path);
  runtime::PlanEngine engine(plan_of(c, "cuda", plan::Precision::Bf16));
  runtime::PlanEngine cpu(plan_of(c, "cpu", plan::Precision::Bf16));
  for (const auto& set : c.sets) {
    SCOPED_TRACE("input set " + set.name);
    const std::map<std::string, Tensor> feeds = feeds_of(set);
    const std::vector<Tensor> outputs = engine.run(feeds);
    const std::vector<Tensor> on_cpu = cpu.run(feeds);
    ASSERT_EQ(outputs.size(), set.reference.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Tensor ref = read_npy(set.reference[i].second);
      ASSERT_EQ(outputs[i].shape(), ref.shape()) << set.reference[i].first;
      double largest = 0, worst = 0, diff2 = 0, ref2 = 0;
      for (int64_t k = 0; k < ref.numel(); ++k) {
        largest = std::max(largest, std::fabs(ref.as_double(k)));
        const double d = outputs[i].as_double(k) - ref.as_double(k);
        worst = std::isnan(d) ? INFINITY : std::max(worst, std::fabs(d));
        diff2 += d * d;
        ref2 += ref.as_double(k) * ref.as_double(k);
      }
      const double relative = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
      EXPECT_LE(relative, 1e-2) << "output '" << set.reference[i].first << "': relative error " << relative;
      EXPECT_LE(test_support::nmse(outputs[i], on_cpu[i]), 1e-4)
          << "output '" << set.reference[i].first << "' against the CPU's bf16 plan";
      std::cout << "  " << c.id << " " << set.name << " " << set.reference[i].first << ": relative error " << relative
                << ", max abs diff / largest " << worst / std::max(largest, 1e-30) << "\n";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaModelExportBf16, ::testing::ValuesIn(load_manifest()),
                         [](const ::testing::TestParamInfo<ExportCase>& info) { return info.param.id; });

// Every bundled export as a CUDA plan whose runs are recorded and replayed (EngineOptions::
// device_replay, CUDA graphs): each input set run four times (eager, recording, two replays), every
// result bit-equal to the same plan run with replay off, and every one of them recorded.
class CudaModelReplay : public ::testing::TestWithParam<ExportCase> {};

TEST_P(CudaModelReplay, ReplaysEqualEagerRunsBitForBit) {
  REQUIRE_GPU();
  const ExportCase& c = GetParam();
  ASSERT_TRUE(c.error.empty()) << c.error;
  SCOPED_TRACE(c.path);
  const plan::Plan p = plan_of(c, "cuda");
  runtime::EngineOptions eager_options;
  eager_options.device_replay = false;
  runtime::PlanEngine eager(p, eager_options);
  runtime::EngineOptions replay_options;
  replay_options.device_replay = true;
  runtime::PlanEngine replaying(p, replay_options);
  expect_runs_bit_equal(c, eager, replaying, 4);
  const runtime::ReplayStats st = replaying.replay_stats();
  std::cout << "  " << c.id << ": " << st.replays << " replays, " << st.eager_runs << " eager runs"
            << (st.declined.empty() ? "" : ", declined: " + st.declined)
            << (st.failed ? ", recording failed: " + st.last_failure : "") << "\n";
  EXPECT_EQ(st.replays + st.eager_runs, static_cast<int64_t>(4 * c.sets.size()));
  // Every bundled export records: its host steps are shape computation the memo serves, and no
  // kernel reads device data on the host. Each set's first run of its signature is eager.
  EXPECT_EQ(st.declined, "");
  EXPECT_FALSE(st.failed) << st.last_failure;
  EXPECT_GE(st.replays, static_cast<int64_t>(3 * c.sets.size()));
}

INSTANTIATE_TEST_SUITE_P(Models, CudaModelReplay, ::testing::ValuesIn(load_manifest()),
                         [](const ::testing::TestParamInfo<ExportCase>& info) { return info.param.id; });

// Every bundled export as a CUDA plan run eagerly with its device activation arena (runtime/
// arena.h): each input set run twice, every result bit-equal to the same plan run with the arena
// off; the second run of each set copies nothing out of the device arena and leaves to the backend's
// allocator only the values its plan does not serve.
class CudaModelArena : public ::testing::TestWithParam<ExportCase> {};

TEST_P(CudaModelArena, EagerRunsEqualArenaLessRunsBitForBit) {
  REQUIRE_GPU();
  const ExportCase& c = GetParam();
  ASSERT_TRUE(c.error.empty()) << c.error;
  SCOPED_TRACE(c.path);
  const plan::Plan p = plan_of(c, "cuda");
  runtime::EngineOptions off_options;
  off_options.arena = false;
  runtime::PlanEngine off(p, off_options), on(p, runtime::EngineOptions{});
  expect_runs_bit_equal(c, off, on, 2, [&](const InputSet& set) {
    const runtime::DeviceArenaStats st = on.arena_stats().device;
    std::cout << "  " << c.id << " " << set.name << ": device arena " << st.arena_bytes << " bytes, "
              << st.arena_allocations << " allocations; backend " << st.backend_allocations << " ("
              << st.leaving_allocations << " leaving, " << st.unplanned_allocations << " unplanned)\n";
    EXPECT_GT(st.arena_allocations, 0u);
    EXPECT_EQ(st.copies, 0u);
    EXPECT_EQ(st.backend_allocations, st.leaving_allocations + st.unplanned_allocations);
  });
}

INSTANTIATE_TEST_SUITE_P(Models, CudaModelArena, ::testing::ValuesIn(load_manifest()),
                         [](const ::testing::TestParamInfo<ExportCase>& info) { return info.param.id; });

// The manifest covers every model x exporter variant x weight set, and every file it names exists.
TEST(ModelsManifest, CompleteAndPresent) {
  const auto cases = load_manifest();
  ASSERT_TRUE(cases.front().error.empty()) << cases.front().error;
  std::set<std::string> ids;
  for (const auto& c : cases) {
    ids.insert(c.id);
    EXPECT_TRUE(fs::exists(c.path)) << c.path;
    EXPECT_FALSE(c.sets.empty()) << c.id << " applies to no input set";
    for (const auto& s : c.sets) {
      for (const auto& [n, p] : s.inputs) EXPECT_TRUE(fs::exists(p)) << c.id << ": " << p;
      for (const auto& [n, p] : s.reference) EXPECT_TRUE(fs::exists(p)) << c.id << ": " << p;
    }
  }
  for (const char* model : {"llama", "gpt2", "bert", "cnn"})
    for (const char* exp : {"torch113_fold_static", "torch113_fold_dynamic", "torch113_nofold_static",
                            "torch113_nofold_dynamic", "dynamo"})
      for (const char* w : {"A", "B"}) {
        const std::string id = std::string(model) + "_" + exp + "_" + w;
        EXPECT_TRUE(ids.count(id)) << "manifest lacks " << id;
      }
}

}  // namespace
