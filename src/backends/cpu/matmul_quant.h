// The CPU's product on quantized Linear weights (--precision int8 / int4): a plain function, so any
// node that holds weights in these layouts can call it: reforge::MatMulQuant (matmul_quant.cc) and
// a com.microsoft MatMulNBits node, whose int4 layout (B [N, n_blocks, block_size / 2] packed low
// nibble first, scales [N * n_blocks], zero points two per byte) is the one QuantMatrix describes
// (ops/reforge/quant_weight.h).
//
// The weight is dequantized in registers, 8 (AVX2) or 16 (AVX-512) values at a time, and multiplied with
// float32 activations into float32 sums: bytes read per weight are 1 (int8) or 1/2 (int4) plus the scales, which
// is what single-token decoding, bound by memory, pays for; the kernels prefetch that stream ahead of their reads.
// int8: widened to float, the column's scale applied to the sum once. int4: X is reordered once per call so that
// the low and high nibbles of 16 weight bytes multiply the even and odd k directly, and each block's zero point is
// factored out (s * (sum_k x_k q_k - zp * sum_k x_k), the block sums of X computed once). The results differ from
// the reference's only by float32 rounding (partial sums per block and per vector lane, combined at the end); each
// output is computed by one thread in an order fixed by the weight's shape, so results do not depend on the thread
// count, nor on which rows or columns share a pass. No VNNI path: VNNI multiplies 8-bit activations, and
// quantizing the activations would change the results (and their error against the float model) for a compute
// saving that memory-bound decoding does not need.
#pragma once

#include <cstdint>

#include "ops/reforge/quant_weight.h"

namespace reforge::cpu {

// Y[m, n] = sum_k X[m, k] * Wd(k, n) (+ bias[n]) for m < M, n < w.shape.N; X rows `ldx` floats
// apart, Y rows `ldy` apart. Runs on up to `threads` threads.
void matmul_quant(const ops::quant::QuantMatrix& w, int64_t M, const float* x, int64_t ldx, const float* bias, float* y,
                  int64_t ldy, int threads);

}  // namespace reforge::cpu
