#include "backends/cuda/cudnn_common.h"

#include <cstdint>
#include <map>
#include <mutex>

#include "backends/cuda/cuda_common.h"
#include "core/error.h"

namespace reforge::cuda {

void check_dnn(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) fail("cuDNN error in ", what, ": ", cudnnGetErrorString(status));
}

cudnnHandle_t dnn() {
  struct Handle {
    cudnnHandle_t h = nullptr;
    Handle() {
      REFORGE_DNN_CHECK(cudnnCreate(&h));
      REFORGE_DNN_CHECK(cudnnSetStream(h, stream()));
    }
    ~Handle() {
      if (h) cudnnDestroy(h);
    }
  };
  thread_local Handle handle;
  return handle.h;
}

Descriptors::Descriptors() {
  REFORGE_DNN_CHECK(cudnnCreateTensorDescriptor(&x));
  REFORGE_DNN_CHECK(cudnnCreateTensorDescriptor(&y));
  REFORGE_DNN_CHECK(cudnnCreateTensorDescriptor(&b));
  REFORGE_DNN_CHECK(cudnnCreateFilterDescriptor(&w));
  REFORGE_DNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
}

Descriptors::~Descriptors() {
  cudnnDestroyConvolutionDescriptor(conv);
  cudnnDestroyFilterDescriptor(w);
  cudnnDestroyTensorDescriptor(b);
  cudnnDestroyTensorDescriptor(y);
  cudnnDestroyTensorDescriptor(x);
}

cudnnDataType_t dnn_type(DType t) {
  switch (t) {
    case DType::Float32:
      return CUDNN_DATA_FLOAT;
    case DType::Float16:
      return CUDNN_DATA_HALF;
    case DType::BFloat16:
      return CUDNN_DATA_BFLOAT16;
    case DType::Float64:
      return CUDNN_DATA_DOUBLE;
    default:
      fail("internal error: cuDNN convolution of ", dtype_name(t));
  }
}

void set_tensor(cudnnTensorDescriptor_t d, cudnnDataType_t type, const std::vector<int>& dims) {
  std::vector<int> strides(dims.size());
  int s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  REFORGE_DNN_CHECK(cudnnSetTensorNdDescriptor(d, type, static_cast<int>(dims.size()), dims.data(), strides.data()));
}

int narrow(int64_t v, const std::string& where) {
  REFORGE_CHECK(v >= 0 && v <= INT32_MAX, where, ": dimension ", v, " exceeds cuDNN's 32-bit sizes");
  return static_cast<int>(v);
}

AlgoChoice cached_algo(std::vector<int> key, const std::function<AlgoChoice()>& choose) {
  static std::mutex mutex;
  static std::map<std::vector<int>, AlgoChoice> memo;
  int device = 0;
  REFORGE_CUDA_CHECK(cudaGetDevice(&device));
  key.push_back(device);
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = memo.find(key);
    if (it != memo.end()) return it->second;
  }
  const AlgoChoice c = choose();  // outside the lock: a query may take a while
  std::lock_guard<std::mutex> lock(mutex);
  return memo.emplace(std::move(key), c).first->second;
}

}  // namespace reforge::cuda
