// Bindings of quantized inputs that a float checkpoint re-derives exactly.
//
// A quantized ONNX weight is bound to a checkpoint only where its codes, scales and zero points are
// reforge::QuantizeWeight of one float32 checkpoint tensor, checked bit for bit on every value at
// build: then each is bound to that step's output and a checkpoint refit re-quantizes the new
// float weights with the same kernel. Today that is com.microsoft MatMulNBits with 4 bits, blocks
// along K of a power of two >= 16 and packed uint8 zero points, no g_idx: the layout and rule of
// ONNX Runtime's MatMulNBitsQuantizer (asymmetric), which QuantizeWeight int4 implements. Every
// other quantized input stays refused (build/binding.h).
#pragma once

#include <array>
#include <optional>
#include <string>

#include "ir/graph.h"
#include "plan/plan.h"
#include "refit/safetensors.h"

namespace reforge::build {

// The bindings of inputs 1, 2 and 3 (B, scales, zero_points) of the MatMulNBits node `n` of
// `g`, when exactly one float32 checkpoint tensor quantizes to all three; nullopt otherwise, with
// `why` saying why not (empty when `n` is not such a node).
std::optional<std::array<plan::Binding, 3>> nbits_bindings(const ir::Graph& g, const ir::Node& n,
                                                           const refit::Checkpoint& ckpt, std::string& why);

}  // namespace reforge::build
