// Products with a few rows on weights prepacked in panels of 16 (sgemm_panels.h): a decoder's
// one token, small batches. Y[M, N] = X[M, K] x W[K, N] (+ bias).
//
// With few rows the product is bound by reading W, not by arithmetic. sgemm_panels' 6 x 16 tile
// keeps two sums per row, so one row waits on the FMA latency (4 cycles on Zen 3) and streams W
// slower than cpu::gemv_rows does the plain copy. Here one row takes four panels side by side
// (eight independent sums), two or three rows two panels, four to six rows one (8-12 sums);
// more rows are cut into equal groups of at most six that take turns on each k block while it
// is in L1, so W still leaves memory once. Each thread owns a contiguous run of panels and walks
// it 16 panels at a time, one k block (16 KB) per panel in turn, prefetching the next block
// into L2: sixteen interleaved streams keep more of W in flight than one.
//
// Measured on AMD EPYC Zen 3 (AVX2, one thread, `build/reforge_linear_bench --rows 1,2,4,8
// --k 1024 --n 2816 --layers 24 --clock cpu`, W from memory; ms per product, noisy host): one
// row 0.50-0.58 against 0.54-0.59 for gemv_rows on the plain W and 0.57-0.67 for the tile; 2-8
// rows on par with the tile (memory- then FMA-bound), 0.55-0.9 against gemv_rows' 0.78-1.3.
// With W in cache (--n 1024 --layers 1) it is 1.2-1.4x faster than the tile up to 8 rows.
//
// Summation order is sgemm_panels' own: each output is summed k ascending in blocks of
// kPanelsBlockK (a single chain of fused multiply-adds from zero per block, or products then
// adds in the portable version), each block added to the running value, then + bias. Results
// are therefore bit-identical to sgemm_panels' tile at the same SIMD level: they depend neither
// on the thread count (panels are split between threads, K never is) nor on how many rows are
// in the product (sgemm_panels dispatches here below gemv_panels_max_rows() rows).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace reforge::cpu {

// k per block of the summation order; sgemm_panels.cc checks that its kBlockK equals it.
inline constexpr int64_t kPanelsBlockK = 256;

// Y (row stride ldy) = X (row stride ldx) x W (panels: pack_panels' layout, 64-byte aligned,
// of type `w_dtype`: Float32, or BFloat16 / Float16 widened exactly in registers) + bias (null: none). Any M >= 0, N
// and K >= 0 (K = 0: Y = bias or 0); only Y's N valid columns are written. Runs on up to `threads` OpenMP threads, one
// when the product is small. AVX2 + FMA when simd_level() allows, else a portable loop with the same sums as
// sgemm_panels' portable tile.
void gemv_panels(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const void* panels, DType w_dtype,
                 const float* bias, float* y, int64_t ldy, int threads);
inline void gemv_panels(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* panels,
                        const float* bias, float* y, int64_t ldy, int threads) {
  gemv_panels(M, N, K, x, ldx, panels, DType::Float32, bias, y, ldy, threads);
}

// Most rows for which gemv_panels beats sgemm_panels' 6 x 16 tile on this CPU's kernels
// (measured: see gemv_panels.cc).
int64_t gemv_panels_max_rows();

}  // namespace reforge::cpu
