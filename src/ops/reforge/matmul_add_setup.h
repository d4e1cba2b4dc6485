// The validation and shape arithmetic of reforge::MatMulAdd (Y = MatMul(X, W) + b), shared by the
// CPU kernel (backends/cpu/matmul_add.cc) and the CUDA kernel (backends/cuda/matmul.cu), so that
// both refuse the same inputs with the same messages. Header-only: the CUDA compiler includes it.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"
#include "ops/registry.h"

namespace reforge::ops {

struct MatMulAddSetup {
  int64_t K = 0, N = 0;
  Shape out;                     // X's shape with N last
  const Tensor* bias = nullptr;  // null when absent
};

// Checks W [K, N] (float32, or bfloat16 / float16 in 16-bit Linear layers), X float32 [..., K]
// and b float32 [N] when given.
inline MatMulAddSetup matmul_add_setup(const KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor* b = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const std::string& label = ctx.node().label();
  REFORGE_CHECK(
      w.rank() == 2 && (w.dtype() == DType::Float32 || w.dtype() == DType::BFloat16 || w.dtype() == DType::Float16),
      label, ": weight must be a float32, bfloat16 or float16 matrix, got ", w.describe());
  REFORGE_CHECK(x.dtype() == DType::Float32 && x.rank() >= 1 && x.shape().back() == w.dim(0), label, ": input ",
                x.describe(), " does not match the weight ", w.describe());
  REFORGE_CHECK(!b || (b->dtype() == DType::Float32 && b->rank() == 1 && b->dim(0) == w.dim(1)), label, ": bias ",
                b ? b->describe() : "", " does not match the weight ", w.describe());
  MatMulAddSetup s;
  s.K = w.dim(0);
  s.N = w.dim(1);
  s.out = x.shape();
  s.out.back() = s.N;
  s.bias = b;
  return s;
}

}  // namespace reforge::ops
