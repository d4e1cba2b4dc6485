// --precision fp16: the float16 conversions (core/half.h) against an exact decoding of every
// half, the streaming kernel's float16 path at every SIMD level against scalar references that
// do the same float32 operations, and fp16 plans: what they store, their accuracy against the
// fp32 plan and PyTorch's references, and the refusal of weights beyond float16's range at
// build and at refit. Refit of fp16 plans against a fresh build is in linear_test.cc
// (LinearPlan.RefitRepacksAndEqualsFreshBuild runs every precision).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backends/cpu/gemv.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/half.h"
#include "core/simd.h"
#include "ops/reforge/float16_weights.h"
#include "plan/plan_io.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/cuda_compare.h"
#include "support/model_references.h"
#include "support/plan_round_trip.h"
#include "support/synthetic_llama.h"
#include "transforms/recipe.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace reforge;
using test_support::round_trip;

namespace {

// The exact value of half `h`, decoded in double from the IEEE 754 binary16 layout.
double half_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 31)
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0)
    v = std::ldexp(static_cast<double>(mant), -24);
  else
    v = std::ldexp(1.0 + mant / 1024.0, exp - 15);
  return sign ? -v : v;
}

}  // namespace

TEST(Half, ToFloatDecodesEveryHalfExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = float16::to_float(static_cast<uint16_t>(h));
    const double want = half_value(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      // Quiet, payload kept (vcvtph2ps does the same).
      const uint32_t b = float_to_bits(f);
      ASSERT_EQ(b & 0x400000u, 0x400000u) << std::hex << h;
      ASSERT_EQ((b >> 13) & 0x1ffu, h & 0x1ffu) << std::hex << h;
      ASSERT_EQ(b >> 31, h >> 15) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h >> 15) != 0) << std::hex << h;  // -0 stays -0
    }
  }
}

// Round to nearest even at every rounding boundary: each half maps to itself, the midpoint of
// two neighbours to the even one, and the floats just beside the midpoint to the nearer one.
TEST(Half, FromFloatRoundsToNearestEvenAtEveryBoundary) {
  for (int sign = 0; sign < 2; ++sign)
    for (uint16_t a = 0; a < 0x7c00; ++a) {
      const uint16_t ha = static_cast<uint16_t>(a | (sign << 15)), hb = static_cast<uint16_t>((a + 1) | (sign << 15));
      const double va = half_value(ha), vb = half_value(hb);  // vb is inf for a = 0x7bff
      ASSERT_EQ(float16::from_float(static_cast<float>(va)), ha) << std::hex << ha;
      // The midpoint; above 65504 the "next half" is 65536 (exponent 16), which overflows to inf.
      const double mid = a == 0x7bff ? (sign ? -65520.0 : 65520.0) : (va + vb) / 2;
      const float fm = static_cast<float>(mid);
      ASSERT_EQ(static_cast<double>(fm), mid) << "midpoint not exact in float32";
      const uint16_t even = (a & 1) ? hb : ha;
      ASSERT_EQ(float16::from_float(fm), even) << std::hex << ha;
      const float toward_a = std::nextafter(fm, static_cast<float>(va)),
                  toward_b = std::nextafter(fm, sign ? -1e30f : 1e30f);
      ASSERT_EQ(float16::from_float(toward_a), ha) << std::hex << ha;
      ASSERT_EQ(float16::from_float(toward_b), hb) << std::hex << ha;
    }
}

TEST(Half, FromFloatOverflowInfNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float16::from_float(65504.0f), 0x7bff);
  EXPECT_EQ(float16::from_float(65519.99f), 0x7bff);
  EXPECT_EQ(float16::from_float(65520.0f), 0x7c00);  // ONNX Cast / IEEE: overflow is inf
  EXPECT_EQ(float16::from_float(-1e6f), 0xfc00);
  EXPECT_EQ(float16::from_float(3e38f), 0x7c00);
  EXPECT_EQ(float16::from_float(inf), 0x7c00);
  EXPECT_EQ(float16::from_float(-inf), 0xfc00);
  EXPECT_EQ(float16::from_float(-0.0f), 0x8000);
  EXPECT_EQ(float16::from_float(std::ldexp(1.0f, -25)), 0);  // half the smallest subnormal: ties to even (0)
  EXPECT_EQ(float16::from_float(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 1);
  EXPECT_EQ(float16::from_float(1e-10f), 0);
  const uint16_t nan = float16::from_float(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x3ff, 0);
  // A signaling NaN whose payload sits in the low bits only must stay a NaN.
  EXPECT_NE(float16::from_float(bits_to_float(0x7f800001u)) & 0x3ff, 0);
}

#if defined(__x86_64__)
// F16C's conversions, where the CPU has them, on a sample of all float32 bit patterns (every
// 251st; the full 2^32 agree too, but take 20 s).
__attribute__((target("f16c"))) static uint16_t f16c_from(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
__attribute__((target("f16c"))) static float f16c_to(uint16_t h) { return _cvtsh_ss(h); }

TEST(Half, AgreesWithF16c) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  for (uint64_t b = 0; b < (1ull << 32); b += 251) {
    const float f = bits_to_float(static_cast<uint32_t>(b));
    ASSERT_EQ(float16::from_float(f), f16c_from(f)) << std::hex << b;
  }
  for (uint32_t h = 0; h < 65536; ++h)
    ASSERT_EQ(float_to_bits(float16::to_float(static_cast<uint16_t>(h))),
              float_to_bits(f16c_to(static_cast<uint16_t>(h))))
        << std::hex << h;
}
#endif

// ---- the streaming kernel ----------------------------------------------------------------

namespace {

// What the SIMD kernels compute, one element at a time: x0 * w0, then one float32 FMA per k in
// ascending order (fused: `fma`), or a float32 multiply and add (the portable loop), then + bias.
std::vector<float> gemv_scalar(int64_t M, int64_t N, int64_t K, const std::vector<float>& x, int64_t ldx,
                               const std::vector<uint16_t>& w, const std::vector<float>& bias, int64_t ldy, bool fma) {
  std::vector<float> y(M * ldy, 0.0f);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t j = 0; j < N; ++j) {
      float a = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        const float xv = x[r * ldx + k], wv = float16::to_float(w[k * N + j]);
        if (k == 0)
          a = xv * wv;
        else if (fma)
          a = std::fma(xv, wv, a);
        else {
          const volatile float p = xv * wv;  // no contraction into an FMA
          a = a + p;
        }
      }
      y[r * ldy + j] = a + bias[j];
    }
  return y;
}

}  // namespace

TEST(GemvFp16, EverySimdLevelMatchesItsScalarReferenceBitForBit) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const SimdLevel top = simd_level();
  for (SimdLevel level : {SimdLevel::Generic, SimdLevel::Avx2, SimdLevel::Avx512}) {
    if (static_cast<int>(level) > static_cast<int>(top)) continue;
    SimdOverride cap(level);
    // The AVX2 kernel needs F16C for float16 (all AVX2 CPUs have it); without it, the portable loop.
    const bool fma = level != SimdLevel::Generic && __builtin_cpu_supports("f16c");
    for (int64_t M : {1, 2, 5})
      for (int64_t K : {1, 3, 4, 9, 130})
        for (int64_t N : {1, 7, 8, 15, 16, 17, 33, 100, 4097}) {
          const int64_t ldx = K + 1, ldy = N + 3;
          std::vector<float> x(M * ldx), bias(N);
          std::vector<uint16_t> w(K * N);
          for (auto& v : x) v = uni(rng);
          for (auto& v : bias) v = uni(rng);
          for (auto& v : w) v = float16::from_float(uni(rng));
          const auto want = gemv_scalar(M, N, K, x, ldx, w, bias, ldy, fma);
          for (int threads : {1, 2}) {
            std::vector<float> y(M * ldy, -7.0f);
            cpu::gemv_rows(M, N, K, x.data(), ldx, w.data(), DType::Float16, bias.data(), y.data(), ldy, threads);
            for (int64_t r = 0; r < M; ++r)
              for (int64_t j = 0; j < ldy; ++j) {
                const float expect = j < N ? want[r * ldy + j] : -7.0f;  // the row padding is untouched
                ASSERT_EQ(float_to_bits(y[r * ldy + j]), float_to_bits(expect))
                    << "level " << static_cast<int>(level) << " M=" << M << " K=" << K << " N=" << N
                    << " threads=" << threads << " at " << r << "," << j << ": " << y[r * ldy + j] << " vs " << expect;
              }
          }
        }
  }
}

TEST(GemvFp16, WidenMatchesToFloat) {
  std::vector<uint16_t> h(65536 + 5);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i * 40503u);  // every half, odd length
  std::vector<float> f(h.size());
  for (SimdLevel level : {SimdLevel::Generic, simd_level()}) {
    SimdOverride cap(level);
    cpu::f16_to_f32(h.data(), f.data(), static_cast<int64_t>(h.size()));
    for (size_t i = 0; i < h.size(); ++i)
      ASSERT_EQ(float_to_bits(f[i]), float_to_bits(float16::to_float(h[i]))) << std::hex << h[i];
  }
}

// ---- plans -------------------------------------------------------------------------------

namespace {

using test_support::relative_error;  // max |a - b| / max |b|

// bfloat16 keeps 8 significant bits, float16 11: the tolerance of the bf16 model test (2e-2)
// scaled by the ratio of their unit roundoffs, 2^-11 / 2^-8.
constexpr double kFp16ModelTolerance = 2e-2 / 8;

}  // namespace

// Plain: the engine weight is Cast(W), [K, N]. Panels: PackPanels(Cast(W)), the 16-bit panels of
// sgemm_panels.h, [ceil(N / 16), K, 16] (zero padding). Either way it holds float16(W) exactly.
TEST(Fp16Plan, StoresLinearWeightsAsFloat16ByACastStep) {
  synth::LlamaSpec spec;
  ir::Graph g = synth::synthetic_llama(spec);
  for (auto packing : {build::WeightPacking::Plain, build::WeightPacking::Panels}) {
    SCOPED_TRACE(packing == build::WeightPacking::Plain ? "plain" : "panels");
    const bool panels = packing == build::WeightPacking::Panels;
    build::BuildOptions o;
    o.mode = plan::BuildMode::Refit;
    o.precision = plan::Precision::Fp16;
    o.weight_packing = packing;
    plan::Plan p = round_trip(build::build_plan(g, o));
    EXPECT_EQ(p.precision, plan::Precision::Fp16);
    EXPECT_STREQ(plan::precision_name(p.precision), "fp16");
    size_t halves = 0;
    for (const auto& w : p.weights) {
      EXPECT_NE(w.dtype, DType::BFloat16) << w.name;
      if (w.dtype != DType::Float16) continue;
      ++halves;
      ASSERT_EQ(w.shape.size(), panels ? 3u : 2u) << w.name;
      const auto& steps = w.recipe.steps;
      ASSERT_EQ(steps.size(), panels ? 2u : 1u) << w.name;
      EXPECT_EQ(steps[0].op_type, "Cast") << w.name;
      EXPECT_EQ(steps[0].attrs.at("to").i, 10) << w.name;  // TensorProto FLOAT16
      if (panels) {
        EXPECT_EQ(steps[1].op_type, "PackPanels") << w.name;
      }
      // The stored bytes are the cast of the source (sources keep float32).
      ASSERT_EQ(w.sources.size(), 1u) << w.name;
      const plan::Source& s = p.sources[w.sources[0]];
      EXPECT_EQ(s.dtype, DType::Float32);
      const Tensor& src = g.initializers.at(s.names.at(0));
      ASSERT_EQ(src.rank(), 2) << w.name;  // MatMul weights, stored [K, N]
      const int64_t K = src.dim(0), N = src.dim(1);
      ASSERT_EQ(w.data.numel(), panels ? (N + 15) / 16 * 16 * K : K * N) << w.name;
      const auto* h = w.data.data<float16>();
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) {
          const int64_t at = panels ? (n / 16) * K * 16 + k * 16 + n % 16 : k * N + n;
          ASSERT_EQ(h[at].bits, float16::from_float(src.data<float>()[k * N + n])) << w.name << " " << k << "," << n;
        }
    }
    // 7 projections per layer and the LM head.
    EXPECT_EQ(halves, static_cast<size_t>(7 * spec.layers + 1));
    for (const auto& s : p.sources) EXPECT_EQ(s.dtype, DType::Float32) << s.key;
  }
}

// The fp16 plan against the fp32 plan of the same model, on the streaming (1 row) and the
// widened-panel (40 rows: OpenBLAS) paths.
TEST(Fp16Plan, OutputsCloseToFp32Plan) {
  for (int64_t seq : {1, 40}) {
    synth::LlamaSpec spec;
    spec.seq = seq;
    ir::Graph g = synth::synthetic_llama(spec);
    build::BuildOptions o;
    runtime::PlanEngine f32(round_trip(build::build_plan(g, o)));
    o.precision = plan::Precision::Fp16;
    runtime::PlanEngine f16(round_trip(build::build_plan(g, o)));
    o.precision = plan::Precision::Bf16;
    runtime::PlanEngine bf16(round_trip(build::build_plan(g, o)));
    auto y32 = f32.run(synth::synthetic_llama_inputs(seq)), y16 = f16.run(synth::synthetic_llama_inputs(seq)),
         yb = bf16.run(synth::synthetic_llama_inputs(seq));
    ASSERT_EQ(y32.size(), y16.size());
    for (size_t i = 0; i < y32.size(); ++i) {
      const double e16 = relative_error(y16[i], y32[i]), eb = relative_error(yb[i], y32[i]);
      EXPECT_LE(e16, kFp16ModelTolerance) << "seq " << seq;
      EXPECT_GT(e16, 0.0) << "seq " << seq << ": fp16 output equals fp32 exactly: weights not cast?";
      // 3 more significant bits: clearly closer than bfloat16.
      EXPECT_LT(e16 * 2, eb) << "seq " << seq << ": fp16 " << e16 << " bf16 " << eb;
    }
  }
}

TEST(Fp16Plan, ModelsMatchFrameworkReference) {
  build::BuildOptions o;
  o.precision = plan::Precision::Fp16;
  const int checked = test_support::check_model_references(
      o, [](const std::string&, const std::string& name, const Tensor& out, const Tensor& ref) {
        ASSERT_EQ(out.shape(), ref.shape()) << name;
        EXPECT_LE(relative_error(out, ref), kFp16ModelTolerance) << name;
      });
  if (checked < 0) GTEST_SKIP() << "no models/manifest.json";
  EXPECT_GT(checked, 0);
}

namespace {

// The name of the first Linear weight initializer of the synthetic Llama (a MatMul's matrix).
std::string first_linear_weight(const ir::Graph& g) {
  for (const auto& n : g.nodes)
    if (n.op_type == "MatMul" && g.initializers.count(n.inputs[1])) return n.inputs[1];
  ADD_FAILURE() << "no MatMul weight";
  return "";
}

}  // namespace

TEST(Fp16Plan, BuildRefusesAWeightBeyondFloat16Range) {
  synth::LlamaSpec spec;
  ir::Graph g = synth::synthetic_llama(spec);
  const std::string w = first_linear_weight(g);
  g.initializers.at(w).mutable_data<float>()[3] = 70000.0f;
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  o.precision = plan::Precision::Fp16;
  try {
    build::build_plan(g, o);
    ADD_FAILURE() << "an fp16 build with 70000 in a weight succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(w), std::string::npos) << msg;
    EXPECT_NE(msg.find("70000"), std::string::npos) << msg;
    EXPECT_NE(msg.find("65504"), std::string::npos) << msg;
  }
  // 65504 itself is the largest finite half: fine. So is anything with bf16 or fp32.
  g.initializers.at(w).mutable_data<float>()[3] = 65504.0f;
  EXPECT_NO_THROW(build::build_plan(g, o));
  g.initializers.at(w).mutable_data<float>()[3] = 70000.0f;
  o.precision = plan::Precision::Bf16;
  EXPECT_NO_THROW(build::build_plan(g, o));
}

// A refit whose new weights overflow float16 is refused, and the engine keeps its old weights:
// plain (MatMulAdd's prepare step) and packed in panels (MatMulAddPacked's).
TEST(Fp16Plan, RefitRefusesAWeightBeyondFloat16Range) {
  synth::LlamaSpec sa;
  sa.seq = 1;
  synth::LlamaSpec sb = sa;
  sb.seed = 2;
  ir::Graph ga = synth::synthetic_llama(sa), gb = synth::synthetic_llama(sb);
  const std::string w = first_linear_weight(gb);
  gb.initializers.at(w).mutable_data<float>()[0] = -1e5f;
  for (auto packing : {build::WeightPacking::Plain, build::WeightPacking::Panels}) {
    SCOPED_TRACE(packing == build::WeightPacking::Plain ? "plain" : "panels");
    build::BuildOptions o;
    o.mode = plan::BuildMode::Refit;
    o.precision = plan::Precision::Fp16;
    o.weight_packing = packing;
    runtime::PlanEngine engine(round_trip(build::build_plan(ga, o)));
    const auto before = engine.run(synth::synthetic_llama_inputs(1));
    refit::Refitter r(engine);
    for (const auto& [id, t] : build::read_sources_from_onnx(engine.plan(), gb)) r.set_source(id, t);
    try {
      r.commit();
      ADD_FAILURE() << "a refit with -1e5 in an fp16 plan's weight succeeded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("65504"), std::string::npos) << e.what();
    }
    const auto after = engine.run(synth::synthetic_llama_inputs(1));
    ASSERT_EQ(before.size(), after.size());
    for (size_t i = 0; i < before.size(); ++i)
      EXPECT_TRUE(transforms::bit_equal(before[i], after[i])) << "output " << i;
  }
}

// On the CUDA backend a float16 weight reaches reforge::MatMulAdd through an upload: placement
// marks those transfers, and where a GPU runs the plan, a refit whose new weight overflows
// float16 is refused there and the engine keeps its weights, as on the CPU.
TEST(Fp16Plan, CudaUploadRefusesAWeightBeyondFloat16Range) {
  REQUIRE_CUDA_BUILD();
  synth::LlamaSpec sa;
  sa.seq = 1;
  synth::LlamaSpec sb = sa;
  sb.seed = 2;
  ir::Graph ga = synth::synthetic_llama(sa), gb = synth::synthetic_llama(sb);
  const std::string w = first_linear_weight(gb);
  gb.initializers.at(w).mutable_data<float>()[0] = -1e5f;
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  o.precision = plan::Precision::Fp16;
  o.backend = "cuda";
  plan::Plan p = round_trip(build::build_plan(ga, o));
  std::map<std::string, std::string> producer;  // value -> ToDevice node label
  size_t marked = 0, fused = 0;
  for (const auto& n : p.graph.nodes)
    if (n.op_type == "ToDevice") {
      producer[n.outputs[0]] = n.label();
      marked += n.has_attr(ops::kFiniteFloat16For);
    }
  for (const auto& n : p.graph.nodes)
    if (n.domain == "reforge" && n.op_type == "MatMulAdd") {
      ++fused;
      ASSERT_TRUE(producer.count(n.inputs[1])) << n.label();
    }
  ASSERT_GT(fused, 0u) << "the CUDA build fuses Linear layers into reforge::MatMulAdd";
  EXPECT_EQ(marked, fused);  // one weight per Linear layer
  if (!test_support::no_gpu().empty()) GTEST_SKIP() << test_support::no_gpu();
  runtime::PlanEngine engine(std::move(p));
  const auto before = engine.run(synth::synthetic_llama_inputs(1));
  refit::Refitter r(engine);
  for (const auto& [id, t] : build::read_sources_from_onnx(engine.plan(), gb)) r.set_source(id, t);
  try {
    r.commit();
    ADD_FAILURE() << "a refit with -1e5 in a CUDA fp16 plan's weight succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("65504"), std::string::npos) << e.what();
  }
  const auto after = engine.run(synth::synthetic_llama_inputs(1));
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(transforms::bit_equal(before[i], after[i])) << "output " << i;
}
