// Strided batched products through cuBLASLt for kernels other than MatMul's (attention's prompt
// form): row-major C = alpha * A op(B) with A [M, K] and B [K, N] (or, trans_b, B stored as
// [N, K]), any row strides (ld) and batch strides, inputs of one float type and C of that type or
// float32; float32 accumulation (float32 inputs exact: no TF32). Descriptors and the heuristic's
// algorithm are kept per thread and shape, as MatMul's are (matmul.cu).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace reforge::cuda {

struct LtGemm {
  DType in = DType::Float32, out = DType::Float32;
  int64_t M = 0, N = 0, K = 0, batch = 1;
  bool trans_b = false;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  float alpha = 1;
};

void lt_gemm(const LtGemm& g);

}  // namespace reforge::cuda
