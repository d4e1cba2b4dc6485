// cpu::matmul_quant (backends/cpu/matmul_quant.h) against a float64 reference computed here from the layouts'
// rule (ops/reforge/quant_weight.h): int8 Q [N, K] times its column's scale; int4 Q [N, n_blocks, block_size / 2],
// element k of a block in byte k / 2, low nibble first, (q - zp) * scale with the zero points two per byte
// (8 where absent). Every byte of the int4 weights is random, the padding too (the nibble after an odd K,
// the bytes past K in the last block, an odd row's last zero-point nibble): the rule gives them no meaning,
// so no output may depend on them. At every SIMD level this CPU has, on odd sizes (K not a multiple of a
// block nor of 32, short last blocks, N not a multiple of the columns per pass, 1 to 6 rows of X, strided
// X and Y), with 1 and 3 threads.
//
// The error bound: the kernels sum float32 products in partial sums of at most a block (int4, whose zero
// point is factored out of each block: terms |x| |s| q and |x| |s| zp) or K / 64 (int8) terms, combined over
// the blocks and the vector lanes; each sum adds at most (its terms - 1) roundings of 2^-24 of the magnitude
// sum_k |x| |s| (q + zp), so (block_size + n_blocks + 64) * 2^-24 of it bounds the error (K + 64 for int8).
// One misread weight moves an output by |x| |s| times a whole step, far above that.
//
// Also asserted bit for bit: outputs do not depend on the thread count, on which columns share a pass
// (the product of the columns [1, N) alone), nor on which rows share one (each row alone).
#include "backends/cpu/matmul_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/simd.h"
#include "support/simd_levels.h"

using namespace reforge;

namespace {

struct Case {
  int bits;
  int64_t block, K, N;
  bool zp, bias;
};

// A quantized weight with its own storage, every byte random.
struct Weight {
  std::vector<uint8_t> q, zp;
  std::vector<float> scales;
  ops::quant::QuantMatrix m;

  Weight(const Case& c, uint32_t seed) {
    std::mt19937 rng(seed);
    m.shape = ops::quant::quant_shape(c.bits, c.bits == 8 ? 0 : c.block, c.K, c.N, "matmul_quant_test");
    const auto& s = m.shape;
    q.resize(static_cast<size_t>(c.bits == 8 ? c.N * c.K : c.N * s.n_blocks * s.blob));
    for (auto& b : q) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> uni(-0.2f, 0.2f);
    scales.resize(static_cast<size_t>(s.num_scales()));
    for (auto& f : scales) f = uni(rng);
    if (c.bits == 4 && c.zp) {
      zp.resize(static_cast<size_t>(s.num_zero_points()));
      for (auto& b : zp) b = static_cast<uint8_t>(rng());
      m.zero_points = zp.data();
    }
    m.q = q.data();
    m.scales = scales.data();
  }

  // The columns [n0, N) as a weight of their own (the same bytes).
  ops::quant::QuantMatrix columns_from(int64_t n0) const {
    ops::quant::QuantMatrix w = m;
    const auto& s = m.shape;
    w.shape.N = s.N - n0;
    w.q = q.data() + (s.bits == 8 ? n0 * s.K : n0 * s.n_blocks * s.blob);
    w.scales = scales.data() + n0 * (s.bits == 8 ? 1 : s.n_blocks);
    if (w.zero_points) w.zero_points = zp.data() + n0 * s.zp_row;
    return w;
  }

  // The integer value of weight (k, n) and the offset it is taken from (0 for int8), by the layout's rule.
  void element(int64_t n, int64_t k, int* value, int* offset, float* scale) const {
    const auto& s = m.shape;
    if (s.bits == 8) {
      *value = static_cast<int8_t>(q[static_cast<size_t>(n * s.K + k)]);
      *offset = 0;
      *scale = scales[static_cast<size_t>(n)];
      return;
    }
    const int64_t b = k / s.block_size, j = k % s.block_size;
    const uint8_t byte = q[static_cast<size_t>((n * s.n_blocks + b) * s.blob + j / 2)];
    *value = (j & 1) ? byte >> 4 : byte & 0x0f;
    if (zp.empty()) {
      *offset = 8;
    } else {
      const uint8_t z = zp[static_cast<size_t>(n * s.zp_row + b / 2)];
      *offset = (b & 1) ? z >> 4 : z & 0x0f;
    }
    *scale = scales[static_cast<size_t>(n * s.n_blocks + b)];
  }
};

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& f : v) f = uni(rng);
  return v;
}

// Y = X Wd (+ b), rows `ldx` and `ldy` apart, at the current SIMD level.
std::vector<float> product(const ops::quant::QuantMatrix& w, int64_t M, const float* x, int64_t ldx, const float* bias,
                           int64_t ldy, int threads) {
  std::vector<float> y(static_cast<size_t>(M * ldy), -1.0f);
  cpu::matmul_quant(w, M, x, ldx, bias, y.data(), ldy, threads);
  return y;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void check(const Case& c, int64_t M) {
  SCOPED_TRACE("bits " + std::to_string(c.bits) + " block " + std::to_string(c.block) + " K " + std::to_string(c.K) +
               " N " + std::to_string(c.N) + " M " + std::to_string(M) + (c.zp ? " zero points" : " zp 8") +
               (c.bias ? " bias" : ""));
  const Weight w(c, static_cast<uint32_t>(c.K * 131 + c.N * 7 + c.block));
  const auto& s = w.m.shape;
  const int64_t ldx = c.K + 3, ldy = c.N + 2;
  const std::vector<float> x = random_floats(M * ldx, static_cast<uint32_t>(M * 17 + c.K));
  const std::vector<float> bias = random_floats(c.N, 5);
  const float* b = c.bias ? bias.data() : nullptr;
  std::vector<double> ref(static_cast<size_t>(M * c.N)), tol(static_cast<size_t>(M * c.N));
  const double eps = std::ldexp(1.0, -24);
  const double depth = c.bits == 8 ? double(c.K + 64) : double(s.block_size + s.n_blocks + 64);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      double sum = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        int value, offset;
        float scale;
        w.element(n, k, &value, &offset, &scale);
        const float wd = static_cast<float>(value - offset) * scale;  // the dequantized weight, a float32 product
        const double xk = x[static_cast<size_t>(m * ldx + k)];
        sum += xk * wd;
        mag += std::fabs(xk) * std::fabs(double(scale)) * (std::abs(value) + offset);
      }
      ref[static_cast<size_t>(m * c.N + n)] = sum + (b ? b[n] : 0.0);
      tol[static_cast<size_t>(m * c.N + n)] = depth * eps * mag + (b ? eps * std::fabs(sum + b[n]) : 0.0);
    }
  for (SimdLevel level : test_support::simd_levels()) {
    SimdOverride cap(level);
    SCOPED_TRACE(test_support::simd_level_name(level));
    const std::vector<float> y = product(w.m, M, x.data(), ldx, b, ldy, 1);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < c.N; ++n) {
        const size_t i = static_cast<size_t>(m * c.N + n);
        ASSERT_NEAR(y[static_cast<size_t>(m * ldy + n)], ref[i], tol[i]) << "row " << m << " column " << n;
      }
      for (int64_t n = c.N; n < ldy; ++n)
        ASSERT_EQ(y[static_cast<size_t>(m * ldy + n)], -1.0f) << "row " << m << ": written past N";
    }
    const std::vector<float> y3 = product(w.m, M, x.data(), ldx, b, ldy, 3);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_TRUE(same_bits(y[i], y3[i])) << "3 threads, element " << i;
    if (c.N > 1) {  // columns [1, N) alone: every pass holds other columns than in the whole product
      const std::vector<float> yc = product(w.columns_from(1), M, x.data(), ldx, b ? b + 1 : nullptr, ldy, 1);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 1; n < c.N; ++n)
          ASSERT_TRUE(same_bits(yc[static_cast<size_t>(m * ldy + n - 1)], y[static_cast<size_t>(m * ldy + n)]))
              << "columns from 1: row " << m << " column " << n;
    }
    if (M > 1)
      for (int64_t m = 0; m < M; ++m) {
        const std::vector<float> yr = product(w.m, 1, x.data() + m * ldx, ldx, b, ldy, 1);
        for (int64_t n = 0; n < c.N; ++n)
          ASSERT_TRUE(same_bits(yr[static_cast<size_t>(n)], y[static_cast<size_t>(m * ldy + n)]))
              << "row " << m << " alone, column " << n;
      }
  }
}

TEST(CpuMatmulQuant, Int4MatchesTheLayoutsRuleAtEveryLevel) {
  const std::vector<Case> cases = {
      {4, 32, 77, 13, true, true},     // K odd: a short last block, a padding nibble
      {4, 32, 33, 5, false, false},    // zero points absent (8)
      {4, 32, 31, 4, true, false},     // one short block
      {4, 32, 600, 37, true, true},    // 19 blocks: an odd zero-point row, the last 16-block group short
      {4, 32, 1024, 67, true, false},  // N not a multiple of the columns per pass
      {4, 16, 16, 1, true, true},      // one block of 16
      {4, 16, 300, 7, true, false},    // blocks of 16, an odd count (the last alone)
      {4, 16, 1100, 9, false, true},   // 69 blocks of 16
      {4, 64, 200, 9, true, true},    {4, 128, 1000, 3, true, false}, {4, 256, 700, 6, false, true},
  };
  for (const Case& c : cases)
    for (int64_t M : {1, 2, 3, 4, 5, 6}) check(c, M);
}

TEST(CpuMatmulQuant, Int8MatchesTheLayoutsRuleAtEveryLevel) {
  const std::vector<Case> cases = {{8, 0, 77, 13, false, true},
                                   {8, 0, 64, 33, false, false},
                                   {8, 0, 300, 1, false, true},
                                   {8, 0, 5, 3, false, false},
                                   {8, 0, 1100, 9, false, true}};
  for (const Case& c : cases)
    for (int64_t M : {1, 2, 3, 4, 5, 6}) check(c, M);
}

}  // namespace
