// linear-weights-packing (passes/weight_packing.cc) and its two reforge ops: PackPanels puts
// every element of W where cpu::panel_at says, MatMulAddPacked matches a float64 reference for
// MatMul- and Gemm(transB)-shaped weights; a packed plan keeps only packed Linear weights,
// agrees with the plain-layout plan, rebuilds (slow refit) in its own layout whatever this CPU
// would choose, and the build lets go of each plain weight once it is packed. Refit of packed
// plans against a fresh build is LinearPlan.RefitRepacksAndEqualsFreshBuild (linear_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

#include "backends/cpu/sgemm_panels.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "passes/build_state.h"
#include "runtime/plan_engine.h"
#include "support/make_tensor.h"
#include "support/plan_round_trip.h"
#include "support/run_op.h"
#include "support/synthetic_llama.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::round_trip;
using test_support::run_op;

namespace {

using test_support::random_floats;

size_t count_nodes(const plan::Plan& p, const std::string& op_type) {
  size_t n = 0;
  for (const auto& node : p.graph.nodes) n += node.op_type == op_type;
  return n;
}

plan::Plan build_with(const ir::Graph& g, build::WeightPacking packing, plan::BuildMode mode = plan::BuildMode::Refit) {
  build::BuildOptions o;
  o.mode = mode;
  o.weight_packing = packing;
  return build::build_plan(g, o);
}

// max |a - b| over max |b|.
double relative_difference(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double diff = 0, mag = 0;
  for (int64_t i = 0; i < a.numel() && i < b.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
    mag = std::max(mag, static_cast<double>(std::fabs(b.data<float>()[i])));
  }
  return diff / mag;
}

}  // namespace

TEST(PackPanels, PlacesEveryElementAndZeroPadsTheLastPanel) {
  for (bool transposed : {false, true})
    for (int64_t N : {1, 15, 16, 17, 40}) {
      const int64_t K = 37;
      SCOPED_TRACE("N " + std::to_string(N) + (transposed ? " transposed" : ""));
      Tensor w = random_floats(transposed ? Shape{N, K} : Shape{K, N}, 3);
      Tensor wp = run_op("reforge", "PackPanels", 1, {&w}, {ir::int_attr("transposed", transposed)});
      const int64_t P = (N + 15) / 16;
      ASSERT_EQ(wp.shape(), (Shape{P, K, 16}));
      const float* p = wp.data<float>();
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < P * 16; ++n) {
          const float want = n >= N ? 0.0f : transposed ? w.data<float>()[n * K + k] : w.data<float>()[k * N + n];
          ASSERT_EQ(p[(n / 16) * K * 16 + k * 16 + n % 16], want) << "k " << k << " n " << n;
          if (n < N) {
            ASSERT_EQ(cpu::panel_at(p, K, k, n), want);
          }
        }
    }
}

// The op a packed plan runs, on 1-D, 2-D and batched inputs, with and without bias, from a
// MatMul-shaped ([K, N]) and a Gemm(transB)-shaped ([N, K]) weight, with more rows than one
// row block (192) and k longer than one k block (256).
TEST(PackPanels, MatMulAddPackedMatchesFloat64Reference) {
  struct Case {
    Shape x;
    int64_t N;
    bool transposed, bias;
  };
  // The last two have enough panels for 2 threads to split them (the others split rows), with
  // several row blocks and a k tail that is not a multiple of 8.
  const std::vector<Case> cases = {{{7}, 5, false, true},           {{3, 40}, 17, true, false},
                                   {{2, 13, 300}, 33, false, true}, {{200, 600}, 50, true, true},
                                   {{1, 1, 64}, 1, false, false},   {{50, 70}, 200, false, true},
                                   {{400, 300}, 130, true, false}};
  for (int threads : {1, 2})
    for (const Case& c : cases) {
      const int64_t K = c.x.back(), rows = shape_numel(c.x) / K;
      SCOPED_TRACE("rows " + std::to_string(rows) + " K " + std::to_string(K) + " N " + std::to_string(c.N) +
                   " threads " + std::to_string(threads));
      Tensor x = random_floats(c.x, 1), w = random_floats(c.transposed ? Shape{c.N, K} : Shape{K, c.N}, 2);
      Tensor b = random_floats({c.N}, 4);
      Tensor wp = run_op("reforge", "PackPanels", 1, {&w}, {ir::int_attr("transposed", c.transposed)});
      Tensor y =
          run_op("reforge", "MatMulAddPacked", 1, {&x, &wp, c.bias ? &b : nullptr}, {ir::int_attr("n", c.N)}, threads);
      Shape want_shape = c.x;
      want_shape.back() = c.N;
      ASSERT_EQ(y.shape(), want_shape);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t n = 0; n < c.N; ++n) {
          double s = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double t = static_cast<double>(x.data<float>()[r * K + k]) *
                             (c.transposed ? w.data<float>()[n * K + k] : w.data<float>()[k * c.N + n]);
            s += t;
            mag += std::fabs(t);
          }
          if (c.bias) s += b.data<float>()[n], mag += std::fabs(b.data<float>()[n]);
          ASSERT_NEAR(y.data<float>()[r * c.N + n], s, 1e-6 * mag + 1e-7) << "row " << r << " column " << n;
        }
    }
}

TEST(PackPanels, MatMulAddPackedRefusesAMismatchedPackedWeight) {
  Tensor x = random_floats({2, 8}, 1), w = random_floats({8, 20}, 2);
  Tensor wp = run_op("reforge", "PackPanels", 1, {&w});
  try {
    run_op("reforge", "MatMulAddPacked", 1, {&x, &wp}, {ir::int_attr("n", 40)});  // 40 columns need 3 panels
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not hold 40 columns"), std::string::npos) << e.what();
  }
  Tensor x9 = random_floats({2, 9}, 1);
  EXPECT_THROW(run_op("reforge", "MatMulAddPacked", 1, {&x9, &wp}, {ir::int_attr("n", 20)}), Error);
}

TEST(WeightPacking, PackedPlanKeepsOnlyPackedLinearWeightsAndMatchesPlainLayout) {
  synth::LlamaSpec spec;
  spec.share_norms = false;
  const size_t linears = static_cast<size_t>(7 * spec.layers + 1);  // 7 projections per layer, LM head
  for (int64_t seq : {1, 5, 40}) {
    SCOPED_TRACE("seq " + std::to_string(seq));
    spec.seq = seq;
    ir::Graph g = synth::synthetic_llama(spec);
    plan::Plan packed = build_with(g, build::WeightPacking::Panels), plain = build_with(g, build::WeightPacking::Plain);
    EXPECT_EQ(count_nodes(packed, "MatMulAddPacked"), linears);
    EXPECT_EQ(count_nodes(plain, "MatMulAddPacked"), 0u);
    EXPECT_EQ(count_nodes(packed, "MatMul") + count_nodes(packed, "MatMulAdd"), 0u) << "a Linear layer was not packed";
    size_t pack_steps = 0;
    for (const auto& w : packed.weights) {
      if (w.recipe.steps.empty() || w.recipe.steps.back().op_type != "PackPanels") continue;
      ++pack_steps;
      EXPECT_EQ(w.shape.size(), 3u) << w.name;
    }
    EXPECT_EQ(pack_steps, linears);
    // Same weights, one plan summing in panels and blocks of k: float32 rounding apart.
    runtime::PlanEngine a(round_trip(packed)), b(round_trip(plain));
    auto ya = a.run(synth::synthetic_llama_inputs(seq)), yb = b.run(synth::synthetic_llama_inputs(seq));
    ASSERT_EQ(ya.size(), yb.size());
    for (size_t i = 0; i < ya.size(); ++i) EXPECT_LT(relative_difference(ya[i], yb[i]), 1e-5) << "output " << i;
  }
}

// Slow refit re-runs the build on the new model: it must lay out the weights as the plan does,
// not as this CPU would by default (a plan built elsewhere, or with the other layout).
TEST(WeightPacking, SlowRefitRebuildsInThePlansLayout) {
  synth::LlamaSpec sa;
  synth::LlamaSpec sb = sa;
  sb.seed = 7;
  for (auto packing : {build::WeightPacking::Panels, build::WeightPacking::Plain}) {
    plan::Plan p = build_with(synth::synthetic_llama(sa), packing);
    plan::Plan fresh_b = build_with(synth::synthetic_llama(sb), packing);
    plan::Plan rebuilt = build::rebuild_from_onnx(p, synth::synthetic_llama(sb));
    ASSERT_EQ(rebuilt.weights.size(), fresh_b.weights.size());
    for (size_t i = 0; i < rebuilt.weights.size(); ++i)
      EXPECT_TRUE(transforms::bit_equal(rebuilt.weights[i].data, fresh_b.weights[i].data)) << rebuilt.weights[i].name;
  }
}

// The pass lets go of each plain weight as soon as it is packed (BuildState::release_replaced),
// while the build is still running, so building holds about one copy of the weights; unless
// something else still needs the source: another node reading it, or another constant's recipe.
// The same for a bf16 build: the float32 weight goes once its bfloat16 cast is packed (or, with
// 16-bit packing off, once it is cast), and the plain cast once packed.
TEST(WeightPacking, PassFreesEachPlainWeightOncePacked) {
  enum Variant { kFp32, kBf16Panels, kBf16Plain };
  for (Variant variant : {kFp32, kBf16Panels, kBf16Plain})
    for (bool derived : {false, true})
      for (int other_user = 0; other_user < 3; ++other_user) {  // 0 none, 1 a node, 2 a recipe
        SCOPED_TRACE(std::string(variant == kFp32         ? "fp32"
                                 : variant == kBf16Panels ? "bf16 panels"
                                                          : "bf16 plain") +
                     (derived ? " refit" : " baked") + " other user " + std::to_string(other_user));
        passes::BuildState s;
        s.pack_linear_panels = true;
        s.pack_half_panels = variant == kBf16Panels;
        s.precision = variant == kFp32 ? plan::Precision::Fp32 : plan::Precision::Bf16;
        s.mode = derived ? plan::BuildMode::Refit : plan::BuildMode::Baked;
        auto storage = std::make_shared<std::vector<float>>(24 * 40, 0.5f);
        std::weak_ptr<std::vector<float>> watch = storage;
        Tensor w = Tensor::wrap(DType::Float32, {24, 40}, storage, storage->data());
        storage.reset();
        plan::Source src;
        src.key = "w@0:1";
        src.dtype = DType::Float32;
        src.shape = {24, 40};
        s.sources.push_back(src);
        s.source_values.push_back(w);
        passes::ConstValue cv;
        cv.value = w;
        if (derived) {
          cv.kind = plan::WeightKind::Derived;
          cv.recipe.result = {plan::Operand::Kind::Source, 0};
          cv.sources = {0};
        } else {
          cv.kind = plan::WeightKind::Baked;
        }
        s.consts[src.key] = std::move(cv);
        w = Tensor();
        ir::Node mm;
        mm.name = "mm";
        mm.op_type = "MatMul";
        mm.opset = 13;
        mm.inputs = {"x", src.key};
        mm.outputs = {"y"};
        s.graph.nodes.push_back(mm);
        if (other_user == 1) {
          ir::Node id = mm;
          id.name = "id";
          id.op_type = "Identity";
          id.inputs = {src.key};
          id.outputs = {"z"};
          s.graph.nodes.push_back(id);
        } else if (other_user == 2) {
          s.consts["neg"] = s.fold("", "Neg", 13, {}, {src.key}, 1, 0);
        }
        passes::linear_weights_precision(s);
        const std::string cast = s.graph.nodes[0].inputs[1];
        passes::linear_weights_packing(s);
        EXPECT_EQ(s.graph.nodes[0].op_type, variant == kBf16Plain ? "MatMulAdd" : "MatMulAddPacked");
        const std::string packed = s.graph.nodes[0].inputs[1];
        ASSERT_TRUE(s.is_const(packed));
        EXPECT_EQ(watch.expired(), other_user == 0 || (other_user == 2 && !derived))
            << "plain weight kept or freed wrongly";
        EXPECT_EQ(s.consts.at(packed).verified, derived && other_user == 0);
        EXPECT_EQ(s.is_const(src.key), other_user == 1);
        if (variant == kBf16Panels) {
          EXPECT_FALSE(s.is_const(cast)) << "the plain bfloat16 cast outlived its packing";
        }
      }
}
