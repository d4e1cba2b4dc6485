#include "backends/cpu/blas_gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/gemv.h"
#include "core/error.h"

#include "core/simd.h"

namespace reforge::cpu {

bool prefer_blas_linear(int64_t rows) { return rows >= kBlasMinRows && simd_level() < SimdLevel::Avx512; }

void blas_linear(int64_t M, int64_t N, int64_t K, const float* a, const float* w, const float* bias, float* c) {
  float beta = 0.0f;
  if (bias) {
    // C starts as the bias in every row; the product adds to it (beta = 1).
#pragma omp parallel for if (M * N > (1 << 16))
    for (int64_t r = 0; r < M; ++r) std::memcpy(c + r * N, bias, static_cast<size_t>(N) * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(M), static_cast<blasint>(N),
              static_cast<blasint>(K), 1.0f, a, static_cast<blasint>(K), w, static_cast<blasint>(N), beta, c,
              static_cast<blasint>(N));
}

namespace {

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

void blas_linear_widened(int64_t M, int64_t N, int64_t K, const float* a, const void* w, DType w_dtype,
                         const float* bias, float* c) {
  const auto* w16 = static_cast<const uint16_t*>(w);
  const int64_t nb_max = std::min(N, kPanel);
  std::vector<float> panel(static_cast<size_t>(K * nb_max));
  for (int64_t j0 = 0; j0 < N; j0 += kPanel) {
    const int64_t nb = std::min(kPanel, N - j0);
#pragma omp parallel for if (K * nb > (1 << 16))
    for (int64_t k = 0; k < K; ++k) widen_row(w16 + k * N + j0, panel.data() + k * nb, nb, w_dtype);
    float beta = 0.0f;
    if (bias) {
      for (int64_t r = 0; r < M; ++r) std::memcpy(c + r * N + j0, bias + j0, static_cast<size_t>(nb) * sizeof(float));
      beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(M), static_cast<blasint>(nb),
                static_cast<blasint>(K), 1.0f, a, static_cast<blasint>(K), panel.data(), static_cast<blasint>(nb), beta,
                c + j0, static_cast<blasint>(N));
  }
}

}  // namespace reforge::cpu
