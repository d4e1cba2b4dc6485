#include "backends/cpu/blas_gemm.h"

#include <cblas.h>

#include <cstring>

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

}  // namespace reforge::cpu
