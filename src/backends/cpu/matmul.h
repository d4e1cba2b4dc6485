// The CPU's matrix product, shared by its MatMul, Gemm and ConvTranspose kernels.
#pragma once

#include "backends/cpu/dnnl_matmul.h"
#include "ops/nn/matmul.h"

namespace reforge::cpu {

// C[b] = alpha * op(A[b]) x op(B[b]) + beta * C[b] in element type `dtype` (any numeric type):
// float32 through oneDNN (the reference loop where oneDNN declines the dimensions), 16-bit floats
// widened to float32 for it, float64 and integers through the reference loop.
void run_matmul(DType dtype, const MatmulDims& d, const void* a, const void* b, void* c);

}  // namespace reforge::cpu
