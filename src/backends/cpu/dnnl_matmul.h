// oneDNN float32 matrix products: the fast path behind MatMul and Gemm.
#pragma once

#include <cstdint>

namespace reforge::cpu {

// C[b] = alpha * op(A[b]) x op(B[b]) + beta * C[b] for b in [0, batch), all row-major and
// dense. op(A) is M x K (A stored K x M when trans_a), op(B) is K x N (stored N x K when
// trans_b). A broadcast operand is one matrix shared by every batch. C is read only when
// beta != 0.
struct MatmulDims {
  int64_t batch = 1;
  bool a_broadcast = false;
  bool b_broadcast = false;
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
};

// Runs the product with a cached oneDNN matmul primitive. Returns false (having written
// nothing) when oneDNN has no implementation for these dimensions; the caller then uses its
// reference loop. All dimensions must be positive.
bool dnnl_matmul_f32(const MatmulDims& d, const float* a, const float* b, float* c);

}  // namespace reforge::cpu
