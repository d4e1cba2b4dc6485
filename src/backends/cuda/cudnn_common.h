// cuDNN pieces shared by the convolution kernels (conv.cu, conv_transpose.cu): error checks, the
// calling thread's handle bound to its stream, the descriptor set of one convolution, and
// packed N-d tensor descriptors (cuDNN sizes are 32-bit: larger ones are refused).
#pragma once

#include <cudnn.h>

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

}  // namespace reforge::cuda
