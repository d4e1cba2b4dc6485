// Quantized ONNX weights in MatMulQuant's layouts: which DequantizeLinear(codes, scale[, zero
// point]) weights of a Linear layer reforge::MatMulQuant holds exactly, and the rules of
// reforge::QdqWeight, the recipe step that re-lays them out (pass fuse-dequantize-matmul,
// passes/qdq_matmul.cc). The pass and the step's reference kernel (qdq_weight.cc) both decide with
// qdq_form(), so a plan never holds a layout its recipe would not reproduce.
//
// A form is exact when MatMulQuant's dequantized weight (ops/reforge/quant_weight.h) equals
// DequantizeLinear's output element for element: both compute float32(code - zero point) * scale,
// one float32 product of an exact integer, so only the integer and the scale have to be carried
// over unchanged.
//
//   int8 form (codes int8 or uint8; the scale per tensor or per output channel, axis N): Q[n, k] =
//     code - zero point, which fits int8 for every code exactly when the zero point is the type's
//     centre (0 for int8, 128 for uint8), i.e. symmetric quantization (ONNX Runtime's default for
//     int8 weights). The centre is a value, not a structure: the pass reads the zero points to
//     choose this form and the step refuses, at build and at every refit, zero points that are
//     not the centre (symmetric_zero_points()); a refit from a model quantized asymmetrically is
//     refused, naming the engine weight, rather than approximated. scales[n] = the column's scale.
//   int4 form (codes int4 or uint4; blocked along K with a block_size MatMulQuant takes, or per
//     tensor / per output channel, held as one block of max(16, K rounded up to a power of two)):
//     codes and zero points shifted into [0, 15] (int4: + 8; an absent zero point is 0), which is
//     exact for every value, so this form depends on structure only. Layout: MatMulNBits' (Q uint8
//     [N, n_blocks, block_size / 2], scales [N * n_blocks], zero points two per byte).
//
// reforge::Int4Unpack is the inverse of the int4 form for uint4 codes with zero points: it lays
// MatMulQuant's int4 weight (QuantizeWeight's output) out as DequantizeLinear's uint4 codes, blocked
// scale and zero point, the binding step that re-derives a QDQ 4-bit weight from a float checkpoint
// (build/binding_quant.h).
//
// Everything else stays on DequantizeLinear (folded to a float32 weight at build, a recipe step
// like any other): int16/uint16/int32, float8/float4 codes, int8 in blocks or with a scale along
// K, float16/bfloat16 scales, 4-bit blocks that are not a power of two >= 16.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "ops/reforge/quant_weight.h"

namespace reforge::ops::quant {

// How the scale of a DequantizeLinear weight [K, N] (or [N, K], transposed) is laid out.
enum class QdqScales : uint8_t { kPerTensor, kPerChannel, kBlocked };

struct QdqForm {
  QuantShape target;  // the MatMulQuant weight (bits, K, N, block_size)
  QdqScales scales = QdqScales::kPerTensor;
  int64_t axis = 1;           // DequantizeLinear's axis, in [0, 2)
  int64_t dq_block_size = 0;  // DequantizeLinear's block_size
  bool transposed = false;    // codes are [N, K] (a Gemm with transB = 1)
  int64_t code_offset = 0;    // added to codes and zero points (int4 codes into [0, 15]); 0 for int8
};

// The form of DequantizeLinear(codes, scale[, zero point]) with attributes `axis` and `block_size`
// as the weight of a Linear layer: "" and `form` set when MatMulQuant holds it exactly (the int8
// form's zero-point values are checked separately, symmetric_zero_points()), else why not.
std::string qdq_form(DType codes, const Shape& codes_shape, DType scale, const Shape& scale_shape, int64_t axis,
                     int64_t block_size, bool transposed, QdqForm& form);

// True when every element of `zero_point` (int8 or uint8) is its type's centre (0 or 128), the
// zero points the int8 form holds.
bool symmetric_zero_points(const Tensor& zero_point);

}  // namespace reforge::ops::quant
