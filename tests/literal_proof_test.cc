// prove_literal: the structural definitions on hand-made tensors, the recognizers on tables made
// by PyTorch (tests/data/literal_tables, written by scripts/models/literal_tables.py), and the
// refusals: weights, near-tables with one value off by more than the bound.
#include "builder/literal_proof.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/npy.h"

namespace reforge::build {
namespace {

Tensor fixture(const std::string& name) {
  return read_npy(std::string(REFORGE_SOURCE_DIR) + "/tests/data/literal_tables/" + name + ".npy");
}

Tensor f32(Shape shape, std::vector<float> v) { return Tensor::copy_of(DType::Float32, std::move(shape), v.data()); }

// Sets element i (as float32/float16) to f(old value).
Tensor perturbed(const Tensor& t, int64_t i, double (*f)(double)) {
  Tensor c = t.clone();
  if (c.dtype() == DType::Float32) {
    float* p = c.mutable_data<float>();
    p[i] = float(f(p[i]));
  } else if (c.dtype() == DType::Float16) {
    auto* p = c.mutable_data<float16>();
    p[i] = float16(float(f(float(p[i]))));
  }
  return c;
}
double rel_1e3(double v) { return v == 0 ? 1e-3 : v * (1 + 1e-3); }
double ulps16(double v) {
  float x = float(v);
  for (int k = 0; k < 16; ++k) x = std::nextafter(x, std::numeric_limits<float>::infinity());
  return x;
}
double ulps16_f16(double v) {  // 16 float16 ulps up
  float16 h{static_cast<float>(v)};
  h.bits = uint16_t(h.bits + (float(v) < 0 ? -16 : 16));
  return float(h);
}

void expect_proof(const Tensor& t, LiteralProof::Kind kind, const std::string& rule_part, const std::string& what) {
  auto p = prove_literal(t);
  ASSERT_TRUE(p.has_value()) << what << " " << t.describe() << " was not proven";
  EXPECT_EQ(p->kind, kind) << what << ": " << describe(*p);
  EXPECT_NE(p->rule.find(rule_part), std::string::npos)
      << what << ": " << describe(*p) << "\n  expected: " << rule_part;
  if (kind == LiteralProof::Kind::Proven) {
    EXPECT_LE(p->max_ulps, 4.0) << what;
  }
}

void expect_refused(const Tensor& t, const std::string& what) {
  auto p = prove_literal(t);
  EXPECT_FALSE(p.has_value()) << what << " " << t.describe() << " was accepted: " << describe(*p);
}

// Every element position class a test perturbs: first, middle, last.
std::vector<int64_t> probe_indices(const Tensor& t) {
  const int64_t n = t.numel();
  return {0, n / 2 + 1, n - 1};
}

void expect_perturbations_refused(const Tensor& t, const std::string& what) {
  for (int64_t i : probe_indices(t)) {
    expect_refused(perturbed(t, i, rel_1e3), what + " with element " + std::to_string(i) + " * (1 + 1e-3)");
    expect_refused(perturbed(t, i, t.dtype() == DType::Float16 ? ulps16_f16 : ulps16),
                   what + " with element " + std::to_string(i) + " + 16 ulps");
  }
}

// ---- structural ----

TEST(LiteralProofStructural, AllEqual) {
  expect_proof(f32({}, {2.0f}), LiteralProof::Kind::Structural, "all-equal (2)", "scalar");
  expect_proof(f32({2, 3}, std::vector<float>(6, 0.5f)), LiteralProof::Kind::Structural, "all-equal (0.5)", "fill");
  expect_proof(f32({0}, {}), LiteralProof::Kind::Structural, "empty", "empty");
  std::vector<float> v(64, 1.0f);
  v[17] = 1.0000001f;
  expect_refused(f32({64}, v), "all-equal but one");
  expect_refused(f32({3}, std::vector<float>(3, std::nanf(""))), "all NaN");
  expect_refused(f32({2}, {0.0f, -0.0f}), "+0 and -0");
}

TEST(LiteralProofStructural, Masks) {
  const float inf = std::numeric_limits<float>::infinity();
  const struct {
    const char* name;
    const char* rule;
  } cases[] = {{"mask_causal_neginf_1x1x16x16", "causal mask 0/-inf [1,1,16,16]"},
               {"mask_causal_finfo_min_8x8", "causal mask 0/-3.4028235e+38 [8,8]"},
               {"mask_tril_ones_16x16", "causal mask 0/1 [16,16]"},
               {"mask_causal_offset_4x12", "j <= i + 8"},
               {"mask_padding_2x1x1x8", "padding mask 0/-3.4028235e+38 [2,1,1,8]"}};
  for (const auto& c : cases) {
    Tensor t = fixture(c.name);
    expect_proof(t, LiteralProof::Kind::Structural, c.rule, c.name);
    expect_perturbations_refused(t, c.name);
  }
  // Upper triangular 0/1 with offset, and a query-padding mask (constant rows).
  std::vector<float> up(16), q(12);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) up[i * 4 + j] = j >= i + 1 ? 1.0f : 0.0f;
  expect_proof(f32({4, 4}, up), LiteralProof::Kind::Structural, "causal mask 0/1", "triu ones");
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) q[i * 4 + j] = i < 2 ? 0.0f : -inf;
  expect_proof(f32({1, 3, 4}, q), LiteralProof::Kind::Structural, "axis -2", "query padding");
  // float16 lowest and -1e4 fills.
  std::vector<float> h = {0, -65504.0f, 0, 0};
  Tensor h16 = cast_tensor(f32({2, 2}, h), DType::Float16);
  expect_proof(h16, LiteralProof::Kind::Structural, "causal mask 0/-65504", "float16 lowest");
  expect_proof(f32({2, 2}, {0, -1e4f, 0, 0}), LiteralProof::Kind::Structural, "0/-10000", "-1e4 fill");
  // Refused: a band (sliding window), scattered values, other fills, three values, {1, -inf}.
  std::vector<float> band(25);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) band[i * 5 + j] = (j <= i && j >= i - 1) ? 0.0f : -inf;
  expect_refused(f32({5, 5}, band), "band mask");
  expect_refused(f32({2, 3}, {0, -inf, 0, -inf, 0, -inf}), "scattered mask");
  expect_refused(f32({2, 2}, {0, -5, 0, 0}), "fill -5");
  expect_refused(f32({2, 2}, {0, 1, -inf, 0}), "three values");
  expect_refused(f32({2, 2}, {1, -inf, 1, 1}), "1/-inf");
  expect_refused(f32({2, 2}, {0, inf, 0, 0}), "0/+inf");
}

TEST(LiteralProofStructural, IntegerAranges) {
  expect_proof(fixture("arange_int_16"), LiteralProof::Kind::Structural, "integer arange 0..15 step 1", "arange(16)");
  expect_proof(fixture("arange_int_1x16"), LiteralProof::Kind::Structural, "integer arange 3..33 step 2 along axis 1",
               "[1,16]");
  expect_proof(fixture("arange_int_rows_8x4"), LiteralProof::Kind::Structural,
               "integer arange 0..7 step 1 along axis 0", "rows");
  for (const char* n : {"arange_int_16", "arange_int_1x16", "arange_int_rows_8x4"})
    expect_perturbations_refused(fixture(n), n);
  expect_refused(f32({4}, {0, 1, 2, 4}), "near-arange with one wrong value");
  // Beyond 2^24 an integer-valued progression is not structural (not every integer there is a
  // float32); it is still an exactly recomputed float arange.
  expect_proof(f32({3}, {16777216.0f, 16777218.0f, 16777220.0f}), LiteralProof::Kind::Proven,
               "float arange 16777216 step 2", "beyond 2^24");
  expect_refused(f32({2, 3}, {0, 1, 2, 0, 1, 3}), "not constant along axis 0");
}

// ---- proven ----

TEST(LiteralProofProven, FloatAranges) {
  expect_proof(fixture("arange_float_quarter"), LiteralProof::Kind::Proven, "float arange 0.5 step 0.25",
               "arange(0.5, 8, 0.25)");
  expect_proof(fixture("arange_float_tenth"), LiteralProof::Kind::Proven, "float arange 0 step 0.1",
               "arange(0, 3, 0.1)");
  expect_proof(fixture("arange_float_neg"), LiteralProof::Kind::Proven, "float arange 1 step -0.07",
               "arange(1, -1, -0.07)");
  for (const char* n : {"arange_float_quarter", "arange_float_tenth", "arange_float_neg"})
    expect_perturbations_refused(fixture(n), n);
}

struct RopeCase {
  std::string file, rule;
};

TEST(LiteralProofProven, RotaryTables) {
  const RopeCase cases[] = {
      {"rope_cos_b10000_d16_p0_s16_f1",
       "rotary cos table, Llama layout cat(freqs, freqs): base 10000, dim 16, positions 0..15, linear scaling 1"},
      {"rope_sin_b10000_d16_p0_s16_f1",
       "rotary sin table, Llama layout cat(freqs, freqs): base 10000, dim 16, positions 0..15"},
      {"rope_cos_b500000_d32_p0_s32_f1", "base 500000, dim 32, positions 0..31"},
      {"rope_sin_b500000_d32_p0_s32_f1", "base 500000, dim 32, positions 0..31"},
      {"rope_cos_b1000000_d128_p0_s64_f1", "base 1000000, dim 128, positions 0..63"},
      {"rope_sin_b1000000_d128_p0_s64_f1", "base 1000000, dim 128, positions 0..63"},
      {"rope_cos_b10000_d80_p0_s24_f1", "base 10000, dim 80, positions 0..23"},
      {"rope_sin_b10000_d80_p0_s24_f1", "base 10000, dim 80, positions 0..23"},
      {"rope_cos_b10000_d64_p0_s48_f2", "linear scaling 2 (inv_freq / factor)"},
      {"rope_sin_b10000_d64_p0_s48_f2", "linear scaling 2 (inv_freq / factor)"},
      {"rope_cos_b10000_d64_p0_s48_f3pos", "linear scaling 3 (positions / factor)"},
      {"rope_sin_b10000_d64_p0_s48_f3pos", "linear scaling 3 (positions / factor)"},
      {"rope_cos_b10000_d16_p5_s16_f1", "positions 5..20"},
      {"rope_sin_b10000_d16_p5_s16_f1", "positions 5..20"},
      {"rope_cos_b12345_d16_p0_s16_f1", "base 12345, dim 16"},
      {"rope_sin_b12345_d16_p0_s16_f1", "base 12345, dim 16"},
      {"rope_cos_b10000_d16_sd", "base 10000, dim 16, positions 0..15"},
      {"rope_cos_b10000_d16_11sd", "base 10000, dim 16, positions 0..15"},
      {"rope_freqs_b10000_d16", "rotary angle half table [S, dim/2]: base 10000, dim 16"},
      {"rope_half_cos_b10000_d16", "rotary cos half table [S, dim/2]: base 10000, dim 16"},
      {"rope_half_sin_b10000_d16", "rotary sin half table [S, dim/2]: base 10000, dim 16"},
      {"rope_gptj_sin_b10000_d16", "GPT-J layout"},
      {"rope_cos_b10000_d16_fp16", "base 10000, dim 16, positions 0..15"},
      {"rope_cos_b10000_d64_s2048", "base 10000, dim 64, positions 0..2047"},
  };
  for (const auto& c : cases) {
    Tensor t = fixture(c.file);
    expect_proof(t, LiteralProof::Kind::Proven, c.rule, c.file);
    expect_perturbations_refused(t, c.file);
  }
}

TEST(LiteralProofProven, RotaryInvFreq) {
  const RopeCase cases[] = {
      {"rope_inv_freq_b10000_d16_p0_s16_f1", "rotary inv_freq: base 10000, dim 16, linear scaling 1"},
      {"rope_inv_freq_b500000_d32_p0_s32_f1", "base 500000, dim 32"},
      {"rope_inv_freq_b1000000_d128_p0_s64_f1", "base 1000000, dim 128"},
      {"rope_inv_freq_b10000_d80_p0_s24_f1", "base 10000, dim 80"},
      {"rope_inv_freq_b10000_d64_p0_s48_f2", "base 10000, dim 64, linear scaling 2"},
      {"rope_inv_freq_b12345_d16_p0_s16_f1", "base 12345, dim 16"},
      {"rope_inv_freq_b10000_d16_expanded", "base 10000, dim 16"},
  };
  for (const auto& c : cases) {
    Tensor t = fixture(c.file);
    expect_proof(t, LiteralProof::Kind::Proven, c.rule, c.file);
    expect_perturbations_refused(t, c.file);
  }
}

TEST(LiteralProofProven, Sinusoidal) {
  const RopeCase cases[] = {
      {"sinusoidal_tutorial_s50_d32",
       "sinusoidal position encoding (interleaved pe[p, 2i] = sin, pe[p, 2i+1] = cos): base 10000, dim 32, positions "
       "0..49"},
      {"sinusoidal_tutorial_s16_d64", "interleaved"},
      {"sinusoidal_fairseq_s20_d16", "concatenated [sin | cos]"},
      {"sinusoidal_numpy_s30_d16", "interleaved"},
  };
  for (const auto& c : cases) {
    Tensor t = fixture(c.file);
    expect_proof(t, LiteralProof::Kind::Proven, c.rule, c.file);
    expect_perturbations_refused(t, c.file);
  }
}

// ---- weights are never literals ----

TEST(LiteralProofNegative, Weights) {
  for (const char* n : {"neg_randn_16x16", "neg_embedding_rows_16x16", "neg_embedding_row"})
    expect_refused(fixture(n), n);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0, 0.02f);
  std::vector<float> w(4096);
  for (auto& x : w) x = nd(rng);
  expect_refused(f32({64, 64}, w), "normal(0, 0.02) weight");
  std::vector<float> u(128);
  for (auto& x : u) x = std::fabs(nd(rng)) * 10;
  expect_refused(f32({1, 128}, u), "positive weight vector");
  // A rotary table of the right shape whose rows are shuffled (positions out of order).
  Tensor t = fixture("rope_cos_b10000_d16_sd").clone();
  float* p = t.mutable_data<float>();
  std::swap_ranges(p + 3 * 16, p + 4 * 16, p + 9 * 16);
  expect_refused(t, "rotary table with two rows swapped");
  expect_refused(cast_tensor(fixture("neg_randn_16x16"), DType::Float16), "float16 weight");
  expect_refused(Tensor::copy_of(DType::Int64, {2}, std::vector<int64_t>{0, 1}.data()), "integer tensor");
}

TEST(LiteralProofDescribe, Lines) {
  auto s = prove_literal(fixture("mask_causal_neginf_1x1x16x16"));
  ASSERT_TRUE(s);
  EXPECT_EQ(describe(*s).rfind("structural: causal mask", 0), 0u) << describe(*s);
  auto p = prove_literal(fixture("rope_cos_b10000_d16_p0_s16_f1"));
  ASSERT_TRUE(p);
  EXPECT_NE(describe(*p).find("proven: rotary cos table"), std::string::npos) << describe(*p);
  EXPECT_NE(describe(*p).find("recipe: float32"), std::string::npos) << describe(*p);
}

}  // namespace
}  // namespace reforge::build
