// Shape and type inference of the quantization family (ops/infer.h). Quantize and Dequantize
// keep x's shape; the output type is the zero point's / `output_dtype` / uint8 for
// QuantizeLinear and `output_dtype` / the scale's for DequantizeLinear. The matrix products
// follow numpy matmul, the convolutions Conv's geometry (ops/nn/conv.h); com.microsoft MatMulNBits
// maps A [..., K] to [..., N]; com.microsoft QLinearAdd and QLinearMul broadcast A and B, QGemm is
// Gemm's [M, N] (float32 without y_zero_point), QLinearSoftmax keeps X's type and shape.
#include <string>

#include "ops/nn/conv.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

void set_like(InferContext& ctx, size_t out, const ValueType& x, DType dtype) {
  ctx.set_output(out, x.rank_known ? ValueType::of(dtype, x.shape) : ValueType::unranked(dtype));
}

void quantize(InferContext& ctx) {
  DType to = DType::UInt8;
  const int64_t attr = ctx.attr_int("output_dtype", 0);
  if (ctx.has_input(2))
    to = ctx.input_type(2).dtype;
  else if (attr != 0)
    to = dtype_from_onnx(static_cast<int32_t>(attr));
  set_like(ctx, 0, ctx.input_type(0), to);
}

void dequantize(InferContext& ctx) {
  const int64_t attr = ctx.attr_int("output_dtype", 0);
  const DType to = attr != 0 ? dtype_from_onnx(static_cast<int32_t>(attr)) : ctx.input_type(1).dtype;
  set_like(ctx, 0, ctx.input_type(0), to);
}

void dynamic_quantize(InferContext& ctx) {
  set_like(ctx, 0, ctx.input_type(0), DType::UInt8);
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType::of(DType::Float32, {}));
  if (ctx.num_outputs() > 2) ctx.set_output(2, ValueType::of(DType::UInt8, {}));
}

void int_matmul(InferContext& ctx, size_t a, size_t b, DType to) {
  const ValueType& at = ctx.input_type(a);
  const ValueType& bt = ctx.input_type(b);
  if (!at.rank_known || !bt.rank_known) return ctx.set_output(0, ValueType::unranked(to));
  ctx.set_output(0, ValueType::of(to, matmul_shape(ctx, at.shape, bt.shape)));
}

void int_conv(InferContext& ctx, size_t x, size_t w, size_t bias, DType to) {
  const ValueType& xt = ctx.input_type(x);
  if (!xt.rank_known) return ctx.set_output(0, ValueType::unranked(to));
  ctx.set_output(0, ValueType::of(to, nn::conv_infer_shape(ctx, xt.shape, ctx.input_type(w), bias)));
}

// com.microsoft MatMulNBits: A [..., K] -> [..., N] of A's type (K and N are attributes).
void matmul_nbits(InferContext& ctx) {
  const ValueType& at = ctx.input_type(0);
  if (!at.rank_known) return ctx.set_output(0, ValueType::unranked(at.dtype));
  if (at.shape.empty()) ctx.fail("A must have rank >= 1");
  SymShape out = at.shape;
  merge_dims(ctx, out.back(), SymDim(ctx.attr_int("K", 0)), "A's last dimension and K");
  out.back() = SymDim(ctx.attr_int("N", 0));
  ctx.set_output(0, ValueType::of(at.dtype, out));
}

// QLinearAdd / QLinearMul (A 0, B 3): A's type, numpy broadcast of the two shapes.
void qlinear_binary(InferContext& ctx) {
  const ValueType& a = ctx.input_type(0);
  const ValueType& b = ctx.input_type(3);
  if (!a.rank_known || !b.rank_known) return ctx.set_output(0, ValueType::unranked(a.dtype));
  ctx.set_output(0, ValueType::of(a.dtype, broadcast_shapes(ctx, a.shape, b.shape)));
}

// QGemm: [M, N] from A and B with transA / transB; y_zero_point's type, else float32.
void qgemm(InferContext& ctx) {
  const DType to = ctx.has_input(8) ? ctx.input_type(8).dtype : DType::Float32;
  const ValueType& a = ctx.input_type(0);
  const ValueType& b = ctx.input_type(3);
  if (!a.rank_known || !b.rank_known) return ctx.set_output(0, ValueType::unranked(to));
  if (a.shape.size() != 2 || b.shape.size() != 2)
    ctx.fail("A and B must be matrices, got " + a.str() + " and " + b.str());
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  SymDim k = a.shape[ta ? 0 : 1];
  merge_dims(ctx, k, b.shape[tb ? 1 : 0], "the inner dimensions of A and B");
  ctx.set_output(0, ValueType::of(to, {a.shape[ta ? 1 : 0], b.shape[tb ? 0 : 1]}));
}

}  // namespace

void register_quant_inference(OpRegistry& r) {
  r.set_infer("", "QuantizeLinear", 10, quantize);
  r.set_infer("", "DequantizeLinear", 10, dequantize);
  r.set_infer("", "DynamicQuantizeLinear", 11, dynamic_quantize);
  r.set_infer("", "MatMulInteger", 10, [](InferContext& ctx) { int_matmul(ctx, 0, 1, DType::Int32); });
  r.set_infer("", "QLinearMatMul", 10, [](InferContext& ctx) { int_matmul(ctx, 0, 3, ctx.input_type(7).dtype); });
  r.set_infer("", "ConvInteger", 10, [](InferContext& ctx) { int_conv(ctx, 0, 1, SIZE_MAX, DType::Int32); });
  r.set_infer("", "QLinearConv", 10, [](InferContext& ctx) { int_conv(ctx, 0, 3, 8, ctx.input_type(7).dtype); });
  r.set_infer("com.microsoft", "MatMulNBits", 1, matmul_nbits);
  r.set_infer("com.microsoft", "QLinearAdd", 1, qlinear_binary);
  r.set_infer("com.microsoft", "QLinearMul", 1, qlinear_binary);
  r.set_infer("com.microsoft", "QGemm", 1, qgemm);
  r.set_infer("com.microsoft", "QLinearSoftmax", 1,
              [](InferContext& ctx) { set_like(ctx, 0, ctx.input_type(0), ctx.input_type(0).dtype); });
}

}  // namespace reforge::ops
