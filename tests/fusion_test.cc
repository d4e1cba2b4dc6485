// Transformer fusion passes (src/passes/fusion_transformer.cc) and their fused kernels
// (src/backends/cpu):
// - on every exported model in models/manifest.json, the passes find the expected number of
//   RMSNorm / GELU / SiLU / attention patterns, and the fused plan still matches the PyTorch
//   reference (baked and refittable builds);
// - hand-built near misses (wrong exponent, eps in the wrong place, softmax on another axis,
//   a refittable GELU constant) stay unfused;
// - the fused kernels agree with the unfused graph on random inputs, across layouts, masks,
//   grouped-query attention, odd sizes and thread counts.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "builder/builder.h"
#include "core/npy.h"
#include "core/simd.h"
#include "onnx/importer.h"
#include "refit/refitter.h"
#include "runtime/engine.h"
#include "runtime/plan_engine.h"
#include "support/engine_for.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

const fs::path kModelsDir = fs::path(REFORGE_SOURCE_DIR) / "models";

std::map<std::string, int> op_counts(const ir::Graph& g) {
  std::map<std::string, int> c;
  for (const auto& n : g.nodes) ++c[(n.domain.empty() ? "" : n.domain + "::") + n.op_type];
  return c;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double d = std::fabs(a.as_double(i) - b.as_double(i));
    if (!(d <= worst)) worst = d;  // NaN wins
  }
  return worst;
}

// ---------------------------------------------------------------------------------------------
// Exported models

struct Expect {
  int rms, attn, silu, gelu, rotary;
};

// model -> expected fused node counts (same for every export of that model).
const std::map<std::string, Expect> kExpected = {
    {"llama", {5, 2, 2, 0, 4}},  // 2 layers x 2 norms + final norm; SwiGLU; rotary on q and k
    {"gpt2", {0, 2, 0, 2, 0}},   // tanh GELU
    {"bert", {0, 2, 0, 2, 0}},   // erf GELU
};

class FusionModels : public ::testing::TestWithParam<nlohmann::json> {};

TEST_P(FusionModels, FusesAndMatchesReference) {
  const nlohmann::json& e = GetParam();
  const std::string model = e.at("model");
  const fs::path path = kModelsDir / e.at("path").get<std::string>();
  SCOPED_TRACE(path.string());
  const Expect want = kExpected.at(model);
  for (plan::BuildMode mode : {plan::BuildMode::Baked, plan::BuildMode::Refit}) {
    SCOPED_TRACE(mode == plan::BuildMode::Baked ? "baked" : "refit");
    build::BuildOptions o;
    o.mode = mode;
    plan::Plan p = build::build_plan(onnx::import_model_file(path.string()), o);
    auto c = op_counts(p.graph);
    EXPECT_EQ(c["reforge::RmsNorm"], want.rms);
    EXPECT_EQ(c["reforge::Attention"], want.attn);
    EXPECT_EQ(c["reforge::SiluMul"] + c["reforge::Silu"], want.silu);
    EXPECT_EQ(c["reforge::Gelu"], want.gelu);
    EXPECT_EQ(c["Pow"], 0);
    EXPECT_EQ(c["Softmax"], 0);
    EXPECT_EQ(c["reforge::Rotary"], want.rotary);
    EXPECT_EQ(c["Neg"], 0);
    EXPECT_EQ(c["Sigmoid"], 0);
    runtime::PlanEngine engine(std::move(p));
    for (const auto& set : e.at("input_sets")) {
      std::map<std::string, Tensor> feeds;
      for (const auto& [name, file] : set.at("inputs").items())
        feeds[name] = read_npy((kModelsDir / file.get<std::string>()).string());
      std::vector<Tensor> out = engine.run(feeds);
      size_t k = 0;
      for (const auto& name : e.at("outputs")) {
        Tensor ref =
            read_npy((kModelsDir / set.at("reference").at(name.get<std::string>()).get<std::string>()).string());
        EXPECT_LE(max_abs_diff(out[k++], ref), 1e-4) << "output " << name << ", input set " << set.at("name");
      }
    }
  }
}

std::vector<nlohmann::json> transformer_exports() {
  std::ifstream f(kModelsDir / "manifest.json");
  std::vector<nlohmann::json> v;
  if (!f) return v;
  const nlohmann::json manifest = nlohmann::json::parse(f);
  for (const auto& e : manifest.at("exports"))
    if (kExpected.count(e.at("model").get<std::string>())) v.push_back(e);
  return v;
}

TEST(FusionModelsList, NotEmpty) { EXPECT_GE(transformer_exports().size(), 30u); }

INSTANTIATE_TEST_SUITE_P(Exports, FusionModels, ::testing::ValuesIn(transformer_exports()),
                         [](const ::testing::TestParamInfo<nlohmann::json>& i) {
                           return i.param.at("model").get<std::string>() + "_" +
                                  i.param.at("export").get<std::string>() + "_" +
                                  i.param.at("weights").get<std::string>();
                         });

// ---------------------------------------------------------------------------------------------
// Hand-built graphs

Tensor scalar_f(float v) {
  Tensor t = Tensor::empty(DType::Float32, {});
  t.mutable_data<float>()[0] = v;
  return t;
}
Tensor ints(std::vector<int64_t> v) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.mutable_data<int64_t>()[i] = v[i];
  return t;
}
Tensor random_f(Shape s, uint32_t seed, float lo = -1, float hi = 1) {
  Tensor t = Tensor::empty(DType::Float32, std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
  return t;
}

struct GraphBuilder {
  ir::Graph g;
  int next = 0;
  explicit GraphBuilder(int opset = 18) {
    g.name = "fusion_test";
    g.ir_version = 10;
    g.opsets = {{"", opset}};
  }
  void input(const std::string& name, DType dt = DType::Float32) { g.inputs.push_back({name, dt, false, {}}); }
  void output(const std::string& name) { g.outputs.push_back({name, DType::Float32, false, {}}); }
  // A Constant node: a literal.
  std::string constant(Tensor t) {
    std::string name = "c" + std::to_string(next++);
    ir::Node n;
    n.name = name;
    n.op_type = "Constant";
    n.opset = g.opsets[""];
    n.outputs = {name};
    n.attrs["value"] = ir::tensor_attr("value", std::move(t));
    g.nodes.push_back(std::move(n));
    return name;
  }
  // An initializer: a source in refit builds (when float).
  std::string init(Tensor t) {
    std::string name = "i" + std::to_string(next++);
    g.initializers[name] = std::move(t);
    return name;
  }
  std::string op(const std::string& type, std::vector<std::string> ins,
                 std::map<std::string, ir::Attribute> attrs = {}) {
    std::string name = type + "_" + std::to_string(next++);
    ir::Node n;
    n.name = name;
    n.op_type = type;
    n.opset = g.opsets[""];
    n.inputs = std::move(ins);
    n.outputs = {name};
    n.attrs = std::move(attrs);
    g.nodes.push_back(std::move(n));
    return name;
  }
};

// Runs the graph unfused (Engine on the imported graph) and fused (build_plan + PlanEngine);
// returns the fused op counts and checks the outputs agree.
std::map<std::string, int> check_fused_vs_unfused(const ir::Graph& g, const std::map<std::string, Tensor>& feeds,
                                                  double tol, plan::BuildMode mode = plan::BuildMode::Baked,
                                                  int threads = 1) {
  runtime::EngineOptions eo;
  eo.threads = threads;
  runtime::Engine ref = test_support::engine_for(g, eo);
  build::BuildOptions o;
  o.mode = mode;
  plan::Plan p = build::build_plan(g, o);
  auto counts = op_counts(p.graph);
  runtime::PlanEngine fused(std::move(p), eo);
  auto a = ref.run(feeds);
  auto b = fused.run(feeds);
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) EXPECT_LE(max_abs_diff(a[i], b[i]), tol) << "output " << i;
  return counts;
}

// x * (1 / sqrt(mean(x^p) + eps)) * w, with knobs for near misses.
ir::Graph rms_graph(float exponent, bool eps_before_mean, bool weight_as_init, int64_t axis = -1) {
  GraphBuilder b;
  b.input("x");
  std::string p = b.op("Pow", {"x", b.constant(scalar_f(exponent))});
  std::string eps = b.constant(scalar_f(1e-6f));
  std::string m;
  if (eps_before_mean)
    m = b.op("ReduceMean", {b.op("Add", {p, eps}), b.constant(ints({axis}))});
  else
    m = b.op("Add", {b.op("ReduceMean", {p, b.constant(ints({axis}))}), eps});
  std::string r = b.op("Reciprocal", {b.op("Sqrt", {m})});
  std::string y = b.op("Mul", {"x", r});
  Tensor w = random_f({48}, 7);
  std::string out = b.op("Mul", {y, weight_as_init ? b.init(w) : b.constant(w)});
  b.output(out);
  return b.g;
}

TEST(FusionRmsNorm, FusesAndMatches) {
  std::map<std::string, Tensor> feeds = {{"x", random_f({2, 5, 48}, 1, -3, 3)}};
  for (auto mode : {plan::BuildMode::Baked, plan::BuildMode::Refit}) {
    auto c = check_fused_vs_unfused(rms_graph(2.0f, false, true), feeds, 1e-5, mode);
    EXPECT_EQ(c["reforge::RmsNorm"], 1);
    EXPECT_EQ(c.size(), 1u);
  }
  // Large enough for the parallel path.
  feeds = {{"x", random_f({64, 33, 48}, 2, -3, 3)}};
  auto c = check_fused_vs_unfused(rms_graph(2.0f, false, false), feeds, 1e-5, plan::BuildMode::Baked, 2);
  EXPECT_EQ(c["reforge::RmsNorm"], 1);
}

TEST(FusionRmsNorm, NearMissesStayUnfused) {
  std::map<std::string, Tensor> feeds = {{"x", random_f({2, 5, 48}, 1, -3, 3)}};
  EXPECT_EQ(check_fused_vs_unfused(rms_graph(3.0f, false, false), feeds, 1e-5)["reforge::RmsNorm"], 0);     // x^3
  EXPECT_EQ(check_fused_vs_unfused(rms_graph(2.0f, true, false), feeds, 1e-5)["reforge::RmsNorm"], 0);      // eps first
  EXPECT_EQ(check_fused_vs_unfused(rms_graph(2.0f, false, false, 1), feeds, 1e-5)["reforge::RmsNorm"], 0);  // axis 1
}

// A 16-bit model's RMSNorm as Hugging Face writes it: Cast(bf16 -> float32), the float32
// normalization, Cast(-> bf16), times the bf16 weight: one RMSNormalization-23 node, whose outputs
// equal the four nodes' (fused RmsNorm and its casts, the pass skipped) within one bf16 ulp (the
// two kernels sum the squares in other orders), refittable weight included; with eps refittable,
// or a float32 weight, it stays as it was.
TEST(FusionRmsNorm, SixteenBitCastsAndWeightBecomeRmsNormalization) {
  auto graph = [](bool eps_refittable, DType weight) {
    GraphBuilder b;
    b.g.inputs.push_back({"x", DType::BFloat16, true, {ir::Dim{3}, ir::Dim{5}, ir::Dim{48}}});
    const auto to = [](DType t) { return std::map<std::string, ir::Attribute>{{"to", ir::int_attr("to", static_cast<int64_t>(t))}}; };
    const std::string x = b.op("Cast", {"x"}, to(DType::Float32));
    const std::string p = b.op("Pow", {x, b.constant(scalar_f(2.0f))});
    const std::string eps = eps_refittable ? b.init(scalar_f(1e-6f)) : b.constant(scalar_f(1e-6f));
    const std::string m = b.op("Add", {b.op("ReduceMean", {p, b.constant(ints({-1}))}), eps});
    const std::string y = b.op("Mul", {x, b.op("Reciprocal", {b.op("Sqrt", {m})})});
    const std::string h = b.op("Cast", {y}, to(weight));
    const std::string out = b.op("Mul", {b.init(cast_tensor(random_f({48}, 7, 0.5f, 1.5f), weight)), h});
    b.g.outputs.push_back({out, weight, false, {}});
    return b.g;
  };
  const std::map<std::string, Tensor> feeds = {
      {"x", cast_tensor(random_f({3, 5, 48}, 1, -3, 3), DType::BFloat16)}};
  for (auto mode : {plan::BuildMode::Baked, plan::BuildMode::Refit}) {
    build::BuildOptions o;
    o.mode = mode;
    plan::Plan fused = build::build_plan(graph(false, DType::BFloat16), o);
    auto counts = op_counts(fused.graph);
    EXPECT_EQ(counts["RMSNormalization"], 1);
    EXPECT_EQ(counts.size(), 1u) << "mode " << plan::build_mode_name(mode);
    o.skip_passes = {"fuse-rms-norm-cast"};
    plan::Plan four = build::build_plan(graph(false, DType::BFloat16), o);
    EXPECT_EQ(op_counts(four.graph)["reforge::RmsNorm"], 1);
    const Tensor a = runtime::PlanEngine(std::move(fused)).run(feeds)[0];
    const Tensor b = runtime::PlanEngine(std::move(four)).run(feeds)[0];
    ASSERT_EQ(a.dtype(), DType::BFloat16);
    ASSERT_EQ(a.shape(), b.shape());
    int differ = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const int32_t d = std::abs(int32_t{a.data<uint16_t>()[i]} - int32_t{b.data<uint16_t>()[i]});
      EXPECT_LE(d, 1) << "element " << i;
      differ += d != 0;
    }
    EXPECT_LE(differ, a.numel() / 20) << "more than 5% of the elements differ by an ulp";
  }
  build::BuildOptions refit;
  refit.mode = plan::BuildMode::Refit;
  EXPECT_EQ(op_counts(build::build_plan(graph(true, DType::BFloat16), refit).graph)["RMSNormalization"], 0);
  EXPECT_EQ(op_counts(build::build_plan(graph(false, DType::Float32), refit).graph)["RMSNormalization"], 0);
}

// A residual Add read by RMSNormalization-23 and again by a later Add: one reforge::AddRmsNorm with
// both results, bit-equal to the unfused graph (float32 and bfloat16, baked and refittable scale);
// an Add of a broadcast operand or a scale that is a graph input stays unfused.
TEST(FusionAddRmsNorm, ResidualSumAndItsNormalizationBecomeOneNode) {
  auto graph = [](DType t, bool broadcast, bool computed_scale) {
    GraphBuilder b(23);
    b.g.inputs.push_back({"x", t, true, {ir::Dim{3}, ir::Dim{5}, ir::Dim{48}}});
    b.g.inputs.push_back({"r", t, true, {ir::Dim{broadcast ? 1 : 3}, ir::Dim{5}, ir::Dim{48}}});
    const std::string sum = b.op("Add", {"x", "r"});
    std::string w = "s";  // a scale the graph is given: not there where the Add is
    if (computed_scale)
      b.g.inputs.push_back({"s", t, true, {ir::Dim{48}}});
    else
      w = b.init(cast_tensor(random_f({48}, 7, 0.5f, 1.5f), t));
    const std::string y = b.op("RMSNormalization", {sum, w}, {{"epsilon", ir::float_attr("epsilon", 1e-5f)}});
    const std::string next = b.op("Add", {sum, y});
    b.g.outputs.push_back({y, t, false, {}});
    b.g.outputs.push_back({next, t, false, {}});
    return b.g;
  };
  for (DType t : {DType::Float32, DType::BFloat16})
    for (auto mode : {plan::BuildMode::Baked, plan::BuildMode::Refit}) {
      const std::map<std::string, Tensor> feeds = {{"x", cast_tensor(random_f({3, 5, 48}, 1, -3, 3), t)},
                                                   {"r", cast_tensor(random_f({3, 5, 48}, 2, -3, 3), t)}};
      build::BuildOptions o;
      o.mode = mode;
      plan::Plan fused = build::build_plan(graph(t, false, false), o);
      auto counts = op_counts(fused.graph);
      EXPECT_EQ(counts["reforge::AddRmsNorm"], 1);
      EXPECT_EQ(counts["RMSNormalization"], 0);
      EXPECT_EQ(counts["Add"], 1);
      o.skip_passes = {"fuse-add-rms-norm"};
      plan::Plan plain = build::build_plan(graph(t, false, false), o);
      EXPECT_EQ(op_counts(plain.graph)["reforge::AddRmsNorm"], 0);
      const std::vector<Tensor> a = runtime::PlanEngine(std::move(fused)).run(feeds);
      const std::vector<Tensor> b = runtime::PlanEngine(std::move(plain)).run(feeds);
      ASSERT_EQ(a.size(), 2u);
      for (size_t k = 0; k < 2; ++k) {
        ASSERT_EQ(a[k].shape(), b[k].shape());
        EXPECT_EQ(0, std::memcmp(a[k].raw(), b[k].raw(), a[k].nbytes())) << "output " << k << " " << dtype_name(t);
      }
    }
  build::BuildOptions o;
  EXPECT_EQ(op_counts(build::build_plan(graph(DType::BFloat16, true, false), o).graph)["reforge::AddRmsNorm"], 0);
  EXPECT_EQ(op_counts(build::build_plan(graph(DType::BFloat16, false, true), o).graph)["reforge::AddRmsNorm"], 0);
}

// Refittable exponent / eps: still fused, kept as inputs; the kernel honours any value.
TEST(FusionRmsNorm, RefittableScalarsStayInputs) {
  GraphBuilder b;
  b.input("x");
  const std::string pn = b.init(scalar_f(2.0f)), en = b.init(scalar_f(1e-5f)), nn = b.init(scalar_f(1.0f));
  std::string p = b.op("Pow", {"x", pn});
  std::string m = b.op("Add", {b.op("ReduceMean", {p, b.constant(ints({-1}))}), en});
  std::string r = b.op("Div", {nn, b.op("Sqrt", {m})});
  b.output(b.op("Mul", {"x", r}));
  std::map<std::string, Tensor> feeds = {{"x", random_f({3, 40}, 4, -2, 2)}};
  auto c = check_fused_vs_unfused(b.g, feeds, 1e-5, plan::BuildMode::Refit);
  EXPECT_EQ(c["reforge::RmsNorm"], 1);
  // Refit exponent 2 -> 3, eps -> 0.5, numerator 1 -> 2: the fused engine follows.
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  runtime::PlanEngine fused(build::build_plan(b.g, o));
  refit::Refitter refitter(fused);
  for (const auto& [name, v] : std::vector<std::pair<std::string, float>>{{pn, 3.0f}, {en, 0.5f}, {nn, 2.0f}}) {
    b.g.initializers[name] = scalar_f(v);
    refitter.set(name, scalar_f(v));
  }
  refitter.commit();
  runtime::Engine ref = test_support::engine_for(b.g);
  EXPECT_LE(max_abs_diff(fused.run(feeds)[0], ref.run(feeds)[0]), 1e-5);
}

ir::Graph gelu_erf_graph(float sqrt2, float half, bool half_as_init = false) {
  GraphBuilder b;
  b.input("x");
  std::string e = b.op("Erf", {b.op("Div", {"x", b.constant(scalar_f(sqrt2))})});
  std::string a = b.op("Add", {e, b.constant(scalar_f(1.0f))});
  std::string m = b.op("Mul", {"x", a});
  b.output(b.op("Mul", {m, half_as_init ? b.init(scalar_f(half)) : b.constant(scalar_f(half))}));
  return b.g;
}

ir::Graph gelu_tanh_graph(float cubic) {
  GraphBuilder b;
  b.input("x");
  std::string h = b.op("Mul", {"x", b.constant(scalar_f(0.5f))});
  std::string p = b.op("Pow", {"x", b.constant(scalar_f(3.0f))});
  std::string a = b.op("Add", {"x", b.op("Mul", {p, b.constant(scalar_f(cubic))})});
  std::string t = b.op("Tanh", {b.op("Mul", {a, b.constant(scalar_f(0.7978845834732056f))})});
  b.output(b.op("Mul", {h, b.op("Add", {t, b.constant(scalar_f(1.0f))})}));
  return b.g;
}

TEST(FusionGelu, BothFormsFuseAndNearMissesDoNot) {
  std::map<std::string, Tensor> feeds = {{"x", random_f({4, 37}, 3, -5, 5)}};
  EXPECT_EQ(check_fused_vs_unfused(gelu_erf_graph(1.4142135f, 0.5f), feeds, 1e-5)["reforge::Gelu"], 1);
  EXPECT_EQ(check_fused_vs_unfused(gelu_tanh_graph(0.044715f), feeds, 1e-5)["reforge::Gelu"], 1);
  EXPECT_EQ(check_fused_vs_unfused(gelu_erf_graph(1.5f, 0.5f), feeds, 1e-5)["reforge::Gelu"], 0);
  EXPECT_EQ(check_fused_vs_unfused(gelu_erf_graph(1.4142135f, 0.4f), feeds, 1e-5)["reforge::Gelu"], 0);
  EXPECT_EQ(check_fused_vs_unfused(gelu_tanh_graph(0.05f), feeds, 1e-5)["reforge::Gelu"], 0);
  // A refittable 0.5 stays an input in a refit build (the kernel honours other values); a baked
  // build drops it.
  {
    build::BuildOptions o;
    o.mode = plan::BuildMode::Refit;
    plan::Plan p = build::build_plan(gelu_erf_graph(1.4142135f, 0.5f, true), o);
    ASSERT_EQ(p.graph.nodes.size(), 1u);
    EXPECT_EQ(p.graph.nodes[0].op_type, "Gelu");
    EXPECT_EQ(p.graph.nodes[0].inputs.size(), 4u);
  }
  EXPECT_EQ(check_fused_vs_unfused(gelu_erf_graph(1.4142135f, 0.5f, true), feeds, 1e-5,
                                   plan::BuildMode::Refit)["reforge::Gelu"],
            1);
  EXPECT_EQ(check_fused_vs_unfused(gelu_erf_graph(1.4142135f, 0.5f, true), feeds, 1e-5)["reforge::Gelu"], 1);
  // Refit the 0.5 to 0.25: the fused engine follows the new value exactly like the unfused graph.
  {
    ir::Graph g = gelu_erf_graph(1.4142135f, 0.5f, true);
    build::BuildOptions o;
    o.mode = plan::BuildMode::Refit;
    runtime::PlanEngine fused(build::build_plan(g, o));
    ASSERT_EQ(g.initializers.size(), 1u);
    const std::string name = g.initializers.begin()->first;
    g.initializers[name] = scalar_f(0.25f);
    refit::Refitter r(fused);
    r.set(name, scalar_f(0.25f));
    r.commit();
    runtime::Engine ref = test_support::engine_for(g);
    EXPECT_LE(max_abs_diff(fused.run(feeds)[0], ref.run(feeds)[0]), 1e-5);
  }
}

TEST(FusionSilu, SiluAndSwiGlu) {
  GraphBuilder b;
  b.input("x");
  b.input("u");
  std::string s = b.op("Mul", {b.op("Sigmoid", {"x"}), "x"});
  b.output(b.op("Mul", {s, "u"}));
  std::map<std::string, Tensor> feeds = {{"x", random_f({3, 1000}, 5, -20, 20)}, {"u", random_f({3, 1000}, 6)}};
  for (int threads : {1, 2}) {
    auto c = check_fused_vs_unfused(b.g, feeds, 1e-5, plan::BuildMode::Baked, threads);
    EXPECT_EQ(c["reforge::SiluMul"], 1);
    EXPECT_EQ(c.size(), 1u);
  }
  // Broadcast multiplier: the kernel falls back to the unfused ops.
  feeds["u"] = random_f({1000}, 6);
  EXPECT_EQ(check_fused_vs_unfused(b.g, feeds, 1e-5)["reforge::SiluMul"], 1);
  // Plain SiLU at the graph output.
  GraphBuilder b2;
  b2.input("x");
  b2.output(b2.op("Mul", {"x", b2.op("Sigmoid", {"x"})}));
  EXPECT_EQ(check_fused_vs_unfused(b2.g, {{"x", random_f({5, 17}, 8, -9, 9)}}, 1e-5)["reforge::Silu"], 1);
}

// Attention as the exporters write it. q: [B,Sq,Hq,D] -> Transpose; k: [B,Hkv,Sk,D] (repeat_kv when
// Hkv < Hq) -> Transpose(0,1,3,2); v: [B,Sk,Hkv,D] -> Transpose -> repeat_kv; scores / sqrt(D) + mask; softmax; PV;
// output transpose to [B,Sq,Hq,D].
struct AttnCase {
  int64_t B, Hq, Hkv, Sq, Sk, D;
  std::string mask;  // "", "add", "where"
  bool mul_scale = false;
  int64_t softmax_axis = -1;
};

ir::Graph attention_graph(const AttnCase& c, bool as_matmul_only = false) {
  GraphBuilder b;
  b.input("q");
  b.input("k");
  b.input("v");
  std::string q = b.op("Transpose", {"q"}, {{"perm", ir::ints_attr("perm", {0, 2, 1, 3})}});
  std::string k = "k", v = b.op("Transpose", {"v"}, {{"perm", ir::ints_attr("perm", {0, 2, 1, 3})}});
  if (c.Hkv != c.Hq) {
    const int64_t r = c.Hq / c.Hkv;
    auto rep = [&](const std::string& x) {
      std::string u = b.op("Unsqueeze", {x, b.constant(ints({2}))});
      std::string e = b.op("Expand", {u, b.constant(ints({c.B, c.Hkv, r, c.Sk, c.D}))});
      return b.op("Reshape", {e, b.constant(ints({c.B, c.Hq, c.Sk, c.D}))});
    };
    k = rep(k);
    v = rep(v);
  }
  std::string kt = b.op("Transpose", {k}, {{"perm", ir::ints_attr("perm", {0, 1, 3, 2})}});
  std::string s = b.op("MatMul", {q, kt});
  if (c.mul_scale)
    s = b.op("Mul", {b.constant(scalar_f(1.0f / std::sqrt(float(c.D)))), s});
  else
    s = b.op("Div", {s, b.constant(scalar_f(std::sqrt(float(c.D))))});
  if (c.mask == "add" || c.mask == "causal") {
    b.input("mask");
    s = b.op("Add", {s, "mask"});
  } else if (c.mask == "where") {
    b.input("mask", DType::Bool);
    s = b.op("Where", {"mask", b.init(scalar_f(-3.4028234663852886e+38f)), s});
  }
  std::string p = b.op("Softmax", {s}, {{"axis", ir::int_attr("axis", c.softmax_axis)}});
  std::string y = b.op("MatMul", {p, v});
  b.output(b.op("Transpose", {y}, {{"perm", ir::ints_attr("perm", {0, 2, 1, 3})}}));
  return b.g;
}

std::map<std::string, Tensor> attention_feeds(const AttnCase& c) {
  std::map<std::string, Tensor> f = {{"q", random_f({c.B, c.Sq, c.Hq, c.D}, 11, -2, 2)},
                                     {"k", random_f({c.B, c.Hkv, c.Sk, c.D}, 12, -2, 2)},
                                     {"v", random_f({c.B, c.Sk, c.Hkv, c.D}, 13)}};
  if (c.mask == "add") {
    Tensor m = random_f({c.B, 1, c.Sq, c.Sk}, 14, -4, 0);
    for (int64_t i = 0; i < m.numel(); i += 3) m.mutable_data<float>()[i] = -3.4028234663852886e+38f;
    f["mask"] = m;
  } else if (c.mask == "causal") {
    // Additive causal mask as torch 1.13 exports it: -FLT_MAX above the diagonal.
    Tensor m = Tensor::empty(DType::Float32, {1, 1, c.Sq, c.Sk});
    for (int64_t i = 0; i < c.Sq; ++i)
      for (int64_t j = 0; j < c.Sk; ++j)
        m.mutable_data<float>()[i * c.Sk + j] = j > i + (c.Sk - c.Sq) ? -3.4028234663852886e+38f : 0.0f;
    f["mask"] = m;
  } else if (c.mask == "where") {
    Tensor m = Tensor::empty(DType::Bool, {1, 1, c.Sq, c.Sk});
    for (int64_t i = 0; i < c.Sq; ++i)
      for (int64_t j = 0; j < c.Sk; ++j) m.mutable_data<bool>()[i * c.Sk + j] = j > i + (c.Sk - c.Sq);  // causal
    f["mask"] = m;
  }
  return f;
}

TEST(FusionAttention, MatchesUnfusedAcrossShapes) {
  const std::vector<AttnCase> cases = {
      {1, 4, 4, 7, 7, 16, "add"},   {2, 4, 2, 5, 5, 16, "add"},         {1, 8, 2, 33, 33, 64, "where"},
      {1, 4, 1, 1, 19, 32, ""},     {2, 2, 2, 40, 40, 20, "add", true}, {1, 16, 4, 128, 128, 64, "add"},
      {1, 3, 3, 3, 70, 8, "where"}, {1, 4, 2, 100, 100, 32, "causal"},  {2, 2, 1, 1, 50, 16, "causal"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::Message() << "B" << c.B << " Hq" << c.Hq << " Hkv" << c.Hkv << " Sq" << c.Sq << " Sk" << c.Sk
                                    << " D" << c.D << " mask '" << c.mask << "'");
    for (int threads : {1, 2}) {
      auto counts =
          check_fused_vs_unfused(attention_graph(c), attention_feeds(c), 2e-5, plan::BuildMode::Baked, threads);
      EXPECT_EQ(counts["reforge::Attention"], 1);
      EXPECT_EQ(counts.size(), 1u) << "everything but the attention should be absorbed";
    }
  }
}

TEST(FusionAttention, SoftmaxOnAnotherAxisIsNotFused) {
  AttnCase c{1, 2, 2, 4, 4, 8, "add"};
  c.softmax_axis = 2;
  EXPECT_EQ(check_fused_vs_unfused(attention_graph(c), attention_feeds(c), 1e-5)["reforge::Attention"], 0);
}

// A repeat that is not a repeat_kv (expanding batch instead of heads) must fail loudly at run
// time rather than compute something else; here the exporter shape is right, so check the
// refit build keeps working too.
TEST(FusionAttention, RefitBuildFuses) {
  AttnCase c{1, 8, 2, 9, 9, 16, "where"};
  auto counts = check_fused_vs_unfused(attention_graph(c), attention_feeds(c), 2e-5, plan::BuildMode::Refit);
  EXPECT_EQ(counts["reforge::Attention"], 1);
}

// PyTorch's scaled_dot_product_attention decomposition, as the dynamo exporter writes it for
// Hugging Face models: Q and K^T each multiplied by sqrt(scale), K^T through a Reshape to its own
// shape, a float mask added, and Where(IsNaN(P), 0, P) after the softmax. Row 0 of the mask is
// -inf throughout, so that row's softmax is NaN and the guard makes its output zero.
// `dt`: the model's float type (a 16-bit model's constants are 16-bit too).
ir::Graph sdpa_graph(int64_t B, int64_t H, int64_t S, int64_t D, bool scales_as_inits, DType dt = DType::Float32) {
  GraphBuilder b;
  auto shaped = [&](const std::string& name) {
    b.g.inputs.push_back({name, dt, true, {{B, ""}, {H, ""}, {S, ""}, {D, ""}}});
  };
  shaped("q");
  shaped("k");
  shaped("v");
  const float root = std::sqrt(1.0f / std::sqrt(static_cast<float>(D)));
  auto typed = [&](const Tensor& t) { return dt == DType::Float32 ? t : cast_tensor(t, dt); };
  auto scale = [&] { return scales_as_inits ? b.init(typed(scalar_f(root))) : b.constant(typed(scalar_f(root))); };
  std::string kt = b.op("Transpose", {"k"}, {{"perm", ir::ints_attr("perm", {0, 1, 3, 2})}});
  kt = b.op("Reshape", {kt, b.constant(ints({B, H, D, S}))});
  std::string qs = b.op("Mul", {"q", scale()});
  std::string ks = b.op("Mul", {kt, scale()});
  Tensor mask = Tensor::empty(DType::Float32, {1, 1, S, S});
  float* m = mask.mutable_data<float>();
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < S; ++j) m[i * S + j] = i == 0 || j > i ? -INFINITY : 0.0f;
  std::string scores = b.op("Add", {b.op("MatMul", {qs, ks}), b.constant(typed(mask))});
  std::string p = b.op("Softmax", {scores}, {{"axis", ir::int_attr("axis", -1)}});
  std::string guarded = b.op("Where", {b.op("IsNaN", {p}), b.constant(typed(scalar_f(0.0f))), p});
  b.output(b.op("MatMul", {guarded, "v"}));
  return b.g;
}

TEST(FusionAttention, ScaledDotProductDecompositionFusesWithItsNanGuard) {
  for (auto [B, H, S, D] : std::vector<std::array<int64_t, 4>>{{1, 2, 5, 8}, {2, 4, 33, 16}, {1, 3, 70, 20}}) {
    SCOPED_TRACE(testing::Message() << "B" << B << " H" << H << " S" << S << " D" << D);
    std::map<std::string, Tensor> feeds = {
        {"q", random_f({B, H, S, D}, 41)}, {"k", random_f({B, H, S, D}, 42)}, {"v", random_f({B, H, S, D}, 43)}};
    for (auto mode : {plan::BuildMode::Baked, plan::BuildMode::Refit})
      for (int threads : {1, 2}) {
        auto counts =
            check_fused_vs_unfused(sdpa_graph(B, H, S, D, mode == plan::BuildMode::Refit), feeds, 2e-5, mode, threads);
        EXPECT_EQ(counts["reforge::Attention"], 1);
        EXPECT_EQ(counts.size(), 1u) << "everything but the attention should be absorbed";
      }
    // The fully masked row is zero in the fused plan, as the guard makes it (not NaN).
    plan::Plan p = build::build_plan(sdpa_graph(B, H, S, D, false), {});
    runtime::PlanEngine e(std::move(p));
    const Tensor y = e.run(feeds)[0];
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t d = 0; d < D; ++d) EXPECT_EQ(y.data<float>()[bh * S * D + d], 0.0f);
  }
}

// The same decomposition in a bfloat16 or float16 model (the dynamo export of a 16-bit Hugging Face
// model: every constant of the pattern 16-bit) stays unfused (fuse_attention says why), with the
// unfused ops' result.
TEST(FusionAttention, SixteenBitScaledDotProductDecompositionStaysUnfused) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t B = 1, H = 2, S = 7, D = 8;
    std::map<std::string, Tensor> feeds = {{"q", cast_tensor(random_f({B, H, S, D}, 41), dt)},
                                           {"k", cast_tensor(random_f({B, H, S, D}, 42), dt)},
                                           {"v", cast_tensor(random_f({B, H, S, D}, 43), dt)}};
    auto counts = check_fused_vs_unfused(sdpa_graph(B, H, S, D, false, dt), feeds, 0.0);
    EXPECT_EQ(counts["reforge::Attention"], 0);
    EXPECT_EQ(counts["Softmax"], 1);
  }
}

// For the CUDA backend the same 16-bit decomposition fuses, into a node that computes in float32
// (precision 'float32': the CUDA kernel's, tests/cuda_attention_test.cc); the build needs no GPU.
TEST(FusionAttention, SixteenBitDecompositionFusesForCudaInFloat32) {
  if (!backends::find_backend("cuda")) GTEST_SKIP() << "reforge is built without CUDA";
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    build::BuildOptions bo;
    bo.backend = "cuda";
    const plan::Plan p = build::build_plan(sdpa_graph(1, 2, 7, 8, false, dt), bo);
    int fused = 0, softmax = 0;
    for (const ir::Node& n : p.graph.nodes) {
      if (n.domain == "reforge" && n.op_type == "Attention") {
        ++fused;
        EXPECT_EQ(n.attr_string("precision", ""), "float32");
      }
      softmax += n.op_type == "Softmax";
    }
    EXPECT_EQ(fused, 1);
    EXPECT_EQ(softmax, 0);
  }
}

// The dynamo export of a grouped-query Llama with a cache (models/hf/llama_decode): K reaches the
// product through the decomposition's 3-D view (Reshape, Transpose [0,2,1], Reshape) of the
// repeated heads, whose reshapes read K's shape; fuse-attention absorbs the view and the repeat,
// so no Expand of K or V is left (GenerateExports checks the tokens against PyTorch's).
TEST(FusionAttention, DynamoGroupedQueryExportAbsorbsTheKeyViewAndTheRepeat) {
  const plan::Plan p = build::build_plan(
      onnx::import_model_file(std::string(REFORGE_SOURCE_DIR) + "/models/hf/llama_decode/A/model.onnx"), {});
  int attention = 0, expand = 0;
  for (const ir::Node& n : p.graph.nodes) {
    if (n.domain == "reforge" && n.op_type == "Attention") {
      ++attention;
      EXPECT_EQ(n.attr_string("k_layout", ""), "bhsd") << n.label();
      ASSERT_GE(n.inputs.size(), 10u) << n.label() << " kept its repeat_kv";
    }
    expand += n.op_type == "Expand";
  }
  EXPECT_EQ(attention, 2);
  EXPECT_LE(expand, 1) << "only the mask's Expand may stay";
}

// rotate_half rotary embedding as both exporters write it (slice axes [3], concat axis -1), on a
// head-transposed input; cos/sin broadcast over batch and heads.
ir::Graph rotary_graph(int64_t S, int64_t D, int64_t split) {
  GraphBuilder b;
  b.input("x");  // [B, S, H, D]
  std::string x = b.op("Transpose", {"x"}, {{"perm", ir::ints_attr("perm", {0, 2, 1, 3})}});
  std::string cos = b.constant(random_f({1, 1, S, D}, 21));
  std::string sin = b.constant(random_f({1, 1, S, D}, 22));
  std::string hi = b.op("Slice", {x, b.constant(ints({split})), b.constant(ints({INT64_MAX})), b.constant(ints({3})),
                                  b.constant(ints({1}))});
  std::string lo = b.op(
      "Slice", {x, b.constant(ints({0})), b.constant(ints({split})), b.constant(ints({3})), b.constant(ints({1}))});
  std::string cat = b.op("Concat", {b.op("Neg", {hi}), lo}, {{"axis", ir::int_attr("axis", -1)}});
  b.output(b.op("Add", {b.op("Mul", {x, cos}), b.op("Mul", {cat, sin})}));
  return b.g;
}

TEST(FusionRotary, FusesAndMatches) {
  for (int64_t D : {64, 24}) {
    std::map<std::string, Tensor> feeds = {{"x", random_f({2, 9, 3, D}, 20)}};
    auto c = check_fused_vs_unfused(rotary_graph(9, D, D / 2), feeds, 1e-6);
    EXPECT_EQ(c["reforge::Rotary"], 1);
    EXPECT_EQ(c.size(), 1u);
  }
  // Split not at the middle: fused, but the kernel runs the unfused ops (same result).
  std::map<std::string, Tensor> feeds = {{"x", random_f({1, 4, 2, 16}, 20)}};
  EXPECT_EQ(check_fused_vs_unfused(rotary_graph(4, 16, 6), feeds, 1e-6)["reforge::Rotary"], 1);
}

// Decomposed LayerNorm (older exporters): (x - mean) / sqrt(var + eps) * g + b.
ir::Graph layer_norm_graph(bool eps_after_sqrt, bool with_bias) {
  GraphBuilder b(13);
  b.input("x");
  auto mean = [&](const std::string& v) {
    return b.op("ReduceMean", {v}, {{"axes", ir::ints_attr("axes", {-1})}, {"keepdims", ir::int_attr("keepdims", 1)}});
  };
  std::string d = b.op("Sub", {"x", mean("x")});
  std::string var = mean(b.op("Pow", {d, b.constant(scalar_f(2.0f))}));
  std::string eps = b.constant(scalar_f(1e-5f));
  std::string den = eps_after_sqrt ? b.op("Add", {b.op("Sqrt", {var}), eps}) : b.op("Sqrt", {b.op("Add", {var, eps})});
  std::string y = b.op("Mul", {b.op("Div", {d, den}), b.init(random_f({32}, 31))});
  if (with_bias) y = b.op("Add", {y, b.init(random_f({32}, 32))});
  b.output(y);
  return b.g;
}

TEST(FusionLayerNorm, FusesAndNearMissDoesNot) {
  std::map<std::string, Tensor> feeds = {{"x", random_f({3, 7, 32}, 30, -2, 4)}};
  for (bool bias : {true, false})
    for (auto mode : {plan::BuildMode::Baked, plan::BuildMode::Refit}) {
      auto c = check_fused_vs_unfused(layer_norm_graph(false, bias), feeds, 1e-5, mode);
      EXPECT_EQ(c["LayerNormalization"], 1);
      EXPECT_EQ(c.size(), 1u);
    }
  EXPECT_EQ(check_fused_vs_unfused(layer_norm_graph(true, true), feeds, 1e-5)["LayerNormalization"], 0);
}

// The generic (non-AVX-512) variants of the fused kernels agree with the unfused graph too.
TEST(FusionKernels, GenericVariantsMatch) {
  SimdOverride generic(SimdLevel::Generic);
  AttnCase c{1, 8, 2, 37, 37, 64, "causal"};
  EXPECT_EQ(check_fused_vs_unfused(attention_graph(c), attention_feeds(c), 2e-5)["reforge::Attention"], 1);
  std::map<std::string, Tensor> feeds = {{"x", random_f({2, 5, 48}, 1, -3, 3)}};
  EXPECT_EQ(check_fused_vs_unfused(rms_graph(2.0f, false, true), feeds, 1e-5)["reforge::RmsNorm"], 1);
  feeds = {{"x", random_f({4, 37}, 3, -5, 5)}};
  EXPECT_EQ(check_fused_vs_unfused(gelu_erf_graph(1.4142135f, 0.5f), feeds, 1e-5)["reforge::Gelu"], 1);
  EXPECT_EQ(check_fused_vs_unfused(gelu_tanh_graph(0.044715f), feeds, 1e-5)["reforge::Gelu"], 1);
  feeds = {{"x", random_f({2, 9, 3, 64}, 20)}};
  EXPECT_EQ(check_fused_vs_unfused(rotary_graph(9, 64, 32), feeds, 1e-6)["reforge::Rotary"], 1);
}

}  // namespace
