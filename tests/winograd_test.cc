// cpu::winograd_conv (Winograd F(4x4, 3x3) and F(2x2, 3x3) on 8-channel blocks) against a
// float64 direct convolution computed here by plain loops, every case in both tile sizes:
//   - shapes with odd sizes, partial edge tiles, channels that are not multiples of 16, zero,
//     one-sided and asymmetric padding, several batches, several blocks of tiles (small and
//     large transformed weights), bias / residual / ReLU, the residual updated in place;
//   - every element within a bound relative to sum |x| |w| (Winograd's transforms round more than
//     a direct sum, never by more than this), and 1 and 2 threads bit for bit equal;
//   - winograd_supported() refuses what the kernel cannot run.
#include "backends/cpu/winograd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/simd.h"
#include "support/make_tensor.h"

using namespace reforge;

namespace {

using test_support::random_floats;

struct Case {
  int64_t N, C, K, H, W;
  std::vector<int64_t> pb, pe;
  bool bias, sum, relu;
};

int64_t blocked_at(int64_t n, int64_t c, int64_t y, int64_t x, int64_t C, int64_t H, int64_t W) {
  return (((n * (C / 8) + c / 8) * H + y) * W + x) * 8 + c % 8;
}

// [N, C, H, W] -> [N, C/8, H, W, 8] by explicit indexing.
std::vector<float> to_blocked(const Tensor& t) {
  const Shape& s = t.shape();
  std::vector<float> o(static_cast<size_t>(t.numel()));
  const float* p = t.data<float>();
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t y = 0; y < s[2]; ++y)
        for (int64_t x = 0; x < s[3]; ++x) o[static_cast<size_t>(blocked_at(n, c, y, x, s[1], s[2], s[3]))] = *p++;
  return o;
}

cpu::ConvDims dims_of(const Case& k) {
  cpu::ConvDims d;
  const int64_t OH = k.H + k.pb[0] + k.pe[0] - 2, OW = k.W + k.pb[1] + k.pe[1] - 2;
  d.src = {k.N, k.C, k.H, k.W}, d.weights = {k.K, k.C, 3, 3}, d.dst = {k.N, k.K, OH, OW};
  d.strides = {1, 1}, d.dilations = {1, 1}, d.pad_begin = k.pb, d.pad_end = k.pe;
  d.has_bias = k.bias;
  d.src_layout = d.dst_layout = cpu::ActLayout::Blocked;
  d.sum_layout = k.sum ? cpu::ActLayout::Blocked : cpu::ActLayout::Nchw;
  return d;
}

bool have_avx2() { return simd_level() >= SimdLevel::Avx2; }

TEST(Winograd, MatchesFloat64DirectConvolution) {
  if (!have_avx2()) GTEST_SKIP() << "the Winograd kernel needs AVX2 + FMA";
  const std::vector<Case> cases = {
      {1, 16, 16, 8, 8, {1, 1}, {1, 1}, true, false, false},
      {2, 24, 40, 7, 9, {1, 1}, {1, 1}, true, true, true},     // K not a multiple of 16, partial tiles
      {1, 8, 8, 5, 5, {0, 0}, {0, 0}, false, false, true},     // no padding: 3 x 3 output, one tile
      {1, 16, 32, 6, 11, {2, 0}, {0, 1}, true, true, false},   // asymmetric padding
      {3, 32, 32, 40, 40, {1, 1}, {1, 1}, true, true, true},   // 300 tiles: several blocks
      {1, 256, 256, 6, 6, {1, 1}, {1, 1}, true, false, true},  // large U: the other block rule
      {1, 64, 64, 14, 14, {1, 1}, {1, 1}, false, true, true},
  };
  uint32_t seed = 1;
  for (int tile : {4, 2})
    for (const Case& k : cases) {
      SCOPED_TRACE("tile=" + std::to_string(tile) + " N=" + std::to_string(k.N) + " C=" + std::to_string(k.C) +
                   " K=" + std::to_string(k.K) + " H=" + std::to_string(k.H) + " W=" + std::to_string(k.W));
      const cpu::ConvDims d = dims_of(k);
      const int64_t OH = d.dst[2], OW = d.dst[3];
      ASSERT_TRUE(cpu::winograd_supported(d, k.sum));
      const Tensor x = random_floats({k.N, k.C, k.H, k.W}, seed++, -2, 2);
      const Tensor w = random_floats({k.K, k.C, 3, 3}, seed++, -0.5f, 0.5f);
      const Tensor b = random_floats({k.K}, seed++);
      const Tensor z = random_floats({k.N, k.K, OH, OW}, seed++, -3, 3);
      const std::vector<float> xb = to_blocked(x), zb = to_blocked(z);
      const cpu::WinogradWeights u(w.data<float>(), k.K, k.C, tile);
      ASSERT_EQ(u.floats(), (tile + 2) * (tile + 2) * ((k.K + 15) / 16 * 16) * k.C);

      std::vector<float> y1(static_cast<size_t>(k.N * k.K * OH * OW), -7.0f), y2 = zb;
      cpu::ConvPostOps post;
      post.relu = k.relu;
      post.sum = k.sum ? zb.data() : nullptr;
      const float* bias = k.bias ? b.data<float>() : nullptr;
      cpu::winograd_conv(d, xb.data(), u, bias, y1.data(), post, 1);
      if (k.sum) post.sum = y2.data();  // the residual's own buffer: written in place
      cpu::winograd_conv(d, xb.data(), u, bias, y2.data(), post, 2);
      ASSERT_EQ(y1, y2) << "1 and 2 threads must give the same bits";

      const float* xp = x.data<float>();
      const float* wp = w.data<float>();
      double worst = 0;
      for (int64_t n = 0; n < k.N; ++n)
        for (int64_t m = 0; m < k.K; ++m)
          for (int64_t oy = 0; oy < OH; ++oy)
            for (int64_t ox = 0; ox < OW; ++ox) {
              double acc = 0, mag = 0;
              for (int64_t c = 0; c < k.C; ++c)
                for (int64_t i = 0; i < 3; ++i)
                  for (int64_t j = 0; j < 3; ++j) {
                    const int64_t iy = oy - k.pb[0] + i, ix = ox - k.pb[1] + j;
                    if (iy < 0 || iy >= k.H || ix < 0 || ix >= k.W) continue;
                    const double t = static_cast<double>(xp[((n * k.C + c) * k.H + iy) * k.W + ix]) *
                                     wp[((m * k.C + c) * 3 + i) * 3 + j];
                    acc += t;
                    mag += std::fabs(t);
                  }
              if (k.bias) acc += b.data<float>()[m], mag += std::fabs(b.data<float>()[m]);
              if (k.sum) {
                const double zv = z.data<float>()[((n * k.K + m) * OH + oy) * OW + ox];
                acc += zv, mag += std::fabs(zv);
              }
              if (k.relu) acc = std::max(acc, 0.0);
              const double got = y1[static_cast<size_t>(blocked_at(n, m, oy, ox, k.K, OH, OW))];
              const double err = std::fabs(got - acc) / (mag + 1e-30);
              worst = std::max(worst, err);
              ASSERT_LE(std::fabs(got - acc), 2e-5 * mag + 1e-6)
                  << "n=" << n << " k=" << m << " y=" << oy << " x=" << ox << " got " << got << " want " << acc;
            }
      EXPECT_GT(worst, 0.0) << "bit-exact to float64 everywhere: the comparison is not looking";
    }
}

TEST(Winograd, TileSizeFollowsTheTransformedWeightsSize) {
  if (!have_avx2() || cpu::activation_block() != 8)
    GTEST_SKIP() << "the conv chain does not run in 8-channel blocks here";
  auto layer = [](int64_t C, int64_t HW, int64_t N = 1) {
    return dims_of(Case{N, C, C, HW, HW, {1, 1}, {1, 1}, true, false, true});
  };
  EXPECT_EQ(cpu::winograd_tile(layer(64, 56), false), 4);   // U 0.6 MB
  EXPECT_EQ(cpu::winograd_tile(layer(256, 14), false), 4);  // U 9.4 MB
  EXPECT_EQ(cpu::winograd_tile(layer(512, 7), false), 2);   // F(4x4) U would be 38 MB; F(2x2) 17 MB
  EXPECT_EQ(cpu::winograd_tile(layer(1024, 7), false), 0);  // even F(2x2) U would be 67 MB
  EXPECT_EQ(cpu::winograd_tile(layer(256, 4), false), 0);   // one 4 x 4 tile
  EXPECT_EQ(cpu::winograd_tile(layer(8, 32), false), 0);    // too few channels
}

TEST(Winograd, SupportedOnlyForWhatTheKernelRuns) {
  if (!have_avx2()) GTEST_SKIP() << "the Winograd kernel needs AVX2 + FMA";
  const Case base{1, 16, 16, 8, 8, {1, 1}, {1, 1}, false, false, false};
  EXPECT_TRUE(cpu::winograd_supported(dims_of(base), false));
  auto refused = [&](auto&& edit, bool sum = false) {
    cpu::ConvDims d = dims_of(base);
    edit(d);
    return !cpu::winograd_supported(d, sum);
  };
  EXPECT_TRUE(refused([](cpu::ConvDims& d) { d.strides = {2, 2}, d.dst = {1, 16, 4, 4}; }));
  EXPECT_TRUE(refused([](cpu::ConvDims& d) { d.dilations = {2, 2}, d.dst = {1, 16, 6, 6}; }));
  EXPECT_TRUE(refused([](cpu::ConvDims& d) { d.group = 2, d.weights = {16, 8, 3, 3}; }));
  EXPECT_TRUE(refused([](cpu::ConvDims& d) { d.weights = {16, 16, 5, 5}, d.dst = {1, 16, 6, 6}; }));
  EXPECT_TRUE(refused([](cpu::ConvDims& d) { d.src = {1, 12, 8, 8}, d.weights = {16, 12, 3, 3}; }));
  EXPECT_TRUE(refused([](cpu::ConvDims& d) { d.weights = {12, 16, 3, 3}, d.dst = {1, 12, 8, 8}; }));
  EXPECT_TRUE(refused([](cpu::ConvDims& d) { d.src_layout = cpu::ActLayout::Nchw; }));
  EXPECT_TRUE(refused([](cpu::ConvDims& d) { d.dst_layout = cpu::ActLayout::Nhwc; }));
  EXPECT_TRUE(refused([](cpu::ConvDims&) {}, true));                      // residual in NCHW
  EXPECT_TRUE(refused([](cpu::ConvDims& d) { d.dst = {1, 16, 7, 8}; }));  // output not what the pads give
  EXPECT_TRUE(refused([](cpu::ConvDims& d) { d.src = {1, 16, 8, 8, 1}; }));
  EXPECT_TRUE(refused([](cpu::ConvDims& d) { d.pad_end = {1}; }));
  EXPECT_THROW(cpu::WinogradWeights(std::vector<float>(16 * 16 * 9).data(), 16, 16, 3), Error);
  {
    SimdOverride generic(SimdLevel::Generic);
    EXPECT_FALSE(cpu::winograd_supported(dims_of(base), false)) << "no AVX2: oneDNN's kernels run";
  }
}

}  // namespace
