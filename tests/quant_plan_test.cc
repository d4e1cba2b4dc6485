// Quantized plans (--precision int8 | int4): reforge::QuantizeWeight against a float64 reference of
// its rules written independently here (ops/reforge/quant_weight.h states them), MatMulQuant's CPU
// kernels at every SIMD level against the reference kernel on odd sizes, the pass on the bundled
// Llama (every Linear layer quantized, outputs near the float model's), the refit's count of
// changed quantized values, and the refusal of a backend without MatMulQuant.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "backends/backend.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/simd.h"
#include "plan/plan_io.h"
#include "refit/refit_from.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/llama_fixture.h"
#include "support/make_tensor.h"
#include "support/plan_round_trip.h"
#include "support/run_op.h"
#include "support/simd_levels.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::random_floats;

namespace {

std::vector<Tensor> quantize(const Tensor& w, int64_t bits, int64_t block, bool transposed) {
  return transforms::evaluate_op("reforge", "QuantizeWeight", 1,
                                 {{"bits", ir::int_attr("bits", bits)},
                                  {"block_size", ir::int_attr("block_size", block)},
                                  {"transposed", ir::int_attr("transposed", transposed ? 1 : 0)}},
                                 {&w}, bits == 8 ? 2 : 3);
}

// Float32 arithmetic, one correctly rounded operation at a time, carried out in float64 and rounded
// to float32 after each operation (exact for +, -, *, / of float32 operands).
float f32(double v) { return static_cast<float>(v); }

double max_abs_of(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(double(t.data<float>()[i])));
  return m;
}

// W[k, n] of a [K, N] or (transposed) [N, K] matrix.
double at(const Tensor& w, bool t, int64_t k, int64_t n) {
  const int64_t N = w.dim(t ? 0 : 1), K = w.dim(t ? 1 : 0);
  return w.data<float>()[t ? n * K + k : k * N + n];
}

// A weight with features the rules have to handle: all-zero columns, columns of one sign, exact
// halves after division, large and tiny values.
Tensor awkward_weight(int64_t rows, int64_t cols, uint32_t seed) {
  Tensor w = random_floats({rows, cols}, seed, -2.0f, 2.0f);
  float* p = w.mutable_data<float>();
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < w.numel(); ++i) {
    switch (rng() % 9) {
      case 0:
        p[i] = 0.0f;
        break;
      case 1:
        p[i] = std::fabs(p[i]) * 1e-6f;
        break;
      case 2:
        p[i] = std::round(p[i] * 8.0f) / 8.0f;  // many exact ties
        break;
      default:
        break;
    }
  }
  return w;
}

void zero_column(Tensor& w, bool t, int64_t n) {
  const int64_t N = w.dim(t ? 0 : 1), K = w.dim(t ? 1 : 0);
  for (int64_t k = 0; k < K; ++k) w.mutable_data<float>()[t ? n * K + k : k * N + n] = 0.0f;
}

TEST(QuantizeWeight, Int8MatchesFloat64ReferenceOfTheRule) {
  for (bool t : {false, true}) {
    const int64_t K = 77, N = 13;
    Tensor w = awkward_weight(t ? N : K, t ? K : N, 7 + t);
    zero_column(w, t, 4);
    const std::vector<Tensor> out = quantize(w, 8, 0, t);
    ASSERT_EQ(out[0].dtype(), DType::Int8);
    ASSERT_EQ(out[0].shape(), (Shape{N, K}));
    ASSERT_EQ(out[1].shape(), (Shape{N}));
    const int8_t* q = static_cast<const int8_t*>(out[0].raw());
    for (int64_t n = 0; n < N; ++n) {
      double amax = 0;
      for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(at(w, t, k, n)));
      const float scale = f32(amax / 127.0);
      ASSERT_EQ(out[1].data<float>()[n], scale) << "column " << n;
      for (int64_t k = 0; k < K; ++k) {
        double want = 0;
        if (scale != 0) {
          const double quotient = f32(at(w, t, k, n) / scale);
          want = std::nearbyint(quotient);  // the default rounding mode: halves to even
          want = std::min(127.0, std::max(-127.0, want));
        }
        ASSERT_EQ(q[n * K + k], static_cast<int8_t>(want)) << "k " << k << " n " << n << (t ? " transposed" : "");
      }
    }
    EXPECT_EQ(out[1].data<float>()[4], 0.0f);
  }
}

TEST(QuantizeWeight, Int4MatchesFloat64ReferenceOfMatMulNBitsRule) {
  for (int64_t block : {16, 32, 64}) {
    for (bool t : {false, true}) {
      SCOPED_TRACE("block " + std::to_string(block) + (t ? " transposed" : ""));
      const int64_t K = 77, N = 9;  // a short last block; 77 is odd: a padding nibble
      Tensor w = awkward_weight(t ? N : K, t ? K : N, 11 + static_cast<uint32_t>(block) + t);
      zero_column(w, t, 2);
      const std::vector<Tensor> out = quantize(w, 4, block, t);
      const int64_t nb = (K + block - 1) / block, blob = block / 2, zrow = (nb + 1) / 2;
      ASSERT_EQ(out[0].dtype(), DType::UInt8);
      ASSERT_EQ(out[0].shape(), (Shape{N, nb, blob}));
      ASSERT_EQ(out[1].shape(), (Shape{N * nb}));
      ASSERT_EQ(out[2].shape(), (Shape{N * zrow}));
      const uint8_t* q = static_cast<const uint8_t*>(out[0].raw());
      const uint8_t* z = static_cast<const uint8_t*>(out[2].raw());
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t b = 0; b < nb; ++b) {
          const int64_t k0 = b * block, k1 = std::min(K, k0 + block);
          double lo = 0, hi = 0;  // the range includes 0
          for (int64_t k = k0; k < k1; ++k) lo = std::min(lo, at(w, t, k, n)), hi = std::max(hi, at(w, t, k, n));
          const float scale = f32(f32(hi - lo) / 15.0);
          double zp_f = lo;
          if (scale != 0) zp_f = f32(0.0 - f32(lo / scale));
          const int zp = zp_f < 0 ? 0 : zp_f > 15 ? 15 : static_cast<int>(std::round(zp_f));
          ASSERT_EQ(out[1].data<float>()[n * nb + b], scale) << "n " << n << " block " << b;
          const int got_zp = (b & 1) ? z[n * zrow + b / 2] >> 4 : z[n * zrow + b / 2] & 15;
          ASSERT_EQ(got_zp, zp) << "n " << n << " block " << b;
          const float r = scale != 0 ? f32(1.0 / scale) : 0.0f;
          for (int64_t k = k0; k < k0 + block; ++k) {
            const int64_t j = k - k0;
            const uint8_t byte = q[(n * nb + b) * blob + j / 2];
            const int got = (j & 1) ? byte >> 4 : byte & 15;
            int want;
            if (k < k1)
              want = static_cast<int>(
                  std::min(15.0, std::max(0.0, std::round(double(f32(f32(at(w, t, k, n) * r) + zp))))));
            else
              want = (j & 1) && k - 1 < k1 ? zp : 0;  // the partner of the last value holds zp, the rest 0
            ASSERT_EQ(got, want) << "n " << n << " k " << k;
          }
        }
        if (nb % 2) {
          EXPECT_EQ(z[n * zrow + zrow - 1] >> 4, 8) << "an odd row's last zero-point nibble";
        }
      }
      // The all-zero column: scales 0, zero points 0, values 0.
      for (int64_t b = 0; b < nb; ++b) EXPECT_EQ(out[1].data<float>()[2 * nb + b], 0.0f);
    }
  }
}

TEST(QuantizeWeight, RefusesNonFiniteWeightsAndBadAttributes) {
  Tensor w = random_floats({32, 4}, 3);
  EXPECT_THROW(quantize(w, 4, 24, false), Error);  // not a power of two
  EXPECT_THROW(quantize(w, 8, 32, false), Error);  // int8 takes no blocks
  EXPECT_THROW(quantize(w, 3, 0, false), Error);
  w.mutable_data<float>()[5] = std::numeric_limits<float>::infinity();
  try {
    quantize(w, 8, 0, false);
    FAIL() << "an infinite weight was quantized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element 5"), std::string::npos) << e.what();
  }
}

ir::Node matmul_quant_node(int64_t bits, int64_t block, int64_t K, int64_t N, bool zp, bool bias) {
  ir::Node n;
  n.name = "mq";
  n.domain = "reforge";
  n.op_type = "MatMulQuant";
  n.opset = 1;
  n.inputs = {"x", "q", "s", zp ? "z" : "", bias ? "b" : ""};
  while (n.inputs.back().empty()) n.inputs.pop_back();
  n.outputs = {"y"};
  n.attrs["bits"] = ir::int_attr("bits", bits);
  n.attrs["block_size"] = ir::int_attr("block_size", block);
  n.attrs["K"] = ir::int_attr("K", K);
  n.attrs["N"] = ir::int_attr("N", N);
  return n;
}

// The reference kernel against a float64 product of the dequantized weight.
TEST(MatMulQuant, ReferenceKernelIsTheProductOfTheDequantizedWeight) {
  const int64_t K = 45, N = 7, M = 3;
  for (int64_t bits : {8, 4}) {
    const int64_t block = bits == 4 ? 16 : 0;
    Tensor w = random_floats({K, N}, 21);
    const std::vector<Tensor> q = quantize(w, bits, block, false);
    Tensor x = random_floats({M, K}, 22);
    Tensor b = random_floats({N}, 23);
    const ir::Node node = matmul_quant_node(bits, block, K, N, bits == 4, true);
    std::vector<const Tensor*> in = {&x, &q[0], &q[1], bits == 4 ? &q[2] : nullptr, &b};
    const Tensor y = test_support::run_reference_node(node, in)[0];
    ASSERT_EQ(y.shape(), (Shape{M, N}));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double want = b.data<float>()[n];
        for (int64_t k = 0; k < K; ++k) {
          double wd;
          if (bits == 8) {
            wd = f32(static_cast<const int8_t*>(q[0].raw())[n * K + k] * double(q[1].data<float>()[n]));
          } else {
            const int64_t nb = (K + 15) / 16, bl = k / 16, j = k % 16;
            const uint8_t byte = static_cast<const uint8_t*>(q[0].raw())[(n * nb + bl) * 8 + j / 2];
            const int v = (j & 1) ? byte >> 4 : byte & 15;
            const uint8_t zb = static_cast<const uint8_t*>(q[2].raw())[n * ((nb + 1) / 2) + bl / 2];
            const int zp = (bl & 1) ? zb >> 4 : zb & 15;
            wd = f32((v - zp) * double(q[1].data<float>()[n * nb + bl]));
          }
          // The dequantized weight is close to the float one: within half a step (int8), a step (int4).
          want += double(x.data<float>()[m * K + k]) * wd;
        }
        EXPECT_NEAR(y.data<float>()[m * N + n], want, 1e-5 * (1 + std::fabs(want))) << "bits " << bits;
      }
  }
}

struct KernelCase {
  int64_t bits, block, K, N, M;
  bool zp, bias;
};

// The CPU kernels (AVX-512, AVX2, generic, as this CPU has them) against the reference kernel.
TEST(MatMulQuant, CpuKernelsMatchReferenceOnOddSizes) {
  const std::vector<KernelCase> cases = {
      {8, 0, 77, 13, 1, false, true},   {8, 0, 64, 33, 5, false, false}, {8, 0, 300, 1, 2, false, true},
      {8, 0, 5, 3, 1, false, false},    {4, 32, 77, 13, 1, true, true},  {4, 32, 64, 33, 5, true, false},
      {4, 16, 300, 7, 4, true, true},   {4, 64, 200, 9, 1, true, false}, {4, 32, 33, 5, 6, false, true},
      {4, 128, 1000, 3, 1, true, true}, {4, 16, 1100, 5, 2, true, false}};  // the last: 69 blocks
  backends::Resolved r;
  const ir::Node probe = matmul_quant_node(8, 0, 8, 8, false, false);
  ASSERT_EQ(backends::resolve(probe, "cpu", &r), "");
  EXPECT_FALSE(r.reference) << "MatMulQuant has no CPU kernel of its own";
  for (const KernelCase& c : cases) {
    SCOPED_TRACE("bits " + std::to_string(c.bits) + " block " + std::to_string(c.block) + " K " + std::to_string(c.K) +
                 " N " + std::to_string(c.N) + " M " + std::to_string(c.M));
    Tensor w = random_floats({c.K, c.N}, static_cast<uint32_t>(c.K * 31 + c.N));
    const std::vector<Tensor> q = quantize(w, c.bits, c.block, false);
    Tensor x = random_floats({c.M, c.K}, static_cast<uint32_t>(c.M + 5));
    Tensor b = random_floats({c.N}, 9);
    const ir::Node node = matmul_quant_node(c.bits, c.block, c.K, c.N, c.zp, c.bias);
    std::vector<const Tensor*> in = {&x, &q[0], &q[1]};
    if (c.zp) in.push_back(&q[2]);
    if (c.bias) {
      if (!c.zp) in.push_back(nullptr);
      in.push_back(&b);
    }
    const Tensor ref = test_support::run_reference_node(node, in)[0];
    double mag = 0;  // the scale of the sums: sum_k |x| |w|
    for (int64_t i = 0; i < x.numel(); ++i) mag = std::max(mag, double(std::fabs(x.data<float>()[i])));
    mag *= double(c.K) * 2.0;
    for (SimdLevel level : test_support::simd_levels()) {
      SimdOverride cap(level);
      for (int threads : {1, 3}) {
        const Tensor y = test_support::run_node(node, in, threads)[0];
        ASSERT_EQ(y.shape(), ref.shape());
        for (int64_t i = 0; i < y.numel(); ++i)
          ASSERT_NEAR(y.data<float>()[i], ref.data<float>()[i], 2e-6 * mag)
              << test_support::simd_level_name(level) << " threads " << threads << " element " << i;
      }
    }
  }
}

// QuantizeWeight's int4 layout is MatMulNBits': the com.microsoft op's reference kernel
// (ops/quant/matmul_nbits.cc, written independently) on QuantizeWeight's outputs gives MatMulQuant's
// reference result bit for bit, and the CPU kernel of MatMulNBits (cpu::matmul_quant on its inputs
// as they are) matches it at every SIMD level; a form it does not take (g_idx) runs the reference.
TEST(MatMulQuant, MatMulNBitsReadsTheSameLayoutAndRunsOnTheSameKernels) {
  const int64_t K = 77, N = 13;
  Tensor w = random_floats({K, N}, 41);
  const std::vector<Tensor> q = quantize(w, 4, 32, false);
  Tensor b = random_floats({N}, 42);
  ir::Node nb;
  nb.name = "nbits";
  nb.domain = "com.microsoft";
  nb.op_type = "MatMulNBits";
  nb.opset = 1;
  nb.inputs = {"a", "b", "s", "z", "", "bias"};
  nb.outputs = {"y"};
  for (const auto& [name, v] : std::map<std::string, int64_t>{{"K", K}, {"N", N}, {"bits", 4}, {"block_size", 32}})
    nb.attrs[name] = ir::int_attr(name, v);
  for (int64_t M : {1, 3}) {
    Tensor x = random_floats({M, K}, 43 + static_cast<uint32_t>(M));
    const std::vector<const Tensor*> in = {&x, &q[0], &q[1], &q[2], nullptr, &b};
    const Tensor ref = test_support::run_reference_node(nb, in)[0];
    const Tensor mine =
        test_support::run_reference_node(matmul_quant_node(4, 32, K, N, true, true), {&x, &q[0], &q[1], &q[2], &b})[0];
    EXPECT_TRUE(transforms::bit_equal(ref, mine)) << "M " << M;
    for (SimdLevel level : test_support::simd_levels()) {
      SimdOverride cap(level);
      const Tensor y = test_support::run_node(nb, in)[0];
      ASSERT_EQ(y.shape(), ref.shape());
      for (int64_t i = 0; i < y.numel(); ++i)
        ASSERT_NEAR(y.data<float>()[i], ref.data<float>()[i], 1e-5 * (1 + max_abs_of(ref)))
            << test_support::simd_level_name(level) << " element " << i;
    }
    // g_idx (here the default grouping, spelled out) is the reference kernel's.
    Tensor g = Tensor::empty(DType::Int32, {K});
    for (int64_t k = 0; k < K; ++k) g.mutable_data<int32_t>()[k] = static_cast<int32_t>(k / 32);
    const std::vector<const Tensor*> with_g = {&x, &q[0], &q[1], &q[2], &g, &b};
    EXPECT_TRUE(transforms::bit_equal(test_support::run_node(nb, with_g)[0], ref));
  }
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(double(t.data<float>()[i])));
  return m;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(double(a.data<float>()[i]) - b.data<float>()[i]));
  return m;
}

plan::Plan llama_quant_plan(plan::Precision p, bool strip = false, int64_t block = 0) {
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  o.precision = p;
  o.block_size = block;
  o.strip_weights = strip;
  return build::build_plan(onnx::import_model_file(test_support::kLlamaA), o);
}

// The float model whose Linear weights are the dequantized weights of quantized plan `p`, decoded
// here from the engine weights by the layouts (independently of the kernels): each quantized
// layer's consumer reads a new initializer holding q * scale or (q - zp) * scale in its float
// layout ([K, N], or [N, K] for a Gemm with transB).
ir::Graph dequantized_model(const std::string& path, const plan::Plan& p) {
  ir::Graph g = onnx::import_model_file(path);
  std::map<uint32_t, std::map<uint32_t, const plan::WeightEntry*>> parts;  // source -> output -> weight
  std::map<uint32_t, const plan::RecipeStep*> steps;
  for (const auto& w : p.weights) {
    if (w.kind != plan::WeightKind::Derived || w.recipe.steps.size() != 1) continue;
    const plan::RecipeStep& st = w.recipe.steps[0];
    if (st.op_type != "QuantizeWeight" || st.inputs[0].kind != plan::Operand::Kind::Source) continue;
    parts[st.inputs[0].index][st.output] = &w;
    steps[st.inputs[0].index] = &st;
  }
  EXPECT_FALSE(parts.empty());
  for (const auto& [src, outs] : parts) {
    const plan::Source& s = p.sources[src];
    const plan::RecipeStep& st = *steps[src];
    const bool t = st.attrs.at("transposed").i != 0;
    const int64_t bits = st.attrs.at("bits").i, block = st.attrs.at("block_size").i;
    const int64_t K = s.shape[t ? 1 : 0], N = s.shape[t ? 0 : 1];
    const Tensor& q = outs.at(0)->data;
    const float* scales = outs.at(1)->data.data<float>();
    Tensor wd = Tensor::empty(DType::Float32, s.shape);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        double v;
        if (bits == 8) {
          v = static_cast<const int8_t*>(q.raw())[n * K + k] * double(scales[n]);
        } else {
          const int64_t nb = (K + block - 1) / block, b = k / block, j = k % block;
          const uint8_t byte = static_cast<const uint8_t*>(q.raw())[(n * nb + b) * (block / 2) + j / 2];
          const uint8_t zb = static_cast<const uint8_t*>(outs.at(2)->data.raw())[n * ((nb + 1) / 2) + b / 2];
          v = (((j & 1) ? byte >> 4 : byte & 15) - ((b & 1) ? zb >> 4 : zb & 15)) * double(scales[n * nb + b]);
        }
        wd.mutable_data<float>()[t ? n * K + k : k * N + n] = static_cast<float>(v);
      }
    const std::string name = s.names.at(0) + ".dequantized";
    g.initializers[name] = wd;
    bool rewired = false;
    for (auto& node : g.nodes)
      if (node.name == s.consumer) {
        EXPECT_EQ(node.inputs.at(s.slot), s.names.at(0));
        node.inputs[s.slot] = name;
        rewired = true;
      }
    EXPECT_TRUE(rewired) << s.key;
  }
  return g;
}

// Every Linear layer of the Llama is quantized, the plan says so after a round trip, and its logits
// equal, within float32 sum order, those of the float model holding the dequantized weights. Their
// error against the float model's (relative max abs: max |y - y_fp32| / max |y_fp32|) is printed;
// this small random-weight model amplifies weight error (about 8x the per-weight relative error).
TEST(QuantizedPlan, LlamaEveryLinearLayerQuantizedEqualsDequantizedFloatModel) {
  runtime::PlanEngine fp32(llama_quant_plan(plan::Precision::Fp32));
  const Tensor ref = fp32.run(test_support::llama_inputs())[0];
  for (auto [prec, bound] : {std::pair{plan::Precision::Int8, 0.1}, std::pair{plan::Precision::Int4, 0.6}}) {
    SCOPED_TRACE(plan::precision_name(prec));
    plan::Plan p = test_support::round_trip(llama_quant_plan(prec));
    EXPECT_EQ(p.precision, prec);
    EXPECT_EQ(p.block_size, prec == plan::Precision::Int4 ? 32 : 0);
    size_t quantized = 0, float_linear = 0;
    for (const auto& n : p.graph.nodes) {
      quantized += n.op_type == "MatMulQuant";
      float_linear +=
          n.op_type == "MatMul" || n.op_type == "MatMulAdd" || n.op_type == "MatMulAddPacked" || n.op_type == "Gemm";
    }
    EXPECT_GT(quantized, 0u);
    // What remains is activation x activation (attention's products), never a constant weight.
    for (const auto& n : p.graph.nodes) {
      if (n.op_type != "MatMul" && n.op_type != "Gemm" && n.op_type != "MatMulAddPacked") continue;
      for (const auto& w : p.weights) EXPECT_NE(n.inputs.size() > 1 ? n.inputs[1] : "", w.name) << n.name;
    }
    for (const auto& w : p.weights) {
      if (w.kind == plan::WeightKind::Derived && w.recipe.steps.size() == 1 &&
          w.recipe.steps[0].op_type == "QuantizeWeight") {
        EXPECT_TRUE(w.dtype == DType::Int8 || w.dtype == DType::UInt8 || w.dtype == DType::Float32) << w.name;
      }
    }
    runtime::PlanEngine deq(build::build_plan(dequantized_model(test_support::kLlamaA, p), {}));
    const Tensor want = deq.run(test_support::llama_inputs())[0];
    runtime::PlanEngine e(std::move(p));
    const Tensor y = e.run(test_support::llama_inputs())[0];
    EXPECT_LE(max_abs_diff(y, want), 1e-5 * max_abs(want));
    const double rel = max_abs_diff(y, ref) / max_abs(ref);
    std::cout << "llama " << plan::precision_name(prec) << ": logits relative max abs error " << rel << "\n";
    EXPECT_GT(rel, 0.0);  // the weights did change
    EXPECT_LT(rel, bound);
  }
}

TEST(QuantizedPlan, BlockSizeIsRecordedAndChecked) {
  plan::Plan p = test_support::round_trip(llama_quant_plan(plan::Precision::Int4, false, 64));
  EXPECT_EQ(p.block_size, 64);
  for (const auto& n : p.graph.nodes)
    if (n.op_type == "MatMulQuant") {
      EXPECT_EQ(n.attr_int("block_size", 0), 64);
    }
  build::BuildOptions o;
  o.precision = plan::Precision::Int8;
  o.block_size = 32;
  EXPECT_THROW(o.validate(), Error);  // blocks are int4's
  o.precision = plan::Precision::Int4;
  o.block_size = 48;
  EXPECT_THROW(o.validate(), Error);
}

// Refit from the same weights changes no quantized value; from B's weights some; the counts are
// the element differences of the engine weights, counted here independently.
TEST(QuantizedPlan, RefitCountsChangedQuantizedValues) {
  for (plan::Precision prec : {plan::Precision::Int8, plan::Precision::Int4}) {
    SCOPED_TRACE(plan::precision_name(prec));
    runtime::PlanEngine e(test_support::round_trip(llama_quant_plan(prec)));
    const std::map<std::string, Tensor> before = test_support::weight_snapshot(e);
    refit::RefitRequest same;
    same.files = {test_support::kLlamaA};
    refit::RefitReport rep = build::refit_from(e, same);
    ASSERT_FALSE(rep.commit.quantized.empty());
    for (const auto& c : rep.commit.quantized) {
      EXPECT_TRUE(c.compared);
      EXPECT_EQ(c.changed, 0u) << c.weight << " " << c.part;
      EXPECT_GT(c.values, 0u);
    }
    EXPECT_NE(rep.summary().find("quantized values changed: weights 0 of"), std::string::npos) << rep.summary();
    refit::RefitRequest other;
    other.files = {test_support::kLlamaB};
    rep = build::refit_from(e, other);
    size_t changed = 0;
    for (const auto& c : rep.commit.quantized) {
      const Tensor& a = before.at(c.weight);
      const Tensor b = e.weight(c.weight);
      size_t diff = 0;
      if (c.part == "scales" || a.dtype() == DType::Int8) {
        const size_t sz = dtype_size(a.dtype());
        for (int64_t i = 0; i < a.numel(); ++i)
          diff += std::memcmp(static_cast<const char*>(a.raw()) + i * sz, static_cast<const char*>(b.raw()) + i * sz,
                              sz) != 0;
        EXPECT_EQ(c.values, static_cast<size_t>(a.numel()));
      } else {
        // Nibbles. This model's K are even, so block padding holds 0 in both (the zero points'
        // padding nibble is 8 in both): every differing nibble is a changed value.
        const uint8_t* pa = static_cast<const uint8_t*>(a.raw());
        const uint8_t* pb = static_cast<const uint8_t*>(b.raw());
        for (int64_t i = 0; i < a.numel(); ++i)
          diff += ((pa[i] ^ pb[i]) & 0x0f) != 0, diff += ((pa[i] ^ pb[i]) & 0xf0) != 0;
        EXPECT_LE(c.values, static_cast<size_t>(a.numel()) * 2);
      }
      EXPECT_EQ(c.changed, diff) << c.weight << " " << c.part;
      changed += c.changed;
    }
    EXPECT_GT(changed, 0u);
    // A small update, every weight scaled by 1 + 2^-20 (16 float32 ulps): every scale of a nonzero
    // column or block moves, while the quantized weights stay (scaled weight over scaled scale)
    // but for rare rounding ties.
    // (Only the Linear weights: the other sources, a mask's -FLT_MAX among them, stay as they are.)
    std::set<uint32_t> linear;
    for (const auto& w : e.plan().weights)
      for (const auto& st : w.recipe.steps)
        if (st.op_type == "QuantizeWeight") linear.insert(st.inputs.at(0).index);
    refit::Refitter r(e);
    for (auto [id, t] : build::read_sources_from_onnx(e.plan(), onnx::import_model_file(test_support::kLlamaB))) {
      if (!linear.count(id)) {
        r.set_source(id, t);
        continue;
      }
      Tensor scaled = Tensor::empty(t.dtype(), t.shape());
      for (int64_t i = 0; i < t.numel(); ++i) scaled.mutable_data<float>()[i] = t.data<float>()[i] * (1.0f + 0x1p-20f);
      r.set_source(id, scaled);
    }
    const refit::CommitReport small = r.commit();
    size_t q_values = 0, q_changed = 0, scales_changed = 0;
    for (const auto& c : small.quantized) {
      if (c.part == "q") q_values += c.values, q_changed += c.changed;
      if (c.part == "scales") {
        size_t nonzero = 0;
        const Tensor s = e.weight(c.weight);
        for (int64_t i = 0; i < s.numel(); ++i) nonzero += s.data<float>()[i] != 0.0f;
        EXPECT_EQ(c.changed, nonzero) << c.weight;
        scales_changed += c.changed;
      }
    }
    EXPECT_GT(scales_changed, 0u);
    EXPECT_LT(q_changed * 1000, q_values) << q_changed << " of " << q_values << " quantized weights changed";
    std::cout << plan::precision_name(prec) << ": a 2^-20 update changed " << q_changed << " of " << q_values
              << " quantized weights and " << scales_changed << " scales\n";
  }
}

// A backend without a MatMulQuant kernel fails the build naming the op, rather than building a
// plan that says int8 and holds float32 weights.
TEST(QuantizedPlan, BackendWithoutKernelRefusesQuantizedBuild) {
  if (!backends::find_backend("cuda")) GTEST_SKIP() << "no CUDA backend in this build";
  build::BuildOptions o;
  o.precision = plan::Precision::Int8;
  o.backend = "cuda";
  try {
    build::build_plan(onnx::import_model_file(test_support::kLlamaA), o);
    FAIL() << "an int8 build for cuda succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MatMulQuant"), std::string::npos) << e.what();
  }
}

}  // namespace
