#include "backends/cpu/cpu_backend.h"

#include "backends/cpu/dnnl_conv.h"
#include "ops/nn/activation_layout.h"

namespace reforge::cpu {

backends::Backend backend() {
  backends::Backend b;
  b.name = "cpu";
  b.memory = backends::Memory::Host;
  b.runs_reference_kernels = true;
  b.register_kernels = [](KernelRegistry& r) {
    // What the layout name "NCHWc" means on this host (ops/nn/activation_layout.h).
    ops::nn::set_native_activation_layout([] {
      return ops::nn::NativeActivationLayout{native_layout(), activation_block()};
    });
    register_arithmetic_kernels(r);
    register_matmul_kernels(r);
    register_gemm_kernels(r);
    register_conv_kernels(r);
    register_conv_transpose_kernels(r);
    register_max_pool_kernels(r);
    register_softmax_kernels(r);
    register_layer_normalization_kernels(r);
    register_gelu_kernels(r);
    register_matmul_add_kernels(r);
    register_matmul_quant_kernels(r);
    register_rms_norm_kernels(r);
    register_silu_kernels(r);
    register_attention_kernels(r);
    register_rotary_kernels(r);
    register_unary_kernels(r);
    register_reduce_kernels(r);
  };
  return b;
}

}  // namespace reforge::cpu
