// The AVX2 + FMA column-block kernels behind cpu::gemv_rows (gemv.h), for CPUs without AVX-512
// (AMD Zen 2/3, Intel before Skylake-SP). Internal to gemv.cc.
//
// Each computes Y[r, j0:j1) = X[r, :] x W[:, j0:j1) (+ bias) for every row r < M, summing each
// element over k in ascending order, four k per pass, with the same operation sequence as the
// AVX-512 kernels (the first product, then one fused multiply-add per k, then + bias): results
// are bit-identical to them and do not depend on the thread count. One row streams W once with
// Y's block in L1; two or more rows use each loaded W vector for every row before the next
// (8 W registers, 4 broadcasts, 2 accumulators), so a few rows cost little more than one.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace reforge::cpu::avx2 {

// True when the CPU runs AVX2 and FMA (and the level is not capped below it: core/simd.h).
bool available();
// available(), and F16C (for float16 weights; every AVX2 CPU has it).
bool available_f16();

void chunk_f32(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const float* w, const float* bias,
               float* y, int64_t ldy, int64_t j0, int64_t j1);
void chunk_bf16(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const uint16_t* w, const float* bias,
                float* y, int64_t ldy, int64_t j0, int64_t j1);
// float16 W, widened with F16C's vcvtph2ps (exact); needs available_f16().
void chunk_f16(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const float16* w, const float* bias,
               float* y, int64_t ldy, int64_t j0, int64_t j1);

}  // namespace reforge::cpu::avx2
