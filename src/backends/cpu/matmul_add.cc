// The CPU's Linear-layer ops of the "reforge" domain: MatMulAdd (also the 16-bit Linear layer of
// --precision bf16/fp16), PackPanels (the panel layout, a recipe step replayed at refit) and
// MatMulAddPacked (the product on packed float32 or 16-bit weights).
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/linear.h"
#include "backends/cpu/sgemm_panels.h"
#include "core/dispatch.h"
#include "ops/reforge/float16_weights.h"
#include "ops/reforge/matmul_add_setup.h"

namespace reforge::ops {

namespace {

// Y = MatMul(X, W) + b, b (optional) a vector along the last axis. W is float32, or bfloat16 /
// float16 in --precision bf16 / fp16 plans (then X stays float32 and the product accumulates in
// float32). A constant W is prepared by the prepare step (linear.h); the bias is added after
// the sum, as the unfused MatMul -> Add would.
//
// A float16 W with an infinity is refused (ops/reforge/float16_weights.h).
std::shared_ptr<const void> matmul_add_prepare(const ir::Node& node, const std::vector<const Tensor*>& constants,
                                               ops::PrepareContext&) {
  if (constants.size() < 2 || !constants[1]) return nullptr;
  refuse_float16_infinities(node.label(), *constants[1]);
  return prepare_linear(*constants[1], false);
}

void matmul_add(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const MatMulAddSetup ms = matmul_add_setup(ctx);
  const float* bias = ms.bias ? ms.bias->data<float>() : nullptr;
  const LinearWeights* lw = ctx.prepared<LinearWeights>();
  LinearWeights unprepared;  // W computed at run time: no packing, the plain paths
  if (!lw) {
    unprepared.K = w.dim(0);
    unprepared.N = w.dim(1);
    unprepared.plain = w;
    unprepared.packable = false;
    lw = &unprepared;
  }
  if (lw->K > 0 && lw->N > 0) {
    REFORGE_ASSERT(run_linear(ctx, x, *lw, bias, ctx.node().attr_int("bf16_activations", 0) != 0));
    return;
  }
  // An empty product: zeros plus the bias.
  Tensor& y = ctx.allocate_output_uninit(0, DType::Float32, ms.out);
  const int64_t n = ms.N, rows = n ? y.numel() / n : 0;
  float* py = y.mutable_data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) py[r * n + j] = bias ? bias[j] : 0.0f;
}

// Wp = W packed into column panels (backends/cpu/sgemm_panels.h): W [K, N], or [N, K] with
// transposed = 1, float32 or (in --precision bf16 / fp16 plans, after the recipe's Cast)
// bfloat16 / float16; Wp [ceil(N / 16), K, 16] of W's type. The recipe step of
// linear-weights-packing (passes/weight_packing.cc).
void pack_panels_op(KernelContext& ctx) {
  const Tensor& w = ctx.input(0);
  REFORGE_CHECK(
      (w.dtype() == DType::Float32 || w.dtype() == DType::BFloat16 || w.dtype() == DType::Float16) && w.rank() == 2,
      ctx.node().label(), ": weight must be a float32, bfloat16 or float16 matrix, got ", w.describe());
  const bool transposed = ctx.node().attr_int("transposed", 0) != 0;
  const int64_t K = w.dim(transposed ? 1 : 0), N = w.dim(transposed ? 0 : 1);
  Tensor& out =
      ctx.allocate_output_uninit(0, w.dtype(), {cpu::panel_floats(1, N) / cpu::kPanelWidth, K, cpu::kPanelWidth});
  if (w.dtype() == DType::Float32)
    cpu::pack_panels(w.data<float>(), K, N, transposed, out.mutable_data<float>());
  else
    cpu::pack_panels16(static_cast<const uint16_t*>(w.raw()), K, N, transposed,
                       static_cast<uint16_t*>(out.mutable_raw()));
}

// A float16 weight with an infinity is refused (see matmul_add_prepare); packed panels hold
// the same values plus zero padding, so the check reads them as they are.
std::shared_ptr<const void> matmul_add_packed_prepare(const ir::Node& node, const std::vector<const Tensor*>& constants,
                                                      ops::PrepareContext&) {
  if (constants.size() >= 2 && constants[1]) refuse_float16_infinities(node.label(), *constants[1]);
  return nullptr;
}

// Y = MatMul(X, W) + b with W given packed (PackPanels), N = attribute n: MatMulAdd's product on
// the packed panels (float32, or bfloat16 / float16 widened exactly), with no prepared state (the
// engine weight is the packed form).
void matmul_add_packed(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& wp = ctx.input(1);
  const Tensor* b = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const std::string& label = ctx.node().label();
  const int64_t N = ctx.node().attr_int("n");
  REFORGE_CHECK(
      N > 0 && (wp.dtype() == DType::Float32 || wp.dtype() == DType::BFloat16 || wp.dtype() == DType::Float16) &&
          wp.rank() == 3 && wp.dim(2) == cpu::kPanelWidth && wp.dim(0) == cpu::panel_floats(1, N) / cpu::kPanelWidth,
      label, ": packed weight ", wp.describe(), " does not hold ", N, " columns in panels of ", cpu::kPanelWidth);
  const int64_t K = wp.dim(1);
  REFORGE_CHECK(x.dtype() == DType::Float32 && x.rank() >= 1 && x.shape().back() == K, label, ": input ", x.describe(),
                " does not match the packed weight ", wp.describe(), " (", K, " rows)");
  REFORGE_CHECK(!b || (b->dtype() == DType::Float32 && b->rank() == 1 && b->dim(0) == N), label, ": bias ",
                b ? b->describe() : "", " does not match the ", N, " columns of the packed weight");
  Shape out = x.shape();
  out.back() = N;
  Tensor& y = ctx.allocate_output_uninit(0, DType::Float32, out);
  const int64_t rows = y.numel() / N;
  const float* a = ctx.node().attr_int("bf16_activations", 0) != 0 ? round_activations(x) : x.data<float>();
  cpu::sgemm_panels(rows, N, K, a, K, wp.raw(), wp.dtype(), b ? b->data<float>() : nullptr, y.mutable_data<float>(), N,
                    ctx.threads());
}

}  // namespace

}  // namespace reforge::ops

namespace reforge::cpu {

void register_matmul_add_kernels(KernelRegistry& r) {
  r.add({"cpu", "reforge", "MatMulAdd", 1, INT_MAX, ops::matmul_add, nullptr, ops::matmul_add_prepare});
  r.add({"cpu", "reforge", "PackPanels", 1, INT_MAX, ops::pack_panels_op});
  r.add({"cpu", "reforge", "MatMulAddPacked", 1, INT_MAX, ops::matmul_add_packed, nullptr,
         ops::matmul_add_packed_prepare});
}

}  // namespace reforge::cpu
