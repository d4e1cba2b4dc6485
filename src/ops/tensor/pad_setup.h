// The validation and index maps of Pad (modes constant, reflect, edge, and wrap from opset 19;
// negative pads crop), shared by the CPU reference kernel (pad_ops.cc) and the CUDA kernel
// (backends/cuda/pad.cu), so that both refuse the same inputs with the same messages and read
// the same source elements. Host code only (pad_setup.cc).
//
// Each output dimension gets an index map: output coordinate -> source coordinate, or a negative
// value for "the constant". Reflect, edge and wrap are then only different maps, and a backend's
// copy is the same for every mode. Negative pads crop the input first; the remaining padding (and
// the reflection) applies to the cropped region, as numpy.pad would after slicing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::ops {

// The checker: the mode is one this opset has.
std::string pad_check(const ir::Node& node);

struct PadSetup {
  std::vector<std::vector<int64_t>> maps;  // per dimension, one entry per output coordinate
  Shape out;
  // The constant as given: a float32 scalar from the attribute (opsets before 11) or the default
  // 0, else input 2, one element of any type and wherever the input lives (a backend brings it to
  // the host and casts it to the data's type).
  Tensor value;
};
PadSetup pad_setup(const KernelContext& ctx);

}  // namespace reforge::ops
