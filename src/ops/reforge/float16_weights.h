// The refusal of float16 Linear weights with infinities. `--precision fp16` casts MatMul/Gemm
// weights to float16 in a recipe step (ONNX Cast semantics: float32 values beyond +-65504 become
// inf), which would make every output of the layer inf or NaN. Every backend refuses such a
// weight where it takes the weight in: the CPU in reforge::MatMulAdd's prepare step, the CUDA
// backend in the upload of a weight that placement marked (kFiniteFloat16For). Prepare steps run
// when an engine is made and inside every refit transaction that replaces the weight, so such a
// refit fails and leaves the engine as it was.
#pragma once

#include <string>

#include "core/tensor.h"

namespace reforge::ops {

// reforge::ToDevice attribute (a string: the consuming node's label) on a transfer of a float16
// Linear weight: the upload refuses a weight with an infinity, naming that node.
inline constexpr const char* kFiniteFloat16For = "finite_float16_for";

// Throws, naming `where`, when `w` is float16 and holds an infinity; other types pass.
void refuse_float16_infinities(const std::string& where, const Tensor& w);

}  // namespace reforge::ops
