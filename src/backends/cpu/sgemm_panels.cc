#include "backends/cpu/sgemm_panels.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cpu/gemv.h"
#include "backends/cpu/gemv_panels.h"
#include "core/error.h"
#include "core/simd.h"
#include "core/thread_pool.h"

namespace reforge::cpu {

namespace {

constexpr int64_t kRows = 6;          // register tile: 6 rows x 16 columns
constexpr int64_t kBlockK = 256;      // k per kernel call: a panel block is 16 KB
constexpr int64_t kBlockM = 192;      // most rows of X packed at a time
constexpr int64_t kGroupPanels = 16;  // panels whose block of Y stays in L2 across k blocks

#define REFORGE_SGEMM_AVX2 __attribute__((target("avx2,fma")))

// Y[0:R, 0:ncols) (+)= X[0:R, 0:kc) x panel block (+ bias): the AVX2 register tile.
// `prefetch` (null: none) is read one line per k: `pf_stride` floats apart (16 for the next
// float32 panel block, 8 for a 16-bit one, whose rows are half a line).
template <int R>
REFORGE_SGEMM_AVX2 void tile_avx2(int64_t kc, const float* x, const float* b, float* y, int64_t ldy, int64_t ncols,
                                  bool accumulate, const float* bias, const float* prefetch, int64_t pf_stride) {
  __m256 c0[R], c1[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) c0[r] = c1[r] = _mm256_setzero_ps();
    // Unrolled: on Zen 3 the rolled loop ran 128-row products 3-14% behind OpenBLAS
    // (build/reforge_linear_bench, K x N = 768 x 3072, 1024 x 2816, 768 x 768), 0-14% ahead unrolled.
#pragma GCC unroll 8
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * kPanelWidth), b1 = _mm256_loadu_ps(b + k * kPanelWidth + 8);
    if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(prefetch + k * pf_stride), _MM_HINT_T1);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(x + k * kRows + r);
      c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
    }
  }
  if (ncols == kPanelWidth) {
    const __m256 bias0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    const __m256 bias1 = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      float* yr = y + r * ldy;
      __m256 v0 = c0[r], v1 = c1[r];
      if (accumulate) {
        v0 = _mm256_add_ps(_mm256_loadu_ps(yr), v0);
        v1 = _mm256_add_ps(_mm256_loadu_ps(yr + 8), v1);
      }
      if (bias) {
        v0 = _mm256_add_ps(v0, bias0);
        v1 = _mm256_add_ps(v1, bias1);
      }
      _mm256_storeu_ps(yr, v0);
      _mm256_storeu_ps(yr + 8, v1);
    }
    return;
  }
  alignas(32) float t[kPanelWidth];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(t, c0[r]);
    _mm256_store_ps(t + 8, c1[r]);
    float* yr = y + r * ldy;
    for (int64_t j = 0; j < ncols; ++j) {
      float v = accumulate ? yr[j] + t[j] : t[j];
      if (bias) v += bias[j];
      yr[j] = v;
    }
  }
}

using TileFn = void (*)(int64_t, const float*, const float*, float*, int64_t, int64_t, bool, const float*, const float*,
                        int64_t);
constexpr TileFn kAvx2Tiles[kRows + 1] = {nullptr,      tile_avx2<1>, tile_avx2<2>, tile_avx2<3>,
                                          tile_avx2<4>, tile_avx2<5>, tile_avx2<6>};

#define REFORGE_SGEMM_AVX512 __attribute__((target("avx512f")))

// The AVX-512 tile: R rows (up to two 6-row strips: `x`, then `x2` for rows 6..11) x Q adjacent
// panels (Q = 1 or 2), one zmm register per panel row. 12 x 2 panels keep 24 accumulators, so
// each broadcast of X feeds two multiply-adds and each load of W twelve: on Sapphire Rapids a
// 6 x 2 tile ran 512-row products ~17% behind oneDNN's brgemm. `b` is the first panel's k block,
// the second `pstride` floats on; `ncols` columns of the last panel are valid. Each output is
// summed in the same order, with the same fused multiply-adds, as by tile_avx2 and gemv_panels,
// so results do not depend on the instruction set either.
template <int R, int Q>
REFORGE_SGEMM_AVX512 void tile_avx512(int64_t kc, const float* x, const float* x2, const float* b, int64_t pstride,
                                      float* y, int64_t ldy, int64_t ncols, bool accumulate, const float* bias,
                                      const float* prefetch) {
  __m512 c[R][Q];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int q = 0; q < Q; ++q) c[r][q] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bq[Q];
#pragma GCC unroll 2
    for (int q = 0; q < Q; ++q) bq[q] = _mm512_loadu_ps(b + q * pstride + k * kPanelWidth);
    if (prefetch) {
#pragma GCC unroll 2
      for (int q = 0; q < Q; ++q)
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + q * pstride + k * kPanelWidth), _MM_HINT_T1);
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(r < kRows ? x[k * kRows + r] : x2[k * kRows + r - kRows]);
#pragma GCC unroll 2
      for (int q = 0; q < Q; ++q) c[r][q] = _mm512_fmadd_ps(a, bq[q], c[r][q]);
    }
  }
#pragma GCC unroll 2
  for (int q = 0; q < Q; ++q) {
    const __mmask16 mask = q < Q - 1 || ncols == kPanelWidth ? __mmask16(0xFFFF) : __mmask16((1u << ncols) - 1);
    const __m512 bq = bias ? _mm512_maskz_loadu_ps(mask, bias + q * kPanelWidth) : _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      float* yr = y + r * ldy + q * kPanelWidth;
      __m512 v = c[r][q];
      if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, yr), v);
      if (bias) v = _mm512_add_ps(v, bq);
      _mm512_mask_storeu_ps(yr, mask, v);
    }
  }
}

constexpr int64_t kWideRows = 2 * kRows;  // rows of the AVX-512 tile: two strips
using WideTileFn = void (*)(int64_t, const float*, const float*, const float*, int64_t, float*, int64_t, int64_t, bool,
                            const float*, const float*);
template <int Q, size_t... R>
constexpr std::array<WideTileFn, kWideRows + 1> wide_tiles(std::index_sequence<R...>) {
  return {nullptr, tile_avx512<static_cast<int>(R) + 1, Q>...};
}
// kAvx512Tiles[Q - 1][R].
constexpr std::array<WideTileFn, kWideRows + 1> kAvx512Tiles[2] = {
    wide_tiles<1>(std::make_index_sequence<kWideRows>()), wide_tiles<2>(std::make_index_sequence<kWideRows>())};

// One strip, AVX2: a[k][r] = rows[r][k] for k < kc (rows[r] null: zeros). Eight k at a time,
// the 6 rows (and two zero rows) transposed as an 8 x 8 block; the k tail one by one. The
// scalar loop (a[k * 6 + r], row by row) was ~8% of a 2-thread BERT down-projection (128 rows,
// K = 3072, N = 768; each thread packs all of X), this ~4%. Masked stores of the six lanes
// (vmaskmovps, slow to memory on Zen 3) were slower than the scalar loop.
REFORGE_SGEMM_AVX2 void pack_strip_avx2(const float* const rows[kRows], int64_t kc, float* a) {
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    __m256 r[8];
#pragma GCC unroll 6
    for (int i = 0; i < kRows; ++i) r[i] = rows[i] ? _mm256_loadu_ps(rows[i] + k) : _mm256_setzero_ps();
    r[6] = r[7] = _mm256_setzero_ps();
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),
                 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),
                 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)),
                 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)),
                 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    // Column j (k + j) holds rows 0..7 of that k.
    const __m256 col[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                           _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                           _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                           _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
    // Eight floats per k, ascending: lanes 6 and 7 (zeros) land on the next k's first two
    // floats, which its own store then overwrites. The strip's last k stores its six alone.
#pragma GCC unroll 7
    for (int j = 0; j < 7; ++j) _mm256_storeu_ps(a + (k + j) * kRows, col[j]);
    float* last = a + (k + 7) * kRows;
    if (k + 8 < kc) {
      _mm256_storeu_ps(last, col[7]);
    } else {
      _mm_storeu_ps(last, _mm256_castps256_ps128(col[7]));
      _mm_storel_pi(reinterpret_cast<__m64*>(last + 4), _mm256_extractf128_ps(col[7], 1));
    }
  }
  for (; k < kc; ++k)
    for (int i = 0; i < kRows; ++i) a[k * kRows + i] = rows[i] ? rows[i][k] : 0.0f;
}

// X[m0 + s * 6 + r, k0 + k] -> a[s][k][r] for the 6-row strips of a block (rows past m1: 0).
void pack_strips(const float* x, int64_t ldx, int64_t m0, int64_t m1, int64_t k0, int64_t kc, float* a, bool avx2) {
  for (int64_t m = m0; m < m1; m += kRows, a += kc * kRows) {
    const int64_t R = std::min(kRows, m1 - m);
    const float* rows[kRows];
    for (int64_t r = 0; r < kRows; ++r) rows[r] = r < R ? x + (m + r) * ldx + k0 : nullptr;
    if (avx2) {
      pack_strip_avx2(rows, kc, a);
      continue;
    }
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t k = 0; k < kc; ++k) a[k * kRows + r] = rows[r] ? rows[r][k] : 0.0f;
  }
}

// Rows [m0, m1) x panels [p0, p1) of the product, on the calling thread. For each block of up
// to kBlockM rows, X is packed once into 6-row strips per k block; then for each group of
// kGroupPanels panels (whose block of Y stays in L2 across the k blocks), each panel's k block
// (16 KB) sits in L1 while every strip passes over it.
//
// 16-bit panels (`wdt` BFloat16 or Float16) are widened a k block at a time (Q panels: 16 or 32
// KB of float32) into a thread buffer that the strips then read as a float32 panel block; from
// 9 rows on (two strips) that widening is a small share of the block's multiply-adds.
void run_block(int64_t m0, int64_t m1, int64_t p0, int64_t p1, int64_t N, int64_t K, const float* x, int64_t ldx,
               const void* panels_any, DType wdt, const float* bias, float* y, int64_t ldy, SimdLevel isa) {
  // Panels side by side in one tile: 2 with AVX-512 (a zmm register per panel row), else 1.
  const int64_t Qmax = isa == SimdLevel::Avx512 ? 2 : 1;
  const bool wide16 = wdt != DType::Float32;
  const auto* panels = static_cast<const float*>(panels_any);  // float32 panels only
  const auto* panels16 = static_cast<const uint16_t*>(panels_any);
  thread_local std::vector<float> abuf, wbuf;
  if (wide16) wbuf.resize(static_cast<size_t>(Qmax * kBlockK * kPanelWidth));
  // Equal blocks of at most kBlockM rows, in whole strips (128 rows: one block, W read once).
  const int64_t blocks = (m1 - m0 + kBlockM - 1) / kBlockM;
  const int64_t block_rows = ((m1 - m0 + blocks - 1) / blocks + kRows - 1) / kRows * kRows;
  abuf.resize(static_cast<size_t>(block_rows * K));
  for (int64_t mb = m0; mb < m1; mb += block_rows) {
    const int64_t mb1 = std::min(m1, mb + block_rows), strips = (mb1 - mb + kRows - 1) / kRows;
    // k block k0 of strip s starts at abuf + k0 * strips * 6 + s * kc * 6.
    for (int64_t k0 = 0; k0 < K; k0 += kBlockK)
      pack_strips(x, ldx, mb, mb1, k0, std::min(kBlockK, K - k0), abuf.data() + k0 * strips * kRows,
                  isa >= SimdLevel::Avx2);
    for (int64_t g = p0; g < p1; g += kGroupPanels) {
      const int64_t g1 = std::min(p1, g + kGroupPanels);
      for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
        const int64_t kc = std::min(kBlockK, K - k0);
        const bool accumulate = k0 > 0, last = k0 + kc == K;
        for (int64_t p = g; p < g1;) {
          const int64_t Q = std::min(Qmax, g1 - p);
          const int64_t n0 = p * kPanelWidth, ncols = std::min(kPanelWidth, N - (p + Q - 1) * kPanelWidth);
          const float* bs = last && bias ? bias + n0 : nullptr;
          const float* as = abuf.data() + k0 * strips * kRows;
          // The first strip also prefetches the k block that comes next (16 or 8 KB per panel, one
          // line per k or per two) into L2: the next panels, else the group's next k block, else
          // the next group. (On AVX-512 only for float32 panels: Q panels' 16-bit blocks lie
          // apart in W, not one per k step.)
          const int64_t np = p + Q < g1 ? p + Q : k0 + kc < K ? g : g1 < p1 ? g1 : -1;
          const int64_t nk = p + Q < g1 ? k0 : k0 + kc < K ? k0 + kc : 0;
          const float* b = nullptr;
          const float* next = nullptr;
          int64_t pstride = K * kPanelWidth;
          if (wide16) {
            for (int64_t q = 0; q < Q; ++q)
              widen_to_f32(panels16 + (p + q) * K * kPanelWidth + k0 * kPanelWidth, wdt, kc * kPanelWidth,
                           wbuf.data() + q * kc * kPanelWidth);
            b = wbuf.data();
            pstride = kc * kPanelWidth;
            if (np >= 0 && Qmax == 1)
              next = reinterpret_cast<const float*>(panels16 + np * K * kPanelWidth + nk * kPanelWidth);
          } else {
            b = panels + p * K * kPanelWidth + k0 * kPanelWidth;
            if (np >= 0) next = panels + np * K * kPanelWidth + nk * kPanelWidth;
          }
          const int64_t pf_stride = wide16 ? kPanelWidth / 2 : kPanelWidth;
          for (int64_t m = mb; m < mb1;) {
            const int64_t R = std::min(isa == SimdLevel::Avx512 ? kWideRows : kRows, mb1 - m);
            float* ys = y + m * ldy + n0;
            const float* pf = m == mb ? next : nullptr;
            if (isa == SimdLevel::Avx512)
              kAvx512Tiles[Q - 1][R](kc, as, as + kc * kRows, b, pstride, ys, ldy, ncols, accumulate, bs, pf);
            else if (isa == SimdLevel::Avx2)
              kAvx2Tiles[R](kc, as, b, ys, ldy, ncols, accumulate, bs, pf, pf_stride);
            else
              panel_block_generic(R, kRows, kc, as, b, ys, ldy, ncols, accumulate, bs);
            m += R;
            as += (R + kRows - 1) / kRows * kc * kRows;  // the strips the tile used
          }
          p += Q;
        }
      }
    }
  }
}

}  // namespace

void fill_bias(int64_t M, int64_t N, const float* bias, float* y, int64_t ldy) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) y[m * ldy + n] = bias ? bias[n] : 0.0f;
}

void panel_block_generic(int64_t R, int64_t x_stride, int64_t kc, const float* x, const float* b, float* y, int64_t ldy,
                         int64_t ncols, bool accumulate, const float* bias) {
  for (int64_t r = 0; r < R; ++r) {
    float acc[kPanelWidth] = {};
    for (int64_t k = 0; k < kc; ++k) {
      const float a = x[k * x_stride + r];
      for (int64_t j = 0; j < kPanelWidth; ++j) acc[j] += a * b[k * kPanelWidth + j];
    }
    float* yr = y + r * ldy;
    for (int64_t j = 0; j < ncols; ++j) {
      float v = accumulate ? yr[j] + acc[j] : acc[j];
      if (bias) v += bias[j];
      yr[j] = v;
    }
  }
}

namespace {

// pack_panels: a memory-bound copy (a refit re-packs every Linear weight into a fresh buffer), shaped for
// bandwidth:
// - Each thread writes one contiguous range of panels, so it streams its own part of dst and
//   takes the page faults of that part (with 2 MiB pages, core/tensor.h, one per 2 MiB).
// - Rows go in blocks of kBlock: for each panel of the range, kBlock rows are copied (a 1 KB
//   run of dst, kBlock short reads from consecutive rows of w), then the next panel. Whole rows
//   at a time would keep a read stream per row and a write stream per panel open; per panel over
//   all of K, every 64-byte read touches a new 4 KiB page of w. Measured on Zen 3 with 879 MB of
//   Llama weights into fresh huge pages: 145 ms per panel, ~85 ms in blocks of 8 to 16 rows.
// - Big matrices are written with non-temporal stores: dst is far larger than the caches and
//   not read soon, and streaming skips reading each destination line before writing it
//   (~25% faster above). Small ones use ordinary stores (they may be read right away).
// - A transposed w ([N, K]: each panel is 16 rows of w, read along K) goes panel by panel over
//   all of K instead: 16 sequential read streams and one write stream. Float32 moves in 4 x 4
//   tiles through SSE registers (the k-th row of a panel is the k-th column of 16 rows of w).
// Every element is copied as is (padding columns are zeros), so the result does not depend on
// the path taken. T is float, or the bits of a 16-bit float: a panel row is 16 elements, 64 or
// 32 bytes, copied 16 bytes at a time.
template <typename T>
void pack_panels_t(const T* w, int64_t K, int64_t N, bool transposed, T* dst) {
  const int64_t P = (N + kPanelWidth - 1) / kPanelWidth;
  constexpr int64_t kBlock = 16;
  static constexpr int kChunks = static_cast<int>(kPanelWidth * sizeof(T) / 16);
  const bool big = K * N > (1 << 18);
  const bool stream = big && reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  // One row of a panel from 16 elements at `src` (the column tail padded with zeros when
  // ncols < 16).
  auto put = [stream](T* o, const T* src) {
    __m128i v[kChunks];
    for (int c = 0; c < kChunks; ++c) v[c] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src) + c);
    for (int c = 0; c < kChunks; ++c) {
      if (stream)
        _mm_stream_si128(reinterpret_cast<__m128i*>(o) + c, v[c]);
      else
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o) + c, v[c]);
    }
  };
  // transposed: panel p holds rows n0 .. n0 + 15 of w, one element of each per panel row.
  auto pack_range_transposed = [&](int64_t p0, int64_t p1) {
    alignas(64) T tile[4][kPanelWidth];
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n0 = p * kPanelWidth, ncols = std::min(kPanelWidth, N - n0);
      T* out = dst + p * K * kPanelWidth;
      int64_t k = 0;
      if constexpr (std::is_same_v<T, float>) {
        if (ncols == kPanelWidth)
          for (; k + 4 <= K; k += 4) {
            for (int64_t j = 0; j < kPanelWidth; j += 4) {
              __m128 r0 = _mm_loadu_ps(w + (n0 + j) * K + k), r1 = _mm_loadu_ps(w + (n0 + j + 1) * K + k);
              __m128 r2 = _mm_loadu_ps(w + (n0 + j + 2) * K + k), r3 = _mm_loadu_ps(w + (n0 + j + 3) * K + k);
              _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
              _mm_store_ps(&tile[0][j], r0);
              _mm_store_ps(&tile[1][j], r1);
              _mm_store_ps(&tile[2][j], r2);
              _mm_store_ps(&tile[3][j], r3);
            }
            for (int r = 0; r < 4; ++r) put(out + (k + r) * kPanelWidth, tile[r]);
          }
      }
      for (; k < K; ++k) {
        for (int64_t j = 0; j < kPanelWidth; ++j) tile[0][j] = j >= ncols ? T{} : w[(n0 + j) * K + k];
        put(out + k * kPanelWidth, tile[0]);
      }
    }
    if (stream) _mm_sfence();
  };
  auto pack_range = [&](int64_t p0, int64_t p1) {
    if (transposed) return pack_range_transposed(p0, p1);
    alignas(64) T line[kPanelWidth];
    for (int64_t k0 = 0; k0 < K; k0 += kBlock) {
      const int64_t k1 = std::min(K, k0 + kBlock);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t n0 = p * kPanelWidth, ncols = std::min(kPanelWidth, N - n0);
        T* out = dst + p * K * kPanelWidth;
        for (int64_t k = k0; k < k1; ++k) {
          T* o = out + k * kPanelWidth;
          if (ncols == kPanelWidth) {
            put(o, w + k * N + n0);
            continue;
          }
          for (int64_t j = 0; j < kPanelWidth; ++j) line[j] = j >= ncols ? T{} : w[k * N + n0 + j];
          put(o, line);
        }
      }
    }
    if (stream) _mm_sfence();  // streamed lines visible before the caller (or another thread) reads dst
  };
  if (!big) {
    pack_range(0, P);
    return;
  }
  const int64_t nt = omp_get_max_threads();
  parallel_tasks(nt, static_cast<int>(nt), [&](int64_t t) { pack_range(P * t / nt, P * (t + 1) / nt); });
}

}  // namespace

void pack_panels(const float* w, int64_t K, int64_t N, bool transposed, float* dst) {
  pack_panels_t(w, K, N, transposed, dst);
}

void pack_panels16(const uint16_t* w, int64_t K, int64_t N, bool transposed, uint16_t* dst) {
  pack_panels_t(w, K, N, transposed, dst);
}

void sgemm_panels(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* panels, const float* bias,
                  float* y, int64_t ldy, int threads) {
  sgemm_panels(M, N, K, x, ldx, panels, DType::Float32, bias, y, ldy, threads);
}

void sgemm_panels(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const void* panels, DType w_dtype,
                  const float* bias, float* y, int64_t ldy, int threads) {
  if (M <= 0 || N <= 0) return;
  if (K == 0) return fill_bias(M, N, bias, y, ldy);
  static_assert(kBlockK == kPanelsBlockK, "gemv_panels must sum in sgemm_panels' k blocks");
  REFORGE_CHECK(w_dtype == DType::Float32 || w_dtype == DType::BFloat16 || w_dtype == DType::Float16,
                "sgemm_panels: panels of type ", dtype_name(w_dtype), " (float32, bfloat16 or float16 expected)");
  if (M <= gemv_panels_max_rows()) return gemv_panels(M, N, K, x, ldx, panels, w_dtype, bias, y, ldy, threads);
  const SimdLevel isa = simd_level();
  const int64_t P = (N + kPanelWidth - 1) / kPanelWidth;
  // Below ~2 M multiply-adds a second thread costs more than it saves.
  const double work = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  int nt = std::max(1, threads);
  if (work < 2e6) nt = 1;
  if (nt == 1) {
    run_block(0, M, 0, P, N, K, x, ldx, panels, w_dtype, bias, y, ldy, isa);
    return;
  }
  // Split the panels between threads (each streams its own part of W); with too few panels for
  // that, split the rows in strips of kRows as well.
  const int64_t tn = std::min<int64_t>(nt, std::max<int64_t>(1, P / 4));
  const int64_t tm = std::max<int64_t>(1, std::min<int64_t>(nt / tn, (M + kRows - 1) / kRows));
  const int64_t strips = (M + kRows - 1) / kRows;
  parallel_tasks(tn * tm, static_cast<int>(tn * tm), [&](int64_t ij) {
    const int64_t i = ij / tm, j = ij % tm;
    const int64_t p0 = P * i / tn, p1 = P * (i + 1) / tn;
    const int64_t m0 = std::min(M, strips * j / tm * kRows), m1 = std::min(M, strips * (j + 1) / tm * kRows);
    run_block(m0, m1, p0, p1, N, K, x, ldx, panels, w_dtype, bias, y, ldy, isa);
  });
}

}  // namespace reforge::cpu
