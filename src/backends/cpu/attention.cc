// The CPU's reforge::Attention, emitted by fuse-attention (src/passes/fusion_transformer.cc); the
// ONNX Attention op's reference kernel is src/ops/transformer/attention.cc.
// Attention(Q, K, V, scale?, mask?, fill?, k_expand?, k_reshape?, v_expand?, v_reshape?):
//   Y = softmax(mask(scale(Q K^T)), last axis) V per (batch, head), where
//   - q_layout/v_layout/out_layout 'bhsd' ([B,H,S,D]) or 'bshd' ([B,S,H,D], the head transpose
//     absorbed); k_layout additionally 'bhds' (K^T given as [B,H,D,S]);
//   - scale_op 'none' | 'mul' | 'div' with the scalar `scale`, or 'mul_qk': Q multiplied by
//     `scale` and K by `k_scale` (input 10) before the product, each rounded to float32, as
//     PyTorch's scaled_dot_product_attention decomposition scales both by sqrt(scale);
//   - mask_mode 'none' | 'add' (float mask added) | 'where_fill_true' / 'where_fill_false'
//     (bool mask: the score is replaced by `fill` where the mask is true / false); the mask
//     broadcasts to [B, Hq, Sq, Sk];
//   - softmax_nan 'keep' | 'zero': 'zero' gives a row whose softmax is NaN (a NaN score, or every
//     score -inf) zero weights, as Where(IsNaN(P), 0, P) after the softmax does (a softmax row
//     is NaN whole or not at all: one NaN term makes the sum NaN);
//   - grouped-query attention: with the four shape inputs, K and V are the un-repeated
//     [B, Hkv, S, D] tensors and the kernel checks that Unsqueeze(2) -> Expand(k_expand) ->
//     Reshape(k_reshape) is the repeat_kv it replaces; query head h reads kv head h / (Hq / Hkv).
// Register tiles are sized per vector variant (fused_common.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/fused_common.h"
#include "backends/cpu/simd_vec.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/reforge/attention_setup.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

using namespace simdv;
using fused::big_enough;
using fused::read_scalar;
using fused::run_op;

using Layout = AttnLayout;

Layout parse_layout(const ir::Node& n, const char* attr, bool allow_bhds) {
  return parse_attn_layout(n, attr, allow_bhds);
}

// A 4-D tensor seen as [batch, heads, seq, dim] through strides (in elements).
struct View4 {
  const float* p = nullptr;
  int64_t b = 0, h = 0, s = 0, d = 0;      // sizes
  int64_t sb = 0, sh = 0, ss = 0, sd = 1;  // strides
};

View4 view_of(const Tensor& t, Layout l) {
  View4 v;
  v.p = t.data<float>();
  const int64_t d0 = t.dim(0), d1 = t.dim(1), d2 = t.dim(2), d3 = t.dim(3);
  switch (l) {
    case Layout::BHSD:
      v = {v.p, d0, d1, d2, d3, d1 * d2 * d3, d2 * d3, d3, 1};
      break;
    case Layout::BSHD:
      v = {v.p, d0, d2, d1, d3, d1 * d2 * d3, d3, d2 * d3, 1};
      break;
    case Layout::BHDS:
      v = {v.p, d0, d1, d3, d2, d1 * d2 * d3, d2 * d3, 1, d3};
      break;
  }
  if (v.b == 1) v.sb = 0;
  return v;
}

// repeat_group (ops/reforge/attention_setup.h) of K or V and the shape inputs expand_i, reshape_i.
int64_t repeat_group(const KernelContext& ctx, const View4& kv, size_t expand_i, size_t reshape_i, bool allowzero) {
  return ops::repeat_group(kv.b, kv.h, kv.s, kv.d, ctx.input(expand_i).to_int64_vector(),
                           ctx.input(reshape_i).to_int64_vector(), allowzero);
}

struct AttnArgs {
  View4 q, k, v;
  float* y;
  int64_t y_sb, y_sh, y_ss;
  int64_t B, Hq, Sq, Sk, D, Dv;
  int64_t k_group = 1, v_group = 1;  // q head h reads kv head h / group (0 when broadcast)
  bool k_bcast_h = false, v_bcast_h = false;
  int scale_op = 0;  // 0 none, 1 multiply by scale (div already inverted)
  float scale = 1;
  int mask_mode = 0;           // 0 none, 1 add, 2 fill where true, 3 fill where false
  bool nan_rows_zero = false;  // softmax_nan 'zero'
  const float* mask_f = nullptr;
  const bool* mask_b = nullptr;
  int64_t m_sb = 0, m_sh = 0, m_sq = 0, m_sk = 0;
  float fill = 0;
  int64_t Skp = 0;             // Sk rounded up to kMaxW
  const float* kt = nullptr;   // packed K^T per (b, kv head): [D][Skp]
  int64_t kt_b = 0, kt_h = 0;  // strides of the packed buffer
};

constexpr int64_t kBlockQ = 32;

// Register blocking of the two products per variant: a tile of kRows query rows by kVecs vectors
// of columns keeps kRows * kVecs accumulators, kVecs loaded vectors and a broadcast in registers.
// AVX-512 (32 zmm): 6 x 4 = 24 accumulators. AVX2 and SSE (16 ymm / xmm): 6 x 2 = 12, the
// classic AVX2 sgemm tile (4 vectors there would spill accumulators to the stack every step);
// a tile of the last 1 or 2 rows of a block takes 4 vectors, so that it still has 4 or 8
// independent FMA chains (query blocks of 32 rows end in 2, a decoding step is 1 row).
template <int kTag, int kRows>
inline constexpr int kTileVecs = kTag == kAvx512 ? 4
                                 : kRows <= 2    ? 4
                                                 : 2;
constexpr int kTileRows = 6;

// S[r][j0 .. j0 + kVecs * W) = Q[r] . K^T for r < kRows.
template <int kTag, int kRows, int kVecs>
RF_INLINE void qk_tile(const float* qrow0, int64_t qstride, const float* kt, int64_t Skp, int64_t D, float* s,
                       int64_t sstride, int64_t j0) {
  using V = Vec<kTag>;
  constexpr int64_t W = kW<kTag>;
  V acc[kRows][kVecs];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kVecs; ++c) acc[r][c] = V{};
  for (int64_t d = 0; d < D; ++d) {
    const float* kp = kt + d * Skp + j0;
    V kv[kVecs];
    for (int c = 0; c < kVecs; ++c) kv[c] = load<V>(kp + c * W);
    for (int r = 0; r < kRows; ++r) {
      const V qv = splat<V>(qrow0[r * qstride + d]);
      for (int c = 0; c < kVecs; ++c) acc[r][c] += qv * kv[c];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kVecs; ++c) store(s + r * sstride + j0 + c * W, acc[r][c]);
}

// S[r][0..ncols) = Q[r] . K^T for r < kRows (ncols a multiple of the vector width, <= Skp).
template <int kTag, int kRows>
RF_INLINE void qk_rows(const float* qrow0, int64_t qstride, const float* kt, int64_t Skp, int64_t D, float* s,
                       int64_t sstride, int64_t ncols) {
  constexpr int64_t W = kW<kTag>;
  constexpr int kVecs = kTileVecs<kTag, kRows>;
  int64_t j = 0;
  for (; j + kVecs * W <= ncols; j += kVecs * W) qk_tile<kTag, kRows, kVecs>(qrow0, qstride, kt, Skp, D, s, sstride, j);
  if constexpr (kVecs > 2)
    for (; j + 2 * W <= ncols; j += 2 * W) qk_tile<kTag, kRows, 2>(qrow0, qstride, kt, Skp, D, s, sstride, j);
  for (; j < ncols; j += W) qk_tile<kTag, kRows, 1>(qrow0, qstride, kt, Skp, D, s, sstride, j);
}

// Y[r][0 .. kVecs * W) = (sum_j P[r][j] V[j]) * inv[r] for r < kRows.
template <int kTag, int kRows, int kVecs>
RF_INLINE void pv_tile(const float* p, int64_t pstride, const float* v, int64_t vstride, int64_t Sk, const float* inv,
                       float* y, int64_t ystride) {
  using V = Vec<kTag>;
  constexpr int64_t W = kW<kTag>;
  V acc[kRows][kVecs];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kVecs; ++c) acc[r][c] = V{};
  for (int64_t j = 0; j < Sk; ++j) {
    V vv[kVecs];
    for (int c = 0; c < kVecs; ++c) vv[c] = load<V>(v + j * vstride + c * W);
    for (int r = 0; r < kRows; ++r) {
      const V pr = splat<V>(p[r * pstride + j]);
      for (int c = 0; c < kVecs; ++c) acc[r][c] += pr * vv[c];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kVecs; ++c) store(y + r * ystride + c * W, acc[r][c] * inv[r]);
}

template <int kTag, int kRows>
RF_INLINE void pv_rows(const AttnArgs& a, const float* p, int64_t pstride, const float* vb, const float* inv, float* y,
                       int64_t klen) {
  constexpr int64_t W = kW<kTag>;
  constexpr int kVecs = kTileVecs<kTag, kRows>;
  const int64_t Dv = a.Dv, vs = a.v.ss;
  int64_t c = 0;
  for (; c + kVecs * W <= Dv; c += kVecs * W)
    pv_tile<kTag, kRows, kVecs>(p, pstride, vb + c, vs, klen, inv, y + c, a.y_ss);
  for (; c + W <= Dv; c += W) pv_tile<kTag, kRows, 1>(p, pstride, vb + c, vs, klen, inv, y + c, a.y_ss);
  for (; c < Dv; ++c)
    for (int r = 0; r < kRows; ++r) {
      float acc = 0;
      for (int64_t j = 0; j < klen; ++j) acc += p[r * pstride + j] * vb[j * vs + c];
      y[r * a.y_ss + c] = acc * inv[r];
    }
}

// The query rows of a block in tiles of kTileRows, then one tile of the remaining 1 .. 5 rows.
// Each result element is the same sum in the same order whatever tile computes it: the tiling
// only decides what stays in registers.
static_assert(kTileRows == 6, "qk_block and pv_block list the remainders of 6");

template <int kTag>
RF_INLINE void qk_block(const AttnArgs& a, const float* qb, const float* kt, float* s, int64_t rows, int64_t ncols) {
  const int64_t qs = a.q.ss, Skp = a.Skp, D = a.D;
  int64_t r = 0;
  for (; r + kTileRows <= rows; r += kTileRows)
    qk_rows<kTag, kTileRows>(qb + r * qs, qs, kt, Skp, D, s + r * Skp, Skp, ncols);
  const float* q = qb + r * qs;
  float* sr = s + r * Skp;
  switch (rows - r) {
    case 5:
      qk_rows<kTag, 5>(q, qs, kt, Skp, D, sr, Skp, ncols);
      break;
    case 4:
      qk_rows<kTag, 4>(q, qs, kt, Skp, D, sr, Skp, ncols);
      break;
    case 3:
      qk_rows<kTag, 3>(q, qs, kt, Skp, D, sr, Skp, ncols);
      break;
    case 2:
      qk_rows<kTag, 2>(q, qs, kt, Skp, D, sr, Skp, ncols);
      break;
    case 1:
      qk_rows<kTag, 1>(q, qs, kt, Skp, D, sr, Skp, ncols);
      break;
    default:
      break;
  }
}

template <int kTag>
RF_INLINE void pv_block(const AttnArgs& a, const float* s, const float* vb, const float* inv, float* yb, int64_t rows,
                        int64_t klen) {
  const int64_t Skp = a.Skp, ys = a.y_ss;
  int64_t r = 0;
  for (; r + kTileRows <= rows; r += kTileRows)
    pv_rows<kTag, kTileRows>(a, s + r * Skp, Skp, vb, inv + r, yb + r * ys, klen);
  const float* p = s + r * Skp;
  float* y = yb + r * ys;
  switch (rows - r) {
    case 5:
      pv_rows<kTag, 5>(a, p, Skp, vb, inv + r, y, klen);
      break;
    case 4:
      pv_rows<kTag, 4>(a, p, Skp, vb, inv + r, y, klen);
      break;
    case 3:
      pv_rows<kTag, 3>(a, p, Skp, vb, inv + r, y, klen);
      break;
    case 2:
      pv_rows<kTag, 2>(a, p, Skp, vb, inv + r, y, klen);
      break;
    case 1:
      pv_rows<kTag, 1>(a, p, Skp, vb, inv + r, y, klen);
      break;
    default:
      break;
  }
}

// One (batch, query head, query block) task.
template <int kTag>
RF_INLINE void attn_task_impl(const AttnArgs& a, int64_t b, int64_t h, int64_t i0, int64_t rows, float* s) {
  using V = Vec<kTag>;
  constexpr int64_t W = kW<kTag>;
  const int64_t Skp = a.Skp, Sk = a.Sk;
  const int64_t kh = a.k_bcast_h ? 0 : h / a.k_group;
  const int64_t vh = a.v_bcast_h ? 0 : h / a.v_group;
  const float* kt = a.kt + (a.k.b == 1 ? 0 : b) * a.kt_b + kh * a.kt_h;
  const float* qb = a.q.p + b * a.q.sb + h * a.q.sh + i0 * a.q.ss;
  // Keys past the last one that any row of the block can see (a causal mask's upper triangle)
  // are skipped: a mask value <= -1e30 (or a Where fill <= -1e30) makes exp() exactly 0 there,
  // as long as the row has an open key to set its max. NaN counts as open.
  int64_t klen = Sk;
  if (a.mask_mode != 0 && (a.mask_mode == 1 || a.fill <= -1e30f)) {
    int64_t last = -1;
    for (int64_t r = 0; r < rows && last + 1 < Sk; ++r) {
      const int64_t i = i0 + r, base = b * a.m_sb + h * a.m_sh + i * a.m_sq;
      int64_t j = Sk - 1;
      if (a.mask_mode == 1) {
        while (j >= 0 && a.mask_f[base + j * a.m_sk] <= -1e30f) --j;
      } else {
        const bool closed = a.mask_mode == 2;
        while (j >= 0 && a.mask_b[base + j * a.m_sk] == closed) --j;
      }
      if (j < 0) {  // a row with no open key: keep everything (its softmax is over all keys)
        last = Sk - 1;
        break;
      }
      last = std::max(last, j);
    }
    klen = last + 1;
  }
  const int64_t kp = (klen + W - 1) / W * W;  // <= Skp: Skp is a multiple of every width
  // Scores.
  qk_block<kTag>(a, qb, kt, s, rows, kp);
  // Scale, mask, softmax numerator (unnormalized) and 1 / sum per row.
  float inv[kBlockQ];
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * Skp;
    const int64_t i = i0 + r;
    if (a.scale_op == 1) {
      const V sc = splat<V>(a.scale);
      for (int64_t j = 0; j < kp; j += W) store(sr + j, load<V>(sr + j) * sc);
    }
    if (a.mask_mode == 1) {
      const float* m = a.mask_f + b * a.m_sb + h * a.m_sh + i * a.m_sq;
      if (a.m_sk == 1) {
        int64_t j = 0;
        for (; j + W <= klen; j += W) store(sr + j, load<V>(sr + j) + load<V>(m + j));
        for (; j < klen; ++j) sr[j] += m[j];
      } else {
        for (int64_t j = 0; j < klen; ++j) sr[j] += m[0];
      }
    } else if (a.mask_mode >= 2) {
      const bool* m = a.mask_b + b * a.m_sb + h * a.m_sh + i * a.m_sq;
      const bool when = a.mask_mode == 2;
      for (int64_t j = 0; j < klen; ++j)
        if (m[j * a.m_sk] == when) sr[j] = a.fill;
    }
    for (int64_t j = klen; j < kp; ++j) sr[j] = ninf;
    V mx = splat<V>(ninf);
    for (int64_t j = 0; j < kp; j += W) {
      const V x = load<V>(sr + j);
      mx = x > mx ? x : mx;
    }
    const float m = hmax(mx);
    const V vm = splat<V>(m);
    V sum{};
    for (int64_t j = 0; j < kp; j += W) {
      V e = vexp(load<V>(sr + j) - vm);
      store(sr + j, e);
      sum += e;
    }
    const float total = hsum(sum);
    inv[r] = 1.0f / total;
    if (a.nan_rows_zero && std::isnan(total)) {  // softmax_nan 'zero': the whole row's weights are 0
      for (int64_t j = 0; j < kp; ++j) sr[j] = 0;
      inv[r] = 0;
    }
  }
  // P V.
  const float* vb = a.v.p + (a.v.b == 1 ? 0 : b) * a.v.sb + vh * a.v.sh;
  float* yb = a.y + b * a.y_sb + h * a.y_sh + i0 * a.y_ss;
  pv_block<kTag>(a, s, vb, inv, yb, rows, klen);
}

RF_AVX512_TARGET void attn_task_avx512(const AttnArgs& a, int64_t b, int64_t h, int64_t i0, int64_t rows, float* s) {
  attn_task_impl<kAvx512>(a, b, h, i0, rows, s);
}
RF_AVX2_TARGET void attn_task_avx2(const AttnArgs& a, int64_t b, int64_t h, int64_t i0, int64_t rows, float* s) {
  attn_task_impl<kAvx2>(a, b, h, i0, rows, s);
}
void attn_task_generic(const AttnArgs& a, int64_t b, int64_t h, int64_t i0, int64_t rows, float* s) {
  attn_task_impl<kGeneric>(a, b, h, i0, rows, s);
}

// Mask strides after right-aligned broadcasting to [B, Hq, Sq, Sk]; false when the mask does not
// broadcast that way (the unfused ops would then broadcast the scores up, or fail).
bool mask_strides(const Tensor& m, AttnArgs& a) {
  if (m.rank() > 4) return false;
  int64_t dims[4] = {1, 1, 1, 1};
  for (int64_t i = 0; i < m.rank(); ++i) dims[4 - m.rank() + i] = m.dim(i);
  const int64_t target[4] = {a.B, a.Hq, a.Sq, a.Sk};
  for (int i = 0; i < 4; ++i)
    if (dims[i] != 1 && dims[i] != target[i]) return false;
  a.m_sk = dims[3] == 1 ? 0 : 1;
  a.m_sq = dims[2] == 1 ? 0 : dims[3];
  a.m_sh = dims[1] == 1 ? 0 : dims[2] * dims[3];
  a.m_sb = dims[0] == 1 ? 0 : dims[1] * dims[2] * dims[3];
  return true;
}

void attention_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const ir::Node& node = ctx.node();
  std::string err = fused_attention_check(node);
  REFORGE_CHECK(err.empty(), where, ": ", err);
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  bool fast = true;
  for (const Tensor* t : {&q, &k, &v}) fast &= t->dtype() == DType::Float32 && t->rank() == 4;
  if (ctx.attr_string("mask_mode", "none") == "add") fast &= ctx.input(4).dtype() == DType::Float32;
  auto unfused = [&] { ctx.set_output(0, attention_unfused(ctx, fused::host_ops(ctx))); };
  if (!fast) return unfused();
  AttnArgs a;
  a.q = view_of(q, parse_layout(node, "q_layout", false));
  a.k = view_of(k, parse_layout(node, "k_layout", true));
  a.v = view_of(v, parse_layout(node, "v_layout", false));
  const Layout out_layout = parse_layout(node, "out_layout", false);
  a.B = a.q.b;
  a.Hq = a.q.h;
  a.Sq = a.q.s;
  a.D = a.q.d;
  a.Sk = a.k.s;
  a.Dv = a.v.d;
  // Anything but per-head attention with matching (or size-1) batch and heads: unfused.
  if (a.k.d != a.D || a.v.s != a.Sk || !(a.k.b == a.B || a.k.b == 1) || !(a.v.b == a.B || a.v.b == 1)) return unfused();
  if (ctx.has_input(6)) {
    if (!(ctx.has_input(7) && ctx.has_input(8) && ctx.has_input(9))) return unfused();
    const bool allowzero = ctx.attr_int("kv_allowzero", 0) != 0;
    a.k_group = repeat_group(ctx, a.k, 6, 7, allowzero);
    a.v_group = repeat_group(ctx, a.v, 8, 9, allowzero);
    if (a.k_group == 0 || a.v_group == 0 || a.k.h * a.k_group != a.Hq || a.v.h * a.v_group != a.Hq) return unfused();
  } else {
    if (!(a.k.h == a.Hq || a.k.h == 1) || !(a.v.h == a.Hq || a.v.h == 1)) return unfused();
    a.k_bcast_h = a.k.h == 1 && a.Hq != 1;
    a.v_bcast_h = a.v.h == 1 && a.Hq != 1;
  }
  const std::string scale_op = ctx.attr_string("scale_op", "none");
  Tensor q_scaled;  // mul_qk: Q * scale, rounded to float32 as the unfused Mul
  float k_scale = 1.0f;
  // Scratch reused across runs, per calling thread (as kt below).
  static thread_local std::vector<float> q_scratch;
  if (scale_op == "mul_qk") {
    const Tensor& qs = ctx.input(3);
    if (qs.dtype() == DType::Float32 && qs.numel() == 1 && qs.on_host()) {
      // A float32 scalar: the Mul's products, each rounded to float32, without allocating.
      const float c = qs.data<float>()[0];
      if (q_scratch.size() < static_cast<size_t>(q.numel())) q_scratch.resize(static_cast<size_t>(q.numel()));
      const float* src = q.data<float>();
      for (int64_t i = 0; i < q.numel(); ++i) q_scratch[static_cast<size_t>(i)] = src[i] * c;
      a.q.p = q_scratch.data();
    } else {
      q_scaled = run_op(ctx, "Mul", 14, {&q, &qs});
      if (q_scaled.dtype() != DType::Float32 || q_scaled.shape() != q.shape()) return unfused();
      a.q.p = q_scaled.data<float>();
    }
    if (ctx.input(10).numel() != 1) return unfused();
    k_scale = static_cast<float>(read_scalar(ctx, 10, 1.0, "K scale"));
  } else if (scale_op != "none") {
    const double c = read_scalar(ctx, 3, 1.0, "scale");
    a.scale_op = 1;
    a.scale = static_cast<float>(scale_op == "div" ? 1.0 / c : c);
  }
  a.nan_rows_zero = ctx.attr_string("softmax_nan", "keep") == "zero";
  const std::string mask_mode = ctx.attr_string("mask_mode", "none");
  if (mask_mode != "none") {
    const Tensor& m = ctx.input(4);
    if (!mask_strides(m, a)) return unfused();
    if (mask_mode == "add") {
      a.mask_mode = 1;
      a.mask_f = m.data<float>();
    } else {
      if (m.dtype() != DType::Bool || ctx.input(5).numel() != 1) return unfused();
      a.mask_mode = mask_mode == "where_fill_true" ? 2 : 3;
      a.mask_b = m.data<bool>();
      a.fill = static_cast<float>(read_scalar(ctx, 5, 0.0, "fill value"));
    }
  }
  if (a.B == 0 || a.Hq == 0 || a.Sq == 0 || a.Dv == 0 || a.Sk == 0) return unfused();
  Shape y_shape = out_layout == Layout::BHSD ? Shape{a.B, a.Hq, a.Sq, a.Dv} : Shape{a.B, a.Sq, a.Hq, a.Dv};
  a.y = ctx.allocate_output_uninit(0, DType::Float32, y_shape).mutable_data<float>();
  if (out_layout == Layout::BHSD) {
    a.y_sb = a.Hq * a.Sq * a.Dv;
    a.y_sh = a.Sq * a.Dv;
    a.y_ss = a.Dv;
  } else {
    a.y_sb = a.Sq * a.Hq * a.Dv;
    a.y_sh = a.Dv;
    a.y_ss = a.Hq * a.Dv;
  }
  if (a.Sk == 0) return unfused();
  // Pack K^T per (batch, kv head): [D][Skp], zero padded.
  a.Skp = (a.Sk + kMaxW - 1) / kMaxW * kMaxW;
  const int64_t kb = a.k.b, kh = a.k.h;
  // Scratch reused across runs (no allocation per run in steady state): per calling thread, so
  // concurrent runs on other threads have their own.
  static thread_local std::vector<float> kt;
  if (kt.size() < static_cast<size_t>(kb * kh * a.D * a.Skp)) kt.resize(static_cast<size_t>(kb * kh * a.D * a.Skp));
  a.kt_h = a.D * a.Skp;
  a.kt_b = kh * a.kt_h;
  float* const ktp = kt.data();  // worker threads must not name `kt`: it is thread_local
  a.kt = ktp;
  const int threads = std::max(1, std::min<int>(ctx.threads(), omp_get_max_threads()));
  const int64_t flops = a.B * a.Hq * a.Sq * a.Sk * (a.D + a.Dv);
  const bool par = threads > 1 && big_enough(flops / 8);
  parallel_tasks(kb * kh, par ? threads : 1, [&](int64_t bh) {
    const int64_t b = bh / kh, h = bh % kh;
    float* dst = ktp + b * a.kt_b + h * a.kt_h;
    const float* src = a.k.p + b * a.k.sb + h * a.k.sh;
    if (a.k.sd == 1) {
      // K rows are contiguous in d: read them in order, write K^T column by column (the
      // destination, D x Skp floats, stays in cache; the source rows may be far apart).
      for (int64_t j = 0; j < a.Sk; ++j) {
        const float* krow = src + j * a.k.ss;
        for (int64_t d = 0; d < a.D; ++d) dst[d * a.Skp + j] = krow[d] * k_scale;
      }
      for (int64_t d = 0; d < a.D; ++d)
        for (int64_t j = a.Sk; j < a.Skp; ++j) dst[d * a.Skp + j] = 0;
    } else {
      for (int64_t d = 0; d < a.D; ++d) {
        float* row = dst + d * a.Skp;
        for (int64_t j = 0; j < a.Sk; ++j) row[j] = src[j * a.k.ss + d * a.k.sd] * k_scale;
        for (int64_t j = a.Sk; j < a.Skp; ++j) row[j] = 0;
      }
    }
  });
  const int64_t qblocks = (a.Sq + kBlockQ - 1) / kBlockQ;
  const int64_t tasks = a.B * a.Hq * qblocks;
  auto fn = pick(attn_task_avx512, attn_task_avx2, attn_task_generic);
  parallel_for(tasks, par ? threads : 1, 1, [&](int64_t t0, int64_t t1) {
    static thread_local std::vector<float> s;
    if (s.size() < static_cast<size_t>(kBlockQ * a.Skp)) s.resize(static_cast<size_t>(kBlockQ * a.Skp));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t qbk = t % qblocks, bh = t / qblocks;
      const int64_t b = bh / a.Hq, h = bh % a.Hq;
      const int64_t i0 = qbk * kBlockQ;
      fn(a, b, h, i0, std::min(kBlockQ, a.Sq - i0), s.data());
    }
  });
}

}  // namespace
}  // namespace reforge::ops

namespace reforge::cpu {

void register_attention_kernels(KernelRegistry& r) {
  // 16-bit attention in float32 is the CUDA kernel's: here it stays the unfused ops.
  auto check = [](const ir::Node& n) -> std::string {
    if (n.attr_string("precision", "rounded") == "float32")
      return "precision 'float32' (16-bit attention computed in float32) runs on the CUDA backend only";
    return ops::fused_attention_check(n);
  };
  r.add({"cpu", "reforge", "Attention", 1, INT_MAX, ops::attention_kernel, check});
}

}  // namespace reforge::cpu
