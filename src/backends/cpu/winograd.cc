#include "backends/cpu/winograd.h"

// Threads: OpenMP, not the kernel thread pool (core/thread_pool.h). A Winograd convolution runs
// between oneDNN's convolutions, whose OpenMP team spins on the cores after each one; a pool loop
// there finds those cores taken and runs on the calling thread alone (ResNet-50, 2 threads: 1.3x
// slower), while the same team serves an OpenMP loop at once.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/dnnl_context.h"
#include "core/error.h"
#include "core/simd.h"

namespace reforge::cpu {

namespace {

constexpr int64_t kBlock = 8;               // channels per activation block (and per AVX2 vector)
constexpr int64_t kPanel = 16;              // output channels per weight panel (two vectors)
constexpr int64_t kRows = 6;                // tiles per register tile
constexpr int64_t kBlockBytes = 2 << 20;    // V and M of one block of tiles, when U is small
constexpr int64_t kSliceBytes = 256 << 10;  // V[p] and M[p] of one block, when U is large
constexpr int64_t kLargeU = 4 << 20;        // bytes of U above which it is read once per block
constexpr int64_t kMaxU4 = 16 << 20;        // largest U of F(4x4, 3x3) winograd_tile accepts
constexpr int64_t kMaxU2 = 32 << 20;        // and of F(2x2, 3x3)

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

#define REFORGE_WINO_AVX2 __attribute__((target("avx2,fma")))

// r = B^T x for one column of six vectors (F(4x4, 3x3), interpolation points 0, +-1, +-2).
REFORGE_WINO_AVX2 inline void bt6(const __m256* x, int64_t sx, __m256* r, int64_t sr) {
  const __m256 x0 = x[0], x1 = x[sx], x2 = x[2 * sx], x3 = x[3 * sx], x4 = x[4 * sx], x5 = x[5 * sx];
  const __m256 four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f), two = _mm256_set1_ps(2.0f);
  r[0] = _mm256_fmadd_ps(four, x0, _mm256_fnmadd_ps(five, x2, x4));
  r[sr] = _mm256_fnmadd_ps(four, _mm256_add_ps(x1, x2), _mm256_add_ps(x3, x4));
  r[2 * sr] = _mm256_fmadd_ps(four, _mm256_sub_ps(x1, x2), _mm256_sub_ps(x4, x3));
  r[3 * sr] = _mm256_fmadd_ps(two, _mm256_sub_ps(x3, x1), _mm256_sub_ps(x4, x2));
  r[4 * sr] = _mm256_fmadd_ps(two, _mm256_sub_ps(x1, x3), _mm256_sub_ps(x4, x2));
  r[5 * sr] = _mm256_fmadd_ps(four, x1, _mm256_fnmadd_ps(five, x3, x5));
}

// r = A^T m for six vectors m (stride sm) into four (stride sr).
REFORGE_WINO_AVX2 inline void at6(const __m256* m, int64_t sm, __m256* r, int64_t sr) {
  const __m256 s12 = _mm256_add_ps(m[sm], m[2 * sm]), d12 = _mm256_sub_ps(m[sm], m[2 * sm]);
  const __m256 s34 = _mm256_add_ps(m[3 * sm], m[4 * sm]), d34 = _mm256_sub_ps(m[3 * sm], m[4 * sm]);
  r[0] = _mm256_add_ps(_mm256_add_ps(m[0], s12), s34);
  r[sr] = _mm256_fmadd_ps(_mm256_set1_ps(2.0f), d34, d12);
  r[2 * sr] = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), s34, s12);
  r[3 * sr] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0f), d34, d12), m[5 * sm]);
}

// The same for F(2x2, 3x3) (points 0, +-1): four values into four, and four into two.
REFORGE_WINO_AVX2 inline void bt4(const __m256* x, int64_t sx, __m256* r, int64_t sr) {
  const __m256 x0 = x[0], x1 = x[sx], x2 = x[2 * sx], x3 = x[3 * sx];
  r[0] = _mm256_sub_ps(x0, x2);
  r[sr] = _mm256_add_ps(x1, x2);
  r[2 * sr] = _mm256_sub_ps(x2, x1);
  r[3 * sr] = _mm256_sub_ps(x1, x3);
}
REFORGE_WINO_AVX2 inline void at4(const __m256* m, int64_t sm, __m256* r, int64_t sr) {
  r[0] = _mm256_add_ps(_mm256_add_ps(m[0], m[sm]), m[2 * sm]);
  r[sr] = _mm256_sub_ps(_mm256_sub_ps(m[sm], m[2 * sm]), m[3 * sm]);
}

// The geometry of one call: tiles (M x M outputs each) are numbered n-major, then row, then column.
struct Geo {
  int64_t N, C, K, Kp, H, W, OH, OW, TH, TW, pt, pl;
};

// Phase 1 for tile `t` and channel block `cb` of F(MxM, 3x3): v[p * pstride] = (B^T d B)[p] for
// the (M + 2)^2 positions p, 8 channels.
template <int M>
REFORGE_WINO_AVX2 void input_tile(const Geo& g, const float* src, int64_t t, int64_t cb, float* v, int64_t pstride) {
  constexpr int T = M + 2;
  const int64_t n = t / (g.TH * g.TW), ty = t / g.TW % g.TH, tx = t % g.TW;
  const int64_t iy0 = ty * M - g.pt, ix0 = tx * M - g.pl;
  const float* plane = src + (n * (g.C / kBlock) + cb) * g.H * g.W * kBlock;
  __m256 d[T * T], s[T * T];
  if (iy0 >= 0 && ix0 >= 0 && iy0 + T <= g.H && ix0 + T <= g.W) {
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j) d[i * T + j] = _mm256_loadu_ps(plane + ((iy0 + i) * g.W + ix0 + j) * kBlock);
  } else {
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j) {
        const int64_t y = iy0 + i, x = ix0 + j;
        d[i * T + j] = y >= 0 && y < g.H && x >= 0 && x < g.W ? _mm256_loadu_ps(plane + (y * g.W + x) * kBlock)
                                                              : _mm256_setzero_ps();
      }
  }
  const auto bt = M == 4 ? bt6 : bt4;
  for (int j = 0; j < T; ++j) bt(d + j, T, s + j, T);          // columns: s = B^T d
  for (int i = 0; i < T; ++i) bt(s + i * T, 1, d + i * T, 1);  // rows: d = s B
  for (int p = 0; p < T * T; ++p) _mm256_storeu_ps(v + p * pstride, d[p]);
}

// Phase 3 for tile `t` and output channel block `kb`: Y = A^T M A (+ bias, + sum, ReLU), stored
// where the tile lies inside the output.
template <int M>
REFORGE_WINO_AVX2 void output_tile(const Geo& g, const float* m, int64_t pstride, int64_t t, int64_t kb,
                                   const float* bias, const float* sum, bool relu, float* dst) {
  constexpr int T = M + 2;
  const int64_t n = t / (g.TH * g.TW), ty = t / g.TW % g.TH, tx = t % g.TW;
  __m256 a[T * T], s[M * T], o[M * M];
  for (int p = 0; p < T * T; ++p) a[p] = _mm256_loadu_ps(m + p * pstride);
  const auto at = M == 4 ? at6 : at4;
  for (int j = 0; j < T; ++j) at(a + j, T, s + j, T);          // columns: s (M x T) = A^T M
  for (int i = 0; i < M; ++i) at(s + i * T, 1, o + i * M, 1);  // rows: o (M x M) = s A
  const __m256 b = bias ? _mm256_loadu_ps(bias + kb * kBlock) : _mm256_setzero_ps();
  const int64_t off = (n * (g.K / kBlock) + kb) * g.OH * g.OW * kBlock;
  const int64_t oy0 = ty * M, ox0 = tx * M;
  const int64_t rows = std::min<int64_t>(M, g.OH - oy0), cols = std::min<int64_t>(M, g.OW - ox0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t at_ = off + ((oy0 + i) * g.OW + ox0 + j) * kBlock;
      __m256 y = _mm256_add_ps(o[i * M + j], b);
      if (sum) y = _mm256_add_ps(y, _mm256_loadu_ps(sum + at_));
      if (relu) y = _mm256_max_ps(y, _mm256_setzero_ps());
      _mm256_storeu_ps(dst + at_, y);
    }
}

// Phase 2 register tile: m[r, 0:16) = sum over c of v[r * ldv + c] x u[c, 0:16), r < R. A
// non-null `prefetch` is the next panel to read (C lines of 64 bytes), fetched into L2 meanwhile.
template <int R>
REFORGE_WINO_AVX2 void gemm_tile(int64_t C, const float* v, int64_t ldv, const float* u, float* m, int64_t ldm,
                                 const float* prefetch) {
  __m256 c0[R], c1[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) c0[r] = c1[r] = _mm256_setzero_ps();
  for (int64_t c = 0; c < C; ++c) {
    const __m256 b0 = _mm256_load_ps(u + c * kPanel), b1 = _mm256_load_ps(u + c * kPanel + 8);
    if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(prefetch + c * kPanel), _MM_HINT_T1);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(v + r * ldv + c);
      c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(m + r * ldm, c0[r]);
    _mm256_storeu_ps(m + r * ldm + 8, c1[r]);
  }
}

using GemmTile = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, const float*);
constexpr GemmTile kGemmTiles[kRows + 1] = {nullptr,      gemm_tile<1>, gemm_tile<2>, gemm_tile<3>,
                                            gemm_tile<4>, gemm_tile<5>, gemm_tile<6>};

// The calling thread's buffer (dnnl_util::thread_buffer) for V and M: grown as needed and kept,
// so a steady run allocates nothing.
constexpr int kScratchSlot = dnnl_util::kWinogradSlot;

bool winograd_disabled_by_env() {
  static const bool off = [] {
    const char* e = std::getenv("REFORGE_CONV_WINOGRAD");
    return e && (std::strcmp(e, "0") == 0 || std::strcmp(e, "off") == 0);
  }();
  return off;
}

}  // namespace

bool winograd_supported(const ConvDims& d, bool has_sum) {
  if (simd_level() < SimdLevel::Avx2) return false;
  if (d.src.size() != 4 || d.weights.size() != 4 || d.dst.size() != 4 || d.group != 1) return false;
  if (d.pad_begin.size() != 2 || d.pad_end.size() != 2) return false;
  if (d.weights[2] != 3 || d.weights[3] != 3) return false;
  if (d.strides != std::vector<int64_t>{1, 1} || d.dilations != std::vector<int64_t>{1, 1}) return false;
  if (d.src_layout != ActLayout::Blocked || d.dst_layout != ActLayout::Blocked) return false;
  if (has_sum && d.sum_layout != ActLayout::Blocked) return false;
  const int64_t C = d.src[1], K = d.weights[0];
  if (C % kBlock != 0 || K % kBlock != 0 || d.weights[1] != C || d.dst[1] != K) return false;
  // The output size must be what the padding gives (the conv op resolved it so).
  return d.dst[2] == d.src[2] + d.pad_begin[0] + d.pad_end[0] - 2 &&
         d.dst[3] == d.src[3] + d.pad_begin[1] + d.pad_end[1] - 2 && d.dst[2] > 0 && d.dst[3] > 0;
}

int winograd_tile(const ConvDims& d, bool has_sum) {
  if (winograd_disabled_by_env() || activation_block() != kBlock || !winograd_supported(d, has_sum)) return 0;
  const int64_t C = d.src[1], K = d.weights[0];
  const int64_t tiles = d.src[0] * ((d.dst[2] + 3) / 4) * ((d.dst[3] + 3) / 4);
  // Measured with bench/conv_bench.cc on Zen 3 (docs/benchmarks.md): 0.3-0.9x oneDNN's time
  // from 16 to 512 channels and from 4 tiles of 4 x 4 up; slower on a single tile (256 channels
  // on a 4 x 4 image: 1.3-1.4x), where the product reads 4x the weights for one tile's
  // arithmetic.
  if (C < 16 || K < 16 || tiles < 4) return 0;
  // U is kept beside the plain weights (in place of oneDNN's packed copy): 4x their size for
  // F(4x4, 3x3), 16/9 for F(2x2, 3x3). ResNet-50's two 512 -> 512 layers in F(4x4) (38 MB of U
  // each) put its batch-1 peak memory at 323 MB, above ONNX Runtime's 317; in F(2x2) (17 MB
  // each, 0.55-0.62x oneDNN's time) it is 282 MB.
  const int64_t cells = C * round_up(K, kPanel) * 4;
  if (36 * cells <= kMaxU4) return 4;
  if (16 * cells <= kMaxU2) return 2;
  return 0;
}

namespace {

// r = G x for 16 lanes of three values, in float64; r[i * stride] for the M + 2 rows of G.
// F(4x4, 3x3): rows 1/4 (1, 0, 0), -1/6 (1, 1, 1), -1/6 (1, -1, 1), (1/24, 1/12, 1/6),
// (1/24, -1/12, 1/6), (0, 0, 1). F(2x2, 3x3): (1, 0, 0), 1/2 (1, 1, 1), 1/2 (1, -1, 1), (0, 0, 1).
void g_column(int tile, const double* a, const double* b, const double* c, double (*r)[kPanel], int stride) {
  for (int64_t l = 0; l < kPanel; ++l) {
    const double s = a[l] + c[l];
    if (tile == 2) {
      r[0][l] = a[l];
      r[stride][l] = (s + b[l]) * 0.5;
      r[2 * stride][l] = (s - b[l]) * 0.5;
      r[3 * stride][l] = c[l];
      continue;
    }
    const double q = a[l] * (1.0 / 24) + c[l] * (1.0 / 6), h = b[l] * (1.0 / 12);
    r[0][l] = a[l] * 0.25;
    r[stride][l] = (s + b[l]) * (-1.0 / 6);
    r[2 * stride][l] = (s - b[l]) * (-1.0 / 6);
    r[3 * stride][l] = q + h;
    r[4 * stride][l] = q - h;
    r[5 * stride][l] = c[l];
  }
}

}  // namespace

WinogradWeights::WinogradWeights(const float* w, int64_t K, int64_t C, int tile)
    : K_(K),
      C_(C),
      tile_(tile),
      u_(Tensor::uninitialized(DType::Float32, {(tile + 2) * (tile + 2) * round_up(K, kPanel) * C})) {
  if (tile != 2 && tile != 4) fail("Winograd: output tiles are 2 x 2 or 4 x 4, not ", tile, " x ", tile);
  float* u = u_.mutable_data<float>();
  const int64_t P = round_up(K, kPanel) / kPanel;
  const int T = tile + 2;
  // One panel's 16 output channels at a time, lane by lane, so that each (position, input
  // channel) is one 64-byte line of U written whole: a refit's first run pays this transform
  // (element by element, with G as a matrix, it ran at ~140 MB/s of weights).
#pragma omp parallel for schedule(static) if (K * C > 4096)
  for (int64_t panel = 0; panel < P; ++panel) {
    const int64_t k0 = panel * kPanel, lanes = std::min(kPanel, K - k0);
    for (int64_t c = 0; c < C; ++c) {
      double g[9][kPanel] = {}, t[6][3][kPanel], v[6][6][kPanel];
      for (int64_t l = 0; l < lanes; ++l)
        for (int e = 0; e < 9; ++e) g[e][l] = w[((k0 + l) * C + c) * 9 + e];
      for (int j = 0; j < 3; ++j) g_column(tile, g[j], g[3 + j], g[6 + j], &t[0][j], 3);   // t = G g
      for (int i = 0; i < T; ++i) g_column(tile, t[i][0], t[i][1], t[i][2], &v[i][0], 1);  // v = t G^T
      for (int p = 0; p < T * T; ++p) {
        float* line = u + ((p * P + panel) * C + c) * kPanel;
        for (int64_t l = 0; l < kPanel; ++l) line[l] = static_cast<float>(v[p / T][p % T][l]);  // 0 past K
      }
    }
  }
}

namespace {

// One block of `nb` tiles from tile t0: V and M (npos x nb x C and npos x nb x Kp floats) in
// `v` / `m`, npos = (tile + 2)^2. Each phase runs items [begin, end) of its own numbering, so the
// block can be split between threads phase by phase or run whole by one thread.
struct BlockRun {
  const Geo& g;
  const float* src;
  const float* U;
  const float* bias;
  const float* sum;
  bool relu;
  float* dst;
  int tile;
  int64_t npos, t0, nb;
  float *v, *m;

  int64_t input_items() const { return nb * (g.C / kBlock); }
  int64_t product_items() const { return npos * (g.Kp / kPanel); }
  int64_t output_items() const { return nb * (g.K / kBlock); }

  void input(int64_t begin, int64_t end) const {
    const int64_t CB = g.C / kBlock;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t = i / CB, cb = i % CB;
      float* vt = v + t * g.C + cb * kBlock;
      if (tile == 4)
        input_tile<4>(g, src, t0 + t, cb, vt, nb * g.C);
      else
        input_tile<2>(g, src, t0 + t, cb, vt, nb * g.C);
    }
  }
  void product(int64_t begin, int64_t end) const {
    const int64_t P = g.Kp / kPanel, strips = (nb + kRows - 1) / kRows;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t p = i / P, panel = i % P;
      const float* up = U + (p * P + panel) * g.C * kPanel;
      const float* vp = v + p * nb * g.C;
      float* mp = m + p * nb * g.Kp + panel * kPanel;
      // U is laid out item after item: the first strip fetches the next item's panel.
      const float* next = i + 1 < npos * P ? up + g.C * kPanel : nullptr;
      for (int64_t s = 0; s < strips; ++s) {
        const int64_t r = std::min(kRows, nb - s * kRows);
        kGemmTiles[r](g.C, vp + s * kRows * g.C, g.C, up, mp + s * kRows * g.Kp, g.Kp, s == 0 ? next : nullptr);
      }
    }
  }
  void output(int64_t begin, int64_t end) const {
    const int64_t KB = g.K / kBlock;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t = i / KB, kb = i % KB;
      const float* mt = m + t * g.Kp + kb * kBlock;
      if (tile == 4)
        output_tile<4>(g, mt, nb * g.Kp, t0 + t, kb, bias, sum, relu, dst);
      else
        output_tile<2>(g, mt, nb * g.Kp, t0 + t, kb, bias, sum, relu, dst);
    }
  }
};

}  // namespace

void winograd_conv(const ConvDims& d, const float* src, const WinogradWeights& u, const float* bias, float* dst,
                   const ConvPostOps& post, int threads) {
  Geo g;
  g.N = d.src[0], g.C = d.src[1], g.H = d.src[2], g.W = d.src[3];
  g.K = d.weights[0], g.Kp = round_up(g.K, kPanel);
  g.OH = d.dst[2], g.OW = d.dst[3];
  const int tile = u.tile();
  const int64_t npos = (tile + 2) * (tile + 2);
  g.TH = (g.OH + tile - 1) / tile, g.TW = (g.OW + tile - 1) / tile;
  g.pt = d.pad_begin[0], g.pl = d.pad_begin[1];
  const int64_t T = g.N * g.TH * g.TW;
  // Tiles per block. U (npos x C x Kp floats) is read once per block. While it is small (64 or
  // 128 channels: 0.6-2.4 MB) the block's whole V and M (npos x tiles x (C + Kp) floats) stay
  // in L2, for the output transform to find M there. Larger U (256+ channels: 9-38 MB, more than
  // L3) would be read from memory once per small block, so there the blocks grow until only one
  // position's V and M fit in L2 (the whole block then in L3). Measured on Zen 3 (ResNet-50
  // batch 1 and 8): either rule alone is 10-30% slower on the other kind of layer.
  const bool large_u = npos * g.C * g.Kp * 4 > kLargeU;
  int64_t tb = (large_u ? kSliceBytes / ((g.C + g.Kp) * 4) : kBlockBytes / (npos * (g.C + g.Kp) * 4)) / kRows * kRows;
  // Small U: each thread takes its own share of the tiles (at least a register tile's worth)
  // through all three phases (no barriers; each reads all of U, which stays in its cache). Large
  // U: the threads share each block phase by phase, so U is read once per block for all of them
  // (and a few tiles still give every thread a share of the npos products).
  const bool own_tiles = !large_u || threads <= 1;
  const int nt =
      own_tiles ? static_cast<int>(std::min<int64_t>(std::max(1, threads), (T + kRows - 1) / kRows)) : threads;
  tb = std::min(std::max(kRows, tb), own_tiles ? round_up((T + nt - 1) / nt, kRows) : T);
  const int64_t block_floats = npos * tb * (g.C + g.Kp);
  // Allocated (or refused, as an Error) before any thread runs.
  float* scratch_base = static_cast<float*>(
      dnnl_util::thread_buffer(kScratchSlot, static_cast<size_t>(block_floats * (own_tiles ? nt : 1)) * sizeof(float)));
  auto block = [&](int64_t t0, int64_t nb, float* v) {
    return BlockRun{g, src, u.data(), bias, post.sum, post.relu, dst, tile, npos, t0, nb, v, v + npos * nb * g.C};
  };
  if (own_tiles) {
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      const int64_t i = omp_get_thread_num(), n = omp_get_num_threads();
      const int64_t begin = T * i / n, end = T * (i + 1) / n;
      float* v = scratch_base + block_floats * i;
      for (int64_t t0 = begin; t0 < end; t0 += tb) {
        const BlockRun b = block(t0, std::min(tb, end - t0), v);
        b.input(0, b.input_items());
        b.product(0, b.product_items());
        b.output(0, b.output_items());
      }
    }
    return;
  }
#pragma omp parallel num_threads(nt)
  for (int64_t t0 = 0; t0 < T; t0 += tb) {
    const BlockRun b = block(t0, std::min(tb, T - t0), scratch_base);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < b.input_items(); ++i) b.input(i, i + 1);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < b.product_items(); ++i) b.product(i, i + 1);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < b.output_items(); ++i) b.output(i, i + 1);
  }
}

}  // namespace reforge::cpu
