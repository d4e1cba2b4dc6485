// Operators of the "reforge" domain: the schema of every one, and the reference kernels of the
// portable weight transforms that build passes record in recipes (BatchNorm folding). The fused
// ops the passes emit (MatMulAdd, also the 16-bit Linear layer of --precision bf16/fp16;
// MatMulQuant, the Linear layer of --precision int8/int4, and its recipe step QuantizeWeight, which
// have reference kernels too: quant_weight.cc;
// MatMulAddPacked on packed weights; RmsNorm, Silu, SiluMul, Gelu, Attention, Rotary; FusedConv
// and MaxPool in the nn family) and the CPU's panel packing have kernels only in backends
// (backends/cpu). Because recipes are replayed by the same kernels at refit, each transform has
// exactly one implementation.
#include <cmath>

#include "core/dispatch.h"
#include "ops/registry.h"

namespace reforge::ops {

namespace {

void check_channel_vector(const KernelContext& ctx, const Tensor& t, int64_t channels, const char* what) {
  if (t.rank() != 1 || t.dim(0) != channels || t.dtype() != ctx.input(0).dtype())
    fail(ctx.node().label(), ": ", what, " is ", t.describe(), ", expected ", dtype_name(ctx.input(0).dtype()), "[",
         channels, "]");
}

// W'[m, ...] = W[m, ...] * scale[m] / sqrt(var[m] + eps)
void bn_fold_weight(KernelContext& ctx) {
  const Tensor& w = ctx.input(0);
  REFORGE_CHECK(w.rank() >= 1, ctx.node().label(), ": weight must have an output-channel axis");
  const int64_t m = w.dim(0);
  check_channel_vector(ctx, ctx.input(1), m, "scale");
  check_channel_vector(ctx, ctx.input(2), m, "variance");
  const float eps = ctx.attr_float("epsilon", 1e-5f);
  Tensor& out = ctx.allocate_output(0, w.dtype(), w.shape());
  const int64_t inner = m ? w.numel() / m : 0;
  dispatch_float(
      w.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* pw = w.data<T>();
        const T* ps = ctx.input(1).data<T>();
        const T* pv = ctx.input(2).data<T>();
        T* po = out.mutable_data<T>();
        for (int64_t c = 0; c < m; ++c) {
          auto f = to_compute(ps[c]) / std::sqrt(to_compute(pv[c]) + static_cast<decltype(to_compute(pv[c]))>(eps));
          for (int64_t i = 0; i < inner; ++i) po[c * inner + i] = from_compute<T>(to_compute(pw[c * inner + i]) * f);
        }
      },
      "BnFoldWeight");
}

// B'[m] = (B[m] - mean[m]) * scale[m] / sqrt(var[m] + eps) + bias[m]
void bn_fold_bias(KernelContext& ctx) {
  const Tensor& b = ctx.input(0);
  REFORGE_CHECK(b.rank() == 1, ctx.node().label(), ": conv bias must be a vector, got ", b.describe());
  const int64_t m = b.dim(0);
  for (size_t k = 1; k < 5; ++k) check_channel_vector(ctx, ctx.input(k), m, "BatchNormalization parameter");
  const float eps = ctx.attr_float("epsilon", 1e-5f);
  Tensor& out = ctx.allocate_output(0, b.dtype(), b.shape());
  dispatch_float(
      b.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* pb = b.data<T>();
        const T* ps = ctx.input(1).data<T>();
        const T* pbeta = ctx.input(2).data<T>();
        const T* pmean = ctx.input(3).data<T>();
        const T* pv = ctx.input(4).data<T>();
        T* po = out.mutable_data<T>();
        for (int64_t c = 0; c < m; ++c) {
          auto f = to_compute(ps[c]) / std::sqrt(to_compute(pv[c]) + static_cast<decltype(to_compute(pv[c]))>(eps));
          po[c] = from_compute<T>((to_compute(pb[c]) - to_compute(pmean[c])) * f + to_compute(pbeta[c]));
        }
      },
      "BnFoldBias");
}

}  // namespace

void register_quant_weight_ops(OpRegistry& r);  // quant_weight.cc: QuantizeWeight, MatMulQuant
void register_qdq_weight_ops(OpRegistry& r);    // qdq_weight.cc: QdqWeight

void register_reforge_ops(OpRegistry& r) {
  register_quant_weight_ops(r);
  register_qdq_weight_ops(r);
  r.add({"reforge", "BnFoldWeight", 1, INT_MAX, bn_fold_weight, nullptr});
  r.add({"reforge", "BnFoldBias", 1, INT_MAX, bn_fold_bias, nullptr});
  // Ops without a reference kernel: the fusion and layout passes emit them only for a backend
  // that has a kernel for them (passes::Pass::emits), and PackPanels is the CPU's weight layout.
  // MatMulGroup(X, W1, ..., Wn) -> (X W1, ..., X Wn): the products of one input (group-matmuls).
  for (const char* op :
       {"MatMulAdd", "MatMulGroup", "PackPanels", "MatMulAddPacked", "Gelu", "RmsNorm", "Silu", "SiluMul"})
    r.add({"reforge", op, 1, INT_MAX, nullptr, nullptr});
  // Attention(Q, K, V, scale?, mask?, fill?, k_expand?, k_reshape?, v_expand?, v_reshape?,
  // k_scale?): the four shapes of the grouped-query repeat (Expand's and Reshape's shape inputs in
  // the pattern fuse-attention replaces) are structure, read as integers on the host by every
  // kernel; k_scale is K's own scale factor under scale_op 'mul_qk'.
  r.add({"reforge",
         "Attention",
         1,
         INT_MAX,
         nullptr,
         nullptr,
         nullptr,
         {InputRole::kData, InputRole::kData, InputRole::kData, InputRole::kData, InputRole::kData, InputRole::kData,
          InputRole::kShape, InputRole::kShape, InputRole::kShape, InputRole::kShape, InputRole::kData}});
  // Rotary(X, cos, sin, hi_start, hi_end, lo_start, lo_end): the bounds of the two halves (Slice
  // starts and ends in the pattern fuse-rotary replaces) are structure.
  r.add({"reforge",
         "Rotary",
         1,
         INT_MAX,
         nullptr,
         nullptr,
         nullptr,
         {InputRole::kData, InputRole::kData, InputRole::kData, InputRole::kShape, InputRole::kShape, InputRole::kShape,
          InputRole::kShape}});
  // Transfers between host and device memory (backends/placement.h inserts them); the device
  // backend that owns the memory has their kernels. ToDevice of an engine weight uploads it once,
  // when the engine is made and again at each refit that replaces it (its prepare step).
  r.add({"reforge", "ToDevice", 1, INT_MAX, nullptr, nullptr});
  r.add({"reforge", "ToHost", 1, INT_MAX, nullptr, nullptr});
}

}  // namespace reforge::ops
