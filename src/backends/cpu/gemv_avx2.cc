#include "backends/cpu/gemv_avx2.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/widen_avx2.h"
#include "core/cpu_features.h"
#include "core/simd.h"

namespace reforge::cpu::avx2 {

namespace {

#define REFORGE_GEMV_AVX2 __attribute__((target("avx2,fma,f16c")))

inline float widen(float v) { return v; }
inline float widen(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline float widen(float16 v) { return float16::to_float(v.bits); }  // = vcvtph2ps (core/half.h)

// Columns [j0, j1) that do not fill a vector: the same operation sequence in scalar fmaf.
template <typename W>
void tail_scalar(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const W* w, const float* bias, float* y,
                 int64_t ldy, int64_t j0, int64_t j1) {
  for (int64_t r = 0; r < M; ++r)
    for (int64_t j = j0; j < j1; ++j) {
      const float* xr = x + r * ldx;
      float a = xr[0] * widen(w[j]);
      for (int64_t k = 1; k < K; ++k) a = std::fma(xr[k], widen(w[k * N + j]), a);
      y[r * ldy + j] = bias ? a + bias[j] : a;
    }
}

// One row, or any rows one at a time: four W rows per pass, Y's block read and written once
// per four multiply-adds.
template <typename W>
REFORGE_GEMV_AVX2 void one_row(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const W* w, float* y,
                               int64_t ldy, int64_t j0, int64_t j1, bool accumulate = false) {
  const int64_t vecs = (j1 - j0) / 8;
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    const W* w0 = w + k * N + j0;
    const W* w1 = w0 + N;
    const W* w2 = w1 + N;
    const W* w3 = w2 + N;
    for (int64_t r = 0; r < M; ++r) {
      const float* xr = x + r * ldx + k;
      const __m256 x0 = _mm256_set1_ps(xr[0]), x1 = _mm256_set1_ps(xr[1]);
      const __m256 x2 = _mm256_set1_ps(xr[2]), x3 = _mm256_set1_ps(xr[3]);
      float* yr = y + r * ldy + j0;
      for (int64_t v = 0; v < vecs; ++v) {
        const int64_t j = v * 8;
        __m256 a = k == 0 && !accumulate ? _mm256_mul_ps(x0, load8(w0 + j))
                                         : _mm256_fmadd_ps(x0, load8(w0 + j), _mm256_loadu_ps(yr + j));
        a = _mm256_fmadd_ps(x1, load8(w1 + j), a);
        a = _mm256_fmadd_ps(x2, load8(w2 + j), a);
        a = _mm256_fmadd_ps(x3, load8(w3 + j), a);
        _mm256_storeu_ps(yr + j, a);
      }
    }
  }
  for (; k < K; ++k) {
    const W* w0 = w + k * N + j0;
    for (int64_t r = 0; r < M; ++r) {
      const __m256 x0 = _mm256_set1_ps(x[r * ldx + k]);
      float* yr = y + r * ldy + j0;
      for (int64_t v = 0; v < vecs; ++v) {
        const int64_t j = v * 8;
        const __m256 a = k == 0 && !accumulate ? _mm256_mul_ps(x0, load8(w0 + j))
                                               : _mm256_fmadd_ps(x0, load8(w0 + j), _mm256_loadu_ps(yr + j));
        _mm256_storeu_ps(yr + j, a);
      }
    }
  }
}

// One row: eight W rows per pass (Y's block is read and written once per eight multiply-adds),
// the rows two passes ahead prefetched into L2 (measured on Zen 3, bench/linear_bench.cc --rows 1
// --clock cpu: 16 rows ahead into L2 streams W at 19-21 GB/s; no prefetch 17-18, into L1 15-17).
constexpr int64_t kSingleAhead = 16;  // W rows prefetched ahead (into L2)
template <typename W>
REFORGE_GEMV_AVX2 void single_row(int64_t K, int64_t N, const float* x, const W* w, float* y, int64_t j0, int64_t j1) {
  const int64_t vecs = (j1 - j0) / 8;
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    const W* w0 = w + k * N + j0;
    __m256 xs[8];
    for (int i = 0; i < 8; ++i) xs[i] = _mm256_set1_ps(x[k + i]);
    const W* ahead = k + 8 + kSingleAhead <= K ? w0 + kSingleAhead * N : nullptr;
    float* yr = y + j0;
    for (int64_t v = 0; v < vecs; ++v) {
      const int64_t j = v * 8;
      if (ahead && (j * static_cast<int64_t>(sizeof(W))) % 64 == 0)
        for (int i = 0; i < 8; ++i) _mm_prefetch(reinterpret_cast<const char*>(ahead + i * N + j), _MM_HINT_T1);
      __m256 a =
          k == 0 ? _mm256_mul_ps(xs[0], load8(w0 + j)) : _mm256_fmadd_ps(xs[0], load8(w0 + j), _mm256_loadu_ps(yr + j));
      for (int i = 1; i < 8; ++i) a = _mm256_fmadd_ps(xs[i], load8(w0 + i * N + j), a);
      _mm256_storeu_ps(yr + j, a);
    }
  }
  if (k < K) one_row<W>(1, K - k, N, x + k, 1, w + k * N, y, 0, j0, j1, /*accumulate=*/k > 0);
}

// Two or more rows: 16 columns x 4 W rows loaded once (8 registers) serve every row.
constexpr int64_t kAhead = 8;  // W rows prefetched ahead
template <typename W>
REFORGE_GEMV_AVX2 void many_rows(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const W* w, float* y,
                                 int64_t ldy, int64_t j0, int64_t j1) {
  const int64_t pairs = (j1 - j0) / 16;
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    const W* w0 = w + k * N + j0;
    // The column block is narrow (Y's rows x columns stay in L1), so each W row is read in
    // short runs that hardware prefetchers do not follow: fetch the rows of a later pass.
    const W* ahead = k + kAhead + 4 <= K ? w0 + kAhead * N : nullptr;
    for (int64_t v = 0; v < pairs; ++v) {
      const int64_t j = v * 16;
      if (ahead && (j * static_cast<int64_t>(sizeof(W))) % 64 == 0) {
        for (int i = 0; i < 4; ++i) _mm_prefetch(reinterpret_cast<const char*>(ahead + i * N + j), _MM_HINT_T0);
      }
      const __m256 a0 = load8(w0 + j), b0 = load8(w0 + j + 8);
      const __m256 a1 = load8(w0 + N + j), b1 = load8(w0 + N + j + 8);
      const __m256 a2 = load8(w0 + 2 * N + j), b2 = load8(w0 + 2 * N + j + 8);
      const __m256 a3 = load8(w0 + 3 * N + j), b3 = load8(w0 + 3 * N + j + 8);
      for (int64_t r = 0; r < M; ++r) {
        const float* xr = x + r * ldx + k;
        const __m256 x0 = _mm256_broadcast_ss(xr), x1 = _mm256_broadcast_ss(xr + 1);
        const __m256 x2 = _mm256_broadcast_ss(xr + 2), x3 = _mm256_broadcast_ss(xr + 3);
        float* yr = y + r * ldy + j0 + j;
        __m256 p = k == 0 ? _mm256_mul_ps(x0, a0) : _mm256_fmadd_ps(x0, a0, _mm256_loadu_ps(yr));
        __m256 q = k == 0 ? _mm256_mul_ps(x0, b0) : _mm256_fmadd_ps(x0, b0, _mm256_loadu_ps(yr + 8));
        p = _mm256_fmadd_ps(x1, a1, p);
        q = _mm256_fmadd_ps(x1, b1, q);
        p = _mm256_fmadd_ps(x2, a2, p);
        q = _mm256_fmadd_ps(x2, b2, q);
        p = _mm256_fmadd_ps(x3, a3, p);
        q = _mm256_fmadd_ps(x3, b3, q);
        _mm256_storeu_ps(yr, p);
        _mm256_storeu_ps(yr + 8, q);
      }
    }
  }
  for (; k < K; ++k) {
    const W* w0 = w + k * N + j0;
    for (int64_t v = 0; v < pairs; ++v) {
      const int64_t j = v * 16;
      const __m256 a0 = load8(w0 + j), b0 = load8(w0 + j + 8);
      for (int64_t r = 0; r < M; ++r) {
        const __m256 x0 = _mm256_broadcast_ss(x + r * ldx + k);
        float* yr = y + r * ldy + j0 + j;
        const __m256 p = k == 0 ? _mm256_mul_ps(x0, a0) : _mm256_fmadd_ps(x0, a0, _mm256_loadu_ps(yr));
        const __m256 q = k == 0 ? _mm256_mul_ps(x0, b0) : _mm256_fmadd_ps(x0, b0, _mm256_loadu_ps(yr + 8));
        _mm256_storeu_ps(yr, p);
        _mm256_storeu_ps(yr + 8, q);
      }
    }
  }
}

REFORGE_GEMV_AVX2 void add_bias(int64_t M, const float* bias, float* y, int64_t ldy, int64_t j0, int64_t j1) {
  const int64_t vecs = (j1 - j0) / 8;
  for (int64_t r = 0; r < M; ++r) {
    float* yr = y + r * ldy + j0;
    for (int64_t v = 0; v < vecs; ++v)
      _mm256_storeu_ps(yr + v * 8, _mm256_add_ps(_mm256_loadu_ps(yr + v * 8), _mm256_loadu_ps(bias + j0 + v * 8)));
  }
}

template <typename W>
void chunk(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const W* w, const float* bias, float* y,
           int64_t ldy, int64_t j0, int64_t j1) {
  const int64_t jv = j0 + (j1 - j0) / 8 * 8;  // end of the full vectors
  if (jv > j0) {
    int64_t jm = j0;
    if (M == 1) {
      single_row<W>(K, N, x, w, y, j0, jv);
      jm = jv;
    } else {
      jm = j0 + (jv - j0) / 16 * 16;
      if (jm > j0) many_rows<W>(M, K, N, x, ldx, w, y, ldy, j0, jm);
    }
    if (jv > jm) one_row<W>(M, K, N, x, ldx, w, y, ldy, jm, jv);
    if (bias) add_bias(M, bias, y, ldy, j0, jv);
  }
  if (jv < j1) tail_scalar<W>(M, K, N, x, ldx, w, bias, y, ldy, jv, j1);
}

}  // namespace

bool available() { return simd_level() >= SimdLevel::Avx2; }

bool available_f16() {
  static const bool f16c = cpu_has_f16c();
  return f16c && available();
}

void chunk_f32(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const float* w, const float* bias,
               float* y, int64_t ldy, int64_t j0, int64_t j1) {
  chunk<float>(M, K, N, x, ldx, w, bias, y, ldy, j0, j1);
}

void chunk_bf16(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const uint16_t* w, const float* bias,
                float* y, int64_t ldy, int64_t j0, int64_t j1) {
  chunk<uint16_t>(M, K, N, x, ldx, w, bias, y, ldy, j0, j1);
}

void chunk_f16(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const float16* w, const float* bias,
               float* y, int64_t ldy, int64_t j0, int64_t j1) {
  chunk<float16>(M, K, N, x, ldx, w, bias, y, ldy, j0, j1);
}

}  // namespace reforge::cpu::avx2
