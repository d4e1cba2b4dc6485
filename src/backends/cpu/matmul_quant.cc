// reforge::MatMulQuant on the CPU, and cpu::matmul_quant (matmul_quant.h): products on int8
// (per output channel) and int4 (blocks, MatMulNBits' layout) weights, dequantized in registers.
//
// int8: each output n reads its weight row once per group of up to 4 rows of X; the weights are
// widened to float and multiplied into four partial sums per row, and the column's scale multiplies
// the sum once.
//
// int4: X is prepared once per call (Int4Rows): each row zero-padded to whole blocks, every 32 k
// reordered into its 16 even k then its 16 odd k, and summed per block. 16 bytes of a weight row (32
// weights) widen to 16 integers whose low nibbles are the weights of the even k and high nibbles those
// of the odd k: a mask and a shift, two conversions and two multiply-adds against the prepared X, no
// table and no shuffle per weight. The zero point is factored out of each block,
//   sum_k x_k (q_k - zp) s = s sum_k x_k q_k - s zp X_b   (X_b: the block's sum of x),
// so a block's products sum into one partial sum that the block's scale multiplies into the output's
// sum, and sum_b s_b zp_b X_b, 16 blocks per vector, is subtracted at the end. A pass computes several
// columns for up to 4 rows, each X vector loaded once for all of them. The zero padding makes the
// nibbles past K contribute nothing whatever they hold, so no k is left to scalar code.
//
// Every output is computed by one thread in an order that depends only on the weight's shape, not on
// the thread count or on which rows and columns share its pass.
#include "backends/cpu/matmul_quant.h"

// GCC 12's AVX-512 conversion intrinsics start from _mm512_undefined_*, which
// -Wmaybe-uninitialized (and, in _mm512_reduce_add_ps, -Wuninitialized) reports wherever they inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/simd.h"
#include "core/thread_pool.h"

namespace reforge::cpu {

namespace {

using ops::quant::QuantMatrix;

constexpr int kMaxRows = 4;                        // rows of X per pass over a weight row
constexpr int kMaxColumns = 4;                     // columns per pass of the int4 kernels
constexpr int64_t kKeptFloats = int64_t{1} << 16;  // the largest prepared X (int4) kept between calls
// How far ahead of its reads a kernel prefetches a weight's bytes. Decoding streams the weights once per token
// through one core, whose hardware prefetchers alone keep too few lines in flight. On an AVX-512 Xeon,
// bench/quant_bench.cc finds the kernels fastest at 8 KB ahead for int8 and int4 in blocks of 16 or 32, and at 2 KB
// for larger int4 blocks (whose passes prefetch several lines per block at once).
constexpr int64_t kPrefetchBytes = 8192;
inline int64_t int4_prefetch_bytes(int64_t blob) { return blob <= 16 ? kPrefetchBytes : 2048; }

// Brings the line at p into the L1 cache. An asm statement, which the optimizer keeps: GCC 12 deletes
// _mm_prefetch as free of effects from some loops that it inlines into a caller.
inline void prefetch_line(const char* p) { asm volatile("prefetcht0 %0" : : "m"(*p)); }

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

RF_QUANT_AVX2 inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The vector kernels take the rows of X (R) and the columns (C) per pass as template parameters and
// index their accumulators with constants only, so every partial sum stays in a register.

// ---- int8 ----

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
    prefetch_line(reinterpret_cast<const char*>(q + k) + kPrefetchBytes);
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

// 16 int8 weights widened to float.
RF_QUANT_AVX512 inline __m512 widen16(const int8_t* q) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
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
    prefetch_line(reinterpret_cast<const char*>(q + k) + kPrefetchBytes);
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

// ---- int4 ----

// X prepared for the int4 kernels. Row m's k sits at x[m * kpad + (k & ~31) + (k & 1) * 16 + (k & 31) / 2]:
// each 32 k, the 16 even ones, then the 16 odd ones; zeros from K to kpad (whole blocks, a multiple of 32).
// sums[m * bpad + b] is the float32 sum of row m's x over block b, zeros from n_blocks to bpad (a multiple of
// 16). The rows are 64-byte aligned.
class Int4Rows {
 public:
  void prepare(const QuantMatrix& w, int64_t M, const float* x, int64_t ldx) {
    const auto& s = w.shape;
    kpad = (s.n_blocks * s.block_size + 31) / 32 * 32;
    bpad = (s.n_blocks + 15) / 16 * 16;
    buf_.assign(static_cast<size_t>(M * (kpad + bpad) + 16), 0.0f);
    float* base = buf_.data();
    base += (16 - reinterpret_cast<uintptr_t>(base) / sizeof(float) % 16) % 16;
    float* sum_rows = base + M * kpad;
    xs = base;
    sums = sum_rows;
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = x + m * ldx;
      float* d = base + m * kpad;
      for (int64_t k = 0; k < s.K; ++k) d[(k & ~int64_t{31}) + (k & 1) * 16 + (k & 31) / 2] = xr[k];
      for (int64_t b = 0; b < s.n_blocks; ++b) {
        float sum = 0.0f;
        for (int64_t k = b * s.block_size, end = std::min(s.K, k + s.block_size); k < end; ++k) sum += xr[k];
        sum_rows[m * bpad + b] = sum;
      }
    }
  }
  int64_t kpad = 0, bpad = 0;
  const float* xs = nullptr;
  const float* sums = nullptr;

 private:
  std::vector<float> buf_;
};

// AVX-512: the zero points of column n's blocks [b, b + 16) as floats (8 where the weight has
// none); those past n_blocks are unspecified (finite) values.
RF_QUANT_AVX512 inline __m512 zero_points16(const QuantMatrix& w, int64_t n, int64_t b) {
  if (!w.zero_points) return _mm512_set1_ps(8.0f);
  const int64_t first = b / 2, bytes = std::min<int64_t>(8, w.shape.zp_row - first);
  const __m128i v =
      _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << bytes) - 1), w.zero_points + n * w.shape.zp_row + first);
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i z = _mm_unpacklo_epi8(_mm_and_si128(v, mask), _mm_and_si128(_mm_srli_epi16(v, 4), mask));
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(z));
}

// Prefetches, for block b of a pass over C columns, the lines of the pass's bytes (Q rows [n, n + C), contiguous;
// the scales, likewise) that the pass reads per block, `ahead` bytes of Q (proportionally of the scales) ahead:
// `qa` and `sa` point that far past the pass's first byte of each.
template <int C>
inline void prefetch_block(const char* qa, const char* sa, int64_t b, int64_t blob) {
  const int64_t qb = b * C * blob, sb = b * C * 4;  // where the block's bytes start in the pass's
  for (int64_t i = (qb + 63) / 64 * 64; i < qb + C * blob; i += 64) prefetch_line(qa + i);
  for (int64_t i = (sb + 63) / 64 * 64; i < sb + C * 4; i += 64) prefetch_line(sa + i);
}

// AVX-512, int4, blocks of 32 * steps weights (STEPS: steps known at compile time, or 0): acc[r][c] += each
// block's products times its scale.
template <int R, int C, int STEPS>
RF_QUANT_AVX512 inline __attribute__((always_inline)) void blocks_i4_avx512(const QuantMatrix& w, const uint8_t* q,
                                                                            const float* sc, const float* x,
                                                                            int64_t kpad, __m512 (&acc)[R][C]) {
  const auto& s = w.shape;
  const int64_t steps = STEPS ? STEPS : s.block_size / 32, blob = steps * 16, nb = s.n_blocks, stride = nb * blob;
  const int64_t ahead = int4_prefetch_bytes(blob);
  const char* qa = reinterpret_cast<const char*>(q) + ahead;
  const char* sa = reinterpret_cast<const char*>(sc) + ahead * 4 / blob;
  const __m512i mask = _mm512_set1_epi32(0x0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* qb = q + b * blob;
    const float* xb = x + b * steps * 32;
    prefetch_block<C>(qa, sa, b, blob);
    __m512 part[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) part[r][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < steps; ++j) {
      __m512 xe[R], xo[R];
      for (int r = 0; r < R; ++r) {
        xe[r] = _mm512_load_ps(xb + r * kpad + j * 32);
        xo[r] = _mm512_load_ps(xb + r * kpad + j * 32 + 16);
      }
      for (int c = 0; c < C; ++c) {
        // The 32 weights of 16 bytes: the low nibbles (even k) and the high ones (odd k), as floats.
        const __m512i v =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb + c * stride + j * 16)));
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, mask)),
                     hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
        for (int r = 0; r < R; ++r) part[r][c] = _mm512_fmadd_ps(xo[r], hi, _mm512_fmadd_ps(xe[r], lo, part[r][c]));
      }
    }
    for (int c = 0; c < C; ++c) {
      const __m512 scale = _mm512_set1_ps(sc[c * nb + b]);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(part[r][c], scale, acc[r][c]);
    }
  }
}

// AVX-512, int4, blocks of 16: a step of 16 bytes covers blocks b (lanes 0..7) and b + 1 (lanes 8..15), whose
// scales multiply its products lane by lane; an odd last block takes 8 bytes.
template <int R, int C>
RF_QUANT_AVX512 inline __attribute__((always_inline)) void pairs_i4_avx512(const QuantMatrix& w, const uint8_t* q,
                                                                           const float* sc, const float* x,
                                                                           int64_t kpad, __m512 (&acc)[R][C]) {
  const int64_t nb = w.shape.n_blocks, stride = nb * 8;
  const char* qa = reinterpret_cast<const char*>(q) + kPrefetchBytes;
  const char* sa = reinterpret_cast<const char*>(sc) + kPrefetchBytes / 2;
  const __m512i mask = _mm512_set1_epi32(0x0f);
  for (int64_t b = 0; b < nb; b += 2) {
    const bool pair = b + 1 < nb;
    prefetch_block<C>(qa, sa, b / 2, 16);
    __m512 xe[R], xo[R];
    for (int r = 0; r < R; ++r) {
      xe[r] = _mm512_load_ps(x + r * kpad + b * 16);
      xo[r] = _mm512_load_ps(x + r * kpad + b * 16 + 16);
    }
    for (int c = 0; c < C; ++c) {
      const uint8_t* qb = q + c * stride + b * 8;
      const __m512i v = _mm512_cvtepu8_epi32(pair ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(qb))
                                                  : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qb)));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, mask)), hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
      const __m512 scale =
          _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(sc[c * nb + b]), _mm512_set1_ps(sc[c * nb + b + (pair ? 1 : 0)]));
      for (int r = 0; r < R; ++r)
        acc[r][c] = _mm512_fmadd_ps(_mm512_fmadd_ps(xo[r], hi, _mm512_mul_ps(xe[r], lo)), scale, acc[r][c]);
    }
  }
}

// AVX-512, int4: outputs (m0 + r, n + c) for r < R, c < C into out[r * C + c].
template <int R, int C>
RF_QUANT_AVX512 void columns_i4_avx512(const QuantMatrix& w, int64_t n, const Int4Rows& p, int64_t m0, float* out) {
  const auto& s = w.shape;
  const int64_t nb = s.n_blocks, stride = nb * s.blob;  // bytes from one column to the next
  const uint8_t* q = static_cast<const uint8_t*>(w.q) + n * stride;
  const float* sc = w.scales + n * nb;
  const float* x = p.xs + m0 * p.kpad;
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  if (s.block_size == 16)
    pairs_i4_avx512<R, C>(w, q, sc, x, p.kpad, acc);
  else if (s.block_size == 32)
    blocks_i4_avx512<R, C, 1>(w, q, sc, x, p.kpad, acc);
  else if (s.block_size == 64)
    blocks_i4_avx512<R, C, 2>(w, q, sc, x, p.kpad, acc);
  else if (s.block_size == 128)
    blocks_i4_avx512<R, C, 4>(w, q, sc, x, p.kpad, acc);
  else
    blocks_i4_avx512<R, C, 0>(w, q, sc, x, p.kpad, acc);
  // The zero points' share, sum_b s_b zp_b X_b.
  __m512 corr[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) corr[r][c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b += 16) {
    const __mmask16 live = nb - b >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (nb - b)) - 1);
    __m512 sums[R];
    for (int r = 0; r < R; ++r) sums[r] = _mm512_load_ps(p.sums + (m0 + r) * p.bpad + b);
    for (int c = 0; c < C; ++c) {
      const __m512 sz = _mm512_mul_ps(_mm512_maskz_loadu_ps(live, sc + c * nb + b), zero_points16(w, n + c, b));
      for (int r = 0; r < R; ++r) corr[r][c] = _mm512_fmadd_ps(sz, sums[r], corr[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[r * C + c] = _mm512_reduce_add_ps(acc[r][c]) - _mm512_reduce_add_ps(corr[r][c]);
}

// AVX2: column n's zero points of blocks [b, b + 8) as floats (8 where the weight has none); b + 8 <= n_blocks.
RF_QUANT_AVX2 inline __m256 zero_points8(const QuantMatrix& w, int64_t n, int64_t b) {
  if (!w.zero_points) return _mm256_set1_ps(8.0f);
  uint32_t bytes;
  std::memcpy(&bytes, w.zero_points + n * w.shape.zp_row + b / 2, 4);
  const __m128i v = _mm_cvtsi32_si128(static_cast<int>(bytes));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i z = _mm_unpacklo_epi8(_mm_and_si128(v, mask), _mm_and_si128(_mm_srli_epi16(v, 4), mask));
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(z));
}

// AVX2 + FMA, int4: as columns_i4_avx512, 16 weights (8 bytes) per step: the even k of the step in
// one 8-float vector, the odd k in another.
template <int R, int C>
RF_QUANT_AVX2 void columns_i4_avx2(const QuantMatrix& w, int64_t n, const Int4Rows& p, int64_t m0, float* out) {
  const auto& s = w.shape;
  const int64_t nb = s.n_blocks, stride = nb * s.blob;
  const uint8_t* q = static_cast<const uint8_t*>(w.q) + n * stride;
  const float* sc = w.scales + n * nb;
  const float* x = p.xs + m0 * p.kpad;
  const int64_t kpad = p.kpad, steps = s.block_size / 16;
  const __m256i mask = _mm256_set1_epi32(0x0f);
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t ahead = int4_prefetch_bytes(s.blob);
  const char* qa = reinterpret_cast<const char*>(q) + ahead;
  const char* sa = reinterpret_cast<const char*>(sc) + ahead * 4 / s.blob;
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_block<C>(qa, sa, b, s.blob);
    __m256 part[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) part[r][c] = _mm256_setzero_ps();
    for (int64_t j = 0; j < steps; ++j) {
      const int64_t k = b * s.block_size + j * 16;  // the step's first k; even k at xk, odd k at xk + 16
      const float* xk = x + (k & ~int64_t{31}) + (k & 16) / 2;
      for (int c = 0; c < C; ++c) {
        const __m256i v =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + c * stride + k / 2)));
        const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, mask)),
                     hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
        for (int r = 0; r < R; ++r)
          part[r][c] = _mm256_fmadd_ps(_mm256_load_ps(xk + r * kpad + 16), hi,
                                       _mm256_fmadd_ps(_mm256_load_ps(xk + r * kpad), lo, part[r][c]));
      }
    }
    for (int c = 0; c < C; ++c) {
      const __m256 scale = _mm256_set1_ps(sc[c * nb + b]);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(part[r][c], scale, acc[r][c]);
    }
  }
  __m256 corr[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) corr[r][c] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8)
    for (int c = 0; c < C; ++c) {
      const __m256 sz = _mm256_mul_ps(_mm256_loadu_ps(sc + c * nb + b), zero_points8(w, n + c, b));
      for (int r = 0; r < R; ++r)
        corr[r][c] = _mm256_fmadd_ps(sz, _mm256_load_ps(p.sums + (m0 + r) * p.bpad + b), corr[r][c]);
    }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float rest = 0.0f;
      for (int64_t i = b; i < nb; ++i)
        rest += sc[c * nb + i] * static_cast<float>(w.zp(n + c, i)) * p.sums[(m0 + r) * p.bpad + i];
      out[r * C + c] = hsum256(acc[r][c]) - (hsum256(corr[r][c]) + rest);
    }
}

using ColumnFn = void (*)(const QuantMatrix&, int64_t, const float*, int64_t, float*);
using ColumnsFn = void (*)(const QuantMatrix&, int64_t, const Int4Rows&, int64_t, float*);

template <int R>
void column_generic_rows(const QuantMatrix& w, int64_t n, const float* x, int64_t ldx, float* out) {
  column_generic(w, n, R, x, ldx, out);
}

// The int8 (or generic) kernel for `rows` rows (1..kMaxRows) at the CPU's level.
ColumnFn pick_column(const SimdLevel level, int rows) {
#define RF_QUANT_ROWS(F) (rows == 1 ? F<1> : rows == 2 ? F<2> : rows == 3 ? F<3> : F<4>)
  if (level == SimdLevel::Avx512) return RF_QUANT_ROWS(column_i8_avx512);
  if (level == SimdLevel::Avx2) return RF_QUANT_ROWS(column_i8_avx2);
  return RF_QUANT_ROWS(column_generic_rows);
#undef RF_QUANT_ROWS
}

// The int4 kernels for `rows` rows (1..kMaxRows) at a vector level: `wide` takes `columns` columns
// per pass, `one` a single column.
struct Int4Kernels {
  ColumnsFn wide, one;
  int columns;
};

Int4Kernels pick_int4(const SimdLevel level, int rows) {
#define RF_QUANT_I4(F, C1, C2, C34)                   \
  (rows == 1   ? Int4Kernels{F<1, C1>, F<1, 1>, C1}   \
   : rows == 2 ? Int4Kernels{F<2, C2>, F<2, 1>, C2}   \
   : rows == 3 ? Int4Kernels{F<3, C34>, F<3, 1>, C34} \
               : Int4Kernels{F<4, C34>, F<4, 1>, C34})
  if (level == SimdLevel::Avx512) return RF_QUANT_I4(columns_i4_avx512, 4, 4, 2);
  return RF_QUANT_I4(columns_i4_avx2, 4, 2, 1);
#undef RF_QUANT_I4
}

}  // namespace

void matmul_quant(const QuantMatrix& w, int64_t M, const float* x, int64_t ldx, const float* bias, float* y,
                  int64_t ldy, int threads) {
  const int64_t N = w.shape.N;
  const SimdLevel level = simd_level();
  const bool int4 = w.shape.bits == 4 && level != SimdLevel::Generic;
  // X prepared, read by every thread of the team below. Decoding's few rows keep their buffer between calls (one
  // per calling thread); many rows (prefill) take one of their own, freed on return.
  thread_local Int4Rows kept;
  Int4Rows own;
  const auto& s = w.shape;
  Int4Rows& rows4 = M * (s.n_blocks * s.block_size + s.n_blocks) <= kKeptFloats ? kept : own;
  if (int4) rows4.prepare(w, M, x, ldx);
  auto run = [&](int64_t n0, int64_t n1) {
    float out[kMaxRows * kMaxColumns];
    for (int64_t m0 = 0; m0 < M; m0 += kMaxRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, M - m0));
      auto store = [&](int64_t n, int columns) {
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < columns; ++c)
            y[(m0 + r) * ldy + n + c] = bias ? out[r * columns + c] + bias[n + c] : out[r * columns + c];
      };
      if (int4) {
        const Int4Kernels k = pick_int4(level, rows);
        int64_t n = n0;
        for (; n + k.columns <= n1; n += k.columns) {
          k.wide(w, n, rows4, m0, out);
          store(n, k.columns);
        }
        for (; n < n1; ++n) {
          k.one(w, n, rows4, m0, out);
          store(n, 1);
        }
      } else {
        const ColumnFn column = pick_column(level, rows);
        for (int64_t n = n0; n < n1; ++n) {
          column(w, n, x + m0 * ldx, ldx, out);
          store(n, 1);
        }
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
  // Each thread's share of the columns is a multiple of kMaxColumns (but the last).
  parallel_tasks(team, static_cast<int>(team), [&](int64_t t) {
    const int64_t nt = team;
    const int64_t per = ((N + nt - 1) / nt + kMaxColumns - 1) / kMaxColumns * kMaxColumns;
    const int64_t n0 = std::min(N, t * per), n1 = std::min(N, (t + 1) * per);
    if (n0 < n1) run(n0, n1);
  });
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
