// The validation and shape arithmetic of reforge::MatMulGroup (Yi = MatMul(X, Wi)), shared by the
// CPU kernel (backends/cpu/matmul.cc) and the CUDA kernel (backends/cuda/matmul.cu), so that both
// refuse the same inputs with the same messages. Header-only: the CUDA compiler includes it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "ops/nn/matmul.h"
#include "ops/registry.h"

namespace reforge::ops {

// Checks X [..., K] of a float type and each Wi [K, Ni] of X's type ([Ni, K] with the attribute
// transposed = 1, and the products' trans_b set), allocates every output Yi [..., Ni]
// (uninitialized) and returns the products: rows of X by K by Ni, one per output.
inline std::vector<nn::MatmulDims> matmul_group_setup(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::string& label = ctx.node().label();
  REFORGE_CHECK(x.rank() >= 1 && is_float(x.dtype()), label, ": X must be a float tensor of rank 1 or more, got ",
                x.describe());
  REFORGE_CHECK(ctx.num_inputs() == ctx.num_outputs() + 1 && ctx.num_outputs() >= 1, label,
                ": takes X and one weight per output, got ", ctx.num_inputs(), " inputs for ", ctx.num_outputs(),
                " outputs");
  const int64_t K = x.dim(x.rank() - 1);
  int64_t rows = 1;
  for (int64_t i = 0; i + 1 < x.rank(); ++i) rows *= x.dim(i);
  const bool transposed = ctx.attr_int("transposed", 0) != 0;
  std::vector<nn::MatmulDims> dims;
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    const Tensor& w = ctx.input(i);
    REFORGE_CHECK(w.rank() == 2 && w.dtype() == x.dtype() && w.dim(transposed ? 1 : 0) == K, label, ": weight ", i,
                  " ", w.describe(), transposed ? " (stored transposed)" : "", " does not multiply X ", x.describe());
    Shape ys = x.shape();
    ys.back() = w.dim(transposed ? 0 : 1);
    ctx.allocate_output_uninit(i - 1, x.dtype(), ys);
    nn::MatmulDims d;
    d.M = rows;
    d.K = K;
    d.N = ys.back();
    d.trans_b = transposed;
    dims.push_back(d);
  }
  return dims;
}

}  // namespace reforge::ops
