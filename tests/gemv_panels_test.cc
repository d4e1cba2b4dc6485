// The few-rows kernel on packed panels (cpu::gemv_panels) and sgemm_panels' dispatch to it:
// against a float64 reference from the plain W, on odd sizes (a zero-padded last panel, K not a
// multiple of the 256-k summation block, strided X and Y), at every SIMD level this CPU has.
// Results must not depend on the thread count, nor on how many rows share the product (rows
// below and above gemv_panels_max_rows() sum in the same order): both are asserted bit for bit.
#include "backends/cpu/gemv_panels.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/sgemm_panels.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/simd.h"
#include "support/simd_levels.h"

using namespace reforge;

namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& f : v) f = uni(rng);
  return v;
}

struct Panels {
  float* data = nullptr;
  Panels(const std::vector<float>& w, int64_t K, int64_t N) {
    const size_t bytes = (static_cast<size_t>(cpu::panel_floats(K, N)) * sizeof(float) + 63) / 64 * 64;
    data = static_cast<float*>(std::aligned_alloc(64, std::max<size_t>(bytes, 64)));
    cpu::pack_panels(w.data(), K, N, false, data);
  }
  ~Panels() { std::free(data); }
  Panels(const Panels&) = delete;
  Panels& operator=(const Panels&) = delete;
};

// Checks y (row stride ldy) against X (row stride ldx) x W + bias in float64: each element within
// 1e-5 of the sum of |terms| (float32 rounding of a K-term sum stays far below that).
void expect_matches_reference(int64_t M, int64_t N, int64_t K, const std::vector<float>& x, int64_t ldx,
                              const std::vector<float>& w, const float* bias, const std::vector<float>& y, int64_t ldy,
                              const std::string& what) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = bias ? bias[n] : 0.0, mag = bias ? std::fabs(bias[n]) : 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double t = static_cast<double>(x[m * ldx + k]) * w[k * N + n];
        ref += t;
        mag += std::fabs(t);
      }
      const double got = y[m * ldy + n];
      ASSERT_LE(std::fabs(got - ref), 1e-5 * mag + 1e-30) << what << " at [" << m << ", " << n << "]";
    }
}

}  // namespace

TEST(GemvPanels, OddSizesThreadsAndSimdLevels) {
  for (SimdLevel level : test_support::simd_levels()) {
    SimdOverride cap(level);
    for (int64_t M : {1, 2, 3, 5, 7, 9})
      for (int64_t N : {1, 15, 16, 17, 40, 100})
        for (int64_t K : {1, 3, 64, 300})
          for (bool with_bias : {false, true}) {
            const int64_t ldx = K + 3, ldy = N + 5;
            const std::vector<float> x = random_floats(M * ldx, 1), w = random_floats(K * N, 2),
                                     b = random_floats(N, 3);
            Panels panels(w, K, N);
            const std::string what = std::string(test_support::simd_level_name(level)) + " M=" + std::to_string(M) +
                                     " N=" + std::to_string(N) + " K=" + std::to_string(K) + (with_bias ? " bias" : "");
            std::vector<float> y1;
            for (int threads : {1, 2}) {
              // Sentinels past each row's N columns: only the valid columns may be written.
              std::vector<float> y(static_cast<size_t>(M * ldy), -7.0f);
              cpu::gemv_panels(M, N, K, x.data(), ldx, panels.data, with_bias ? b.data() : nullptr, y.data(), ldy,
                               threads);
              expect_matches_reference(M, N, K, x, ldx, w, with_bias ? b.data() : nullptr, y, ldy, what);
              for (int64_t m = 0; m < M; ++m)
                for (int64_t n = N; n < ldy; ++n) ASSERT_EQ(y[m * ldy + n], -7.0f) << what << ": wrote past N";
              if (threads == 1)
                y1 = y;
              else
                ASSERT_EQ(std::memcmp(y1.data(), y.data(), y.size() * sizeof(float)), 0)
                    << what << ": 1 and 2 threads differ";
            }
          }
  }
}

// Big enough (M x N x K >= 256K multiply-adds) that two threads really split the panels.
TEST(GemvPanels, TwoThreadsSplitPanelsBitIdentical) {
  const int64_t M = 3, N = 1000, K = 700;
  const std::vector<float> x = random_floats(M * K, 4), w = random_floats(K * N, 5), b = random_floats(N, 6);
  Panels panels(w, K, N);
  std::vector<float> y1(static_cast<size_t>(M * N)), y2(y1.size());
  cpu::gemv_panels(M, N, K, x.data(), K, panels.data, b.data(), y1.data(), N, 1);
  cpu::gemv_panels(M, N, K, x.data(), K, panels.data, b.data(), y2.data(), N, 2);
  expect_matches_reference(M, N, K, x, K, w, b.data(), y1, N, "M=3 N=1000 K=700");
  ASSERT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0);
}

TEST(GemvPanels, KZeroGivesBias) {
  const std::vector<float> b = random_floats(17, 7);
  std::vector<float> y(2 * 17, 5.0f);
  cpu::gemv_panels(2, 17, 0, nullptr, 0, nullptr, b.data(), y.data(), 17, 1);
  for (int64_t i = 0; i < 34; ++i) EXPECT_EQ(y[i], b[i % 17]);
}

// sgemm_panels on row counts either side of gemv_panels_max_rows() (few rows go to gemv_panels,
// more to the 6 x 16 tile) against the reference; and each row of the 40-row product equals,
// bit for bit, the same row computed alone, so batching a token does not change its outputs.
TEST(GemvPanels, SgemmPanelsDispatchAndRowIndependence) {
  ASSERT_GE(cpu::gemv_panels_max_rows(), 1);
  for (SimdLevel level : test_support::simd_levels()) {
    SimdOverride cap(level);
    const int64_t N = 100, K = 600, ldx = K + 1, ldy = N + 2;  // K spans three summation blocks
    const std::vector<float> x = random_floats(40 * ldx, 8), w = random_floats(K * N, 9), b = random_floats(N, 10);
    Panels panels(w, K, N);
    std::vector<float> alone(static_cast<size_t>(40 * ldy));
    for (int64_t m = 0; m < 40; ++m)
      cpu::sgemm_panels(1, N, K, x.data() + m * ldx, ldx, panels.data, b.data(), alone.data() + m * ldy, ldy, 1);
    for (int64_t M : {1, 6, 7, 13, 40})
      for (int threads : {1, 2}) {
        const std::string what = std::string(test_support::simd_level_name(level)) +
                                 " sgemm_panels M=" + std::to_string(M) + " threads=" + std::to_string(threads);
        std::vector<float> y(static_cast<size_t>(M * ldy));
        cpu::sgemm_panels(M, N, K, x.data(), ldx, panels.data, b.data(), y.data(), ldy, threads);
        expect_matches_reference(M, N, K, x, ldx, w, b.data(), y, ldy, what);
        for (int64_t m = 0; m < M; ++m)
          ASSERT_EQ(std::memcmp(y.data() + m * ldy, alone.data() + m * ldy, N * sizeof(float)), 0)
              << what << ": row " << m << " differs from the same row alone";
      }
  }
}

// With enough panels (N / 16 >= 8) two or more threads split the panels and each multiplies every
// row (packing all of X itself): several row blocks (400 rows: three), 2 and 3 threads, float32
// and bfloat16 panels, every SIMD level. Each result equals the 1-thread one bit for bit (and
// that one the float64 reference).
TEST(GemvPanels, SgemmPanelsThreadsSplitThePanelsOfEveryRow) {
  const int64_t N = 300, K = 600, ldx = K + 1, ldy = N + 2;
  const std::vector<float> w = random_floats(K * N, 14), b = random_floats(N, 15);
  std::vector<uint16_t> w16(static_cast<size_t>(K * N));
  std::vector<float> widened(w16.size());
  for (size_t i = 0; i < w16.size(); ++i) {
    w16[i] = bfloat16(w[i]).bits;
    widened[i] = bfloat16::to_float(w16[i]);
  }
  Panels p32(w, K, N), p32w(widened, K, N);
  auto* p16 =
      static_cast<uint16_t*>(std::aligned_alloc(64, (static_cast<size_t>(cpu::panel_floats(K, N)) * 2 + 63) / 64 * 64));
  cpu::pack_panels16(w16.data(), K, N, false, p16);
  for (SimdLevel level : test_support::simd_levels()) {
    SimdOverride cap(level);
    for (int64_t M : {9, 40, 200, 400}) {
      const std::vector<float> x = random_floats(M * ldx, 16);
      const std::string what = std::string(test_support::simd_level_name(level)) + " M=" + std::to_string(M);
      std::vector<float> one(static_cast<size_t>(M * ldy), -7.0f), one16(one.size(), -7.0f);
      cpu::sgemm_panels(M, N, K, x.data(), ldx, p32.data, b.data(), one.data(), ldy, 1);
      cpu::sgemm_panels(M, N, K, x.data(), ldx, p32w.data, b.data(), one16.data(), ldy, 1);
      expect_matches_reference(M, N, K, x, ldx, w, b.data(), one, ldy, what);
      for (int threads : {2, 3}) {
        std::vector<float> y(one.size(), -7.0f), y16(one.size(), -7.0f);
        cpu::sgemm_panels(M, N, K, x.data(), ldx, p32.data, b.data(), y.data(), ldy, threads);
        cpu::sgemm_panels(M, N, K, x.data(), ldx, p16, DType::BFloat16, b.data(), y16.data(), ldy, threads);
        ASSERT_EQ(std::memcmp(y.data(), one.data(), y.size() * sizeof(float)), 0) << what << " threads=" << threads;
        ASSERT_EQ(std::memcmp(y16.data(), one16.data(), y16.size() * sizeof(float)), 0)
            << what << " threads=" << threads << ": bfloat16 panels differ from the float32 panels of the widened W";
      }
    }
  }
  std::free(p16);
}

// pack_panels is a copy: every packed float equals its W element bit for bit and the padding of
// the last panel is +0.0f, for W as [K, N] and as its transpose, on small matrices (ordinary
// stores, one thread) and big ones (threads in contiguous panel ranges, rows in blocks,
// non-temporal stores), with K not a multiple of the row block, at 1 and 2 OpenMP threads, and
// into a destination that is only 4-byte aligned (ordinary stores). Values include -0.0f and a
// NaN payload so a conversion anywhere would show.
TEST(GemvPanels, PackPanelsIsABitExactCopy) {
  struct Case {
    int64_t K, N;
  };
  for (Case c : {Case{5, 3}, Case{33, 17}, Case{100, 100}, Case{1000, 300}, Case{531, 1037}})
    for (bool transposed : {false, true})
      for (int threads : {1, 2})
        for (size_t misalign : {size_t{0}, size_t{1}}) {
          const int64_t K = c.K, N = c.N;
          std::vector<float> w = random_floats(K * N, static_cast<uint32_t>(K * 7 + N));
          w[0] = -0.0f;
          uint32_t nan_bits = 0x7fc01234u;
          std::memcpy(&w[w.size() / 2], &nan_bits, 4);
          const size_t floats = static_cast<size_t>(cpu::panel_floats(K, N));
          std::vector<float> store(floats + 32, 1.0f);
          float* dst = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(store.data()) + 63) / 64 * 64) + misalign;
          const int saved = omp_get_max_threads();
          omp_set_num_threads(threads);
          cpu::pack_panels(w.data(), K, N, transposed, dst);
          omp_set_num_threads(saved);
          const std::string what = "K=" + std::to_string(K) + " N=" + std::to_string(N) +
                                   (transposed ? " transposed" : "") + " threads=" + std::to_string(threads) +
                                   " misalign=" + std::to_string(misalign);
          const int64_t P = (N + cpu::kPanelWidth - 1) / cpu::kPanelWidth;
          for (int64_t p = 0; p < P; ++p)
            for (int64_t k = 0; k < K; ++k)
              for (int64_t j = 0; j < cpu::kPanelWidth; ++j) {
                const int64_t n = p * cpu::kPanelWidth + j;
                const float want = n < N ? (transposed ? w[n * K + k] : w[k * N + n]) : 0.0f;
                const float got = dst[(p * K + k) * cpu::kPanelWidth + j];
                ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << what << " at k=" << k << " n=" << n;
              }
        }
}

// 16-bit panels (--precision bf16 / fp16 plans): PackPanels of the bfloat16 or float16 bits, and
// products on them that widen W exactly, so each result equals, bit for bit, the float32 panels
// product on the widened weights (also checked against float64), for few rows (gemv_panels, in
// registers) and many (the tile, on a widened k block), at every SIMD level, 1 and 2 threads.
TEST(GemvPanels, SixteenBitPanelsEqualFloat32PanelsOfTheWidenedWeights) {
  for (DType dt : {DType::BFloat16, DType::Float16})
    for (SimdLevel level : test_support::simd_levels()) {
      SimdOverride cap(level);
      for (int64_t N : {7, 16, 50})
        for (int64_t K : {3, 300, 600})
          for (bool transposed : {false, true}) {
            // W16 as the model's Cast leaves it ([K, N], or [N, K] for a Gemm with transB = 1).
            const std::vector<float> w32 = random_floats(K * N, 11);
            std::vector<uint16_t> w16(static_cast<size_t>(K * N));
            std::vector<float> widened(static_cast<size_t>(K * N));  // [K, N]
            for (int64_t k = 0; k < K; ++k)
              for (int64_t n = 0; n < N; ++n) {
                const float f = w32[k * N + n];
                const uint16_t h = dt == DType::BFloat16 ? bfloat16(f).bits : float16::from_float(f);
                w16[transposed ? n * K + k : k * N + n] = h;
                widened[k * N + n] = dt == DType::BFloat16 ? bfloat16::to_float(h) : float16::to_float(h);
              }
            const size_t elems = static_cast<size_t>(cpu::panel_floats(K, N));
            auto* p16 = static_cast<uint16_t*>(std::aligned_alloc(64, (elems * 2 + 63) / 64 * 64));
            cpu::pack_panels16(w16.data(), K, N, transposed, p16);
            for (int64_t k = 0; k < K; ++k)  // layout: panel_at's, zero padding
              for (int64_t n = 0; n < (N + 15) / 16 * 16; ++n) {
                const uint16_t got = p16[(n / 16) * K * 16 + k * 16 + n % 16];
                ASSERT_EQ(got, n < N ? w16[transposed ? n * K + k : k * N + n] : 0) << k << "," << n;
              }
            Panels p32(widened, K, N);
            const std::vector<float> b = random_floats(N, 12);
            for (int64_t M : {1, 2, 5, 8, 9, 13, 40}) {
              const int64_t ldx = K + 1, ldy = N + 3;
              const std::vector<float> x = random_floats(M * ldx, 13);
              const std::string what = std::string(dtype_name(dt)) + " " + test_support::simd_level_name(level) +
                                       " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                                       " K=" + std::to_string(K) + (transposed ? " transposed" : "");
              std::vector<float> want(static_cast<size_t>(M * ldy), -7.0f);
              cpu::sgemm_panels(M, N, K, x.data(), ldx, p32.data, b.data(), want.data(), ldy, 1);
              expect_matches_reference(M, N, K, x, ldx, widened, b.data(), want, ldy, what);
              for (int threads : {1, 2}) {
                std::vector<float> got(want.size(), -7.0f);
                cpu::sgemm_panels(M, N, K, x.data(), ldx, p16, dt, b.data(), got.data(), ldy, threads);
                ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
                    << what << " threads=" << threads << ": differs from the float32 panels of the widened W";
              }
            }
            std::free(p16);
          }
    }
}
