// The CPU's ConvTranspose: the reference algorithm (ops/nn/conv_transpose.cc) with its column
// matrix computed by run_matmul, oneDNN for float32.
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/matmul.h"
#include "ops/nn/nn_common.h"

namespace reforge::cpu {

namespace {

void conv_transpose_kernel(ops::KernelContext& ctx) { ops::nn::conv_transpose_run(ctx, run_matmul); }

}  // namespace

void register_conv_transpose_kernels(KernelRegistry& r) {
  r.add({"cpu", "", "ConvTranspose", 1, INT_MAX, conv_transpose_kernel});
}

}  // namespace reforge::cpu
