// Float32 products on weights prepacked into column panels: Y[M, N] = X[M, K] x W[K, N] (+ bias).
//
// Why reforge has its own GEMM: a Linear layer's W is constant, but oneDNN's gemm:jit and
// OpenBLAS repack it on every call (the BLAS interface has no prepacked B). With a few hundred
// rows that repacking is a fifth of the product's time (K = 1024, N = 2816, 128 rows: OpenBLAS
// 55 GFLOPS against 77 at 1024 rows on AMD EPYC Zen 3, one core). ONNX Runtime's MLAS prepacks
// constant weights once; so does this module, and its packed panels are the only copy of W the
// engine keeps (cpu::PanelWeights), so prepacking costs no memory.
//
// Layout ("panels of 16"): W's columns are cut into ceil(N / 16) panels of 16 columns; panel p
// holds W[k, 16p .. 16p + 16) for k = 0 .. K-1, one 64-byte row per k, panels one after the
// other, the last padded with zeros. A 6 x 16 AVX2 register tile (12 accumulators), or on
// AVX-512 a tile of up to 12 rows x 2 panels (24 accumulators), runs over a block of k per
// call, reading X by broadcasts and each panel by aligned loads; the panel block stays in L1
// while every 6-row strip of X passes over it.
//
// 16-bit panels: the same layout with bfloat16 or float16 elements (a panel row is 32 bytes), the
// engine weight of --precision bf16 / fp16 plans on CPUs without a 16-bit matrix product. The
// products widen W exactly to float32 (many rows: a panel's k block at a time into an L1 buffer
// that every strip of X then reads; few rows: in registers) and run the float32 kernels, so the
// result is bit for bit the float32 product on the widened weights, with half the bytes of W read.
//
// Each output element is summed in the same order (k ascending in blocks of kBlockK, each block
// added to the running sum, then + bias) whatever the thread count, row count or instruction set.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "ops/reforge/panels.h"

namespace reforge::cpu {

using ops::kPanelWidth;  // the panel layout is the ops' (ops/reforge/panels.h)
using ops::panel_floats;

// Packs W into `dst` (panel_floats(K, N) floats, 64-byte aligned). `w` is [K, N] row-major, or
// [N, K] row-major when `transposed` (W given as its transpose, as Gemm transB = 1 stores it).
void pack_panels(const float* w, int64_t K, int64_t N, bool transposed, float* dst);
// The same for a bfloat16 or float16 W (bits as uint16_t; `dst`: panel_floats(K, N) elements).
void pack_panels16(const uint16_t* w, int64_t K, int64_t N, bool transposed, uint16_t* dst);

// W[k, n] read back from the packed form (tests, plan inspection).
inline float panel_at(const float* panels, int64_t K, int64_t k, int64_t n) {
  return panels[(n / kPanelWidth) * K * kPanelWidth + k * kPanelWidth + n % kPanelWidth];
}

// Y (row stride ldy) = X (row stride ldx) x W (packed) + bias (null: none). Runs on up to
// `threads` OpenMP threads (fewer when the product is small).
void sgemm_panels(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* panels, const float* bias,
                  float* y, int64_t ldy, int threads);
// The same with panels of type `w_dtype`: Float32, BFloat16 or Float16.
void sgemm_panels(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const void* panels, DType w_dtype,
                  const float* bias, float* y, int64_t ldy, int threads);

// Y[M, N] = bias (0 where bias is null): the product with K = 0, for sgemm_panels and gemv_panels.
void fill_bias(int64_t M, int64_t N, const float* bias, float* y, int64_t ldy);

// The portable sums of one k block of one panel for R rows (CPUs without AVX2 + FMA; shared by
// sgemm_panels and gemv_panels): Y[r, 0:ncols) (+)= sum over k of X[k * x_stride + r] x panel row
// k (+ bias), as a * b + c, not fused. X is packed k-major, x_stride floats per k.
void panel_block_generic(int64_t R, int64_t x_stride, int64_t kc, const float* x, const float* b, float* y, int64_t ldy,
                         int64_t ncols, bool accumulate, const float* bias);

}  // namespace reforge::cpu
