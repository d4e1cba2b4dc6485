// The refit matrix: every exported model pair (weights A as initialized, B fine-tuned) x build
// mode x stripped/full x fast/slow refit. Build from A, save and reload the plan, refit with the
// re-export of B; the engine weights must equal a fresh build from B bit for bit, and the
// outputs must match PyTorch's outputs for B. Plus the refit-identical contract and the
// origin regression (a stripped, refittable Llama whose lowering creates constants).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "plan/plan_io.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/plan_round_trip.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::round_trip;
namespace fs = std::filesystem;

namespace {

const fs::path kModels = fs::path(REFORGE_SOURCE_DIR) / "models";

struct Pair {
  std::string id, model, path_a, path_b;
  std::map<std::string, std::string> inputs;     // first input set
  std::map<std::string, std::string> reference;  // B's reference outputs for it
  std::vector<std::string> output_names;
  double tolerance = 1e-4;
};

std::vector<Pair> load_pairs() {
  std::ifstream f(kModels / "manifest.json");
  if (!f) return {};
  nlohmann::json j = nlohmann::json::parse(f);
  std::map<std::string, nlohmann::json> a, b;
  for (const auto& e : j.at("exports")) {
    std::string key = e.at("model").get<std::string>() + "_" + e.at("export").get<std::string>();
    (e.at("weights") == "A" ? a : b)[key] = e;
  }
  std::vector<Pair> out;
  for (const auto& [key, ea] : a) {
    if (!b.count(key)) continue;
    const auto& eb = b[key];
    Pair p;
    p.id = key;
    p.model = ea.at("model").get<std::string>();
    p.path_a = (kModels / ea.at("path").get<std::string>()).string();
    p.path_b = (kModels / eb.at("path").get<std::string>()).string();
    const auto& set = eb.at("input_sets").at(0);
    for (const auto& [n, v] : set.at("inputs").items()) p.inputs[n] = (kModels / v.get<std::string>()).string();
    for (const auto& [n, v] : set.at("reference").items()) p.reference[n] = (kModels / v.get<std::string>()).string();
    p.output_names = eb.at("outputs").get<std::vector<std::string>>();
    p.tolerance = eb.at("tolerance").at("max_abs_diff").get<double>();
    out.push_back(p);
  }
  return out;
}

std::map<std::string, Tensor> read_inputs(const Pair& p) {
  std::map<std::string, Tensor> in;
  for (const auto& [n, path] : p.inputs) in[n] = read_npy(path);
  return in;
}

double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double m = 0;
  for (int64_t i = 0; i < a.numel() && i < b.numel(); ++i) m = std::max(m, std::fabs(a.as_double(i) - b.as_double(i)));
  return m;
}

void expect_matches_reference(const Pair& p, const runtime::PlanEngine& e) {
  auto outs = e.run(read_inputs(p));
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string& name = e.outputs()[i].name;
    ASSERT_TRUE(p.reference.count(name)) << name;
    Tensor ref = read_npy(p.reference.at(name));
    double d = max_diff(outs[i], ref);
    EXPECT_LE(d, p.tolerance) << p.id << " output " << name;
    // Never silently zero: the reference is not all zeros, so neither may we be.
    double mag = 0;
    for (int64_t k = 0; k < outs[i].numel(); ++k) mag = std::max(mag, std::fabs(outs[i].as_double(k)));
    EXPECT_GT(mag, 1e-3) << p.id << " output " << name << " is all (near) zeros";
  }
}

// Serializes and reloads, as a user shipping the plan would.
struct Mode {
  const char* name;
  plan::BuildMode mode;
  std::vector<std::string> patterns;
};

const std::vector<Mode>& modes() {
  static const std::vector<Mode> m = {
      {"refit", plan::BuildMode::Refit, {}},
      {"refit_identical", plan::BuildMode::RefitIdentical, {}},
      {"refit_individual", plan::BuildMode::RefitIndividual, {"*"}},
  };
  return m;
}

}  // namespace

class RefitMatrix : public ::testing::TestWithParam<Pair> {};

TEST_P(RefitMatrix, FastSlowFreshAgreeAndMatchFramework) {
  const Pair& p = GetParam();
  ir::Graph ga = reforge::onnx::import_model_file(p.path_a);
  ir::Graph gb = reforge::onnx::import_model_file(p.path_b);
  for (const auto& m : modes()) {
    build::BuildOptions o;
    o.mode = m.mode;
    o.individual_patterns = m.patterns;
    plan::Plan fresh_b = build::build_plan(gb, o);
    for (bool strip : {false, true}) {
      for (bool slow : {false, true}) {
        SCOPED_TRACE(std::string(m.name) + (strip ? " stripped" : " full") + (slow ? " slow" : " fast"));
        o.strip_weights = strip;
        runtime::PlanEngine engine(round_trip(build::build_plan(ga, o)));
        refit::Refitter r(engine);
        if (strip) {
          EXPECT_FALSE(r.missing().empty());
        }
        auto refit_b = [&]() {
          if (slow) {
            r.commit_rebuilt(build::rebuild_from_onnx(engine.plan(), gb));
          } else {
            for (const auto& [id, t] : build::read_sources_from_onnx(engine.plan(), gb)) r.set_source(id, t);
            r.commit();
          }
        };
        if (m.mode == plan::BuildMode::RefitIdentical) {
          // Other weights are refused with an error, and the engine is unchanged.
          EXPECT_THROW(refit_b(), Error);
          r.clear();
          if (strip) {
            EXPECT_THROW(engine.run(read_inputs(p)), Error);
          }
          // The build-time weights are accepted.
          if (slow)
            r.commit_rebuilt(build::rebuild_from_onnx(engine.plan(), ga));
          else {
            for (const auto& [id, t] : build::read_sources_from_onnx(engine.plan(), ga)) r.set_source(id, t);
            r.commit();
          }
          EXPECT_TRUE(r.missing().empty());
          continue;
        }
        refit_b();
        EXPECT_TRUE(r.missing().empty());
        for (const auto& w : fresh_b.weights) {
          Tensor mine = engine.weight(w.name);
          ASSERT_TRUE(mine.defined()) << w.name;
          EXPECT_TRUE(transforms::bit_equal(mine, w.data))
              << "engine weight " << w.name << " differs from a fresh build of B";
        }
        expect_matches_reference(p, engine);
      }
    }
  }
}

// Quantized plans (--precision int8 / int4) of the Llama and BERT exports: a refit re-quantizes
// B's float32 weights, and fast refit == slow refit == a fresh quantized build of B bit for bit,
// engine weights and outputs alike, full and stripped. (How near a quantized plan's outputs are to
// the float model's is tests/quant_plan_test.cc's: exactly the float model holding the
// dequantized weights; these tiny random-weight models amplify int4's weight error to tens of
// percent of their outputs.)
TEST_P(RefitMatrix, QuantizedFastSlowFreshAgree) {
  const Pair& p = GetParam();
  if (p.model != "llama" && p.model != "bert") GTEST_SKIP() << "quantized rows cover llama and bert";
  ir::Graph ga = reforge::onnx::import_model_file(p.path_a);
  ir::Graph gb = reforge::onnx::import_model_file(p.path_b);
  for (plan::Precision prec : {plan::Precision::Int8, plan::Precision::Int4}) {
    build::BuildOptions o;
    o.mode = plan::BuildMode::Refit;
    o.precision = prec;
    plan::Plan fresh_b = build::build_plan(gb, o);
    size_t quantized = 0;
    for (const auto& n : fresh_b.graph.nodes) quantized += n.op_type == "MatMulQuant";
    ASSERT_GT(quantized, 0u) << plan::precision_name(prec);
    runtime::PlanEngine fresh_engine(round_trip(plan::Plan(fresh_b)));
    const std::vector<Tensor> fresh_out = fresh_engine.run(read_inputs(p));
    for (bool strip : {false, true}) {
      for (bool slow : {false, true}) {
        SCOPED_TRACE(std::string(plan::precision_name(prec)) + (strip ? " stripped" : " full") +
                     (slow ? " slow" : " fast"));
        o.strip_weights = strip;
        runtime::PlanEngine engine(round_trip(build::build_plan(ga, o)));
        refit::Refitter r(engine);
        if (slow) {
          r.commit_rebuilt(build::rebuild_from_onnx(engine.plan(), gb));
        } else {
          for (const auto& [id, t] : build::read_sources_from_onnx(engine.plan(), gb)) r.set_source(id, t);
          r.commit();
        }
        for (const auto& w : fresh_b.weights) {
          Tensor mine = engine.weight(w.name);
          ASSERT_TRUE(mine.defined()) << w.name;
          EXPECT_TRUE(transforms::bit_equal(mine, w.data))
              << "engine weight " << w.name << " differs from a fresh build of B";
        }
        const std::vector<Tensor> outs = engine.run(read_inputs(p));
        ASSERT_EQ(outs.size(), fresh_out.size());
        for (size_t i = 0; i < outs.size(); ++i) {
          EXPECT_TRUE(transforms::bit_equal(outs[i], fresh_out[i])) << "output " << i << " differs from a fresh build";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, RefitMatrix, ::testing::ValuesIn(load_pairs()),
                         [](const ::testing::TestParamInfo<Pair>& i) { return i.param.id; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RefitMatrix);

TEST(RefitMatrix, ManifestHasPairs) { EXPECT_GE(load_pairs().size(), 4u); }
