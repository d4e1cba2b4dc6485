#include "backends/cpu/cpu_backend.h"

#include "backends/cpu/dnnl_conv.h"
#include "backends/cpu/dnnl_matmul.h"
#include "core/simd.h"
#include "ops/nn/activation_layout.h"

namespace reforge::cpu {

namespace {

const char* simd_level_name(SimdLevel l) {
  switch (l) {
    case SimdLevel::Avx512:
      return "avx512";
    case SimdLevel::Avx2:
      return "avx2";
    case SimdLevel::Generic:
      return "generic";
  }
  return "generic";
}

// The CPU decides its weight layouts from its instruction sets: float32 Linear weights in panels
// where the panel kernels have AVX2 or AVX-512; 16-bit weights in panels too, except bfloat16
// where oneDNN multiplies it natively (asked only in bf16 builds: the answer makes a oneDNN
// primitive, once per process).
class Layouts final : public backends::WeightLayoutPolicy {
 public:
  backends::LayoutChoice choose(const backends::LayoutRequest& q) const override {
    using P = backends::LayoutRequest::Packing;
    using W = backends::LayoutRequest::Weights;
    backends::LayoutChoice c;
    c.features.push_back(simd_level_name(simd_level()));
    c.linear_panels = q.packing == P::Panels || (q.packing == P::Auto && simd_level() >= SimdLevel::Avx2);
    bool half = q.packing == P::Panels;
    if (!half && c.linear_panels) {
      if (q.weights == W::Float16) half = true;
      if (q.weights == W::BFloat16) {
        const bool native = has_bf16_matmul();
        if (native) c.features.push_back("bf16-matmul");
        half = !native;
      }
    }
    c.half_panels = half;
    return c;
  }
};

}  // namespace

backends::Backend backend() {
  static Layouts layouts;
  backends::Backend b;
  b.name = "cpu";
  b.memory = backends::Memory::Host;
  b.runs_reference_kernels = true;
  b.layouts = &layouts;
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
