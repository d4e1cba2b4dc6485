// Gemm on the CPU: a Linear layer (constant float32 B, transA = 0, alpha = 1, C absent or a row
// vector with beta = 1) runs the prepared Linear paths (linear.h); anything else runs Gemm's
// shape logic (ops/nn/matmul.h) with the CPU product (oneDNN for float32; its sum post-op
// scaled by beta accumulates into the broadcast C).
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/linear.h"
#include "backends/cpu/matmul.h"
#include "ops/nn/matmul.h"

namespace reforge::cpu {

namespace {

using ops::KernelContext;
using ops::LinearWeights;
using ops::prepare_linear;
using ops::run_linear;

// A constant float B with transA = 0 and alpha = 1 (a Linear layer) is prepared (linear.h); the
// kernel then runs it as Y = A x B + C when C is absent or a row vector with beta = 1.
std::shared_ptr<const void> gemm_prepare(const ir::Node& node, const std::vector<const Tensor*>& constants,
                                         ops::PrepareContext&) {
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
  if (const auto* lw = ctx.prepared<LinearWeights>(); lw && A.rank() == 2) {
    bool fits = false;
    const float* bias = linear_bias(ctx, lw->N, fits);
    if (fits && run_linear(ctx, A, *lw, bias)) return;
  }
  ops::nn::gemm_run(ctx, run_matmul);
}

}  // namespace

void register_gemm_kernels(KernelRegistry& r) {
  r.add({"cpu", "", "Gemm", 1, INT_MAX, gemm_kernel, nullptr, gemm_prepare});
}

}  // namespace reforge::cpu
