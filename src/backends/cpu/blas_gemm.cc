#include "backends/cpu/blas_gemm.h"

#include <omp.h>

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/gemv.h"
#include "core/error.h"
#include "core/simd.h"
#include "core/thread_pool.h"

namespace reforge::cpu {

bool prefer_blas_linear(int64_t rows) { return rows >= kBlasMinRows && simd_level() < SimdLevel::Avx512; }

namespace {

// C[M, n] (row stride ldc) = A[M, K] x W[K, n] (row stride ldw) (+ bias[n]): C starts as the
// bias in every row and the product adds to it (beta = 1).
void sgemm_bias(int64_t M, int64_t n, int64_t K, const float* a, const float* w, int64_t ldw, const float* bias,
                float* c, int64_t ldc) {
  float beta = 0.0f;
  if (bias) {
    parallel_tasks(M, M * n > (1 << 16) ? omp_get_max_threads() : 1,
                   [&](int64_t r) { std::memcpy(c + r * ldc, bias, static_cast<size_t>(n) * sizeof(float)); });
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(M), static_cast<blasint>(n),
              static_cast<blasint>(K), 1.0f, a, static_cast<blasint>(K), w, static_cast<blasint>(ldw), beta, c,
              static_cast<blasint>(ldc));
}

constexpr int64_t kPanel = 256;  // columns of W widened per sgemm call (not tuned: measured under load)

// dst[0, n) = float32 of src[0, n) (16-bit W).
void widen_row(const uint16_t* src, float* dst, int64_t n, DType dtype) {
  switch (dtype) {
    case DType::BFloat16:
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
        std::memcpy(dst + i, &bits, 4);
      }
      return;
    case DType::Float16:
      f16_to_f32(src, dst, n);
      return;
    default:
      fail("blas_linear_widened: unsupported weight type ", dtype_name(dtype));
  }
}

}  // namespace

void blas_linear(int64_t M, int64_t N, int64_t K, const float* a, const float* w, const float* bias, float* c) {
  sgemm_bias(M, N, K, a, w, N, bias, c, N);
}

void blas_linear_widened(int64_t M, int64_t N, int64_t K, const float* a, const void* w, DType w_dtype,
                         const float* bias, float* c) {
  const auto* w16 = static_cast<const uint16_t*>(w);
  const int64_t nb_max = std::min(N, kPanel);
  std::vector<float> panel(static_cast<size_t>(K * nb_max));
  for (int64_t j0 = 0; j0 < N; j0 += kPanel) {
    const int64_t nb = std::min(kPanel, N - j0);
    parallel_tasks(K, K * nb > (1 << 16) ? omp_get_max_threads() : 1,
                   [&](int64_t k) { widen_row(w16 + k * N + j0, panel.data() + k * nb, nb, w_dtype); });
    sgemm_bias(M, nb, K, a, panel.data(), nb, bias ? bias + j0 : nullptr, c + j0, N);
  }
}

}  // namespace reforge::cpu
