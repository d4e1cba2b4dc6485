// The CPU's reforge::Silu and reforge::SiluMul, emitted by fuse-silu
// (src/passes/fusion_transformer.cc):
// Silu(X):        Y = X * sigmoid(X)
// SiluMul(X, U):  Y = X * sigmoid(X) * U   (U broadcasts as in Mul)
// Float32 on the vectors of simd_vec.h (fused_common.h); other types run the unfused ops.
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

template <int kTag>
RF_INLINE void silu_impl(const float* x, const float* u, float* y, int64_t n) {
  using V = Vec<kTag>;
  constexpr int64_t W = kW<kTag>;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    V v = load<V>(x + i);
    V s = v / (1.0f + vexp(-v));
    if (u) s *= load<V>(u + i);
    store(y + i, s);
  }
  for (; i < n; ++i) {
    float s = x[i] / (1.0f + std::exp(-x[i]));
    y[i] = u ? s * u[i] : s;
  }
}
RF_AVX512_TARGET void silu_avx512(const float* x, const float* u, float* y, int64_t n) {
  silu_impl<kAvx512>(x, u, y, n);
}
RF_AVX2_TARGET void silu_avx2(const float* x, const float* u, float* y, int64_t n) { silu_impl<kAvx2>(x, u, y, n); }
void silu_generic(const float* x, const float* u, float* y, int64_t n) { silu_impl<kGeneric>(x, u, y, n); }

void silu_run(const KernelContext& ctx, const float* x, const float* u, float* y, int64_t n) {
  auto fn = pick(silu_avx512, silu_avx2, silu_generic);
  const int threads = std::max(1, std::min<int>(ctx.threads(), omp_get_max_threads()));
  if (threads > 1 && big_enough(n * 4)) {
    parallel_tasks(threads, threads, [&](int64_t t) {
      const int64_t nt = threads;
      int64_t b0 = (n / kMaxW) * t / nt * kMaxW, b1 = t + 1 == nt ? n : (n / kMaxW) * (t + 1) / nt * kMaxW;
      fn(x + b0, u ? u + b0 : nullptr, y + b0, b1 - b0);
    });
  } else {
    fn(x, u, y, n);
  }
}

void silu_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::Float32) {
    Tensor s = run_op(ctx, "Sigmoid", 13, {&x});
    ctx.set_output(0, run_op(ctx, "Mul", 14, {&x, &s}));
    return;
  }
  float* y = ctx.allocate_output_uninit(0, DType::Float32, x.shape()).mutable_data<float>();
  silu_run(ctx, x.data<float>(), nullptr, y, x.numel());
}

void silu_mul_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& u = ctx.input(1);
  if (x.dtype() != DType::Float32 || u.dtype() != DType::Float32 || x.shape() != u.shape()) {
    Tensor s = run_op(ctx, "Sigmoid", 13, {&x});
    Tensor xs = run_op(ctx, "Mul", 14, {&x, &s});
    ctx.set_output(0, run_op(ctx, "Mul", 14, {&xs, &u}));
    return;
  }
  float* y = ctx.allocate_output_uninit(0, DType::Float32, x.shape()).mutable_data<float>();
  silu_run(ctx, x.data<float>(), u.data<float>(), y, x.numel());
}

}  // namespace
}  // namespace reforge::ops

namespace reforge::cpu {

void register_silu_kernels(KernelRegistry& r) {
  r.add({"cpu", "reforge", "Silu", 1, INT_MAX, ops::silu_kernel});
  r.add({"cpu", "reforge", "SiluMul", 1, INT_MAX, ops::silu_mul_kernel});
}

}  // namespace reforge::cpu
