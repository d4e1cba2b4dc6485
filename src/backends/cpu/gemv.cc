#include "backends/cpu/gemv.h"

#include "backends/cpu/gemv_avx2.h"

// GCC 12's AVX-512 conversion intrinsics start from _mm512_undefined_*, which
// -Wmaybe-uninitialized reports (as "'__Y' may be used uninitialized") wherever they inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The helpers returning __m512 are internal and compiled for AVX-512 targets only: the note on
// the ABI of such returns from default-target code does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/half.h"
#include "core/simd.h"
#include "core/thread_pool.h"

namespace reforge::cpu {

namespace {

// Columns of Y accumulated at once: the block of Y (M rows) stays in L1 while W streams by.
// AVX2's few-rows kernel keeps Y's block in L2 instead (16K elements: 64 KB; longer runs of
// each W row, measured 10-20% faster at 8 rows on Zen 3 than the L1-sized block).
int64_t chunk_columns(int64_t M, bool avx2) {
  const int64_t elements = avx2 && M >= 2 ? 16384 : 4096;
  return std::max<int64_t>(16, (elements / std::max<int64_t>(M, 1)) / 16 * 16);
}

// ---- portable version ------------------------------------------------------------------------

// W: float, uint16_t (bfloat16 bits) or float16.
template <typename W>
float widen(W v) {
  if constexpr (std::is_same_v<W, float>)
    return v;
  else if constexpr (std::is_same_v<W, float16>)
    return float16::to_float(v.bits);
  else
    return bfloat16::to_float(v);
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
REFORGE_AVX512 inline __m512 load_w(const float16* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
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
        _mm512_mask_storeu_ps(
            yr + v * 16, m,
            _mm512_add_ps(_mm512_maskz_loadu_ps(m, yr + v * 16), _mm512_maskz_loadu_ps(m, bias + j0 + v * 16)));
      }
    }
  }
}

// How far ahead of the loads (in bfloat16 elements: 2 KB) chunk_bf16_pairs prefetches each W row.
// Prefetching past the end of a row (or of W) is harmless: a prefetch never faults.
constexpr int64_t kBf16PrefetchAhead = 1024;

// bfloat16 W, full groups of 32 columns: one 64-byte load holds 32 weights, and the even and
// odd columns widen to float32 with one shift or one mask each (no conversion instruction), so
// W streams with ~3 instructions per cache line instead of ~8. The group's accumulators hold the
// even columns, then the odd ones, and are put back in order at the end; every element is still
// summed over k in ascending order, bit-identical to chunk_avx512.
REFORGE_AVX512 void chunk_bf16_pairs(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const uint16_t* w,
                                     const float* bias, float* y, int64_t ldy, int64_t j0, int64_t j1) {
  const int64_t groups = (j1 - j0) / 32;
  const int64_t jg = j0 + groups * 32;
  if (jg < j1) chunk_avx512<uint16_t>(M, K, N, x, ldx, w, bias, y, ldy, jg, j1);
  if (groups == 0) return;
  const __m512i odd_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  auto even = [](__m512i q) REFORGE_AVX512 { return _mm512_castsi512_ps(_mm512_slli_epi32(q, 16)); };
  auto odd = [&](__m512i q) REFORGE_AVX512 { return _mm512_castsi512_ps(_mm512_and_si512(q, odd_mask)); };
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    const uint16_t* w0 = w + k * N + j0;
    const uint16_t* w1 = w0 + N;
    const uint16_t* w2 = w1 + N;
    const uint16_t* w3 = w2 + N;
    for (int64_t r = 0; r < M; ++r) {
      const float* xr = x + r * ldx + k;
      const __m512 x0 = _mm512_set1_ps(xr[0]), x1 = _mm512_set1_ps(xr[1]);
      const __m512 x2 = _mm512_set1_ps(xr[2]), x3 = _mm512_set1_ps(xr[3]);
      float* yr = y + r * ldy + j0;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t j = g * 32;
        if (r == 0) {
          // Each W row is one stream here; the hardware prefetchers alone keep too few lines in
          // flight for it (Xeon, one thread: the 32000-column lm_head 9.0 -> 10.9 GB/s).
          _mm_prefetch(reinterpret_cast<const char*>(w0 + j + kBf16PrefetchAhead), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(w1 + j + kBf16PrefetchAhead), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(w2 + j + kBf16PrefetchAhead), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(w3 + j + kBf16PrefetchAhead), _MM_HINT_T0);
        }
        const __m512i q0 = _mm512_loadu_si512(w0 + j), q1 = _mm512_loadu_si512(w1 + j);
        const __m512i q2 = _mm512_loadu_si512(w2 + j), q3 = _mm512_loadu_si512(w3 + j);
        __m512 e = k == 0 ? _mm512_mul_ps(x0, even(q0)) : _mm512_fmadd_ps(x0, even(q0), _mm512_loadu_ps(yr + j));
        __m512 o = k == 0 ? _mm512_mul_ps(x0, odd(q0)) : _mm512_fmadd_ps(x0, odd(q0), _mm512_loadu_ps(yr + j + 16));
        e = _mm512_fmadd_ps(x1, even(q1), e);
        o = _mm512_fmadd_ps(x1, odd(q1), o);
        e = _mm512_fmadd_ps(x2, even(q2), e);
        o = _mm512_fmadd_ps(x2, odd(q2), o);
        e = _mm512_fmadd_ps(x3, even(q3), e);
        o = _mm512_fmadd_ps(x3, odd(q3), o);
        _mm512_storeu_ps(yr + j, e);
        _mm512_storeu_ps(yr + j + 16, o);
      }
    }
  }
  for (; k < K; ++k) {
    const uint16_t* w0 = w + k * N + j0;
    for (int64_t r = 0; r < M; ++r) {
      const __m512 x0 = _mm512_set1_ps(x[r * ldx + k]);
      float* yr = y + r * ldy + j0;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t j = g * 32;
        const __m512i q0 = _mm512_loadu_si512(w0 + j);
        __m512 e = k == 0 ? _mm512_mul_ps(x0, even(q0)) : _mm512_fmadd_ps(x0, even(q0), _mm512_loadu_ps(yr + j));
        __m512 o = k == 0 ? _mm512_mul_ps(x0, odd(q0)) : _mm512_fmadd_ps(x0, odd(q0), _mm512_loadu_ps(yr + j + 16));
        _mm512_storeu_ps(yr + j, e);
        _mm512_storeu_ps(yr + j + 16, o);
      }
    }
  }
  // Back to column order (then the bias, after the sum as everywhere).
  const __m512i lo_idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_idx = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t r = 0; r < M; ++r) {
    float* yr = y + r * ldy + j0;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t j = g * 32;
      const __m512 e = _mm512_loadu_ps(yr + j), o = _mm512_loadu_ps(yr + j + 16);
      __m512 lo = _mm512_permutex2var_ps(e, lo_idx, o), hi = _mm512_permutex2var_ps(e, hi_idx, o);
      if (bias) {
        lo = _mm512_add_ps(lo, _mm512_loadu_ps(bias + j0 + j));
        hi = _mm512_add_ps(hi, _mm512_loadu_ps(bias + j0 + j + 16));
      }
      _mm512_storeu_ps(yr + j, lo);
      _mm512_storeu_ps(yr + j + 16, hi);
    }
  }
}

// Follows core/simd.h's level, so SimdOverride / REFORGE_SIMD can force each variant.
bool has_avx512() { return simd_level() == SimdLevel::Avx512; }

template <typename W>
void gemv_typed(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const W* w, const float* bias, float* y,
                int64_t ldy, int threads) {
  if (K == 0) {
    for (int64_t r = 0; r < M; ++r)
      for (int64_t j = 0; j < N; ++j) y[r * ldy + j] = bias ? bias[j] : 0.0f;
    return;
  }
  const bool simd = has_avx512();
  const bool simd2 = !simd && (std::is_same_v<W, float16> ? avx2::available_f16() : avx2::available());
  const int64_t cw = chunk_columns(M, simd2);
  const int64_t vecs = (N + 15) / 16;
  // Below ~64K multiply-adds a parallel region costs more than it saves.
  const int64_t work = M * N * K;
  int team = static_cast<int>(
      std::min<int64_t>({static_cast<int64_t>(std::max(threads, 1)), vecs, std::max<int64_t>(1, work / (1 << 16))}));
  auto run_slice = [&](int64_t c0, int64_t c1) {
    for (int64_t j0 = c0; j0 < c1; j0 += cw) {
      const int64_t j1 = std::min(c1, j0 + cw);
      if (simd) {
        if constexpr (std::is_same_v<W, uint16_t>)
          chunk_bf16_pairs(M, K, N, x, ldx, w, bias, y, ldy, j0, j1);
        else
          chunk_avx512<W>(M, K, N, x, ldx, w, bias, y, ldy, j0, j1);
      } else if (simd2) {
        if constexpr (std::is_same_v<W, uint16_t>)
          avx2::chunk_bf16(M, K, N, x, ldx, w, bias, y, ldy, j0, j1);
        else if constexpr (std::is_same_v<W, float16>)
          avx2::chunk_f16(M, K, N, x, ldx, w, bias, y, ldy, j0, j1);
        else
          avx2::chunk_f32(M, K, N, x, ldx, w, bias, y, ldy, j0, j1);
      } else {
        chunk_ref<W>(M, K, N, x, ldx, w, bias, y, ldy, j0, j1);
      }
    }
  };
  if (team <= 1) {
    run_slice(0, N);
    return;
  }
  parallel_tasks(team, static_cast<int>(team), [&](int64_t t) {
    const int64_t nt = team;
    const int64_t per = (vecs + nt - 1) / nt;
    const int64_t c0 = std::min(N, t * per * 16), c1 = std::min(N, (t + 1) * per * 16);
    if (c0 < c1) run_slice(c0, c1);
  });
}

// Round-to-nearest-even float32 -> bfloat16 bits (in the low half of each lane), NaN kept quiet:
// bfloat16::from_float, 16 at a time.
REFORGE_AVX512 inline __m512i bf16_bits(__m512i v) {
  const __m512i rounded = _mm512_add_epi32(
      v, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(v, 16), _mm512_set1_epi32(1))));
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(v, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(_mm512_srli_epi32(rounded, 16), nan, _mm512_srli_epi32(v, 16), _mm512_set1_epi32(0x40));
}

REFORGE_AVX512 void bf16_split_avx512(const float* src, uint16_t* hi, uint16_t* lo, int64_t n) {
  const __m512i finite_max = _mm512_set1_epi32(0x7f7fffff), abs_mask = _mm512_set1_epi32(0x7fffffff);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(m, src + i);
    const __m512i h = bf16_bits(_mm512_castps_si512(x));
    const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    // Inf and NaN go whole into the high part.
    const __mmask16 finite = _mm512_cmple_epu32_mask(_mm512_and_si512(_mm512_castps_si512(hf), abs_mask), finite_max);
    const __m512i l = _mm512_maskz_mov_epi32(finite, bf16_bits(_mm512_castps_si512(_mm512_sub_ps(x, hf))));
    _mm256_mask_storeu_epi16(hi + i, m, _mm512_cvtepi32_epi16(h));
    if (lo) _mm256_mask_storeu_epi16(lo + i, m, _mm512_cvtepi32_epi16(l));
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
    case DType::Float16:
      gemv_typed(M, N, K, x, ldx, static_cast<const float16*>(w), bias, y, ldy, threads);
      return;
    default:
      fail("gemv: unsupported weight type ", dtype_name(w_dtype));
  }
}

int64_t gemv_max_rows() {
  switch (simd_level()) {
    case SimdLevel::Avx2:
      return 8;
    default:
      return 1;
  }
}

void split_f32_to_bf16(const float* src, uint16_t* hi, uint16_t* lo, int64_t n) {
  if (has_avx512()) {
    bf16_split_avx512(src, hi, lo, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    hi[i] = bfloat16::from_float(src[i]);
    const float h = bfloat16::to_float(hi[i]);
    if (lo) lo[i] = std::isfinite(h) ? bfloat16::from_float(src[i] - h) : 0;
  }
}

void round_to_bf16(const float* src, float* dst, int64_t n) {
  // (At -O3 the compiler vectorizes this loop, NaN test included.)
  parallel_for(n, n > (1 << 18) ? omp_get_max_threads() : 1, 1 << 14, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dst[i] = bfloat16::to_float(bfloat16::from_float(src[i]));
  });
}

namespace {
__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}
}  // namespace

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  static const bool f16c = __builtin_cpu_supports("avx") && cpu_has_f16c();
  if (f16c && simd_level() != SimdLevel::Generic) {
    f16_to_f32_f16c(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = float16::to_float(src[i]);
}

void widen_to_f32(const uint16_t* src, DType dtype, int64_t n, float* dst) {
  if (dtype == DType::Float16) return f16_to_f32(src, dst, n);
  REFORGE_ASSERT(dtype == DType::BFloat16);
  for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16::to_float(src[i]);
}

}  // namespace reforge::cpu
