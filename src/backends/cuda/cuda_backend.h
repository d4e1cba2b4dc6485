// The CUDA backend: nodes placed on "cuda" run as CUDA kernels on the GPU (device 0), with their
// tensors in device memory (backends/cuda/cuda_common.h says how memory and streams are used).
#pragma once

#include "backends/backend.h"

namespace reforge::cuda {

// The descriptor that backends/backend.cc registers when reforge is built with CUDA.
backends::Backend backend();

}  // namespace reforge::cuda
