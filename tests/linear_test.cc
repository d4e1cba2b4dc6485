// Linear layers (MatMul/Gemm with a constant weight, reforge::MatMulAdd): the prepared paths
// (streaming kernel for few rows, oneDNN on packed weights for many) against a float64
// reference on odd sizes; --precision bf16 plans against the framework's reference outputs; and
// refit of fp32, bf16 and fp16 plans, which must re-pack the weights: a plan refit from weights B
// equals a fresh build from B bit for bit, weights and outputs.
#include "backends/cpu/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backends/backend.h"
#include "backends/cpu/blas_gemm.h"
#include "backends/cpu/dnnl_matmul.h"
#include "backends/cpu/gemv.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/half.h"
#include "core/simd.h"
#include "ops/registry.h"
#include "plan/plan_io.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/model_references.h"
#include "support/plan_round_trip.h"
#include "support/simd_levels.h"
#include "support/synthetic_llama.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::round_trip;

namespace {

Tensor random_tensor(DType dt, Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = uni(rng);
  if (dt == DType::Float32) return t;
  Tensor h = Tensor::empty(dt, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::BFloat16)
      h.mutable_data<bfloat16>()[i] = bfloat16(t.data<float>()[i]);
    else
      h.mutable_data<float16>()[i] = float16(t.data<float>()[i]);
  }
  return h;
}

float value_at(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::BFloat16) return static_cast<float>(t.data<bfloat16>()[i]);
  if (t.dtype() == DType::Float16) return static_cast<float>(t.data<float16>()[i]);
  return t.data<float>()[i];
}

// Runs one registry op the way the engine does: prepare on the inputs flagged constant, then the
// kernel with what was prepared.
Tensor run_op(const std::string& domain, const std::string& op, std::vector<const Tensor*> inputs,
              std::vector<bool> constant, std::map<std::string, ir::Attribute> attrs, int threads, bool* prepared_out) {
  ir::Node node;
  node.op_type = op;
  node.domain = domain;
  node.opset = domain.empty() ? 13 : 1;
  node.name = "test_" + op;
  node.attrs = std::move(attrs);
  for (size_t i = 0; i < inputs.size(); ++i) node.inputs.push_back(inputs[i] ? "in" + std::to_string(i) : "");
  node.outputs = {"y"};
  std::vector<const Tensor*> cins(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (i < constant.size() && constant[i]) cins[i] = inputs[i];
  const backends::Resolved def = backends::host_kernel(node);
  ops::HostPrepareContext host_context;
  std::shared_ptr<const void> prepared =
      def.prepare && *def.prepare ? (*def.prepare)(node, cins, host_context) : nullptr;
  if (prepared_out) *prepared_out = prepared != nullptr;
  ops::KernelContext ctx(node, inputs, threads, nullptr, prepared.get());
  (*def.kernel)(ctx);
  return ctx.outputs()[0];
}

// Y = X[rows, K] x W[K, N] (+ bias) in float64, with an error bound per element: `rel` times
// sum |x w| (the size of the rounding errors of a float32 or bfloat16 sum).
struct Reference {
  std::vector<double> y, scale;
};
Reference reference(const Tensor& x, const Tensor& w, bool w_transposed, const Tensor* bias, int64_t rows, int64_t K,
                    int64_t N) {
  Reference r;
  r.y.assign(rows * N, 0.0);
  r.scale.assign(rows * N, 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = bias ? value_at(*bias, j) : 0.0, a = 0;
      for (int64_t k = 0; k < K; ++k) {
        double p = static_cast<double>(value_at(x, i * K + k)) * value_at(w, w_transposed ? j * K + k : k * N + j);
        s += p;
        a += std::fabs(p);
      }
      r.y[i * N + j] = s;
      r.scale[i * N + j] = a + (bias ? std::fabs(value_at(*bias, j)) : 0.0);
    }
  return r;
}

void expect_close(const Tensor& y, const Reference& r, double rel, const std::string& what) {
  ASSERT_EQ(y.numel(), static_cast<int64_t>(r.y.size())) << what;
  int bad = 0;
  for (int64_t i = 0; i < y.numel() && bad < 5; ++i) {
    double d = std::fabs(y.data<float>()[i] - r.y[i]);
    if (!(d <= rel * r.scale[i] + 1e-6)) {
      ADD_FAILURE() << what << ": element " << i << " is " << y.data<float>()[i] << ", want " << r.y[i];
      ++bad;
    }
  }
}

constexpr double kF32Rel = 2e-6;    // float32 sums of up to ~200 terms
constexpr double kSplitRel = 2e-5;  // activations as two bfloat16 parts: 16 bits, 2^-17 relative

}  // namespace

TEST(LinearKernel, MatMulConstantWeightOddSizes) {
  for (int threads : {1, 2})
    for (int64_t M : {1, 3, 17, 40})
      for (int64_t K : {1, 5, 33, 100})
        for (int64_t N : {1, 7, 17, 50, 130}) {
          const int64_t batch = M == 1 ? 1 : 2;  // batched rows: batch x M
          Tensor x = random_tensor(DType::Float32, {batch, M, K}, 1);
          Tensor w = random_tensor(DType::Float32, {K, N}, 2);
          bool prepared = false;
          Tensor y = run_op("", "MatMul", {&x, &w}, {false, true}, {}, threads, &prepared);
          EXPECT_TRUE(prepared);
          EXPECT_EQ(y.shape(), (Shape{batch, M, N}));
          expect_close(y, reference(x, w, false, nullptr, batch * M, K, N), kF32Rel,
                       "MatMul M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N));
        }
}

// Float32 weights that oneDNN takes as they are (its AVX2 gemm wants the plain row-major layout)
// are not copied when "packed": the engine then holds one copy of each Linear weight, not two
// (peak memory). Where oneDNN picks a blocked layout (AVX-512 brgemm) the copy is real. Either
// way products on the packed path match the reference.
TEST(LinearKernel, Float32PackedWeightsAliasThePlainCopy) {
  const int64_t K = 96, N = 80, rows = 40;
  Tensor w = random_tensor(DType::Float32, {K, N}, 7);
  auto lw = ops::prepare_linear(w, false);
  ASSERT_NE(lw, nullptr);
  EXPECT_EQ(lw->plain.raw(), w.raw());  // untransposed: the engine weight itself
  const cpu::PackedWeights* p = lw->packed();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(cpu::packed_aliases_plain(*p), cpu::packed_layout_is_plain(*p));
  if (simd_level() == SimdLevel::Avx2) {
    EXPECT_TRUE(cpu::packed_aliases_plain(*p));  // gemm:jit (Zen 3 measured)
  }
  Tensor x = random_tensor(DType::Float32, {rows, K}, 8);
  Tensor y = Tensor::empty(DType::Float32, {rows, N});
  ASSERT_TRUE(cpu::dnnl_matmul_packed(*p, rows, x.data<float>(), nullptr, y.mutable_data<float>()));
  expect_close(y, reference(x, w, false, nullptr, rows, K, N), kF32Rel, "packed alias");
  // bfloat16 weights are re-laid out for oneDNN's bf16 kernels: a real copy.
  auto lb = ops::prepare_linear(random_tensor(DType::BFloat16, {K, N}, 9), false);
  if (const cpu::PackedWeights* pb = lb->packed()) {
    EXPECT_FALSE(cpu::packed_aliases_plain(*pb));
  }
}

// The OpenBLAS path (multi-row Linear products on CPUs without AVX-512) with and without a bias.
TEST(LinearKernel, BlasLinearMatchesReference) {
  for (int64_t M : {1, 33, 70})
    for (bool with_bias : {false, true}) {
      const int64_t K = 75, N = 131;
      Tensor x = random_tensor(DType::Float32, {M, K}, 31), w = random_tensor(DType::Float32, {K, N}, 32);
      Tensor b = random_tensor(DType::Float32, {N}, 33);
      Tensor y = Tensor::empty(DType::Float32, {M, N});
      cpu::blas_linear(M, N, K, x.data<float>(), w.data<float>(), with_bias ? b.data<float>() : nullptr,
                       y.mutable_data<float>());
      expect_close(y, reference(x, w, false, with_bias ? &b : nullptr, M, K, N), kF32Rel,
                   "blas M=" + std::to_string(M) + (with_bias ? " bias" : ""));
    }
  // 16-bit W widened a panel (256 columns) at a time: N spans several panels and a remainder.
  for (DType dt : {DType::BFloat16, DType::Float16})
    for (bool with_bias : {false, true}) {
      const int64_t M = 37, K = 29, N = 1100;
      Tensor x = random_tensor(DType::Float32, {M, K}, 34), w = random_tensor(dt, {K, N}, 35);
      Tensor b = random_tensor(DType::Float32, {N}, 36);
      Tensor y = Tensor::empty(DType::Float32, {M, N});
      cpu::blas_linear_widened(M, N, K, x.data<float>(), w.raw(), dt, with_bias ? b.data<float>() : nullptr,
                               y.mutable_data<float>());
      expect_close(y, reference(x, w, false, with_bias ? &b : nullptr, M, K, N), kF32Rel,
                   std::string("blas widened ") + dtype_name(dt) + (with_bias ? " bias" : ""));
    }
  EXPECT_FALSE(cpu::prefer_blas_linear(cpu::kBlasMinRows - 1));
  EXPECT_EQ(cpu::prefer_blas_linear(cpu::kBlasMinRows), simd_level() < SimdLevel::Avx512);
}

// The streaming kernel itself on any row count, strided rows, all weight types, with a bias, at
// every instruction-set level this CPU has (generic, AVX2, AVX-512: each has its own kernels,
// including the few-rows one from two rows on), against the float64 reference; and the result
// of a level does not depend on the thread count (columns are split, sums are not).
TEST(LinearKernel, GemvRowsOddSizes) {
  const std::vector<SimdLevel> levels = test_support::simd_levels();
  for (SimdLevel level : levels) {
    SimdOverride cap(level);
    for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16})
      for (int64_t M : {1, 2, 3, 8, 17})
        for (int64_t K : {1, 3, 9, 33, 130})
          for (int64_t N : {1, 15, 17, 33, 50, 200}) {
            Tensor x = random_tensor(DType::Float32, {M, K + 2}, 21);  // row stride K + 2
            Tensor w = random_tensor(dt, {K, N}, 22);
            Tensor b = random_tensor(DType::Float32, {N}, 23);
            const std::string what = std::string("gemv level ") + std::to_string(static_cast<int>(level)) + " " +
                                     dtype_name(dt) + " M=" + std::to_string(M) + " K=" + std::to_string(K) +
                                     " N=" + std::to_string(N);
            Tensor y1;
            for (int threads : {1, 2}) {
              Tensor y = Tensor::empty(DType::Float32, {M, N + 1});  // row stride N + 1
              cpu::gemv_rows(M, N, K, x.data<float>(), K + 2, w.raw(), dt, b.data<float>(), y.mutable_data<float>(),
                             N + 1, threads);
              Tensor xs = Tensor::empty(DType::Float32, {M, K}), ys = Tensor::empty(DType::Float32, {M, N});
              for (int64_t r = 0; r < M; ++r) {
                std::memcpy(xs.mutable_data<float>() + r * K, x.data<float>() + r * (K + 2), K * 4);
                std::memcpy(ys.mutable_data<float>() + r * N, y.data<float>() + r * (N + 1), N * 4);
              }
              expect_close(ys, reference(xs, w, false, &b, M, K, N), kF32Rel, what);
              if (threads == 1)
                y1 = ys;
              else
                ASSERT_EQ(std::memcmp(y1.raw(), ys.raw(), ys.nbytes()), 0) << what << ": 1 and 2 threads differ";
            }
          }
  }
}

TEST(LinearKernel, MatMulVectorAndBroadcastBatches) {
  Tensor w = random_tensor(DType::Float32, {37, 19}, 3);
  Tensor v = random_tensor(DType::Float32, {37}, 4);
  Tensor y = run_op("", "MatMul", {&v, &w}, {false, true}, {}, 1, nullptr);
  EXPECT_EQ(y.shape(), (Shape{19}));
  expect_close(y, reference(v, w, false, nullptr, 1, 37, 19), kF32Rel, "vector x matrix");
  // A with two batch dimensions against one constant B.
  Tensor x = random_tensor(DType::Float32, {2, 3, 5, 37}, 5);
  y = run_op("", "MatMul", {&x, &w}, {false, true}, {}, 2, nullptr);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5, 19}));
  expect_close(y, reference(x, w, false, nullptr, 30, 37, 19), kF32Rel, "broadcast B");
  // A batched constant B is not a Linear weight: the generic batched path.
  Tensor wb = random_tensor(DType::Float32, {2, 37, 19}, 6);
  Tensor xb = random_tensor(DType::Float32, {2, 4, 37}, 7);
  bool prepared = true;
  y = run_op("", "MatMul", {&xb, &wb}, {false, true}, {}, 1, &prepared);
  EXPECT_EQ(y.shape(), (Shape{2, 4, 19}));
  for (int b = 0; b < 2; ++b) {
    Tensor xs = Tensor::copy_of(DType::Float32, {4, 37}, xb.data<float>() + b * 4 * 37);
    Tensor ws = Tensor::copy_of(DType::Float32, {37, 19}, wb.data<float>() + b * 37 * 19);
    Tensor ys = Tensor::copy_of(DType::Float32, {4, 19}, y.data<float>() + b * 4 * 19);
    expect_close(ys, reference(xs, ws, false, nullptr, 4, 37, 19), kF32Rel, "batched B");
  }
}

TEST(LinearKernel, GemmTransposedWithBias) {
  for (int64_t M : {1, 3, 17, 64})
    for (bool tb : {false, true})
      for (int c_kind : {0, 1, 2, 3}) {  // none, [N], [1, N], [M, N] (generic path)
        const int64_t K = 45, N = 23;
        Tensor a = random_tensor(DType::Float32, {M, K}, 8);
        Tensor b = random_tensor(DType::Float32, tb ? Shape{N, K} : Shape{K, N}, 9);
        Tensor c = random_tensor(DType::Float32, c_kind == 1 ? Shape{N} : c_kind == 2 ? Shape{1, N} : Shape{M, N}, 10);
        std::map<std::string, ir::Attribute> attrs = {{"transB", ir::int_attr("transB", tb)}};
        std::vector<const Tensor*> ins = {&a, &b};
        if (c_kind) ins.push_back(&c);
        Tensor y = run_op("", "Gemm", ins, {false, true, true}, attrs, 2, nullptr);
        Reference r = reference(a, b, tb, nullptr, M, K, N);
        if (c_kind)
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) r.y[i * N + j] += c.data<float>()[c_kind == 3 ? i * N + j : j];
        expect_close(
            y, r, kF32Rel,
            "Gemm M=" + std::to_string(M) + " transB=" + std::to_string(tb) + " C kind " + std::to_string(c_kind));
      }
}

// 16-bit weights on every path: few rows (streaming), 16..100 rows (oneDNN on packed weights
// where the CPU has a bfloat16 matmul; else, and always for float16, the streaming kernel below
// 32 rows and OpenBLAS on widened panels from 32); the reference multiplies the 16-bit weights'
// exact values in float64.
TEST(LinearKernel, MatMulAdd16BitWeights) {
  for (DType dt : {DType::BFloat16, DType::Float16})
    for (int threads : {1, 2})
      for (int64_t M : {1, 3, 16, 17, 100})
        for (int64_t N : {7, 50, 130}) {
          const int64_t K = 67;
          Tensor x = random_tensor(DType::Float32, {M, K}, 11);
          Tensor w = random_tensor(dt, {K, N}, 12);
          Tensor b = random_tensor(DType::Float32, {N}, 13);
          for (bool with_bias : {false, true}) {
            std::vector<const Tensor*> ins = {&x, &w};
            if (with_bias) ins.push_back(&b);
            bool prepared = false;
            Tensor y = run_op("reforge", "MatMulAdd", ins, {false, true, true}, {}, threads, &prepared);
            EXPECT_TRUE(prepared);
            // Both paths keep the activations' float32 accuracy (oneDNN's as a high + low split).
            expect_close(y, reference(x, w, false, with_bias ? &b : nullptr, M, K, N), kSplitRel,
                         std::string(dtype_name(dt)) + " MatMulAdd M=" + std::to_string(M) + " N=" + std::to_string(N));
          }
        }
}

TEST(LinearKernel, MatMulAddUnpreparedMatchesPrepared) {
  // A weight computed at run time (no prepare step) takes the plain paths: same sums for one row.
  Tensor x = random_tensor(DType::Float32, {1, 29}, 14);
  Tensor w = random_tensor(DType::Float32, {29, 31}, 15);
  Tensor b = random_tensor(DType::Float32, {31}, 16);
  bool prepared = false;
  Tensor y1 = run_op("reforge", "MatMulAdd", {&x, &w, &b}, {false, true, true}, {}, 1, &prepared);
  EXPECT_TRUE(prepared);
  Tensor y2 = run_op("reforge", "MatMulAdd", {&x, &w, &b}, {false, false, false}, {}, 1, &prepared);
  EXPECT_FALSE(prepared);
  EXPECT_TRUE(transforms::bit_equal(y1, y2));
}

// ---- plans --------------------------------------------------------------------------------

namespace {

size_t count_weights(const plan::Plan& p, DType dt) {
  size_t n = 0;
  for (const auto& w : p.weights) n += w.dtype == dt;
  return n;
}

}  // namespace

// Plain: W16 = Cast(W). Panels: PackPanels(Cast(W)), run by MatMulAddPacked. Auto picks panels
// exactly where oneDNN has no bfloat16 product (and the CPU has AVX2).
TEST(LinearPlan, Bf16RecordsPrecisionAndCastsOnlyLinearWeights) {
  synth::LlamaSpec spec;
  ir::Graph g = synth::synthetic_llama(spec);
  for (auto packing : {build::WeightPacking::Plain, build::WeightPacking::Panels, build::WeightPacking::Auto}) {
    const bool panels =
        packing == build::WeightPacking::Panels ||
        (packing == build::WeightPacking::Auto && simd_level() >= SimdLevel::Avx2 && !cpu::has_bf16_matmul());
    SCOPED_TRACE(panels ? "panels" : "plain");
    build::BuildOptions o;
    o.mode = plan::BuildMode::Refit;
    o.precision = plan::Precision::Bf16;
    o.weight_packing = packing;
    plan::Plan p = build::build_plan(g, o);
    EXPECT_EQ(p.precision, plan::Precision::Bf16);
    EXPECT_EQ(round_trip(p).precision, plan::Precision::Bf16);
    // 7 projections per layer and the LM head; sources keep their float32 type.
    EXPECT_EQ(count_weights(p, DType::BFloat16), static_cast<size_t>(7 * spec.layers + 1));
    for (const auto& s : p.sources) EXPECT_EQ(s.dtype, DType::Float32) << s.key;
    for (const auto& w : p.weights) {
      if (w.dtype != DType::BFloat16) continue;
      ASSERT_EQ(w.recipe.steps.size(), panels ? 2u : 1u) << w.name;
      EXPECT_EQ(w.recipe.steps[0].op_type, "Cast") << w.name;
      EXPECT_EQ(w.recipe.steps.back().op_type, panels ? "PackPanels" : "Cast") << w.name;
      EXPECT_EQ(w.shape.size(), panels ? 3u : 2u) << w.name;
    }
    size_t packed_nodes = 0;
    for (const auto& n : p.graph.nodes) packed_nodes += n.op_type == "MatMulAddPacked";
    EXPECT_EQ(packed_nodes, panels ? static_cast<size_t>(7 * spec.layers + 1) : 0u);
    build::BuildOptions f32 = o;
    f32.precision = plan::Precision::Fp32;
    EXPECT_EQ(count_weights(build::build_plan(g, f32), DType::BFloat16), 0u);
  }
}

// A refit must re-pack: the engine built from weights A and refit with B gives exactly what a
// fresh build from B gives, on the few-row (1) and many-row (5, 40 rows) paths, for weights
// stored plain (packed by oneDNN at load) and in panels (packed by the PackPanels recipe step),
// in fp32, bf16 (with float32 and with bfloat16 activations) and fp16 plans; and so does a slow
// refit (a rebuild from B with the plan's options, which must keep them).
TEST(LinearPlan, RefitRepacksAndEqualsFreshBuild) {
  const std::pair<plan::Precision, plan::Precision> precisions[] = {{plan::Precision::Fp32, plan::Precision::Fp32},
                                                                    {plan::Precision::Bf16, plan::Precision::Fp32},
                                                                    {plan::Precision::Bf16, plan::Precision::Bf16},
                                                                    {plan::Precision::Fp16, plan::Precision::Fp32}};
  for (auto [precision, activations] : precisions)
    for (auto packing : {build::WeightPacking::Panels, build::WeightPacking::Plain})
      for (int64_t seq : {1, 5, 40})
        for (bool strip : {false, true}) {
          SCOPED_TRACE(std::string(plan::precision_name(precision)) + " (" + plan::precision_name(activations) +
                       " activations)" + (packing == build::WeightPacking::Panels ? " panels" : " plain") + " seq " +
                       std::to_string(seq) + (strip ? " stripped" : ""));
          synth::LlamaSpec sa;
          sa.seq = seq;
          sa.share_norms = false;
          synth::LlamaSpec sb = sa;
          sb.seed = 2;
          ir::Graph ga = synth::synthetic_llama(sa), gb = synth::synthetic_llama(sb);
          build::BuildOptions o;
          o.mode = plan::BuildMode::Refit;
          o.precision = precision;
          o.activations = activations;
          o.weight_packing = packing;
          plan::Plan fresh_b = build::build_plan(gb, o);
          runtime::PlanEngine engine_b(round_trip(fresh_b));
          auto out_b = engine_b.run(synth::synthetic_llama_inputs(seq));

          o.strip_weights = strip;
          runtime::PlanEngine engine(round_trip(build::build_plan(ga, o)));
          std::vector<Tensor> out_a;
          if (!strip) out_a = engine.run(synth::synthetic_llama_inputs(seq));
          refit::Refitter r(engine);
          for (const auto& [id, t] : build::read_sources_from_onnx(engine.plan(), gb)) r.set_source(id, t);
          r.commit();
          for (const auto& w : fresh_b.weights)
            EXPECT_TRUE(transforms::bit_equal(engine.weight(w.name), w.data)) << "engine weight " << w.name;
          auto out = engine.run(synth::synthetic_llama_inputs(seq));
          ASSERT_EQ(out.size(), out_b.size());
          for (size_t i = 0; i < out.size(); ++i) {
            EXPECT_TRUE(transforms::bit_equal(out[i], out_b[i]))
                << "output " << i << " differs from a fresh build of B";
            if (!strip) {
              EXPECT_FALSE(transforms::bit_equal(out[i], out_a[i])) << "output " << i << " still A's";
            }
          }
          if (strip || seq == 5) continue;  // the slow path once per configuration and row path
          plan::Plan rebuilt = build::rebuild_from_onnx(engine.plan(), gb);
          EXPECT_EQ(rebuilt.precision, precision);
          EXPECT_EQ(rebuilt.activations, activations);
          auto out_slow = runtime::PlanEngine(std::move(rebuilt)).run(synth::synthetic_llama_inputs(seq));
          for (size_t i = 0; i < out.size(); ++i)
            EXPECT_TRUE(transforms::bit_equal(out_slow[i], out_b[i]))
                << "slow refit: output " << i << " differs from a fresh build of B";
        }
}

// The tiny exported models in bf16 against PyTorch's float32 reference: the error relative to
// the output's magnitude stays under 2e-2 (bfloat16 keeps 8 significant bits), with float32
// activations (at most 1.3e-2 when written) and with bf16 ones (--activations bf16: 1.5e-2).
TEST(LinearPlan, Bf16ModelsMatchFrameworkReference) {
  for (auto activations : {plan::Precision::Fp32, plan::Precision::Bf16}) {
    SCOPED_TRACE(std::string(plan::precision_name(activations)) + " activations");
    build::BuildOptions o;
    o.precision = plan::Precision::Bf16;
    o.activations = activations;
    const int checked = test_support::check_model_references(
        o, [](const std::string&, const std::string& name, const Tensor& out, const Tensor& ref) {
          ASSERT_EQ(out.shape(), ref.shape()) << name;
          EXPECT_LE(test_support::relative_error(out, ref), 2e-2) << name;
        });
    if (checked < 0) GTEST_SKIP() << "no models/manifest.json";
    EXPECT_GT(checked, 0);
  }
}

TEST(LinearKernel, SplitToBf16) {
  std::vector<float> src = {1.0f,
                            -3.14159265f,
                            1e-30f,
                            65504.123f,
                            3.0e38f,
                            -0.0f,
                            0.1f,
                            1.0f / 3.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            123456.789f,
                            -7.7e-5f,
                            2.5f,
                            1e10f,
                            -1e-10f,
                            0.3f};
  std::vector<uint16_t> hi(src.size()), lo(src.size());
  cpu::split_f32_to_bf16(src.data(), hi.data(), lo.data(), static_cast<int64_t>(src.size()));  // 17: a masked tail
  for (size_t i = 0; i < src.size(); ++i) {
    const float h = bfloat16::to_float(hi[i]), l = bfloat16::to_float(lo[i]);
    EXPECT_EQ(hi[i], bfloat16::from_float(src[i])) << i;
    if (std::isnan(src[i])) {
      EXPECT_TRUE(std::isnan(h));
      EXPECT_EQ(lo[i], 0);
    } else if (std::isinf(src[i])) {
      EXPECT_EQ(h, src[i]);
      EXPECT_EQ(lo[i], 0);
    } else {
      EXPECT_LE(std::fabs(static_cast<double>(h) + l - src[i]), std::fabs(src[i]) * std::ldexp(1.0, -16)) << i;
    }
  }
}
