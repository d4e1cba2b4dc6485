// Recipe replay runs its data-movement steps (Transpose, Cast, PackPanels, ...) on all threads,
// as checkpoint bindings do, while the builder folds them on one: the bytes must not depend on
// the thread count. Checked against hand-derived values (the transpose and the panel layout of
// backends/cpu/sgemm_panels.h, written out element by element), at sizes that take the kernels'
// parallel paths. A 2-D Transpose read only by PackPanels, and a source given as a transpose, are
// packed from the matrix directly (transforms/recipe.h): the same bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backends/cpu/sgemm_panels.h"
#include "transforms/recipe.h"

using namespace reforge;

namespace {

Tensor random_f(Shape s, uint32_t seed) {
  Tensor t = Tensor::empty(DType::Float32, std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2, 2);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
  return t;
}

plan::RecipeStep step(std::string domain, std::string op, std::map<std::string, ir::Attribute> attrs,
                      plan::Operand in) {
  plan::RecipeStep st;
  st.domain = std::move(domain);
  st.op_type = std::move(op);
  st.opset = st.domain.empty() ? 18 : 1;
  st.attrs = std::move(attrs);
  st.inputs = {in};
  return st;
}

// Source [N, K] (a Linear weight as PyTorch stores it) -> Transpose -> [K, N] -> PackPanels.
plan::Recipe transpose_then_pack() {
  plan::Recipe r;
  r.steps.push_back(step("", "Transpose", {{"perm", ir::ints_attr("perm", {1, 0})}}, {plan::Operand::Kind::Source, 0}));
  r.steps.push_back(
      step("reforge", "PackPanels", {{"transposed", ir::int_attr("transposed", 0)}}, {plan::Operand::Kind::Step, 0}));
  r.result = {plan::Operand::Kind::Step, 1};
  return r;
}

}  // namespace

TEST(RecipeThreads, TransposeThenPackIsTheHandDerivedLayoutOnAnyThreadCount) {
  const int64_t N = 530, K = 611;  // K * N > 2^18: PackPanels' parallel path; N not a multiple of 16
  const Tensor w = random_f({N, K}, 7);
  const float* pw = w.data<float>();
  const int64_t W = cpu::kPanelWidth, P = (N + W - 1) / W;
  Tensor expect = Tensor::empty(DType::Float32, {P, K, W});
  float* pe = expect.mutable_data<float>();
  for (int64_t p = 0; p < P; ++p)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < W; ++j) {
        const int64_t n = p * W + j;
        pe[(p * K + k) * W + j] = n < N ? pw[n * K + k] : 0.0f;  // W^T[k][n], zero padding past N
      }
  const plan::Recipe r = transpose_then_pack();
  for (int threads : {1, 2, 4, 0}) {
    const Tensor got = transforms::replay_recipe(r, {w}, {}, threads);
    EXPECT_TRUE(transforms::bit_equal(got, expect)) << "threads = " << threads;
  }
}

TEST(RecipeThreads, TransposeAndCastStepsMatchOneThread) {
  const int64_t N = 1024, K = 768;
  const Tensor w = random_f({N, K}, 11);
  plan::Recipe r;
  r.steps.push_back(step("", "Transpose", {{"perm", ir::ints_attr("perm", {1, 0})}}, {plan::Operand::Kind::Source, 0}));
  r.steps.push_back(
      step("", "Cast", {{"to", ir::int_attr("to", 16)}}, {plan::Operand::Kind::Step, 0}));  // 16 = bfloat16
  r.result = {plan::Operand::Kind::Step, 1};
  const Tensor one = transforms::replay_recipe(r, {w}, {}, 1);
  ASSERT_EQ(one.dtype(), DType::BFloat16);
  ASSERT_EQ(one.shape(), (Shape{K, N}));
  // Hand-derived: element [k, n] is w[n, k] rounded to bfloat16 (round to nearest even).
  const uint16_t* p1 = static_cast<const uint16_t*>(one.raw());
  for (int64_t k = 0; k < K; k += 97)
    for (int64_t n = 0; n < N; n += 89) {
      uint32_t bits;
      const float v = w.data<float>()[n * K + k];
      std::memcpy(&bits, &v, 4);
      const uint16_t bf = static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
      EXPECT_EQ(p1[k * N + n], bf) << "at [" << k << ", " << n << "]";
    }
  for (int threads : {2, 4, 0})
    EXPECT_TRUE(transforms::bit_equal(transforms::replay_recipe(r, {w}, {}, threads), one)) << "threads = " << threads;
}

// A source given as the transpose of a matrix (a checkpoint tensor an exporter stored
// transposed, Refitter::set_source_transposed): PackPanels reads the matrix directly, a Transpose
// of the source is the matrix itself, and any other step reads the transpose, made first. Both against the hand-derived bytes above.
TEST(RecipeThreads, SourceGivenTransposedIsPackedOrTransposedAsIfMade) {
  const int64_t N = 530, K = 611;
  const Tensor w = random_f({N, K}, 7);  // the source is w^T, [K, N]
  const Tensor wt = transforms::transpose_2d(w, 1);
  ASSERT_EQ(wt.shape(), (Shape{K, N}));
  for (int64_t k = 0; k < K; k += 61)
    for (int64_t n = 0; n < N; n += 53) ASSERT_EQ(wt.data<float>()[k * N + n], w.data<float>()[n * K + k]);
  plan::Recipe pack;
  pack.steps.push_back(
      step("reforge", "PackPanels", {{"transposed", ir::int_attr("transposed", 0)}}, {plan::Operand::Kind::Source, 0}));
  pack.result = {plan::Operand::Kind::Step, 0};
  EXPECT_TRUE(transforms::reads_source_transposable(pack, 0));
  const std::vector<Tensor> given_w = {w};
  const Tensor direct = transforms::replay_recipe(pack, {Tensor()}, {}, 0, &given_w);
  EXPECT_TRUE(transforms::bit_equal(direct, transforms::replay_recipe(pack, {wt}, {}, 1)));
  EXPECT_TRUE(transforms::bit_equal(direct, transforms::replay_recipe(transpose_then_pack(), {w}, {}, 1)));
  // Read by a Cast as well: not only packed, so the transpose is made for it.
  plan::Recipe cast = pack;
  cast.steps.push_back(step("", "Cast", {{"to", ir::int_attr("to", 16)}}, {plan::Operand::Kind::Source, 0}));
  cast.result = {plan::Operand::Kind::Step, 1};
  EXPECT_FALSE(transforms::reads_source_transposable(cast, 0));
  EXPECT_TRUE(transforms::bit_equal(transforms::replay_recipe(cast, {Tensor()}, {}, 0, &given_w),
                                    transforms::replay_recipe(cast, {wt}, {}, 1)));
  // The identity recipe keeps the source itself: nothing to pack.
  plan::Recipe identity;
  identity.result = {plan::Operand::Kind::Source, 0};
  EXPECT_FALSE(transforms::reads_source_transposable(identity, 0));
  // A Transpose of the source is the matrix given, bytes and storage.
  plan::Recipe back;
  back.steps.push_back(step("", "Transpose", {{"perm", ir::ints_attr("perm", {1, 0})}}, {plan::Operand::Kind::Source, 0}));
  back.result = {plan::Operand::Kind::Step, 0};
  EXPECT_TRUE(transforms::reads_source_transposable(back, 0));
  const Tensor same = transforms::replay_recipe(back, {Tensor()}, {}, 0, &given_w);
  EXPECT_TRUE(transforms::bit_equal(same, transforms::replay_recipe(back, {wt}, {}, 1)));
  EXPECT_EQ(same.raw(), w.raw());
}

// A Transpose read twice (by PackPanels and as the result) is made once and used by both.
TEST(RecipeThreads, TransposeReadTwiceIsNotFolded) {
  const Tensor w = random_f({40, 70}, 3);
  plan::Recipe r = transpose_then_pack();
  r.result = {plan::Operand::Kind::Step, 0};  // the transpose itself is the engine weight
  const Tensor got = transforms::replay_recipe(r, {w}, {}, 1);
  ASSERT_EQ(got.shape(), (Shape{70, 40}));
  for (int64_t k = 0; k < 70; ++k)
    for (int64_t n = 0; n < 40; ++n) ASSERT_EQ(got.data<float>()[k * 40 + n], w.data<float>()[n * 70 + k]);
}
