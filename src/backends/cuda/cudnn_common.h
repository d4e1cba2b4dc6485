// cuDNN pieces shared by the convolution kernels (conv.cu, conv_transpose.cu): error checks, the
// calling thread's handle bound to its stream, the descriptor set of one convolution, packed N-d
// tensor descriptors (cuDNN sizes are 32-bit: larger ones are refused), and the memo of each
// geometry's algorithm.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace reforge::cuda {

// Throws an Error with `what` and cuDNN's message unless `status` is success.
void check_dnn(cudnnStatus_t status, const char* what);
#define REFORGE_DNN_CHECK(expr) ::reforge::cuda::check_dnn((expr), #expr)

// The calling thread's cuDNN handle, bound to its stream.
cudnnHandle_t dnn();

// The descriptors of one convolution: input, output, bias, filter and the convolution itself.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Descriptors();
  ~Descriptors();
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

// cuDNN's type for float32, float16, bfloat16 and float64.
cudnnDataType_t dnn_type(DType t);

// A packed (C order) tensor of `dims`.
void set_tensor(cudnnTensorDescriptor_t d, cudnnDataType_t type, const std::vector<int>& dims);

// `v` as cuDNN's int, refused (naming `where`) beyond 32 bits.
int narrow(int64_t v, const std::string& where);

// An algorithm (a cudnnConvolution*Algo_t) and the workspace it needs.
struct AlgoChoice {
  int algo = -1;
  size_t workspace = 0;
};

// The choice for the geometry `key` (the call's kind, types and every descriptor dimension; the
// current device is added here), made by `choose` the first time and remembered for the process.
// cuDNN's heuristic query costs more than a whole small convolution, and its answer depends on
// the geometry only, so every later run with the same shapes takes the same algorithm.
AlgoChoice cached_algo(std::vector<int> key, const std::function<AlgoChoice()>& choose);

}  // namespace reforge::cuda
