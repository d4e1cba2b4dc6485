#include "backends/cpu/linear.h"

#include <omp.h>

#include <cstring>

#include "backends/cpu/blas_gemm.h"
#include "backends/cpu/dnnl_context.h"
#include "backends/cpu/gemv.h"
#include "backends/cpu/matmul.h"
#include "core/thread_pool.h"
#include "ops/nn/nn_common.h"

namespace reforge::ops {

namespace {

// oneDNN's layout choice for W may depend on the row count; pack for a typical prompt.
constexpr int64_t kPackRows = 256;

}  // namespace

std::shared_ptr<const LinearWeights> prepare_linear(const Tensor& w, bool transposed) {
  if (!w.defined() || w.rank() != 2 ||
      (w.dtype() != DType::Float32 && w.dtype() != DType::BFloat16 && w.dtype() != DType::Float16))
    return nullptr;
  const int64_t K = transposed ? w.dim(1) : w.dim(0), N = transposed ? w.dim(0) : w.dim(1);
  if (K == 0 || N == 0) return nullptr;
  auto lw = std::make_shared<LinearWeights>();
  lw->K = K;
  lw->N = N;
  if (!transposed) {
    lw->plain = w;
  } else {
    lw->plain = Tensor::uninitialized(w.dtype(), {K, N});
    const size_t es = dtype_size(w.dtype());
    const auto* src = static_cast<const uint8_t*>(w.raw());
    auto* dst = static_cast<uint8_t*>(lw->plain.mutable_raw());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) std::memcpy(dst + (k * N + n) * es, src + (n * K + k) * es, es);
  }
  return lw;
}

const cpu::PackedWeights* LinearWeights::packed() const {
  if (!packable) return nullptr;
  std::call_once(pack_once_, [&] {
    // Where oneDNN takes W as it is (float32), the "packed" weights alias `plain`.
    auto keep = std::make_shared<const Tensor>(plain);
    packed_ = cpu::pack_weights(K, N, false, plain.dtype(), plain.raw(), kPackRows, keep);
  });
  return packed_.get();
}

const float* round_activations(const Tensor& x) {
  auto* dst = static_cast<float*>(
      cpu::dnnl_util::thread_buffer(cpu::dnnl_util::kRoundedXSlot, static_cast<size_t>(x.numel()) * 4));
  cpu::round_to_bf16(x.data<float>(), dst, x.numel());
  return dst;
}

bool run_linear(KernelContext& ctx, const Tensor& x, const LinearWeights& w, const float* bias, bool round_x) {
  if (x.dtype() != DType::Float32 || x.rank() < 1 || x.shape().back() != w.K) return false;
  Shape out = x.shape();
  out.back() = w.N;
  Tensor& y = ctx.allocate_output_uninit(0, DType::Float32, out);
  const int64_t rows = x.numel() / w.K;
  if (rows == 0) return true;
  // With round_x, the paths below multiply X rounded to bfloat16 (rounded once, on first use),
  // except oneDNN's product on packed weights, which is told to round it and does so in the
  // conversion to bfloat16 that its product needs anyway.
  const float* a_rounded = nullptr;
  auto a = [&] { return !round_x ? x.data<float>() : a_rounded ? a_rounded : (a_rounded = round_activations(x)); };
  float* c = y.mutable_data<float>();
  // Tiny products (the model-test models: 7 x 32 x 128) are dominated by oneDNN's per-call cost
  // (~5 us); the streaming kernel has none.
  constexpr double kTinyProduct = 1 << 17;  // multiply-adds
  if (rows <= cpu::gemv_max_rows() ||
      static_cast<double>(rows) * static_cast<double>(w.N) * static_cast<double>(w.K) <= kTinyProduct) {
    cpu::gemv_rows(rows, w.N, w.K, a(), w.K, w.plain.raw(), w.plain.dtype(), bias, c, w.N, ctx.threads());
    return true;
  }
  if (w.plain.dtype() == DType::Float32 && cpu::prefer_blas_linear(rows)) {
    // No AVX-512 and many rows: OpenBLAS beats oneDNN here (backends/cpu/blas_gemm.h), on W as is.
    cpu::blas_linear(rows, w.N, w.K, a(), w.plain.data<float>(), bias, c);
    return true;
  }
  if (const cpu::PackedWeights* p = w.packed();
      p && cpu::dnnl_matmul_packed(*p, rows, x.data<float>(), bias, c, round_x))
    return true;
  if (w.plain.dtype() != DType::Float32) {
    // No 16-bit matmul in oneDNN on this CPU (and none for float16 W with float32 activations
    // on any): many rows take OpenBLAS on W widened a panel at a time, fewer the streaming kernel.
    if (rows >= cpu::kBlasMinRows)
      cpu::blas_linear_widened(rows, w.N, w.K, a(), w.plain.raw(), w.plain.dtype(), bias, c);
    else
      cpu::gemv_rows(rows, w.N, w.K, a(), w.K, w.plain.raw(), w.plain.dtype(), bias, c, w.N, ctx.threads());
    return true;
  }
  cpu::MatmulDims d;
  d.M = rows, d.N = w.N, d.K = w.K;
  cpu::run_matmul(DType::Float32, d, a(), w.plain.raw(), c);
  if (bias) {
    parallel_tasks(rows, rows * w.N > (1 << 16) ? omp_get_max_threads() : 1, [&](int64_t r) {
      for (int64_t j = 0; j < w.N; ++j) c[r * w.N + j] += bias[j];
    });
  }
  return true;
}

}  // namespace reforge::ops
