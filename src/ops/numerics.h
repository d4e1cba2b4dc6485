// How 16-bit Softmax and Attention sum their weights.
//
// By default a 16-bit (float16, bfloat16) softmax accumulates exp(x - max) in float32 and rounds
// the sum once, as ONNX Runtime, TensorRT and PyTorch do. The ONNX reference implementation
// (numpy on 16-bit arrays) instead rounds the sum after each addition, and the node suite's 16-bit
// expected outputs carry that rounding. Such a sum stops growing once each addend is below half
// the sum's spacing: a bfloat16 sum of 512 ones ends at 256, so every weight of a uniform
// 512-key attention row comes out twice too large. BuildOptions::reference_rounding marks the
// graph's Softmax and Attention nodes to round as the reference does (for reproducing it); the
// kernels, CPU and CUDA, read the mark from the node, so plans, recipes and refits carry it.
#pragma once

#include "ir/graph.h"

namespace reforge::ops {

// The node attribute of the mark (an int, 1); a name no ONNX operator defines.
inline constexpr const char* kReferenceRoundingAttr = "reforge.reference_rounding";

// True when `n` rounds its 16-bit sums after each addition (the reference's rounding).
inline bool reference_rounding(const ir::Node& n) { return n.attr_int(kReferenceRoundingAttr, 0) == 1; }

// Marks `n` with the reference's rounding.
inline void mark_reference_rounding_of(ir::Node& n) {
  n.attrs[kReferenceRoundingAttr] = ir::int_attr(kReferenceRoundingAttr, 1);
}

// Marks every Softmax and Attention node of `g` (ONNX domain) with the reference's rounding.
inline void mark_reference_rounding(ir::Graph& g) {
  for (auto& n : g.nodes)
    if (n.domain.empty() && (n.op_type == "Softmax" || n.op_type == "Attention")) mark_reference_rounding_of(n);
}

}  // namespace reforge::ops
