#include "backends/cpu/gemv.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "core/error.h"
#include "core/half.h"

namespace reforge::cpu {

namespace {

// Columns of Y accumulated at once: the block of Y (M rows) stays in L1 while W streams by.
int64_t chunk_columns(int64_t M) { return std::max<int64_t>(16, (4096 / std::max<int64_t>(M, 1)) / 16 * 16); }

// ---- portable version ------------------------------------------------------------------------

template <typename W>
float widen(W v) {
  if constexpr (std::is_same_v<W, float>) return v;
  else return bfloat16::to_float(v);
}

template <typename W>
void chunk_ref(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const W* w, const float* bias, float* y,
               int64_t ldy, int64_t j0, int64_t j1) {
  for (int64_t r = 0; r < M; ++r) std::fill(y + r * ldy + j0, y + r * ldy + j1, 0.0f);
  for (int64_t k = 0; k < K; ++k) {
    const W* wr = w + k * N;
    for (int64_t r = 0; r < M; ++r) {
      const float xv = x[r * ldx + k];
      float* yr = y + r * ldy;
      for (int64_t j = j0; j < j1; ++j) yr[j] += xv * widen(wr[j]);
    }
  }
  if (bias)
    for (int64_t r = 0; r < M; ++r)
      for (int64_t j = j0; j < j1; ++j) y[r * ldy + j] += bias[j];
}

// ---- AVX-512 version -------------------------------------------------------------------------

#define REFORGE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

REFORGE_AVX512 inline __m512 load_w(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
REFORGE_AVX512 inline __m512 load_w(const uint16_t* p, __mmask16 m) {
  __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// One column block [j0, j1) of every row: Y = X x W (+ bias), summing k in ascending order.
// Four rows of W go by per pass, so Y is read and written once per four multiply-adds.
template <typename W>
REFORGE_AVX512 void chunk_avx512(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const W* w,
                                 const float* bias, float* y, int64_t ldy, int64_t j0, int64_t j1) {
  const int64_t width = j1 - j0;
  const int64_t full = width / 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (width % 16)) - 1);
  const __mmask16 all = 0xffff;
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    const W* w0 = w + k * N + j0;
    const W* w1 = w0 + N;
    const W* w2 = w1 + N;
    const W* w3 = w2 + N;
    for (int64_t r = 0; r < M; ++r) {
      const float* xr = x + r * ldx + k;
      const __m512 x0 = _mm512_set1_ps(xr[0]), x1 = _mm512_set1_ps(xr[1]);
      const __m512 x2 = _mm512_set1_ps(xr[2]), x3 = _mm512_set1_ps(xr[3]);
      float* yr = y + r * ldy + j0;
      auto step = [&](int64_t j, __mmask16 m) REFORGE_AVX512 {
        __m512 a = k == 0 ? _mm512_mul_ps(x0, load_w(w0 + j, m))
                          : _mm512_fmadd_ps(x0, load_w(w0 + j, m), _mm512_maskz_loadu_ps(m, yr + j));
        a = _mm512_fmadd_ps(x1, load_w(w1 + j, m), a);
        a = _mm512_fmadd_ps(x2, load_w(w2 + j, m), a);
        a = _mm512_fmadd_ps(x3, load_w(w3 + j, m), a);
        _mm512_mask_storeu_ps(yr + j, m, a);
      };
      for (int64_t v = 0; v < full; ++v) step(v * 16, all);
      if (tail) step(full * 16, tail);
    }
  }
  for (; k < K; ++k) {
    const W* w0 = w + k * N + j0;
    for (int64_t r = 0; r < M; ++r) {
      const __m512 x0 = _mm512_set1_ps(x[r * ldx + k]);
      float* yr = y + r * ldy + j0;
      auto step = [&](int64_t j, __mmask16 m) REFORGE_AVX512 {
        __m512 a = k == 0 ? _mm512_mul_ps(x0, load_w(w0 + j, m))
                          : _mm512_fmadd_ps(x0, load_w(w0 + j, m), _mm512_maskz_loadu_ps(m, yr + j));
        _mm512_mask_storeu_ps(yr + j, m, a);
      };
      for (int64_t v = 0; v < full; ++v) step(v * 16, all);
      if (tail) step(full * 16, tail);
    }
  }
  if (bias) {
    for (int64_t r = 0; r < M; ++r) {
      float* yr = y + r * ldy + j0;
      for (int64_t v = 0; v <= full; ++v) {
        const __mmask16 m = v < full ? all : tail;
        if (!m) break;
        _mm512_mask_storeu_ps(yr + v * 16, m,
                              _mm512_add_ps(_mm512_maskz_loadu_ps(m, yr + v * 16), _mm512_maskz_loadu_ps(m, bias + j0 + v * 16)));
      }
    }
  }
}

bool has_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl");
  return ok;
}

template <typename W>
void gemv_typed(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const W* w, const float* bias, float* y,
                int64_t ldy, int threads) {
  if (K == 0) {
    for (int64_t r = 0; r < M; ++r)
      for (int64_t j = 0; j < N; ++j) y[r * ldy + j] = bias ? bias[j] : 0.0f;
    return;
  }
  const bool simd = has_avx512();
  const int64_t cw = chunk_columns(M);
  const int64_t vecs = (N + 15) / 16;
  // Below ~64K multiply-adds a parallel region costs more than it saves.
  const int64_t work = M * N * K;
  int team = static_cast<int>(std::min<int64_t>({static_cast<int64_t>(std::max(threads, 1)), vecs,
                                                 std::max<int64_t>(1, work / (1 << 16))}));
  auto run_slice = [&](int64_t c0, int64_t c1) {
    for (int64_t j0 = c0; j0 < c1; j0 += cw) {
      const int64_t j1 = std::min(c1, j0 + cw);
      if (simd) chunk_avx512<W>(M, K, N, x, ldx, w, bias, y, ldy, j0, j1);
      else chunk_ref<W>(M, K, N, x, ldx, w, bias, y, ldy, j0, j1);
    }
  };
  if (team <= 1) {
    run_slice(0, N);
    return;
  }
#pragma omp parallel num_threads(team)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t per = (vecs + nt - 1) / nt;
    const int64_t c0 = std::min(N, t * per * 16), c1 = std::min(N, (t + 1) * per * 16);
    if (c0 < c1) run_slice(c0, c1);
  }
}

REFORGE_AVX512 void bf16_convert_avx512(const float* src, uint16_t* dst, int64_t n) {
  const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512i v = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + i));
    __m512i rounded = _mm512_add_epi32(v, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(v, 16), one)));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(v, abs_mask), inf);
    __m512i r = _mm512_mask_or_epi32(_mm512_srli_epi32(rounded, 16), nan, _mm512_srli_epi32(v, 16),
                                     _mm512_set1_epi32(0x40));
    _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtepi32_epi16(r));
  }
}

}  // namespace

void gemv_rows(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const void* w, DType w_dtype,
               const float* bias, float* y, int64_t ldy, int threads) {
  if (M <= 0 || N <= 0) return;
  switch (w_dtype) {
    case DType::Float32:
      gemv_typed(M, N, K, x, ldx, static_cast<const float*>(w), bias, y, ldy, threads);
      return;
    case DType::BFloat16:
      gemv_typed(M, N, K, x, ldx, static_cast<const uint16_t*>(w), bias, y, ldy, threads);
      return;
    default:
      fail("gemv: unsupported weight type ", dtype_name(w_dtype));
  }
}

void convert_f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  if (has_avx512()) {
    bf16_convert_avx512(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16::from_float(src[i]);
}

}  // namespace reforge::cpu
