// Quantized ONNX models as ONNX Runtime's tools write them, against ONNX Runtime's own outputs
// and against the float model.
//
// models/quant/manifest.json (scripts/models/make_quant_models.py) lists the bundled BERT, CNN
// and Llama quantized by quantize_dynamic (DynamicQuantizeLinear, MatMulInteger, ConvInteger),
// quantize_static (QDQ; QOperator: QLinearConv, QLinearMatMul and com.microsoft QGemm,
// QLinearAdd, QLinearMul, QLinearSoftmax) and MatMulNBitsQuantizer (com.microsoft MatMulNBits, and
// DequantizeLinear of 4-bit codes in its QDQ format; 4 bits, block 32), with ORT's outputs on the committed inputs.
// Each variant is built for the CPU with every pass, serialized and loaded, run on every input set, and compared with
// ORT's output (tolerance vs_ort, tight) and with the float model's framework output (tolerance vs_float: ORT's own
// error against it with a margin); the test prints both errors and ORT's. Then the refit rules: a plan built from a
// quantized model refits by position from the model re-quantized from other weights, giving the engine weights and
// outputs of a fresh build of that model bit for bit; a float checkpoint refits a MatMulNBits plan (its 4-bit weights
// are reforge::QuantizeWeight of the float weights, bit for bit) and is refused, naming the
// quantized weights, where it cannot re-derive them.
// The QDQ variants run their Linear layers on the integer codes (fuse-dequantize-matmul): the
// plans hold the codes, not float32 copies, and stay as close to ORT as the float path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "builder/binding.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "refit/refit_from.h"
#include "refit/safetensors.h"
#include "runtime/engine.h"
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

const fs::path kModels = fs::path(REFORGE_SOURCE_DIR) / "models";

struct QuantSet {
  std::string name;
  std::map<std::string, std::string> inputs;  // input name -> npy path
  std::vector<std::pair<std::string, std::string>> ort, flt;
};

struct QuantCase {
  std::string name, error, path, model, weights;
  std::vector<std::string> input_names, output_names;
  std::vector<QuantSet> sets;
  double ort_vs_float = 0, tol_float = 0, tol_ort = 0;
};

void PrintTo(const QuantCase& c, std::ostream* os) { *os << c.name; }

std::vector<QuantCase> load_manifest() {
  std::vector<QuantCase> out;
  const fs::path path = kModels / "quant" / "manifest.json";
  try {
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot open " + path.string() + " (scripts/models/make_quant_models.py)");
    const nlohmann::json j = nlohmann::json::parse(f);
    for (const auto& v : j.at("variants")) {
      QuantCase c;
      c.name = v.at("name").get<std::string>();
      c.path = (kModels / v.at("path").get<std::string>()).string();
      c.model = v.at("model").get<std::string>();
      c.weights = v.at("weights").get<std::string>();
      c.input_names = v.at("inputs").get<std::vector<std::string>>();
      c.output_names = v.at("outputs").get<std::vector<std::string>>();
      c.ort_vs_float = v.at("ort_vs_float").get<double>();
      c.tol_float = v.at("tolerance").at("vs_float").get<double>();
      c.tol_ort = v.at("tolerance").at("vs_ort").get<double>();
      for (const auto& s : v.at("input_sets")) {
        QuantSet qs;
        qs.name = s.at("name").get<std::string>();
        for (const auto& [n, p] : s.at("inputs").items()) qs.inputs[n] = (kModels / p.get<std::string>()).string();
        for (const auto& o : c.output_names) {
          qs.ort.emplace_back(o, (kModels / s.at("ort_reference").at(o).get<std::string>()).string());
          qs.flt.emplace_back(o, (kModels / s.at("float_reference").at(o).get<std::string>()).string());
        }
        c.sets.push_back(std::move(qs));
      }
      out.push_back(std::move(c));
    }
    if (out.empty()) throw std::runtime_error(path.string() + " lists no variants");
  } catch (const std::exception& ex) {
    QuantCase c;
    c.name = "manifest";
    c.error = std::string("reading ") + path.string() + ": " + ex.what();
    out = {c};
  }
  return out;
}

QuantCase find_case(const std::string& name) {
  for (auto& c : load_manifest())
    if (c.name == name) return c;
  ADD_FAILURE() << "models/quant/manifest.json has no variant " << name;
  return {};
}

// max |got - ref| over the elements; fails the test on a shape, dtype or non-finite mismatch.
double max_diff(const Tensor& got, const Tensor& ref, const std::string& what) {
  EXPECT_EQ(got.dtype(), ref.dtype()) << what;
  EXPECT_EQ(got.shape(), ref.shape()) << what;
  if (got.shape() != ref.shape() || got.dtype() != ref.dtype()) return INFINITY;
  double m = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double g = got.as_double(i), r = ref.as_double(i);
    if (!std::isfinite(g)) return INFINITY;
    m = std::max(m, std::fabs(g - r));
  }
  return m;
}

std::map<std::string, Tensor> feeds_of(const QuantSet& s) {
  std::map<std::string, Tensor> feeds;
  for (const auto& [n, p] : s.inputs) feeds[n] = read_npy(p);
  return feeds;
}

plan::Plan build(const std::string& path, plan::BuildMode mode = plan::BuildMode::Baked, bool strip = false,
                 std::vector<std::string> skip = {}) {
  build::BuildOptions o;
  o.mode = mode;
  o.strip_weights = strip;
  o.skip_passes = std::move(skip);
  return round_trip(build::build_plan(onnx::import_model_file(path), o));
}

// max |output - reference| over every input set and output of `c`, for the engine `e`.
std::pair<double, double> errors(const runtime::PlanEngine& e, const QuantCase& c) {
  double vs_ort = 0, vs_float = 0;
  for (const auto& s : c.sets) {
    SCOPED_TRACE("input set " + s.name);
    const auto outs = e.run(feeds_of(s));
    EXPECT_EQ(outs.size(), s.ort.size());
    for (size_t i = 0; i < outs.size() && i < s.ort.size(); ++i) {
      vs_ort = std::max(vs_ort, max_diff(outs[i], read_npy(s.ort[i].second), "vs ORT " + s.ort[i].first));
      vs_float = std::max(vs_float, max_diff(outs[i], read_npy(s.flt[i].second), "vs float " + s.flt[i].first));
    }
  }
  return {vs_ort, vs_float};
}

size_t count_ops(const plan::Plan& p, const std::string& op) {
  size_t n = 0;
  for (const auto& node : p.graph.nodes) n += node.op_type == op;
  return n;
}

size_t weight_bytes(const plan::Plan& p) {
  size_t b = 0;
  for (const auto& w : p.weights) b += w.data.nbytes();
  return b;
}

class QuantModel : public ::testing::TestWithParam<QuantCase> {};

TEST_P(QuantModel, MatchesOrtAndFloat) {
  const QuantCase& c = GetParam();
  ASSERT_TRUE(c.error.empty()) << c.error;
  SCOPED_TRACE(c.path);
  ir::Graph g = onnx::import_model_file(c.path);
  const auto unsupported = runtime::unsupported_nodes(g);
  std::string list;
  for (const auto& u : unsupported) list += "\n  " + u;
  ASSERT_TRUE(unsupported.empty()) << unsupported.size() << " unsupported nodes:" << list;
  std::unique_ptr<runtime::PlanEngine> e;
  try {
    e = std::make_unique<runtime::PlanEngine>(build(c.path));
  } catch (const std::exception& ex) {
    FAIL() << "build failed: " << ex.what();
  }
  const auto [vs_ort, vs_float] = errors(*e, c);
  std::printf("[ quant    ] %-16s ORT vs float %.4g   reforge vs float %.4g   reforge vs ORT %.3g\n", c.name.c_str(),
              c.ort_vs_float, vs_float, vs_ort);
  EXPECT_LE(vs_ort, c.tol_ort) << "reforge vs ONNX Runtime's quantized output";
  EXPECT_LE(vs_float, c.tol_float) << "reforge vs the float model (ORT reaches " << c.ort_vs_float << ")";
}

// The QDQ variants: every Linear layer on DequantizeLinear of int8 (ORT's quantize_static) or
// 4-bit (its weight-only quantizer in QDQ format) codes runs on MatMulQuant, the plan holds the
// codes instead of float32 weights, and the outputs are as close to ORT's and to the float model
// as those of the plan that dequantizes at build (--skip-pass fuse-dequantize-matmul), with the
// same tolerances. Convolutions keep their weights dequantized at build (MatMulQuant is a
// matrix product). The test prints both plans' errors.
TEST(QuantModelFusion, QdqLinearLayersRunOnTheCodes) {
  const std::vector<std::pair<std::string, size_t>> variants = {
      {"bert_static", 13}, {"cnn_static", 1}, {"llama_qdq4_A", 15}, {"llama_qdq4_sym_A", 15}};
  for (const auto& [name, linear] : variants) {
    SCOPED_TRACE(name);
    const QuantCase c = find_case(name);
    const plan::Plan fused = build(c.path),
                     plain = build(c.path, plan::BuildMode::Baked, false, {"fuse-dequantize-matmul"});
    EXPECT_EQ(count_ops(fused, "MatMulQuant"), linear);
    EXPECT_EQ(count_ops(plain, "MatMulQuant"), 0u);
    EXPECT_EQ(count_ops(fused, "MatMul") + count_ops(fused, "Gemm") + count_ops(fused, "MatMulAdd") +
                  count_ops(fused, "MatMulAddPacked") + linear,
              count_ops(plain, "MatMul") + count_ops(plain, "Gemm") + count_ops(plain, "MatMulAdd") +
                  count_ops(plain, "MatMulAddPacked"));
    // int8 codes are a quarter of float32, 4-bit ones an eighth (plus their scales): the fused plan
    // is at least half the bytes of the fused layers' float32 weights smaller.
    size_t fused_float = 0;
    for (const auto& n : fused.graph.nodes)
      if (n.op_type == "MatMulQuant") fused_float += size_t(4 * n.attr_int("K", 0) * n.attr_int("N", 0));
    EXPECT_LE(weight_bytes(fused) + fused_float / 2, weight_bytes(plain))
        << "fused " << weight_bytes(fused) << " bytes, dequantized at build " << weight_bytes(plain);
    const auto [f_ort, f_float] = errors(runtime::PlanEngine(fused), c);
    const auto [p_ort, p_float] = errors(runtime::PlanEngine(plain), c);
    std::printf(
        "[ qdq      ] %-16s %zu layers on codes, weights %zu -> %zu bytes; vs ORT %.3g (dequantized at build "
        "%.3g), vs float %.4g (%.4g), ORT vs float %.4g\n",
        name.c_str(), linear, weight_bytes(plain), weight_bytes(fused), f_ort, p_ort, f_float, p_float, c.ort_vs_float);
    EXPECT_LE(f_ort, c.tol_ort);
    EXPECT_LE(f_float, c.tol_float);
  }
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantModel, ::testing::ValuesIn(load_manifest()),
                         [](const ::testing::TestParamInfo<QuantCase>& info) { return info.param.name; });

// The manifest has every variant the tests below rely on, and every file it names exists.
TEST(QuantManifest, CompleteAndPresent) {
  std::set<std::string> names;
  for (const auto& c : load_manifest()) {
    ASSERT_TRUE(c.error.empty()) << c.error;
    names.insert(c.name);
    EXPECT_TRUE(fs::exists(c.path)) << c.path;
    for (const auto& s : c.sets) {
      for (const auto& [n, p] : s.inputs) EXPECT_TRUE(fs::exists(p)) << p;
      for (const auto& [n, p] : s.ort) EXPECT_TRUE(fs::exists(p)) << p;
      for (const auto& [n, p] : s.flt) EXPECT_TRUE(fs::exists(p)) << p;
    }
  }
  for (const char* n :
       {"bert_dynamic", "cnn_dynamic", "bert_static", "cnn_static", "cnn_static_B", "cnn_static_B2", "cnn_static_qop",
        "llama_nbits_A", "llama_nbits_B", "llama_qdq4_A", "llama_qdq4_B", "llama_qdq4_sym_A"})
    EXPECT_TRUE(names.count(n)) << "manifest lacks " << n;
}

// A plan built (--refit) from the model quantized from weights A, refit from the same model
// quantized from weights B, equals a fresh build of B: every derived engine weight bit for bit,
// every output bit for bit, and B's ORT output within the manifest's tolerance.
void expect_refit_equals_fresh(const std::string& a_name, const std::string& b_name) {
  const QuantCase a = find_case(a_name), b = find_case(b_name);
  for (bool strip : {false, true}) {
    SCOPED_TRACE(strip ? "stripped" : "full");
    runtime::PlanEngine refit(build(a.path, plan::BuildMode::Refit, strip));
    runtime::PlanEngine fresh(build(b.path, plan::BuildMode::Refit));
    refit::RefitRequest req;
    req.files = {b.path};
    req.mode = refit::RefitMode::Verify;
    const refit::RefitReport rep = build::refit_from(refit, req);
    EXPECT_GT(rep.commit.sources_set, 0u);
    EXPECT_TRUE(refit.missing_sources().empty());
    EXPECT_EQ(derived_weight_hashes(refit), derived_weight_hashes(fresh));
    for (const auto& s : b.sets) {
      SCOPED_TRACE("input set " + s.name);
      const auto got = refit.run(feeds_of(s));
      const auto want = fresh.run(feeds_of(s));
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(transforms::bit_equal(got[i], want[i])) << "output " << i << " differs from a fresh build";
        EXPECT_LE(max_diff(got[i], read_npy(s.ort[i].second), "vs ORT"), b.tol_ort);
      }
    }
  }
}

TEST(QuantRefit, MatMulNBitsFromRequantizedOnnx) { expect_refit_equals_fresh("llama_nbits_A", "llama_nbits_B"); }

// The classifier's Gemm runs on int8 codes (MatMulQuant), the convolutions on weights dequantized
// at build: both kinds of recipe replay.
TEST(QuantRefit, QdqFromRequantizedOnnx) { expect_refit_equals_fresh("cnn_static_B", "cnn_static_B2"); }

// Every Linear layer on uint4 codes with zero points, blocks of 32 (QdqWeight's int4 form).
TEST(QuantRefit, Qdq4BitFromRequantizedOnnx) { expect_refit_equals_fresh("llama_qdq4_A", "llama_qdq4_B"); }

// Which quantization a float tensor re-derives: ONNX Runtime's quantize_static writes its int8
// weights by the rule of reforge::QuantizeWeight (symmetric, per output channel, amax / 127, halves
// to even), so every int8 weight of the QDQ BERT, codes and scales, equals QuantizeWeight of the
// float model's weight bit for bit (docs/refit.md). The activations' scales of the same model come
// from calibration data, which no checkpoint holds.
TEST(QuantRefit, OrtInt8WeightsAreQuantizeWeightOfTheFloatWeights) {
  const ir::Graph q = onnx::import_model_file(find_case("bert_static").path);
  const ir::Graph f = onnx::import_model_file((kModels / "bert" / "dynamo" / "A" / "model.onnx").string());
  size_t checked = 0;
  for (const ir::Node& n : q.nodes) {
    if (n.op_type != "DequantizeLinear" || !q.initializers.count(n.inputs[0])) continue;
    const Tensor& codes = q.initializers.at(n.inputs[0]);
    if (codes.dtype() != DType::Int8 || codes.rank() != 2) continue;
    SCOPED_TRACE(n.name);
    const std::string name = n.inputs[0].substr(0, n.inputs[0].rfind("_quantized"));
    ASSERT_TRUE(f.initializers.count(name)) << name;
    const bool transposed = n.attr_int("axis", 1) == 0;  // [N, K]: a Gemm's transB weight
    const Tensor& w = f.initializers.at(name);
    const std::vector<Tensor> out =
        transforms::evaluate_op("reforge", "QuantizeWeight", 1,
                                {{"bits", ir::int_attr("bits", 8)},
                                 {"block_size", ir::int_attr("block_size", 0)},
                                 {"transposed", ir::int_attr("transposed", transposed ? 1 : 0)}},
                                {&w}, 2);
    // Q is [N, K]: the codes as the model stores them, transposed for a MatMul's [K, N] weight.
    const Tensor want = transposed ? out[0] : transforms::evaluate_op("", "Transpose", 21, {}, {&out[0]}, 1)[0];
    EXPECT_TRUE(transforms::bit_equal(want, codes)) << "codes";
    EXPECT_TRUE(transforms::bit_equal(out[1], q.initializers.at(n.inputs[1]))) << "scales";
    ++checked;
  }
  EXPECT_EQ(checked, 13u);
}

// The same for ONNX Runtime's 4-bit quantizer (MatMulNBits, block 32, asymmetric): its B, scales
// and zero points are reforge::QuantizeWeight's int4 output of the float weight, bit for bit.
TEST(QuantRefit, Ort4BitWeightsAreQuantizeWeightOfTheFloatWeights) {
  const ir::Graph q = onnx::import_model_file(find_case("llama_nbits_A").path);
  const ir::Graph f = onnx::import_model_file((kModels / "llama" / "dynamo" / "A" / "model.onnx").string());
  size_t checked = 0;
  for (const ir::Node& n : q.nodes) {
    if (n.op_type != "MatMulNBits") continue;
    SCOPED_TRACE(n.name);
    const std::string name = n.inputs[1].substr(0, n.inputs[1].rfind("_Q4"));
    ASSERT_TRUE(f.initializers.count(name)) << name;
    const Tensor& w = f.initializers.at(name);
    const std::vector<Tensor> out =
        transforms::evaluate_op("reforge", "QuantizeWeight", 1,
                                {{"bits", ir::int_attr("bits", 4)},
                                 {"block_size", ir::int_attr("block_size", n.attr_int("block_size", 0))},
                                 {"transposed", ir::int_attr("transposed", 0)}},
                                {&w}, 3);
    for (size_t i = 0; i < 3; ++i) {
      const Tensor& ort = q.initializers.at(n.inputs[1 + i]);
      EXPECT_EQ(ort.nbytes(), out[i].nbytes()) << "input " << 1 + i;
      EXPECT_TRUE(ort.nbytes() == out[i].nbytes() && std::memcmp(ort.raw(), out[i].raw(), ort.nbytes()) == 0)
          << "input " << 1 + i << " " << ort.describe() << " vs " << out[i].describe();
    }
    ++checked;
  }
  EXPECT_GT(checked, 0u);
  std::printf("[ quant    ] %zu MatMulNBits weights equal QuantizeWeight int4 of the float weights\n", checked);
}

// A float checkpoint cannot re-derive weights another tool quantized: binding refuses, naming
// a quantized weight, its consumer and why, and pointing at the ways that work.
TEST(QuantRefit, FloatCheckpointRefused) {
  const QuantCase llama = find_case("llama_qdq4_sym_A");
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  const auto ckpt = refit::Checkpoint::open((kModels / "llama" / "checkpoint_A.safetensors").string());
  const std::string err =
      error_of([&] { build::build_plan_with_checkpoint(onnx::import_model_file(llama.path), o, ckpt, {}); });
  EXPECT_NE(err.find("quantized weights"), std::string::npos) << err;
  // QDQ 4-bit, symmetric (int4 codes, no zero points): not QuantizeWeight's rule, refused.
  EXPECT_NE(err.find("'val_119_DQ_Q4' int4[64,64] (input 0 of node 'node_linear_3_DQ_Q4' (DequantizeLinear))"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("not by a reforge recipe"), std::string::npos) << err;
  EXPECT_NE(err.find("re-quantized ONNX"), std::string::npos) << err;
  EXPECT_NE(err.find("--precision int8|int4"), std::string::npos) << err;

  // QDQ: DequantizeLinear's int8 weights and scales are refused the same way.
  const QuantCase cnn = find_case("cnn_static");
  const auto cnn_ckpt = refit::Checkpoint::open((kModels / "cnn" / "checkpoint_A.safetensors").string());
  const std::string qdq =
      error_of([&] { build::build_plan_with_checkpoint(onnx::import_model_file(cnn.path), o, cnn_ckpt, {}); });
  EXPECT_NE(
      qdq.find("int8[16,16,3,3] (input 0 of node 'block1.conv1.conv.weight_DequantizeLinear' (DequantizeLinear))"),
      std::string::npos)
      << qdq;

  // --allow-partial-binding builds; the plan's checkpoint refit is refused, naming the weight
  // and the reason, and the engine is left as it was.
  build::BindOptions partial;
  partial.allow_partial = true;
  runtime::PlanEngine e(
      round_trip(build::build_plan_with_checkpoint(onnx::import_model_file(llama.path), o, ckpt, partial)));
  const auto before = derived_weight_hashes(e);
  refit::RefitRequest req;
  req.files = {(kModels / "llama" / "checkpoint_B.safetensors").string()};
  const std::string refused = error_of([&] { refit::refit_from(e, req); });
  EXPECT_NE(refused.find("val_119_DQ_Q4"), std::string::npos) << refused;
  EXPECT_NE(refused.find("not by a reforge recipe"), std::string::npos) << refused;
  EXPECT_EQ(derived_weight_hashes(e), before);
}

// ONNX Runtime's asymmetric 4-bit weights are reforge::QuantizeWeight int4 of the float weights
// (above), so a float checkpoint re-derives them: the build binds every quantized input of the
// `op` nodes to that step of the checkpoint's Linear weight (laid out by Int4Unpack for
// DequantizeLinear), and a refit from checkpoint B equals a fresh build of the model ONNX Runtime
// quantized from weights B, engine weights and outputs bit for bit.
void expect_checkpoint_refit_equals_fresh(const std::string& a_name, const std::string& b_name, const std::string& op,
                                          size_t quantized_inputs) {
  const QuantCase a = find_case(a_name), b = find_case(b_name);
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  const auto ckpt = refit::Checkpoint::open((kModels / "llama" / "checkpoint_A.safetensors").string());
  build::BindResult bound;
  runtime::PlanEngine e(
      round_trip(build::build_plan_with_checkpoint(onnx::import_model_file(a.path), o, ckpt, {}, &bound)));
  EXPECT_EQ(bound.unbound, 0u);
  size_t quantized_bound = 0;
  for (const auto& s : e.plan().sources)
    if (s.op_type == op) {
      EXPECT_EQ(s.binding.status, plan::Binding::Status::Bound) << s.key << ": " << s.binding.note;
      quantized_bound += s.binding.status == plan::Binding::Status::Bound;
    }
  EXPECT_EQ(quantized_bound, quantized_inputs);
  runtime::PlanEngine fresh(build(b.path, plan::BuildMode::Refit));
  refit::RefitRequest req;
  req.files = {(kModels / "llama" / "checkpoint_B.safetensors").string()};
  refit::refit_from(e, req);
  EXPECT_EQ(derived_weight_hashes(e), derived_weight_hashes(fresh));
  for (const auto& s : b.sets) {
    SCOPED_TRACE("input set " + s.name);
    const auto got = e.run(feeds_of(s));
    const auto want = fresh.run(feeds_of(s));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(transforms::bit_equal(got[i], want[i])) << "output " << i;
      EXPECT_LE(max_diff(got[i], read_npy(s.ort[i].second), "vs ORT"), b.tol_ort);
    }
  }
}

TEST(QuantRefit, MatMulNBitsFromFloatCheckpoint) {
  expect_checkpoint_refit_equals_fresh("llama_nbits_A", "llama_nbits_B", "MatMulNBits", 15 * 3);
}

TEST(QuantRefit, Qdq4BitFromFloatCheckpoint) {
  expect_checkpoint_refit_equals_fresh("llama_qdq4_A", "llama_qdq4_B", "DequantizeLinear", 15 * 3);
}

}  // namespace
