// reforge::MatMulQuant on the CPU, and cpu::matmul_quant (matmul_quant.h): products on int8
// (per output channel) and int4 (blocks, MatMulNBits' layout) weights, dequantized in registers.
//
// Each output n reads its weight row once per group of up to 4 rows of X (single-token decoding:
// once). int8: the weights are widened to float and multiplied into four partial sums per row,
// and the column's scale multiplies the sum once. int4: each block's weights are dequantized as
// the reference dequantizes them, (q - zp) * scale (on AVX-512 by a lookup in the block's table of
// its 16 values, four columns per pass for one row), and multiplied into two partial sums per row.
// The tail of K that does not fill a vector is summed in scalar code on the reference's values.
#include "backends/cpu/matmul_quant.h"

// GCC 12's AVX-512 conversion intrinsics start from _mm512_undefined_*, which
// -Wmaybe-uninitialized (and, in _mm512_reduce_add_ps, -Wuninitialized) reports wherever they inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
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

// The vector kernels take the rows of X per pass as a template parameter R and index their
// accumulators with constants only, so every partial sum stays in a register.

// Where the scalar tail of column n starts: the first k that no vector step covers.
inline int64_t vector_end(const QuantMatrix& w) {
  const auto& s = w.shape;
  if (s.bits == 8) return s.K / 16 * 16;
  const int64_t last = (s.n_blocks - 1) * s.block_size;  // only the last block can be short
  return last + (s.K - last) / 16 * 16;
}

// AVX2 + FMA, int8: 32 weights per step in four 8-float partial sums per row; the column's
// scale multiplies the sum once at the end.
template <int R>
RF_QUANT_AVX2 void column_i8_avx2(const QuantMatrix& w, int64_t n, const float* x, int64_t ldx, float* out) {
  const int64_t K = w.shape.K;
  const int8_t* q = static_cast<const int8_t*>(w.q) + n * K;
  __m256 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < 4; ++u) acc[r][u] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k));
    const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k + 16));
    const __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b0));
    const __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b0, 8)));
    const __m256 w2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b1));
    const __m256 w3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b1, 8)));
    for (int r = 0; r < R; ++r) {
      const float* xr = x + r * ldx + k;
      acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xr), w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 8), w1, acc[r][1]);
      acc[r][2] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 16), w2, acc[r][2]);
      acc[r][3] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 24), w3, acc[r][3]);
    }
  }
  for (; k + 16 <= K; k += 16) {
    const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k));
    const __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b0));
    const __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b0, 8)));
    for (int r = 0; r < R; ++r) {
      const float* xr = x + r * ldx + k;
      acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xr), w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 8), w1, acc[r][1]);
    }
  }
  const float scale = w.scales[n];
  for (int r = 0; r < R; ++r)
    out[r] = hsum256(_mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][1]), _mm256_add_ps(acc[r][2], acc[r][3]))) * scale;
  tail(w, n, k, R, x, ldx, out);
}

// AVX2 + FMA, int4: each block's weights dequantized ((q - zp) * scale) 16 at a time into two
// 8-float vectors, summed into two partial sums per row.
template <int R>
RF_QUANT_AVX2 void column_i4_avx2(const QuantMatrix& w, int64_t n, const float* x, int64_t ldx, float* out) {
  const auto& s = w.shape;
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const uint8_t* row = static_cast<const uint8_t*>(w.q) + n * s.n_blocks * s.blob;
  for (int64_t b = 0; b < s.n_blocks; ++b) {
    const int64_t k0 = b * s.block_size, len = std::min(s.block_size, s.K - k0);
    const __m256 scale = _mm256_set1_ps(w.scales[n * s.n_blocks + b]);
    const __m256 zp = _mm256_set1_ps(static_cast<float>(w.zp(n, b)));
    const uint8_t* blob = row + b * s.blob;
    for (int64_t j = 0; j + 16 <= len; j += 16) {
      const __m128i v = unpack_nibbles(blob + j / 2);
      const __m256 w0 = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), zp), scale);
      const __m256 w1 =
          _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))), zp), scale);
      for (int r = 0; r < R; ++r) {
        const float* xr = x + r * ldx + k0 + j;
        acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xr), w0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 8), w1, acc[r][1]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum256(_mm256_add_ps(acc[r][0], acc[r][1]));
  tail(w, n, vector_end(w), R, x, ldx, out);
}

// 16 int8 weights widened to float.
RF_QUANT_AVX512 inline __m512 widen16(const int8_t* q) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
}

// The 16 dequantized values of an int4 block, (i - zp) * scale for i = 0..15, as the reference
// computes them: a vector the block's nibbles index.
RF_QUANT_AVX512 inline __m512 block_table(float scale, float zp) {
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(zp)), _mm512_set1_ps(scale));
}

// 16 weights from 16 bytes whose low 4 bits are the nibbles (vpermps reads only those bits).
RF_QUANT_AVX512 inline __m512 lookup16(__m128i v, __m512 table) {
  return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(v), table);
}

// AVX-512, int8: 64 weights per step in four 16-float partial sums per row; the column's scale
// multiplies the sum once at the end.
template <int R>
RF_QUANT_AVX512 void column_i8_avx512(const QuantMatrix& w, int64_t n, const float* x, int64_t ldx, float* out) {
  const int64_t K = w.shape.K;
  const int8_t* q = static_cast<const int8_t*>(w.q) + n * K;
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < 4; ++u) acc[r][u] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) {
    const __m512 w0 = widen16(q + k), w1 = widen16(q + k + 16), w2 = widen16(q + k + 32), w3 = widen16(q + k + 48);
    for (int r = 0; r < R; ++r) {
      const float* xr = x + r * ldx + k;
      acc[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(xr), w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_loadu_ps(xr + 16), w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(_mm512_loadu_ps(xr + 32), w2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(_mm512_loadu_ps(xr + 48), w3, acc[r][3]);
    }
  }
  for (; k + 16 <= K; k += 16) {
    const __m512 w0 = widen16(q + k);
    for (int r = 0; r < R; ++r) acc[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + k), w0, acc[r][0]);
  }
  const float scale = w.scales[n];
  for (int r = 0; r < R; ++r)
    out[r] =
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), _mm512_add_ps(acc[r][2], acc[r][3]))) *
        scale;
  tail(w, n, k, R, x, ldx, out);
}

// The zero points of column n's blocks [b, b + 64) as floats, 16 at a time from 8 bytes where the
// row holds them (the rest one at a time).
RF_QUANT_AVX512 inline void zero_points64(const QuantMatrix& w, int64_t n, int64_t b, float* zpf) {
  const auto& s = w.shape;
  int64_t i = 0;
  if (w.zero_points) {
    const uint8_t* zrow = w.zero_points + n * s.zp_row;
    for (; i + 16 <= 64 && (b + i) / 2 + 8 <= s.zp_row; i += 16)
      _mm512_store_ps(zpf + i, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(unpack_nibbles(zrow + (b + i) / 2))));
  }
  for (; i < 64 && b + i < s.n_blocks; ++i) zpf[i] = static_cast<float>(w.zp(n, b + i));
}

// AVX-512, int4: 32 weights (16 bytes) per step, dequantized by a lookup in the block's table of
// its 16 values (one permute per 16 weights) and summed into two partial sums per row; a 16-weight
// step where a block has 16 left.
template <int R>
RF_QUANT_AVX512 void column_i4_avx512(const QuantMatrix& w, int64_t n, const float* x, int64_t ldx, float* out) {
  const auto& s = w.shape;
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const uint8_t* row = static_cast<const uint8_t*>(w.q) + n * s.n_blocks * s.blob;
  alignas(64) float zpf[64];
  for (int64_t b = 0; b < s.n_blocks; ++b) {
    if (b % 64 == 0) zero_points64(w, n, b, zpf);
    const int64_t k0 = b * s.block_size, len = std::min(s.block_size, s.K - k0);
    const __m512 table = block_table(w.scales[n * s.n_blocks + b], zpf[b % 64]);
    const uint8_t* blob = row + b * s.blob;
    int64_t j = 0;
    for (; j + 32 <= len; j += 32) {
      // Low nibbles in `bytes`, high ones in `hi` (bits above the nibble are ignored by the lookup).
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blob + j / 2));
      const __m128i hi = _mm_srli_epi16(bytes, 4);
      const __m512 w0 = lookup16(_mm_unpacklo_epi8(bytes, hi), table),
                   w1 = lookup16(_mm_unpackhi_epi8(bytes, hi), table);
      for (int r = 0; r < R; ++r) {
        const float* xr = x + r * ldx + k0 + j;
        acc[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(xr), w0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(_mm512_loadu_ps(xr + 16), w1, acc[r][1]);
      }
    }
    if (j + 16 <= len) {
      const __m512 w0 = lookup16(unpack_nibbles(blob + j / 2), table);
      for (int r = 0; r < R; ++r) acc[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + k0 + j), w0, acc[r][0]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
  tail(w, n, vector_end(w), R, x, ldx, out);
}

// AVX-512, int4, one row of X: columns n .. n + C - 1 at once, column_i4_avx512<1>'s steps for
// each, interleaved (C times the independent work per step, each X vector loaded once for all).
template <int C>
RF_QUANT_AVX512 void columns_i4_avx512(const QuantMatrix& w, int64_t n, const float* x, float* out) {
  const auto& s = w.shape;
  __m512 acc[C][2];
  for (int c = 0; c < C; ++c) acc[c][0] = acc[c][1] = _mm512_setzero_ps();
  const uint8_t* row = static_cast<const uint8_t*>(w.q) + n * s.n_blocks * s.blob;
  const int64_t stride = s.n_blocks * s.blob;  // bytes from one column to the next
  alignas(64) float zpf[C][64];
  for (int64_t b = 0; b < s.n_blocks; ++b) {
    if (b % 64 == 0)
      for (int c = 0; c < C; ++c) zero_points64(w, n + c, b, zpf[c]);
    const int64_t k0 = b * s.block_size, len = std::min(s.block_size, s.K - k0);
    __m512 table[C];
    for (int c = 0; c < C; ++c) table[c] = block_table(w.scales[(n + c) * s.n_blocks + b], zpf[c][b % 64]);
    const uint8_t* blob = row + b * s.blob;
    int64_t j = 0;
    for (; j + 32 <= len; j += 32) {
      const __m512 x0 = _mm512_loadu_ps(x + k0 + j), x1 = _mm512_loadu_ps(x + k0 + j + 16);
      for (int c = 0; c < C; ++c) {
        const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blob + c * stride + j / 2));
        const __m128i ph = _mm_srli_epi16(p, 4);
        acc[c][0] = _mm512_fmadd_ps(x0, lookup16(_mm_unpacklo_epi8(p, ph), table[c]), acc[c][0]);
        acc[c][1] = _mm512_fmadd_ps(x1, lookup16(_mm_unpackhi_epi8(p, ph), table[c]), acc[c][1]);
      }
    }
    if (j + 16 <= len) {
      const __m512 x0 = _mm512_loadu_ps(x + k0 + j);
      for (int c = 0; c < C; ++c)
        acc[c][0] = _mm512_fmadd_ps(x0, lookup16(unpack_nibbles(blob + c * stride + j / 2), table[c]), acc[c][0]);
    }
  }
  for (int c = 0; c < C; ++c) {
    out[c] = _mm512_reduce_add_ps(_mm512_add_ps(acc[c][0], acc[c][1]));
    tail(w, n + c, vector_end(w), 1, x, 0, out + c);
  }
}

constexpr int kPairColumns = 4;  // columns per pass of columns_i4_avx512

using ColumnFn = void (*)(const QuantMatrix&, int64_t, const float*, int64_t, float*);

template <int R>
void column_generic_rows(const QuantMatrix& w, int64_t n, const float* x, int64_t ldx, float* out) {
  column_generic(w, n, R, x, ldx, out);
}

// The kernel for `rows` rows (1..kMaxRows) at the CPU's level.
ColumnFn pick_column(int bits, int rows) {
  const SimdLevel level = simd_level();
#define RF_QUANT_ROWS(F) (rows == 1 ? F<1> : rows == 2 ? F<2> : rows == 3 ? F<3> : F<4>)
  if (level == SimdLevel::Avx512) return bits == 8 ? RF_QUANT_ROWS(column_i8_avx512) : RF_QUANT_ROWS(column_i4_avx512);
  if (level == SimdLevel::Avx2) return bits == 8 ? RF_QUANT_ROWS(column_i8_avx2) : RF_QUANT_ROWS(column_i4_avx2);
  return RF_QUANT_ROWS(column_generic_rows);
#undef RF_QUANT_ROWS
}

}  // namespace

void matmul_quant(const QuantMatrix& w, int64_t M, const float* x, int64_t ldx, const float* bias, float* y,
                  int64_t ldy, int threads) {
  const int64_t N = w.shape.N;
  auto run = [&](int64_t n0, int64_t n1) {
    float out[kMaxRows > kPairColumns ? kMaxRows : kPairColumns];
    for (int64_t m0 = 0; m0 < M; m0 += kMaxRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, M - m0));
      const ColumnFn column = pick_column(w.shape.bits, rows);
      int64_t n = n0;
      if (rows == 1 && w.shape.bits == 4 && simd_level() == SimdLevel::Avx512)
        for (; n + kPairColumns <= n1; n += kPairColumns) {
          columns_i4_avx512<kPairColumns>(w, n, x + m0 * ldx, out);
          for (int c = 0; c < kPairColumns; ++c) y[m0 * ldy + n + c] = bias ? out[c] + bias[n + c] : out[c];
        }
      for (; n < n1; ++n) {
        column(w, n, x + m0 * ldx, ldx, out);
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

// com.microsoft MatMulNBits (ops/quant/matmul_nbits.cc) in the form reforge's int4 shares with it
// (bits 4, float32 A and scales, zero points absent or packed uint8, no g_idx, float32 bias): the
// product above on its B, scales and zero points as they are. Every other form runs the op's
// reference kernel.
void matmul_nbits_cpu(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const int64_t K = node.attr_int("K", 0), N = node.attr_int("N", 0), bits = node.attr_int("bits", 4),
                block = node.attr_int("block_size", 0);
  const Tensor& a = ctx.input(0);
  bool fast = bits == 4 && K > 0 && N > 0 && quant::valid_block_size(block) && a.dtype() == DType::Float32 &&
              a.rank() >= 1 && a.shape().back() == K && !ctx.has_input(4);
  quant::QuantMatrix w;
  const float* bias = nullptr;
  if (fast) {
    w.shape = quant::quant_shape(4, block, K, N, node.label());
    const Tensor& q = ctx.input(1);
    const Tensor& s = ctx.input(2);
    fast = q.dtype() == DType::UInt8 && q.shape() == w.shape.q_shape() && s.dtype() == DType::Float32 &&
           s.numel() == w.shape.num_scales();
    if (fast && ctx.has_input(3)) {
      const Tensor& z = ctx.input(3);
      fast = z.dtype() == DType::UInt8 && z.numel() == w.shape.num_zero_points();
      if (fast) w.zero_points = static_cast<const uint8_t*>(z.raw());
    }
    if (fast && ctx.has_input(5)) {
      const Tensor& b = ctx.input(5);
      fast = b.dtype() == DType::Float32 && b.numel() == N;
      if (fast) bias = b.data<float>();
    }
    if (fast) {
      w.q = q.raw();
      w.scales = s.data<float>();
    }
  }
  if (!fast) {
    const OpDef* def = OpRegistry::global().find(node.domain, node.op_type, node.opset);
    REFORGE_ASSERT(def && def->kernel);
    def->kernel(ctx);
    return;
  }
  Shape out = a.shape();
  out.back() = N;
  Tensor& y = ctx.allocate_output_uninit(0, DType::Float32, out);
  cpu::matmul_quant(w, a.numel() / K, a.data<float>(), K, bias, y.mutable_data<float>(), N, ctx.threads());
}

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
  r.add({"cpu", "com.microsoft", "MatMulNBits", 1, INT_MAX, ops::matmul_nbits_cpu});
}

}  // namespace reforge::cpu
