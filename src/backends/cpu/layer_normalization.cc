// The CPU's LayerNormalization: a float32 fast path for rows of `inner` contiguous elements, Scale and B with
// exactly `inner` elements (no broadcast within the row), no Mean/InvStdDev outputs. Two passes
// over each row in float32 on the native vectors of simd_vec.h (mean, then the centred sum of
// squares, so no cancellation), OpenMP over rows for large tensors.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd_vec.h"
#include "core/thread_pool.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

using namespace simdv;

// Outside the fast path: the op's reference kernel (ops/nn/layer_normalization.cc).
void layer_norm_reference(KernelContext& ctx) {
  const OpDef* def = OpRegistry::global().find(ctx.node().domain, ctx.node().op_type, ctx.opset());
  REFORGE_ASSERT(def != nullptr && def->kernel);
  def->kernel(ctx);
}

struct LnArgs {
  const float* x;
  const float* s;
  const float* b;  // may be null
  float* y;
  int64_t n;
  float eps;
};

template <int kTag>
RF_INLINE void ln_rows_impl(const LnArgs& a, int64_t r0, int64_t r1) {
  using V = Vec<kTag>;
  constexpr int64_t W = kW<kTag>;
  const int64_t n = a.n;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = a.x + r * n;
    float* y = a.y + r * n;
    V s0{}, s1{};
    int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
      s0 += load<V>(x + i);
      s1 += load<V>(x + i + W);
    }
    for (; i + W <= n; i += W) s0 += load<V>(x + i);
    float sum = hsum(s0 + s1);
    for (; i < n; ++i) sum += x[i];
    const float mean = sum * inv_n;
    const V vm = splat<V>(mean);
    V q0{}, q1{};
    for (i = 0; i + 2 * W <= n; i += 2 * W) {
      const V d0 = load<V>(x + i) - vm, d1 = load<V>(x + i + W) - vm;
      q0 += d0 * d0;
      q1 += d1 * d1;
    }
    for (; i + W <= n; i += W) {
      const V d0 = load<V>(x + i) - vm;
      q0 += d0 * d0;
    }
    float sq = hsum(q0 + q1);
    for (; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
    const float inv = 1.0f / std::sqrt(sq * inv_n + a.eps);
    const V vi = splat<V>(inv);
    for (i = 0; i + W <= n; i += W) {
      V v = (load<V>(x + i) - vm) * vi * load<V>(a.s + i);
      if (a.b) v += load<V>(a.b + i);
      store(y + i, v);
    }
    for (; i < n; ++i) y[i] = (x[i] - mean) * inv * a.s[i] + (a.b ? a.b[i] : 0.0f);
  }
}
RF_AVX512_TARGET void ln_rows_avx512(const LnArgs& a, int64_t r0, int64_t r1) { ln_rows_impl<kAvx512>(a, r0, r1); }
RF_AVX2_TARGET void ln_rows_avx2(const LnArgs& a, int64_t r0, int64_t r1) { ln_rows_impl<kAvx2>(a, r0, r1); }
void ln_rows_generic(const LnArgs& a, int64_t r0, int64_t r1) { ln_rows_impl<kGeneric>(a, r0, r1); }

// Returns false (having done nothing) when the node is outside the fast path's conditions.
bool layer_norm_fast_f32(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const Tensor& S = ctx.input(1);
  const Tensor* B = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  if (X.dtype() != DType::Float32 || S.dtype() != DType::Float32 || (B && B->dtype() != DType::Float32)) return false;
  if (ctx.output_wanted(1) || ctx.output_wanted(2) || X.numel() == 0) return false;
  const int64_t rank = X.rank();
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < -rank || axis >= rank) return false;
  if (axis < 0) axis += rank;
  int64_t inner = 1;
  for (int64_t i = axis; i < rank; ++i) inner *= X.dim(i);
  // Scale/B must be the normalized shape, possibly with leading 1s and fewer dims.
  auto fits = [&](const Tensor& p) {
    if (p.numel() != inner || p.rank() > rank) return false;
    for (int64_t i = 0; i < p.rank(); ++i) {
      const int64_t ax = rank - p.rank() + i;
      if (ax < axis ? p.dim(i) != 1 : p.dim(i) != X.dim(ax)) return false;
    }
    return true;
  };
  if (!fits(S) || (B && !fits(*B))) return false;
  LnArgs a{X.data<float>(), S.data<float>(), B ? B->data<float>() : nullptr,
           nullptr,         inner,           ctx.attr_float("epsilon", 1e-5f)};
  a.y = ctx.allocate_output_uninit(0, DType::Float32, X.shape()).mutable_data<float>();
  const int64_t rows = X.numel() / inner;
  auto fn = pick(ln_rows_avx512, ln_rows_avx2, ln_rows_generic);
  const int threads = std::max(1, std::min<int>(ctx.threads(), omp_get_max_threads()));
  if (threads > 1 && rows > 1 && X.numel() >= (int64_t{1} << 15)) {
    parallel_tasks(threads, threads, [&](int64_t t) {
      const int64_t nt = threads;
      fn(a, rows * t / nt, rows * (t + 1) / nt);
    });
  } else {
    fn(a, 0, rows);
  }
  return true;
}

void layer_norm_kernel(KernelContext& ctx) {
  if (!layer_norm_fast_f32(ctx)) layer_norm_reference(ctx);
}

}  // namespace

}  // namespace reforge::ops

namespace reforge::cpu {

void register_layer_normalization_kernels(KernelRegistry& r) {
  r.add({"cpu", "", "LayerNormalization", 17, INT_MAX, ops::layer_norm_kernel});
}

}  // namespace reforge::cpu
