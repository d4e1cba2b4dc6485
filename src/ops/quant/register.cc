// The quantization op family: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear
// (quantize.cc), MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv (qlinear.cc), and
// ONNX Runtime's com.microsoft MatMulNBits (matmul_nbits.cc) and QLinearAdd, QLinearMul, QGemm
// and QLinearSoftmax (qlinear_contrib.cc). The
// narrow types they read and write (int4, float8, ...) are held one element per byte
// (core/narrow.h).
#include "ops/registry.h"

namespace reforge::ops {

namespace quant {
void register_quantize_ops(OpRegistry& r);         // quantize.cc
void register_qlinear_ops(OpRegistry& r);          // qlinear.cc
void register_matmul_nbits_ops(OpRegistry& r);     // matmul_nbits.cc
void register_qlinear_contrib_ops(OpRegistry& r);  // qlinear_contrib.cc
}  // namespace quant

void register_quant_ops(OpRegistry& r) {
  quant::register_quantize_ops(r);
  quant::register_qlinear_ops(r);
  quant::register_matmul_nbits_ops(r);
  quant::register_qlinear_contrib_ops(r);
}

}  // namespace reforge::ops
