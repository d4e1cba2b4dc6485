// The CPU's reforge::Rotary, emitted by fuse-rotary (src/passes/fusion_transformer.cc).
// Rotary(X, cos, sin, hi_start, hi_end, lo_start, lo_end), attributes axes, layout:
//   Y = X * cos + concat(-X[..., hi_start:hi_end], X[..., lo_start:lo_end]) * sin, X given as
//   [B,H,S,D] (layout 'bhsd') or [B,S,H,D] ('bshd', the head transpose absorbed); Y is [B,H,S,D].
//   The fast path is rotate_half (lo = [0, D/2), hi = [D/2, >= D)); other bounds run the
//   unfused ops.
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
#include "ops/registry.h"

namespace reforge::ops {
namespace {

using namespace simdv;
using fused::big_enough;
using fused::read_scalar;
using fused::run_op;

struct RotArgs {
  const float* x;
  const float* cos;
  const float* sin;
  float* y;
  int64_t H, S, D, half;
  int64_t x_sb, x_sh, x_ss;
  int64_t c_sb, c_sh, c_ss, s_sb, s_sh, s_ss;  // broadcast strides (0 where size 1)
};

template <int kTag>
RF_INLINE void rotary_rows_impl(const RotArgs& a, int64_t r0, int64_t r1) {
  using V = Vec<kTag>;
  constexpr int64_t W = kW<kTag>;
  const int64_t h2 = a.half;
  for (int64_t r = r0; r < r1; ++r) {  // r = (b * H + h) * S + s
    const int64_t s = r % a.S, bh = r / a.S, h = bh % a.H, b = bh / a.H;
    const float* x = a.x + b * a.x_sb + h * a.x_sh + s * a.x_ss;
    const float* c = a.cos + b * a.c_sb + h * a.c_sh + s * a.c_ss;
    const float* sn = a.sin + b * a.s_sb + h * a.s_sh + s * a.s_ss;
    float* y = a.y + r * a.D;
    int64_t i = 0;
    for (; i + W <= h2; i += W) {
      const V x0 = load<V>(x + i), x1 = load<V>(x + h2 + i);
      store(y + i, x0 * load<V>(c + i) + (-x1) * load<V>(sn + i));
      store(y + h2 + i, x1 * load<V>(c + h2 + i) + x0 * load<V>(sn + h2 + i));
    }
    for (; i < h2; ++i) {
      const float x0 = x[i], x1 = x[h2 + i];
      y[i] = x0 * c[i] + (-x1) * sn[i];
      y[h2 + i] = x1 * c[h2 + i] + x0 * sn[h2 + i];
    }
  }
}
RF_AVX512_TARGET void rotary_rows_avx512(const RotArgs& a, int64_t r0, int64_t r1) {
  rotary_rows_impl<kAvx512>(a, r0, r1);
}
RF_AVX2_TARGET void rotary_rows_avx2(const RotArgs& a, int64_t r0, int64_t r1) { rotary_rows_impl<kAvx2>(a, r0, r1); }
void rotary_rows_generic(const RotArgs& a, int64_t r0, int64_t r1) { rotary_rows_impl<kGeneric>(a, r0, r1); }

// Strides of a table (cos or sin) broadcast to [B, H, S, D] with its last dimension D.
bool table_strides(const Tensor& t, const int64_t (&target)[4], int64_t& sb, int64_t& sh, int64_t& ss) {
  if (t.dtype() != DType::Float32 || t.rank() > 4 || t.rank() < 1) return false;
  int64_t dims[4] = {1, 1, 1, 1};
  for (int64_t i = 0; i < t.rank(); ++i) dims[4 - t.rank() + i] = t.dim(i);
  if (dims[3] != target[3]) return false;
  for (int i = 0; i < 3; ++i)
    if (dims[i] != 1 && dims[i] != target[i]) return false;
  ss = dims[2] == 1 ? 0 : dims[3];
  sh = dims[1] == 1 ? 0 : dims[2] * dims[3];
  sb = dims[0] == 1 ? 0 : dims[1] * dims[2] * dims[3];
  return true;
}

void rotary_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const bool bshd = ctx.attr_string("layout", "bhsd") == "bshd";
  auto unfused = [&] { ctx.set_output(0, rotary_unfused(ctx, fused::host_ops(ctx))); };
  if (x.dtype() != DType::Float32 || x.rank() != 4) return unfused();
  int64_t bounds[4];  // hi_start, hi_end, lo_start, lo_end
  for (int i = 0; i < 4; ++i) {
    const Tensor& t = ctx.input(3 + i);
    if (t.numel() != 1 || !is_integer(t.dtype())) return unfused();
    bounds[i] = t.to_int64_vector()[0];
  }
  const int64_t half = bounds[2] == 0 ? bounds[3] : -1, hi_end = bounds[1];
  if (bounds[0] != half) return unfused();
  RotArgs a{};
  const int64_t B = x.dim(0);
  a.H = bshd ? x.dim(2) : x.dim(1);
  a.S = bshd ? x.dim(1) : x.dim(2);
  a.D = x.dim(3);
  a.half = half;
  if (a.D != 2 * half || hi_end < a.D) return unfused();
  const int64_t target[4] = {B, a.H, a.S, a.D};
  if (!table_strides(ctx.input(1), target, a.c_sb, a.c_sh, a.c_ss) ||
      !table_strides(ctx.input(2), target, a.s_sb, a.s_sh, a.s_ss))
    return unfused();
  a.x = x.data<float>();
  a.cos = ctx.input(1).data<float>();
  a.sin = ctx.input(2).data<float>();
  if (bshd) {
    a.x_sb = a.S * a.H * a.D;
    a.x_ss = a.H * a.D;
    a.x_sh = a.D;
  } else {
    a.x_sb = a.H * a.S * a.D;
    a.x_sh = a.S * a.D;
    a.x_ss = a.D;
  }
  a.y = ctx.allocate_output_uninit(0, DType::Float32, {B, a.H, a.S, a.D}).mutable_data<float>();
  const int64_t rows = B * a.H * a.S;
  auto fn = pick(rotary_rows_avx512, rotary_rows_avx2, rotary_rows_generic);
  const int threads = std::max(1, std::min<int>(ctx.threads(), omp_get_max_threads()));
  if (threads > 1 && rows > 1 && big_enough(rows * a.D)) {
    parallel_tasks(threads, threads, [&](int64_t t) {
      const int64_t nt = threads;
      fn(a, rows * t / nt, rows * (t + 1) / nt);
    });
  } else {
    fn(a, 0, rows);
  }
}

}  // namespace
}  // namespace reforge::ops

namespace reforge::cpu {

void register_rotary_kernels(KernelRegistry& r) { r.add({"cpu", "reforge", "Rotary", 1, INT_MAX, ops::rotary_kernel}); }

}  // namespace reforge::cpu
