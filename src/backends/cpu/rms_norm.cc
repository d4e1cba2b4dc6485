// The CPU's reforge::RmsNorm, emitted by fuse-rms-norm (src/passes/fusion_transformer.cc):
// RmsNorm(X, W?, eps, p?, n?):  Y = X * (n / sqrt(mean(X^p over the last axis) + eps)) [* W]
//   p defaults to 2 (fast path), n to 1; W broadcasts along the last axis (N or 1 elements).
// Float32 rows on the vectors of simd_vec.h (fused_common.h).
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

struct RmsArgs {
  const float* x;
  const float* w;  // null: no weight
  bool w_scalar;
  float* y;
  int64_t n;
  float eps, num;
  double p;
};

template <int kTag>
RF_INLINE void rms_rows_impl(const RmsArgs& a, int64_t r0, int64_t r1) {
  using V = Vec<kTag>;
  constexpr int64_t W = kW<kTag>;
  const int64_t n = a.n;
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = a.x + r * n;
    float* y = a.y + r * n;
    float ss;
    if (a.p == 2.0) {
      V s0{}, s1{}, s2{}, s3{};
      int64_t i = 0;
      for (; i + 4 * W <= n; i += 4 * W) {
        V x0 = load<V>(x + i), x1 = load<V>(x + i + W), x2 = load<V>(x + i + 2 * W), x3 = load<V>(x + i + 3 * W);
        s0 += x0 * x0;
        s1 += x1 * x1;
        s2 += x2 * x2;
        s3 += x3 * x3;
      }
      for (; i + W <= n; i += W) {
        V x0 = load<V>(x + i);
        s0 += x0 * x0;
      }
      ss = hsum((s0 + s1) + (s2 + s3));
      for (; i < n; ++i) ss += x[i] * x[i];
    } else {
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += std::pow(static_cast<float>(x[i]), static_cast<float>(a.p));
      ss = static_cast<float>(acc);
    }
    const float inv = a.num / std::sqrt(ss / static_cast<float>(n) + a.eps);
    const V vinv = splat<V>(inv);
    int64_t i = 0;
    if (a.w && !a.w_scalar) {
      for (; i + W <= n; i += W) store(y + i, (load<V>(x + i) * vinv) * load<V>(a.w + i));
      for (; i < n; ++i) y[i] = (x[i] * inv) * a.w[i];
    } else {
      const float ws = a.w ? a.w[0] : 1.0f;
      const V vw = splat<V>(ws);
      if (a.w) {
        for (; i + W <= n; i += W) store(y + i, (load<V>(x + i) * vinv) * vw);
        for (; i < n; ++i) y[i] = (x[i] * inv) * ws;
      } else {
        for (; i + W <= n; i += W) store(y + i, load<V>(x + i) * vinv);
        for (; i < n; ++i) y[i] = x[i] * inv;
      }
    }
  }
}

RF_AVX512_TARGET void rms_rows_avx512(const RmsArgs& a, int64_t r0, int64_t r1) { rms_rows_impl<kAvx512>(a, r0, r1); }
RF_AVX2_TARGET void rms_rows_avx2(const RmsArgs& a, int64_t r0, int64_t r1) { rms_rows_impl<kAvx2>(a, r0, r1); }
void rms_rows_generic(const RmsArgs& a, int64_t r0, int64_t r1) { rms_rows_impl<kGeneric>(a, r0, r1); }

void rms_norm_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(x.dtype() == DType::Float32 && x.rank() >= 1, where, ": X must be a float32 tensor of rank >= 1, got ",
                x.describe());
  const int64_t n = x.dim(x.rank() - 1);
  const int64_t rows = n ? x.numel() / n : 0;
  RmsArgs a{};
  if (ctx.has_input(1)) {
    const Tensor& w = ctx.input(1);
    REFORGE_CHECK(w.dtype() == DType::Float32 && (w.numel() == n || w.numel() == 1) && w.rank() <= x.rank(), where,
                  ": weight ", w.describe(), " does not broadcast along the last axis of X ", x.describe());
    a.w = w.data<float>();
    a.w_scalar = w.numel() == 1 && n != 1;
  }
  a.eps = static_cast<float>(read_scalar(ctx, 2, 0.0, "epsilon"));
  a.p = read_scalar(ctx, 3, 2.0, "exponent");
  a.num = static_cast<float>(read_scalar(ctx, 4, 1.0, "numerator"));
  a.x = x.data<float>();
  a.n = n;
  a.y = ctx.allocate_output_uninit(0, DType::Float32, x.shape()).mutable_data<float>();
  auto fn = pick(rms_rows_avx512, rms_rows_avx2, rms_rows_generic);
  const int threads = std::max(1, std::min<int>(ctx.threads(), omp_get_max_threads()));
  if (threads > 1 && rows > 1 && big_enough(rows * n)) {
    parallel_tasks(threads, threads, [&](int64_t t) {
      const int64_t nt = threads;
      const int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
      fn(a, r0, r1);
    });
  } else {
    fn(a, 0, rows);
  }
}

}  // namespace
}  // namespace reforge::ops

namespace reforge::cpu {

void register_rms_norm_kernels(KernelRegistry& r) {
  r.add({"cpu", "reforge", "RmsNorm", 1, INT_MAX, ops::rms_norm_kernel});
}

}  // namespace reforge::cpu
