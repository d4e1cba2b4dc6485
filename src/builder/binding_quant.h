// Bindings of quantized inputs that a float checkpoint re-derives exactly.
//
// A quantized ONNX weight is bound to a checkpoint only where its codes, scales and zero points are
// reforge::QuantizeWeight of one float32 checkpoint tensor (in the model's layout), checked bit for
// bit on every value at build: then each is bound to that step's output and a checkpoint refit
// re-quantizes the new float weights with the same kernel. QuantizeWeight int4 is the rule of ONNX
// Runtime's MatMulNBitsQuantizer (asymmetric, zero points), so these re-derive:
//   - com.microsoft MatMulNBits, 4 bits, blocks of a power of two >= 16 along K, packed uint8 zero
//     points, no g_idx: B, scales and zero_points are QuantizeWeight's three outputs;
//   - DequantizeLinear of uint4 codes with uint4 zero points in such blocks (the same quantizer in
//     QDQ format): QuantizeWeight's outputs laid out as DequantizeLinear's by reforge::Int4Unpack.
// Every other quantized input stays refused (build/binding.h).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "ir/graph.h"
#include "plan/plan.h"
#include "refit/safetensors.h"

namespace reforge::build {

// The bindings of the quantized inputs of node `n` of `g` by input slot, when exactly one float32
// checkpoint tensor re-derives all of them; nullopt otherwise, with `why` saying why not (empty when
// `n` has no form that could).
std::optional<std::map<size_t, plan::Binding>> quantized_bindings(const ir::Graph& g, const ir::Node& n,
                                                                  const refit::Checkpoint& ckpt, std::string& why);

}  // namespace reforge::build
