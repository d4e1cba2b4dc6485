// Float32 matrix products through OpenBLAS (cblas_sgemm, the OpenMP build): the multi-row path
// of Linear layers on CPUs without AVX-512.
//
// Why a second GEMM library next to oneDNN: on AVX2-only CPUs OpenBLAS 0.3.21's Haswell/Zen
// kernels beat oneDNN 2.6's float32 matmul (gemm:jit, which like OpenBLAS packs W per call) by
// ~7% from 32 rows on, and lose to it below (AMD EPYC Zen 3, K = 1024, N = 2816, one thread,
// CPU time, `build/reforge_linear_bench --rows 8,16,32,128,256 --clock cpu`: 32 rows 1.07-1.10x
// oneDNN's time, 128 rows 0.92-0.93x, 256 rows 0.93-0.94x, 8 rows 1.21x). On AVX-512 CPUs
// oneDNN stays the choice (measured faster than ONNX Runtime there; docs/benchmarks.md).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace reforge::cpu {

// True when a Linear product of `rows` rows should use blas_linear rather than oneDNN on this
// CPU: no AVX-512 (per core/simd.h's level) and at least kBlasMinRows rows.
inline constexpr int64_t kBlasMinRows = 32;
bool prefer_blas_linear(int64_t rows);

// C[M, N] = A[M, K] x W[K, N] (+ bias[N]; null: none), all float32, row-major, dense. Runs on
// omp_get_max_threads() threads (OpenBLAS's OpenMP build follows the caller's team size).
void blas_linear(int64_t M, int64_t N, int64_t K, const float* a, const float* w, const float* bias, float* c);

// The same product for 16-bit W (`w_dtype` BFloat16 or Float16): W is
// widened to float32 one column panel at a time into a buffer, and each panel is one
// sgemm call. For CPUs without 16-bit matrix instructions, where a bfloat16 plan would otherwise
// run its multi-row products on the streaming kernel (2.3x slower than float32 sgemm at 128
// rows on Zen 3) or keep a float32 copy of every weight: the panel costs K x 256 x 4 bytes,
// not a copy of W (panel: 256 columns). Accumulation is float32 on the exactly widened weights.
void blas_linear_widened(int64_t M, int64_t N, int64_t K, const float* a, const void* w, DType w_dtype,
                         const float* bias, float* c);

}  // namespace reforge::cpu
