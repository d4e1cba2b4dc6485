// Activation layouts of the convolution chain (cpu::ActLayout): the node attribute values, the
// stored shape of an [N, C, H, W] activation in each layout, and copies to and from NCHW (the
// fallback paths of FusedConv and reforge::MaxPool).
#pragma once

#include <string>

#include "backends/cpu/dnnl_conv.h"
#include "core/tensor.h"
#include "ir/graph.h"

namespace reforge::ops::nn {

// "NHWC" -> Nhwc, "NCHWc" -> cpu::native_layout() (Blocked on AVX2 / AVX-512 CPUs), anything
// else -> Nchw (checkers reject other values).
cpu::ActLayout parse_layout(const std::string& s);
// The stored shape of an activation of NCHW shape `s` in layout `l`; Blocked needs C % b == 0.
Shape physical_shape(const Shape& s, cpu::ActLayout l);
// The [N, C, H, W] shape of `t` stored in layout `l`; throws naming `node` when `t` cannot be.
Shape logical_shape(const Tensor& t, cpu::ActLayout l, const ir::Node& node);
// Copies of any element type between NCHW and layout `l` (no copy for Nchw).
Tensor from_nchw(const Tensor& t, cpu::ActLayout l);
Tensor to_nchw(const Tensor& t, cpu::ActLayout l, const ir::Node& node);

}  // namespace reforge::ops::nn
