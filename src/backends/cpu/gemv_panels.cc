#include "backends/cpu/gemv_panels.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "backends/cpu/gemv.h"
#include "backends/cpu/sgemm_panels.h"
#include "backends/cpu/widen_avx2.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/half.h"
#include "core/simd.h"
#include "core/thread_pool.h"

namespace reforge::cpu {

namespace {

constexpr int64_t kMaxRows = 6;       // rows whose outputs share the registers (12 accumulators)
constexpr int64_t kGroupPanels = 16;  // panels streamed k block by k block, side by side

// Panels streamed side by side for a group of R rows: enough independent sums (2 x R x Q) to
// hide the FMA latency, at most 12 accumulators.
constexpr int panels_together(int64_t R) { return R == 1 ? 4 : R <= 3 ? 2 : 1; }

#define REFORGE_GEMV_PANELS_AVX2 __attribute__((target("avx2,fma,f16c")))

// Rows [0, R) x Q adjacent panels, one k block: Y (+)= X[:, 0:kc) x panels[:, 0:kc) (+ bias),
// X packed k-major (x[k * R + r]). Every k (every other k for 16-bit W, whose panel rows are
// half a line) also prefetches one line of each of the Q panels' next block (`prefetch`, null:
// none) into L2. `b` is the first panel's block, the next ones `pstride` elements apart; `ncols`
// columns of the last panel are valid (16 but in W's last panel).
template <int R, int Q, typename W>
REFORGE_GEMV_PANELS_AVX2 void block_avx2(int64_t kc, const float* x, const W* b, int64_t pstride, float* y, int64_t ldy,
                                         int64_t ncols, bool accumulate, const float* bias, const W* prefetch) {
  __m256 c[R][Q][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) c[r][q][0] = c[r][q][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m256 b0[Q], b1[Q];
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      b0[q] = avx2::load8(b + q * pstride + k * kPanelWidth);
      b1[q] = avx2::load8(b + q * pstride + k * kPanelWidth + 8);
    }
    if (prefetch && (sizeof(W) == 4 || k % 2 == 0)) {
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) {
        const char* pf = reinterpret_cast<const char*>(prefetch + q * pstride + k * kPanelWidth);
        _mm_prefetch(pf, _MM_HINT_T1);
      }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(x + k * R + r);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) {
        c[r][q][0] = _mm256_fmadd_ps(a, b0[q], c[r][q][0]);
        c[r][q][1] = _mm256_fmadd_ps(a, b1[q], c[r][q][1]);
      }
    }
  }
  // The same operations as sgemm_panels' tile: (y + block) + bias.
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      float* yr = y + r * ldy + q * kPanelWidth;
      const float* bq = bias ? bias + q * kPanelWidth : nullptr;
      if (q < Q - 1 || ncols == kPanelWidth) {
        __m256 v0 = c[r][q][0], v1 = c[r][q][1];
        if (accumulate) {
          v0 = _mm256_add_ps(_mm256_loadu_ps(yr), v0);
          v1 = _mm256_add_ps(_mm256_loadu_ps(yr + 8), v1);
        }
        if (bq) {
          v0 = _mm256_add_ps(v0, _mm256_loadu_ps(bq));
          v1 = _mm256_add_ps(v1, _mm256_loadu_ps(bq + 8));
        }
        _mm256_storeu_ps(yr, v0);
        _mm256_storeu_ps(yr + 8, v1);
      } else {
        alignas(32) float t[kPanelWidth];
        _mm256_store_ps(t, c[r][q][0]);
        _mm256_store_ps(t + 8, c[r][q][1]);
        for (int64_t j = 0; j < ncols; ++j) {
          float v = accumulate ? yr[j] + t[j] : t[j];
          if (bq) v += bq[j];
          yr[j] = v;
        }
      }
    }
}

template <typename W>
using BlockFn = void (*)(int64_t, const float*, const W*, int64_t, float*, int64_t, int64_t, bool, const float*,
                         const W*);

// kBlocks<W>[R][Q]: R rows, Q panels (Q <= panels_together(R); fewer at the end of a thread's run).
template <typename W>
constexpr BlockFn<W> kBlocks[kMaxRows + 1][4] = {
    {nullptr, nullptr, nullptr, nullptr},
    {block_avx2<1, 1, W>, block_avx2<1, 2, W>, block_avx2<1, 3, W>, block_avx2<1, 4, W>},
    {block_avx2<2, 1, W>, block_avx2<2, 2, W>, nullptr, nullptr},
    {block_avx2<3, 1, W>, block_avx2<3, 2, W>, nullptr, nullptr},
    {block_avx2<4, 1, W>, nullptr, nullptr, nullptr},
    {block_avx2<5, 1, W>, nullptr, nullptr, nullptr},
    {block_avx2<6, 1, W>, nullptr, nullptr, nullptr},
};

// The portable route for one panel's k block: 16-bit W widened into a thread buffer first.
template <typename W>
void block_generic(int64_t R, int64_t kc, const float* x, const W* b, float* y, int64_t ldy, int64_t ncols,
                   bool accumulate, const float* bias) {
  if constexpr (std::is_same_v<W, float>) {
    panel_block_generic(R, R, kc, x, b, y, ldy, ncols, accumulate, bias);
  } else {
    thread_local std::vector<float> wide;
    wide.resize(static_cast<size_t>(kc * kPanelWidth));
    widen_to_f32(reinterpret_cast<const uint16_t*>(b), std::is_same_v<W, float16> ? DType::Float16 : DType::BFloat16,
                 kc * kPanelWidth, wide.data());
    panel_block_generic(R, R, kc, x, wide.data(), y, ldy, ncols, accumulate, bias);
  }
}

// Panels [p0, p1) for every row, on the calling thread, kGroupPanels at a time (one row: Q at a
// time, see below): one k block of each panel of the group in turn (Q side by side in
// registers), each serving every group of rows while it is in L1, and prefetching the next one.
// Sixteen interleaved streams plus that prefetch keep more of W in flight than one front-to-back
// stream does (Zen 3, K = 1024, N = 2816, 4 rows from memory: 0.55-0.6 ms against 0.8-1.0 for
// one stream).
template <typename W>
void run_panels(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const W* panels, const float* bias,
                float* y, int64_t ldy, int64_t p0, int64_t p1, bool avx2) {
  // Equal groups of at most kMaxRows rows (8 rows: 4 + 4, measured faster than 6 + 2).
  const int64_t groups = (M + kMaxRows - 1) / kMaxRows, group_rows = (M + groups - 1) / groups;
  const int64_t pstride = K * kPanelWidth;
  // X packed once, each group of rows k-major (x[k * R + r]): the kernel's broadcasts then read
  // one contiguous run, not R rows whose stride (often a multiple of 4 KB) maps them all to the
  // same L1 sets as the panel block.
  thread_local std::vector<float> xbuf;
  xbuf.resize(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; m += group_rows) {
    const int64_t R = std::min(group_rows, M - m);
    float* a = xbuf.data() + m * K;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t k = 0; k < K; ++k) a[k * R + r] = x[(m + r) * ldx + k];
  }
  const int64_t Qmax = avx2 ? panels_together(group_rows) : 1;
  // One row is different: its Q = 4 panels side by side are the whole group, read front to back
  // as four sequential streams that the hardware prefetcher follows, with no software prefetch
  // (Zen 3, one thread, from memory: K = 1024, N = 32000: 5.2-5.4 ms against 5.8-6.1 for 16
  // streams with prefetch, ORT 5.0; N = 2816: 0.43-0.47 against 0.51-0.54). From two rows on
  // (Q <= 2) the 16 streams with prefetch stay faster (M = 2, N = 2816: 0.54 against 0.58-0.63).
  const bool one_row = M == 1;
  const int64_t G = one_row ? Qmax : kGroupPanels;
  for (int64_t g = p0; g < p1; g += G) {
    const int64_t g1 = std::min(p1, g + G);
    for (int64_t k0 = 0; k0 < K; k0 += kPanelsBlockK) {
      const int64_t kc = std::min(kPanelsBlockK, K - k0);
      const bool accumulate = k0 > 0;
      for (int64_t p = g; p < g1; p += Qmax) {
        const int64_t Q = std::min(Qmax, g1 - p);
        const int64_t n0 = p * kPanelWidth, ncols = std::min(kPanelWidth, N - (p + Q - 1) * kPanelWidth);
        const float* bs = k0 + kc == K && bias ? bias + n0 : nullptr;
        const W* b = panels + p * pstride + k0 * kPanelWidth;
        const W* next = p + Q < g1    ? b + Q * pstride
                        : k0 + kc < K ? panels + g * pstride + (k0 + kc) * kPanelWidth
                        : g1 < p1     ? panels + g1 * pstride
                                      : nullptr;
        for (int64_t m = 0; m < M; m += group_rows) {
          const int64_t R = std::min(group_rows, M - m);
          const float* xs = xbuf.data() + m * K + k0 * R;
          float* ys = y + m * ldy + n0;
          // R <= group_rows, and only M <= 3 (one group) has group_rows <= 3: Q suits R.
          if (avx2)
            kBlocks<W>[R][Q - 1](kc, xs, b, pstride, ys, ldy, ncols, accumulate, bs,
                                 m == 0 && !one_row ? next : nullptr);
          else
            block_generic<W>(R, kc, xs, b, ys, ldy, ncols, accumulate, bs);
        }
      }
    }
  }
}

template <typename W>
void gemv_panels_typed(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const W* panels, const float* bias,
                       float* y, int64_t ldy, int threads) {
  static const bool f16c = cpu_has_f16c();
  const bool avx2 = simd_level() >= SimdLevel::Avx2 && (!std::is_same_v<W, float16> || f16c);
  const int64_t P = (N + kPanelWidth - 1) / kPanelWidth;
  // Below ~256K multiply-adds (1 MB of W for one row) a second thread costs more than it saves.
  const double work = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  const int64_t nt = work < (1 << 18) ? 1 : std::min<int64_t>(std::max(1, threads), P);
  if (nt == 1) {
    run_panels<W>(M, N, K, x, ldx, panels, bias, y, ldy, 0, P, avx2);
    return;
  }
  parallel_tasks(nt, static_cast<int>(nt), [&](int64_t t) {
    run_panels<W>(M, N, K, x, ldx, panels, bias, y, ldy, P * t / nt, P * (t + 1) / nt, avx2);
  });
}

}  // namespace

void gemv_panels(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const void* panels, DType w_dtype,
                 const float* bias, float* y, int64_t ldy, int threads) {
  if (M <= 0 || N <= 0) return;
  if (K == 0) return fill_bias(M, N, bias, y, ldy);
  switch (w_dtype) {
    case DType::Float32:
      return gemv_panels_typed(M, N, K, x, ldx, static_cast<const float*>(panels), bias, y, ldy, threads);
    case DType::BFloat16:
      return gemv_panels_typed(M, N, K, x, ldx, static_cast<const uint16_t*>(panels), bias, y, ldy, threads);
    case DType::Float16:
      return gemv_panels_typed(M, N, K, x, ldx, static_cast<const float16*>(panels), bias, y, ldy, threads);
    default:
      fail("gemv_panels: panels of type ", dtype_name(w_dtype), " (float32, bfloat16 or float16 expected)");
  }
}

// AVX2 (AMD EPYC Zen 3, one thread, K = 1024, build/reforge_linear_bench --clock cpu): from
// memory (N = 2816, --layers 24) this kernel and the tile are within noise of each other from 2
// to 8 rows, both at W's streaming rate or at the FMA rate, and the tile wins from 10; with W in
// cache (N = 1024, --layers 1) this kernel is faster up to 16 rows (8 rows: 0.21-0.24 against
// 0.28-0.32 ms). 8 keeps the memory-bound case no slower. The portable loops do the same
// arithmetic either way; 8 keeps one summation route.
int64_t gemv_panels_max_rows() { return 8; }

}  // namespace reforge::cpu
