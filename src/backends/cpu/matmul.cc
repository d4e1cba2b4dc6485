// MatMul on the CPU: a constant 2-D float32 B (a Linear layer's weight) is prepared for the
// Linear paths (linear.h); everything else runs MatMul's shape logic (ops/nn/matmul.h) with
// run_matmul, oneDNN for float32. reforge::MatMulGroup runs each of its products so.
#include "backends/cpu/matmul.h"

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/linear.h"
#include "ops/reforge/matmul_group_setup.h"

namespace reforge::cpu {

namespace {

void matmul_f32(const MatmulDims& d, const float* a, const float* b, float* c) {
  if (dnnl_matmul_f32(d, a, b, c)) return;
  ops::nn::matmul_ref<float>(d, a, b, c);
}

std::shared_ptr<const void> matmul_prepare(const ir::Node&, const std::vector<const Tensor*>& constants,
                                           ops::PrepareContext&) {
  if (constants.size() < 2 || !constants[1] || constants[1]->dtype() != DType::Float32) return nullptr;
  return ops::prepare_linear(*constants[1], false);
}

void matmul_kernel(ops::KernelContext& ctx) {
  if (const auto* lw = ctx.prepared<ops::LinearWeights>(); lw && ops::run_linear(ctx, ctx.input(0), *lw, nullptr))
    return;
  ops::nn::matmul_run(ctx, run_matmul);
}

// reforge::MatMulGroup: each product as MatMul runs it here.
void matmul_group_kernel(ops::KernelContext& ctx) {
  const std::vector<MatmulDims> dims = ops::matmul_group_setup(ctx);
  const Tensor& x = ctx.input(0);
  for (size_t i = 0; i < dims.size(); ++i)
    run_matmul(x.dtype(), dims[i], x.raw(), ctx.input(i + 1).raw(), ctx.outputs()[i].mutable_raw());
}

}  // namespace

void run_matmul(DType dtype, const MatmulDims& d, const void* a, const void* b, void* c) {
  ops::nn::matmul_product(dtype, d, a, b, c, matmul_f32);
}

void register_matmul_kernels(KernelRegistry& r) {
  r.add({"cpu", "", "MatMul", 1, INT_MAX, matmul_kernel, nullptr, matmul_prepare});
  r.add({"cpu", "reforge", "MatMulGroup", 1, INT_MAX, matmul_group_kernel});
}

}  // namespace reforge::cpu
