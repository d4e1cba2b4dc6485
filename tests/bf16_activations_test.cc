// --activations bf16 (BuildOptions::activations, plan.h Precision): bf16 plans whose Linear layers
// round their float32 input to bfloat16 before the product. The rounding equals
// bfloat16::from_float on every kind of value; every Linear node of such a plan carries the
// attribute, in both weight layouts and through the plan file; its outputs equal a float64
// product of the rounded X and the rounded W on every row-count path (one row, few rows, many
// rows: the streaming kernel, the panels, oneDNN's single bfloat16 product where the CPU has
// one) and differ from the exact-activation product, also over float32 W (the attribute rounds X
// whatever W is); and the options are checked. Fast and slow refit of such plans:
// LinearPlan.RefitRepacksAndEqualsFreshBuild (linear_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backends/cpu/gemv.h"
#include "builder/builder.h"
#include "core/half.h"
#include "runtime/plan_engine.h"
#include "support/make_tensor.h"
#include "support/plan_round_trip.h"
#include "support/run_op.h"

using namespace reforge;
using test_support::random_floats;
using test_support::round_trip;

namespace {

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float bf16_round(float f) { return bfloat16::to_float(bfloat16::from_float(f)); }

// One Linear layer: y = MatMul(x, W) + b (W [K, N]), or y = Gemm(x, W, b, transB = 1) (W [N, K]).
ir::Graph linear_graph(int64_t rows, int64_t K, int64_t N, bool gemm) {
  ir::Graph g;
  g.name = "linear";
  g.ir_version = 10;
  g.opsets[""] = 18;
  g.initializers["W"] = random_floats(gemm ? Shape{N, K} : Shape{K, N}, 11);
  g.initializers["b"] = random_floats({N}, 12);
  ir::ValueInfo in;
  in.name = "x";
  in.dtype = DType::Float32;
  in.has_shape = true;
  in.shape = {ir::Dim{rows, ""}, ir::Dim{K, ""}};
  g.inputs.push_back(in);
  auto node = [&](const std::string& op, std::vector<std::string> ins, const std::string& out,
                  std::map<std::string, ir::Attribute> attrs = {}) {
    ir::Node n;
    n.op_type = op;
    n.opset = 18;
    n.name = "/" + op;
    n.inputs = std::move(ins);
    n.outputs = {out};
    n.attrs = std::move(attrs);
    g.nodes.push_back(n);
  };
  if (gemm) {
    node("Gemm", {"x", "W", "b"}, "y", {{"transB", ir::int_attr("transB", 1)}});
  } else {
    node("MatMul", {"x", "W"}, "xw");
    node("Add", {"xw", "b"}, "y");
  }
  ir::ValueInfo out;
  out.name = "y";
  out.dtype = DType::Float32;
  g.outputs.push_back(out);
  return g;
}

// y = X' W' + b in float64, X' = X rounded to bfloat16 when `round_x`, W' = W rounded to
// bfloat16; scale = sum |x' w'| + |b| per element, the size of a float32 sum's rounding error.
struct Reference {
  std::vector<double> y, scale;
};
Reference reference(const ir::Graph& g, const Tensor& x, bool round_x, bool gemm) {
  const Tensor& w = g.initializers.at("W");
  const Tensor& b = g.initializers.at("b");
  const int64_t N = b.numel(), K = w.numel() / N, rows = x.numel() / K;
  Reference r;
  r.y.assign(rows * N, 0.0);
  r.scale.assign(rows * N, 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = b.data<float>()[j], a = std::fabs(s);
      for (int64_t k = 0; k < K; ++k) {
        const float xv = x.data<float>()[i * K + k];
        const double p = static_cast<double>(round_x ? bf16_round(xv) : xv) *
                         bf16_round(w.data<float>()[gemm ? j * K + k : k * N + j]);
        s += p;
        a += std::fabs(p);
      }
      r.y[i * N + j] = s;
      r.scale[i * N + j] = a;
    }
  return r;
}

// max over elements of |y - ref| / scale.
double worst(const Tensor& y, const Reference& r) {
  EXPECT_EQ(y.numel(), static_cast<int64_t>(r.y.size()));
  double m = 0;
  for (int64_t i = 0; i < y.numel(); ++i) m = std::max(m, std::fabs(y.data<float>()[i] - r.y[i]) / r.scale[i]);
  return m;
}

int64_t linear_nodes(const plan::Plan& p, bool with_attr) {
  int64_t n = 0;
  for (const auto& node : p.graph.nodes)
    if (node.domain == "reforge" && (node.op_type == "MatMulAdd" || node.op_type == "MatMulAddPacked"))
      n += !with_attr || node.attr_int("bf16_activations", 0) == 1;
  return n;
}

}  // namespace

TEST(Bf16Activations, RoundingEqualsFromFloatOnEveryKindOfValue) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          1.00390625f /* tie, even: down */,
                          1.01171875f /* tie, odd: up */,
                          3.0e38f,
                          3.3961e38f,
                          1e-40f /* subnormal */,
                          std::numeric_limits<float>::max() /* rounds past the largest bfloat16 */,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  uint32_t snan = 0x7f800001u;  // a signalling NaN whose payload is all in the low half
  float f;
  std::memcpy(&f, &snan, 4);
  v.push_back(f);
  std::mt19937 rng(5);
  for (int i = 0; i < (1 << 16); ++i) {
    const uint32_t b = rng();
    std::memcpy(&f, &b, 4);
    v.push_back(f);
  }
  std::vector<float> out(v.size());
  cpu::round_to_bf16(v.data(), out.data(), static_cast<int64_t>(v.size()));
  std::vector<uint16_t> hi(v.size()), hi_only(v.size()), lo(v.size());
  cpu::split_f32_to_bf16(v.data(), hi.data(), lo.data(), static_cast<int64_t>(v.size()));
  cpu::split_f32_to_bf16(v.data(), hi_only.data(), nullptr, static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(bits(out[i]), bits(bf16_round(v[i]))) << "element " << i << " = " << v[i];
    ASSERT_EQ(hi_only[i], hi[i]) << "element " << i;
    ASSERT_EQ(bits(out[i]), static_cast<uint32_t>(hi[i]) << 16) << "element " << i;
  }
  EXPECT_EQ(out[3], 1.0f);
  EXPECT_EQ(out[4], 1.015625f);
  EXPECT_TRUE(std::isinf(out[8]));
  EXPECT_TRUE(std::isnan(out[12]));  // not rounded into an infinity
  // In place.
  std::vector<float> same = v;
  cpu::round_to_bf16(same.data(), same.data(), static_cast<int64_t>(same.size()));
  EXPECT_EQ(std::memcmp(same.data(), out.data(), out.size() * 4), 0);
}

TEST(Bf16Activations, LinearLayersMultiplyTheRoundedInput) {
  const int64_t K = 96, N = 40;  // N: two full panels and a padded one
  for (bool gemm : {false, true})
    for (auto packing : {build::WeightPacking::Plain, build::WeightPacking::Panels})
      for (int64_t rows : {1, 3, 9, 40, 300})
        for (int threads : {1, 2}) {
          SCOPED_TRACE(std::string(gemm ? "Gemm" : "MatMul+Add") +
                       (packing == build::WeightPacking::Panels ? " panels" : " plain") + " rows " +
                       std::to_string(rows) + " threads " + std::to_string(threads));
          ir::Graph g = linear_graph(rows, K, N, gemm);
          const Tensor x = random_floats({rows, K}, 13, -2.0f, 2.0f);
          build::BuildOptions o;
          o.precision = plan::Precision::Bf16;
          o.activations = plan::Precision::Bf16;
          o.weight_packing = packing;
          plan::Plan p = round_trip(build::build_plan(g, o));
          EXPECT_EQ(p.activations, plan::Precision::Bf16);
          EXPECT_EQ(linear_nodes(p, false), 1);
          EXPECT_EQ(linear_nodes(p, true), 1) << "the Linear node lacks bf16_activations = 1";
          runtime::EngineOptions eo;
          eo.threads = threads;
          runtime::PlanEngine engine(std::move(p), eo);
          const Tensor y = engine.run({{"x", x}})[0];
          // Exact in the rounded values: only the float32 sum's rounding remains.
          EXPECT_LE(worst(y, reference(g, x, true, gemm)), 2e-6);
          // ... and not the product of the exact activations (off by about 2^-9 relative).
          EXPECT_GT(worst(y, reference(g, x, false, gemm)), 1e-4);

          // The default (float32 activations) is the exact-X product, to 16 bits of X.
          o.activations = plan::Precision::Fp32;
          plan::Plan exact = build::build_plan(g, o);
          EXPECT_EQ(exact.activations, plan::Precision::Fp32);
          EXPECT_EQ(linear_nodes(exact, true), 0);
          runtime::PlanEngine exact_engine(std::move(exact), eo);
          EXPECT_LE(worst(exact_engine.run({{"x", x}})[0], reference(g, x, false, gemm)), 2e-5);
        }
}

// The attribute means "round X" whatever W's type: MatMulAdd with float32 W and
// bf16_activations = 1, on every row-count path of run_linear (streaming kernel, OpenBLAS or
// oneDNN's float32 product, which rounds X itself), multiplies the rounded X by the exact W.
TEST(Bf16Activations, MatMulAddRoundsXOverFloat32Weights) {
  const int64_t K = 96, N = 40;
  const Tensor w = random_floats({K, N}, 21), bias = random_floats({N}, 22);
  for (int64_t rows : {1, 40, 300})
    for (int threads : {1, 2}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " threads " + std::to_string(threads));
      const Tensor x = random_floats({rows, K}, 23, -2.0f, 2.0f);
      const Tensor y = test_support::run_op("reforge", "MatMulAdd", 1, {&x, &w, &bias},
                                            {ir::int_attr("bf16_activations", 1)}, threads);
      double worst_rounded = 0, worst_exact = 0;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double rounded = bias.data<float>()[j], exact = rounded, scale = std::fabs(rounded);
          for (int64_t k = 0; k < K; ++k) {
            const double wk = w.data<float>()[k * N + j], xk = x.data<float>()[i * K + k];
            rounded += bf16_round(static_cast<float>(xk)) * wk;
            exact += xk * wk;
            scale += std::fabs(xk * wk);
          }
          const double got = y.data<float>()[i * N + j];
          worst_rounded = std::max(worst_rounded, std::fabs(got - rounded) / scale);
          worst_exact = std::max(worst_exact, std::fabs(got - exact) / scale);
        }
      EXPECT_LE(worst_rounded, 2e-6);
      EXPECT_GT(worst_exact, 1e-4);
    }
}

TEST(Bf16Activations, OptionsAndPlansAreChecked) {
  ir::Graph g = linear_graph(4, 8, 8, false);
  build::BuildOptions o;
  o.activations = plan::Precision::Bf16;
  for (auto precision : {plan::Precision::Fp32, plan::Precision::Fp16}) {
    o.precision = precision;
    try {
      build::build_plan(g, o);
      ADD_FAILURE() << "bf16 activations accepted with " << plan::precision_name(precision) << " weights";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--activations bf16 needs --precision bf16"), std::string::npos) << e.what();
    }
  }
  o.precision = plan::Precision::Bf16;
  o.activations = plan::Precision::Fp16;
  EXPECT_THROW(build::build_plan(g, o), Error);

  // A plan file that claims bf16 activations over float32 weights is malformed.
  o.activations = plan::Precision::Fp32;
  o.precision = plan::Precision::Fp32;
  plan::Plan p = build::build_plan(g, o);
  p.activations = plan::Precision::Bf16;
  try {
    round_trip(p);
    ADD_FAILURE() << "a plan with bf16 activations and fp32 weights was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("activations"), std::string::npos) << e.what();
  }
}
