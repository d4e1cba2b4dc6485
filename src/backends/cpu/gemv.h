// Matrix products with a few rows and a constant right-hand matrix (decoder tokens, small
// batches): Y[M, N] = X[M, K] x W[K, N] (+ bias[N]).
//
// With few rows the product is bound by reading W, not by arithmetic, so these kernels stream W
// exactly once, row after row in long contiguous runs (what hardware prefetchers like best),
// and keep a column block of Y in L1 as the accumulator. The columns are split between OpenMP
// threads, so every thread streams its own slice of each W row. Each output element is summed
// in the same order (k ascending, then + bias) whatever the thread count, so results do not
// depend on it.
//
// W is float32, bfloat16 or float16 (widened to float32 in registers, exactly: activations and
// accumulation stay float32). AVX-512 and AVX2 (+FMA, +F16C for float16: gemv_avx2.h) versions
// are chosen at run time by core/simd.h's level and give bit-identical sums; otherwise a portable
// loop computes the same sums (without FMA).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace reforge::cpu {

// Y (row stride ldy) = X (row stride ldx) x W ([K, N] row-major, dtype `w_dtype`, Float32,
// BFloat16 or Float16) + bias (null: none). Any M works, but it is the fast choice for one row only (each
// further row costs an L1 pass over the Y block; a packed GEMM wins from two rows on). `threads`
// caps the OpenMP team (the product runs on one thread when it is small).
void gemv_rows(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const void* w, DType w_dtype,
               const float* bias, float* y, int64_t ldy, int threads);

// Largest row count for which gemv_rows beats oneDNN on packed weights, for this CPU's kernels
// (bench/linear_bench.cc, K = 1024, N = 2816, weights streamed from memory, one thread):
//  - AVX-512 (Sapphire Rapids): 1. One row 14.2 vs 11.7 GB/s in float32, 12.1 vs 9.6 in
//    bfloat16; two rows 10.2 vs 11.2 (that kernel reloads W per row).
//  - AVX2 (AMD EPYC Zen 3): 8. The few-rows kernel loads each W vector once for all rows:
//    2 rows 0.86 vs 1.23 ms, 4 rows 0.82 vs 1.36, 8 rows 1.10 vs 1.36, 16 rows 2.9 vs 1.6.
//  - generic: 1.
int64_t gemv_max_rows();

// Splits float32 values into two bfloat16 parts, src[i] ~ hi[i] + lo[i] (hi = bfloat16(src),
// lo = bfloat16(src - hi), both rounded to nearest even; 16 significant bits together). Inf and
// NaN go into hi whole, lo is then 0. Lets a bfloat16 x bfloat16 product keep float32-accurate
// activations: X W = Xhi W + Xlo W. `lo` may be null: hi only (X rounded to bfloat16).
void split_f32_to_bf16(const float* src, uint16_t* hi, uint16_t* lo, int64_t n);

// dst[i] = src[i] rounded to the nearest bfloat16 (ties to even), as a float32: the value
// bfloat16::to_float(bfloat16::from_float(src[i])) (NaN stays NaN, quieted; a finite value
// that rounds past bfloat16's range becomes inf). The activations of `--activations bf16`.
// dst may equal src.
void round_to_bf16(const float* src, float* dst, int64_t n);

// dst[i] = the float16 bits src[i] widened to float32 (exact; F16C when the CPU has it, else
// float16::to_float: the same values, NaNs quieted alike).
void f16_to_f32(const uint16_t* src, float* dst, int64_t n);

// dst[i] = the bfloat16 (`dtype` BFloat16) or float16 (Float16) bits src[i] widened to float32,
// exactly.
void widen_to_f32(const uint16_t* src, DType dtype, int64_t n, float* dst);

}  // namespace reforge::cpu
