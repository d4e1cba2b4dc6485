// Gemm: Y = alpha * op(A) x op(B) + beta * C, with C broadcast unidirectionally to [M, N].
//
// C is first broadcast into the output, which the product then accumulates into (oneDNN's sum
// post-op scaled by beta), so the bias costs one pass over the output and no temporary.
#include <cstring>

#include "core/dispatch.h"
#include "ops/linear.h"
#include "ops/nn_common.h"

namespace reforge::ops::nn {

namespace {

// A constant float B with transA = 0 and alpha = 1 (a Linear layer) is prepared (ops/linear.h); the
// kernel then runs it as Y = A x B + C when C is absent or a row vector with beta = 1.
std::shared_ptr<const void> gemm_prepare(const ir::Node& node, const std::vector<const Tensor*>& constants) {
  if (constants.size() < 2 || !constants[1] || constants[1]->dtype() != DType::Float32) return nullptr;
  if (node.attr_int("transA", 0) != 0 || node.attr_float("alpha", 1.0f) != 1.0f) return nullptr;
  return prepare_linear(*constants[1], node.attr_int("transB", 0) != 0);
}

// The bias of a Gemm that run_linear can take: C absent (or beta = 0): null; C of N floats
// ([N] or [1, N]) with beta = 1: its data; anything else: `fits` is false.
const float* linear_bias(const KernelContext& ctx, int64_t N, bool& fits) {
  fits = true;
  const float beta = ctx.attr_float("beta", 1.0f);
  if (!ctx.has_input(2) || beta == 0.0f) return nullptr;
  const Tensor& C = ctx.input(2);
  fits = beta == 1.0f && C.dtype() == DType::Float32 && C.numel() == N &&
         (C.rank() == 1 || (C.rank() == 2 && C.dim(0) == 1));
  return fits ? C.data<float>() : nullptr;
}

void gemm_kernel(KernelContext& ctx) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  const std::string& label = ctx.node().label();
  if (const auto* lw = ctx.prepared<LinearWeights>(); lw && A.rank() == 2) {
    bool fits = false;
    const float* bias = linear_bias(ctx, lw->N, fits);
    if (fits && run_linear(ctx, A, *lw, bias)) return;
  }
  REFORGE_CHECK(A.rank() == 2 && B.rank() == 2, label, ": A and B must be 2-D, got ", A.describe(), " and ",
                B.describe());
  REFORGE_CHECK(A.dtype() == B.dtype(), label, ": A and B have different element types ", dtype_name(A.dtype()),
                " and ", dtype_name(B.dtype()));
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const int64_t M = ta ? A.dim(1) : A.dim(0), K = ta ? A.dim(0) : A.dim(1);
  const int64_t KB = tb ? B.dim(1) : B.dim(0), N = tb ? B.dim(0) : B.dim(1);
  REFORGE_CHECK(K == KB, label, ": inner dimensions differ: op(A) is ", M, "x", K, ", op(B) is ", KB, "x", N,
                " (transA=", ta, ", transB=", tb, ")");
  float alpha = ctx.attr_float("alpha", 1.0f), beta = ctx.attr_float("beta", 1.0f);
  Tensor& Y = ctx.allocate_output(0, A.dtype(), {M, N});
  if (Y.numel() == 0) return;

  const bool has_c = ctx.has_input(2) && beta != 0.0f;
  if (has_c) {
    const Tensor& C = ctx.input(2);
    REFORGE_CHECK(C.dtype() == A.dtype(), label, ": C has element type ", dtype_name(C.dtype()), ", A has ",
                  dtype_name(A.dtype()));
    REFORGE_CHECK(C.rank() <= 2, label, ": C must have rank <= 2, got ", C.describe());
    // Unidirectional broadcast of C to [M, N].
    const int64_t cr = C.rank() == 2 ? C.dim(0) : 1;
    const int64_t cc = C.rank() >= 1 ? C.dim(C.rank() - 1) : 1;
    REFORGE_CHECK((cr == M || cr == 1) && (cc == N || cc == 1), label, ": C ", C.describe(),
                  " cannot be broadcast to [", M, ",", N, "]");
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
  cpu::MatmulDims d;
  d.M = M, d.N = N, d.K = K;
  d.trans_a = ta, d.trans_b = tb;
  d.alpha = alpha;
  d.beta = has_c ? beta : 0.0f;
  run_matmul(A.dtype(), d, A.raw(), B.raw(), Y.mutable_raw());
}

}  // namespace

void register_gemm_ops(OpRegistry& r) {
  r.add({"",
         "Gemm",
         1,
         INT_MAX,
         gemm_kernel,
         nullptr,
         gemm_prepare,
         {InputRole::kData, InputRole::kWeight, InputRole::kWeight}});
}

}  // namespace reforge::ops::nn
