// cuDNN pieces shared by the convolution kernels (conv.cu, conv_transpose.cu): error checks, the
// calling thread's handle bound to its stream, the descriptor set of one convolution, packed N-d
// tensor descriptors (cuDNN sizes are 32-bit: larger ones are refused), and the memo of each
// geometry's algorithm.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <functional>
#include <initializer_list>
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
// the geometry only, so every later run with the same shapes takes the same algorithm. `choose`
// gets the algorithm a loaded timing cache names for the geometry (then it only sizes that
// algorithm's workspace), or -1 (then it chooses).
AlgoChoice cached_algo(std::vector<int> key, const std::function<AlgoChoice(int loaded)>& choose);

// The timing cache (Backend::save_timing_cache / load_timing_cache), as TensorRT's: every
// algorithm chosen or loaded on the current device, as text:
//   reforge timing cache 1
//   device NVIDIA H100 80GB HBM3
//   cudnn 91300
//   <geometry key> -> <algorithm>        (one line per geometry)
// Loading takes such text (`where` names its file in errors): a line that does not parse, a kind
// or algorithm out of cuDNN's range, another device's or cuDNN version's cache is an error naming
// `where`, the line and what is wrong, and loads nothing. Loaded geometries take the named
// algorithm without timing; an algorithm cuDNN refuses for the geometry fails that call.
std::string save_timing_cache();
void load_timing_cache(const std::string& text, const std::string& where);

// The key of a convolution's geometry for cached_algo: the call's kind (forward, backward data),
// its data type, group count and every descriptor dimension.
std::vector<int> geometry_key(int kind, cudnnDataType_t type, int group,
                              std::initializer_list<const std::vector<int>*> dims);

// The first of cuDNN's ranked candidates (cudnnConvolution*AlgoPerf_t) that succeeded and, unless
// `tensor_ops`, computes without tensor-core math (TF32 for float32); -1 when none does.
template <typename Perf>
int first_algo(const Perf* perf, int count, bool tensor_ops) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && (tensor_ops || perf[i].mathType != CUDNN_TENSOR_OP_MATH))
      return static_cast<int>(perf[i].algo);
  return -1;
}

}  // namespace reforge::cuda
