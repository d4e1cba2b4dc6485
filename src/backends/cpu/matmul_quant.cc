// reforge::MatMulQuant on the CPU, and cpu::matmul_quant (matmul_quant.h): products on int8
// (per output channel) and int4 (blocks, MatMulNBits' layout) weights, dequantized in registers.
//
// Each output n reads its weight row once per group of up to 4 rows of X (single-token decoding:
// once). A weight vector is made as the reference makes it, int -> float, minus the zero point
// (int4), times the scale, then multiplied into 4 partial sums per row (independent chains, so the
// multiply-adds overlap); the tail of K that does not fill a vector is summed in scalar code.
#include "backends/cpu/matmul_quant.h"

// GCC 12's AVX-512 conversion intrinsics start from _mm512_undefined_*, which
// -Wmaybe-uninitialized reports wherever they inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "backends/cpu/cpu_backend.h"
#include "core/simd.h"

namespace reforge::cpu {

namespace {

using ops::quant::QuantMatrix;

constexpr int kMaxRows = 4;  // rows of X per pass over a weight row

#define RF_QUANT_AVX2 __attribute__((target("avx2,fma")))
#define RF_QUANT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

// Nibble j of an int4 weight row's block b.
inline int nibble(const QuantMatrix& w, int64_t n, int64_t k) {
  const auto& s = w.shape;
  const int64_t b = k / s.block_size, j = k % s.block_size;
  const uint8_t byte = static_cast<const uint8_t*>(w.q)[(n * s.n_blocks + b) * s.blob + j / 2];
  return (j & 1) ? byte >> 4 : byte & 0x0f;
}

// The dequantized weight (k, n), as the reference computes it.
inline float weight(const QuantMatrix& w, int64_t n, int64_t k) {
  const auto& s = w.shape;
  if (s.bits == 8) return static_cast<float>(static_cast<const int8_t*>(w.q)[n * s.K + k]) * w.scales[n];
  const int64_t b = k / s.block_size;
  return static_cast<float>(nibble(w, n, k) - w.zp(n, b)) * w.scales[n * s.n_blocks + b];
}

// Adds sum over k in [k0, K) of X[r, k] * Wd(k, n) to out[r].
inline void tail(const QuantMatrix& w, int64_t n, int64_t k0, int rows, const float* x, int64_t ldx, float* out) {
  for (int64_t k = k0; k < w.shape.K; ++k) {
    const float wk = weight(w, n, k);
    for (int r = 0; r < rows; ++r) out[r] += x[r * ldx + k] * wk;
  }
}

// Generic: the reference's sum, one row at a time.
void column_generic(const QuantMatrix& w, int64_t n, int rows, const float* x, int64_t ldx, float* out) {
  for (int r = 0; r < rows; ++r) out[r] = 0.0f;
  tail(w, n, 0, rows, x, ldx, out);
}

// The 16 nibbles of 8 bytes, in k order (low nibble first), as 16 bytes.
RF_QUANT_AVX2 inline __m128i unpack_nibbles(const uint8_t* p) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(bytes, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  return _mm_unpacklo_epi8(lo, hi);
}

RF_QUANT_AVX2 inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// AVX2 + FMA: 16 weights per step (two 8-float vectors).
template <int kBits>
RF_QUANT_AVX2 void column_avx2(const QuantMatrix& w, int64_t n, int rows, const float* x, int64_t ldx, float* out) {
  const auto& s = w.shape;
  const int64_t K = s.K, full = K / 16 * 16;
  __m256 acc[kMaxRows][4];
  for (int r = 0; r < kMaxRows; ++r)
    for (int u = 0; u < 4; ++u) acc[r][u] = _mm256_setzero_ps();
  const int8_t* q8 = static_cast<const int8_t*>(w.q) + n * K;
  __m256 scale = _mm256_set1_ps(kBits == 8 ? w.scales[n] : 0.0f), zp = _mm256_setzero_ps();
  for (int64_t k = 0; k < full; k += 16) {
    __m256 w0, w1;
    if constexpr (kBits == 8) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q8 + k));
      w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), scale);
      w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8))), scale);
    } else {
      const int64_t b = k / s.block_size, j = k % s.block_size;
      if (j == 0) {
        scale = _mm256_set1_ps(w.scales[n * s.n_blocks + b]);
        zp = _mm256_set1_ps(static_cast<float>(w.zp(n, b)));
      }
      const __m128i v = unpack_nibbles(static_cast<const uint8_t*>(w.q) + (n * s.n_blocks + b) * s.blob + j / 2);
      w0 = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), zp), scale);
      w1 = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))), zp), scale);
    }
    const int u = static_cast<int>((k >> 4) & 1) * 2;
    for (int r = 0; r < rows; ++r) {
      const float* xr = x + r * ldx + k;
      acc[r][u] = _mm256_fmadd_ps(_mm256_loadu_ps(xr), w0, acc[r][u]);
      acc[r][u + 1] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 8), w1, acc[r][u + 1]);
    }
  }
  for (int r = 0; r < rows; ++r)
    out[r] = hsum256(_mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][1]), _mm256_add_ps(acc[r][2], acc[r][3])));
  tail(w, n, full, rows, x, ldx, out);
}

RF_QUANT_AVX512 inline __m512 weights16_avx512(const QuantMatrix& w, int64_t n, int64_t k, __m512& scale, __m512& zp,
                                               int bits) {
  const auto& s = w.shape;
  if (bits == 8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(w.q) + n * s.K + k));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), scale);
  }
  const int64_t b = k / s.block_size, j = k % s.block_size;
  if (j == 0) {
    scale = _mm512_set1_ps(w.scales[n * s.n_blocks + b]);
    zp = _mm512_set1_ps(static_cast<float>(w.zp(n, b)));
  }
  const __m128i v = unpack_nibbles(static_cast<const uint8_t*>(w.q) + (n * s.n_blocks + b) * s.blob + j / 2);
  return _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)), zp), scale);
}

// AVX-512: 16 weights per step (one 16-float vector), 4 partial sums per row.
template <int kBits>
RF_QUANT_AVX512 void column_avx512(const QuantMatrix& w, int64_t n, int rows, const float* x, int64_t ldx, float* out) {
  const int64_t K = w.shape.K, full = K / 16 * 16;
  __m512 acc[kMaxRows][4];
  for (int r = 0; r < kMaxRows; ++r)
    for (int u = 0; u < 4; ++u) acc[r][u] = _mm512_setzero_ps();
  __m512 scale = _mm512_set1_ps(kBits == 8 ? w.scales[n] : 0.0f), zp = _mm512_setzero_ps();
  for (int64_t k = 0; k < full; k += 16) {
    const __m512 wv = weights16_avx512(w, n, k, scale, zp, kBits);
    const int u = static_cast<int>((k >> 4) & 3);
    for (int r = 0; r < rows; ++r) acc[r][u] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + k), wv, acc[r][u]);
  }
  for (int r = 0; r < rows; ++r)
    out[r] =
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), _mm512_add_ps(acc[r][2], acc[r][3])));
  tail(w, n, full, rows, x, ldx, out);
}

using ColumnFn = void (*)(const QuantMatrix&, int64_t, int, const float*, int64_t, float*);

ColumnFn pick_column(int bits) {
  switch (simd_level()) {
    case SimdLevel::Avx512:
      return bits == 8 ? column_avx512<8> : column_avx512<4>;
    case SimdLevel::Avx2:
      return bits == 8 ? column_avx2<8> : column_avx2<4>;
    default:
      return column_generic;
  }
}

}  // namespace

void matmul_quant(const QuantMatrix& w, int64_t M, const float* x, int64_t ldx, const float* bias, float* y,
                  int64_t ldy, int threads) {
  const int64_t N = w.shape.N;
  const ColumnFn column = pick_column(w.shape.bits);
  auto run = [&](int64_t n0, int64_t n1) {
    float out[kMaxRows];
    for (int64_t m0 = 0; m0 < M; m0 += kMaxRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, M - m0));
      for (int64_t n = n0; n < n1; ++n) {
        column(w, n, rows, x + m0 * ldx, ldx, out);
        for (int r = 0; r < rows; ++r) y[(m0 + r) * ldy + n] = bias ? out[r] + bias[n] : out[r];
      }
    }
  };
  // Below ~64K multiply-adds a parallel region costs more than it saves.
  const int64_t work = M * N * w.shape.K;
  const int team = static_cast<int>(
      std::min<int64_t>({static_cast<int64_t>(std::max(threads, 1)), N, std::max<int64_t>(1, work / (1 << 16))}));
  if (team <= 1) {
    run(0, N);
    return;
  }
#pragma omp parallel num_threads(team)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t per = (N + nt - 1) / nt;
    const int64_t n0 = std::min(N, t * per), n1 = std::min(N, (t + 1) * per);
    if (n0 < n1) run(n0, n1);
  }
}

}  // namespace reforge::cpu

namespace reforge::ops {

namespace {

void matmul_quant_cpu(KernelContext& ctx) {
  const quant::MatMulQuantSetup s = quant::matmul_quant_setup(ctx);
  Tensor& y = ctx.allocate_output_uninit(0, DType::Float32, s.out);
  cpu::matmul_quant(s.w, s.rows, ctx.input(0).data<float>(), s.w.shape.K, s.bias, y.mutable_data<float>(), s.w.shape.N,
                    ctx.threads());
}

}  // namespace

}  // namespace reforge::ops

namespace reforge::cpu {

void register_matmul_quant_kernels(KernelRegistry& r) {
  r.add({"cpu", "reforge", "MatMulQuant", 1, INT_MAX, ops::matmul_quant_cpu});
}

}  // namespace reforge::cpu
