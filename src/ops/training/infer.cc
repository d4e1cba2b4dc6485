// Shape and type inference of the ai.onnx.preview.training optimizers (ops/infer.h), as ONNX
// states it: each new X has X's type and shape, each new state tensor (Adagrad's H, Momentum's V,
// Adam's V and H) the type and shape of the state tensor it replaces.
#include <string>

#include "ops/registry.h"

namespace reforge::ops {
namespace {

// `state` state tensors per optimized tuple (Adagrad, Momentum: 1; Adam: 2).
void infer_optimizer(InferContext& ctx, size_t state) {
  const size_t k = 2 + state;
  if (ctx.num_inputs() < 2 + k || (ctx.num_inputs() - 2) % k != 0)
    ctx.fail(str_cat("expects R, T and groups of ", k, " tensors as inputs, got ", ctx.num_inputs()));
  const size_t n = (ctx.num_inputs() - 2) / k;
  if (ctx.num_outputs() != n * (k - 1))
    ctx.fail(str_cat(n, " optimized tensors need ", n * (k - 1), " outputs, got ", ctx.num_outputs()));
  for (size_t i = 0; i < n; ++i) {
    ctx.set_output(i, ctx.input_type(2 + i));
    for (size_t s = 0; s < state; ++s) ctx.set_output((1 + s) * n + i, ctx.input_type(2 + (2 + s) * n + i));
  }
}

}  // namespace

void register_training_inference(OpRegistry& r) {
  const char* const d = "ai.onnx.preview.training";
  r.set_infer(d, "Adagrad", 1, [](InferContext& ctx) { infer_optimizer(ctx, 1); });
  r.set_infer(d, "Momentum", 1, [](InferContext& ctx) { infer_optimizer(ctx, 1); });
  r.set_infer(d, "Adam", 1, [](InferContext& ctx) { infer_optimizer(ctx, 2); });
}

}  // namespace reforge::ops
