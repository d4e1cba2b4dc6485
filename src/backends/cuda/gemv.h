// Products with few rows on 16-bit operands: a decoding step multiplies one row per sequence by
// every weight matrix, so its time is the time to read the weights. Timed against cuBLASLt on an
// H100 and an H200 (docs/benchmarks.md), this kernel streams a large weight slower than cuBLASLt,
// so a MatMul runs on cuBLASLt; the kernel runs a decoding step's small products of one input
// (reforge::MatMulGroup: a layer's query, key and value projections) in one launch, instead of
// one launch each.
//
// C[M, N] = A[M, K] B[K, N], all bfloat16 or all float16, row-major, M <= kGemvMaxRows (a batch of
// products with A's batch folded into M when B is shared). Each block owns 256 columns and a
// slice of the rows of B: its 8 warps read B's rows in turn, each lane 8 adjacent columns with
// one 16-byte load per row (eight rows in flight), accumulating in float32; the warps' sums are
// added in warp order in shared memory. The slices of one column range are added by the block
// that finishes last (a counter per column range, reset by that block), in slice order, so the
// result does not depend on which block ran when; rounded once to the output type.
#pragma once

#include <vector>

#include "core/dtype.h"
#include "ops/nn/matmul.h"

namespace reforge::cuda {

constexpr int64_t kGemvMaxRows = 8;
constexpr int kGemvMaxProducts = 4;

// Runs the product as above when `blocks_per_sm` is given (how many blocks per multiprocessor the
// split aims at) and it is such a product (type, M, no transposes, alpha 1 and beta 0, N a
// multiple of 8, 16-byte aligned operands), and returns true; false otherwise (nothing ran): for
// tests and timing. `rows_in_flight`: rows of B each warp loads at once, 4 or 8 (0: the default).
bool gemv_product(DType dtype, const ops::nn::MatmulDims& d, const void* a, const void* b, void* c,
                  int blocks_per_sm = 0, int rows_in_flight = 0);

// Several products of one A (the query, key and value projections of a layer; its gate and up
// projections), C_i[1, N_i] = A[1, K] B_i[K, N_i], in one launch of the kernel above: true when
// it ran; false (nothing ran) when they are not such products (one row, 2 to kGemvMaxProducts of
// them, each as above) or hold too few or too many weights together (from 2^22 to below 2^24).
struct GemvOutput {
  const void* b = nullptr;
  void* c = nullptr;
  int64_t n = 0;
};
bool gemv_products(DType dtype, int64_t M, int64_t K, const void* a, const std::vector<GemvOutput>& outputs);

// C[M, N] = A[M, K] Bt[N, K]^T with B stored transposed (K contiguous), 16-bit, M <= 4 or 8, K a
// multiple of 8, A and Bt 16-byte aligned: true when it ran. A warp reads whole rows of Bt (or a
// slice of them) and reduces across its lanes, so no block waits for another. `rows_per_warp`
// (1, 2, 4; 0: 1) and `slices` of K per row (1, 2, 4, 8; 0: chosen from the shape). On an H100 it
// streamed every one-row product of the Llama decoding shapes faster than cuBLASLt (up to 1.7x on
// the small ones), and products of 4 and 8 rows slower (docs/benchmarks.md).
bool gemv_product_nt(DType dtype, int64_t M, int64_t K, int64_t N, const void* a, const void* bt, void* c,
                     int rows_per_warp = 0, int slices = 0);
// Up to kGemvMaxProducts such products of one row A, C_i[1, N_i] = A Bt_i^T, in one launch (a
// layer's query, key and value projections): true when it ran; false (nothing ran) for more rows
// (cuBLASLt is faster there) or when one of them is not such a product.
bool gemv_products_nt(DType dtype, int64_t M, int64_t K, const void* a, const std::vector<GemvOutput>& outputs);

// reforge::MatMulAdd's product of a few rows with a 16-bit weight: Y[M, N] = X[M, K] W[K, N] + b,
// X, Y and b float32, W bfloat16 or float16 read as it is (widened exactly in registers: the
// float32 product of the widened weight, summed in another order), b optional (added to the
// finished sums), M <= kGemvMaxRows, N a multiple of 8, W 16-byte aligned: true when it ran. The
// split-K kernel above, streaming the 16-bit weight instead of a float32 copy of it.
bool gemv_matmul_add(int64_t M, int64_t K, int64_t N, const float* x, DType w_dtype, const void* w,
                     const float* bias, float* y);

// The same product by cuBLASLt (matmul.cu), as the products this kernel declines take it: for
// comparing the two (tests/cuda_gemv_test.cc times them).
void cublaslt_product(DType dtype, const ops::nn::MatmulDims& d, const void* a, const void* b, void* c);

}  // namespace reforge::cuda
