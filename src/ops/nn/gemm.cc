// Gemm: Y = alpha * op(A) x op(B) + beta * C, with C broadcast unidirectionally to [M, N].
//
// C is first broadcast into the output, which the product then accumulates into (beta scales
// it), so the bias costs one pass over the output and no temporary.
#include <cstring>

#include "core/dispatch.h"
#include "ops/nn/matmul.h"
#include "ops/nn/nn_common.h"

namespace reforge::ops::nn {

GemmSetup gemm_setup(const KernelContext& ctx) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  const std::string& label = ctx.node().label();
  REFORGE_CHECK(A.rank() == 2 && B.rank() == 2, label, ": A and B must be 2-D, got ", A.describe(), " and ",
                B.describe());
  REFORGE_CHECK(A.dtype() == B.dtype(), label, ": A and B have different element types ", dtype_name(A.dtype()),
                " and ", dtype_name(B.dtype()));
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const int64_t M = ta ? A.dim(1) : A.dim(0), K = ta ? A.dim(0) : A.dim(1);
  const int64_t KB = tb ? B.dim(1) : B.dim(0), N = tb ? B.dim(0) : B.dim(1);
  REFORGE_CHECK(K == KB, label, ": inner dimensions differ: op(A) is ", M, "x", K, ", op(B) is ", KB, "x", N,
                " (transA=", ta, ", transB=", tb, ")");
  const float alpha = ctx.attr_float("alpha", 1.0f), beta = ctx.attr_float("beta", 1.0f);
  GemmSetup s;
  s.has_c = ctx.has_input(2) && beta != 0.0f;
  MatmulDims& d = s.dims;
  d.M = M, d.N = N, d.K = K;
  d.trans_a = ta, d.trans_b = tb;
  d.alpha = alpha;
  d.beta = s.has_c ? beta : 0.0f;
  return s;
}

GemmBias gemm_bias(const KernelContext& ctx, const MatmulDims& d) {
  const Tensor& A = ctx.input(0);
  const Tensor& C = ctx.input(2);
  const std::string& label = ctx.node().label();
  REFORGE_CHECK(C.dtype() == A.dtype(), label, ": C has element type ", dtype_name(C.dtype()), ", A has ",
                dtype_name(A.dtype()));
  REFORGE_CHECK(C.rank() <= 2, label, ": C must have rank <= 2, got ", C.describe());
  // Unidirectional broadcast of C to [M, N].
  GemmBias b;
  b.rows = C.rank() == 2 ? C.dim(0) : 1;
  b.cols = C.rank() >= 1 ? C.dim(C.rank() - 1) : 1;
  REFORGE_CHECK((b.rows == d.M || b.rows == 1) && (b.cols == d.N || b.cols == 1), label, ": C ", C.describe(),
                " cannot be broadcast to [", d.M, ",", d.N, "]");
  return b;
}

void gemm_run(KernelContext& ctx, MatmulProduct product) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  const GemmSetup s = gemm_setup(ctx);
  const MatmulDims& d = s.dims;
  const int64_t M = d.M, N = d.N;
  Tensor& Y = ctx.allocate_output(0, A.dtype(), {M, N});
  if (Y.numel() == 0) return;
  if (s.has_c) {
    const Tensor& C = ctx.input(2);
    const GemmBias cb = gemm_bias(ctx, d);
    const int64_t cr = cb.rows, cc = cb.cols;
    const size_t es = dtype_size(A.dtype());
    const auto* src = static_cast<const uint8_t*>(C.raw());
    auto* dst = static_cast<uint8_t*>(Y.mutable_raw());
    for (int64_t i = 0; i < M; ++i) {
      const uint8_t* row = src + (cr == 1 ? 0 : i * cc * es);
      uint8_t* out = dst + i * N * es;
      if (cc == N) {
        std::memcpy(out, row, N * es);
      } else {
        for (int64_t j = 0; j < N; ++j) std::memcpy(out + j * es, row, es);
      }
    }
  }
  product(A.dtype(), d, A.raw(), B.raw(), Y.mutable_raw());
}

namespace {

void gemm_kernel(KernelContext& ctx) { gemm_run(ctx, matmul_reference_product); }

}  // namespace

void register_gemm_ops(OpRegistry& r) {
  r.add({"",
         "Gemm",
         1,
         INT_MAX,
         gemm_kernel,
         nullptr,
         nullptr,
         {InputRole::kData, InputRole::kWeight, InputRole::kWeight}});
}

}  // namespace reforge::ops::nn
