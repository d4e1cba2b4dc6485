#include "backends/cuda/cudnn_common.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

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

std::vector<int> geometry_key(int kind, cudnnDataType_t type, int group,
                              std::initializer_list<const std::vector<int>*> dims) {
  std::vector<int> key = {kind, static_cast<int>(type), group};
  for (const auto* v : dims) {
    key.push_back(static_cast<int>(v->size()));
    key.insert(key.end(), v->begin(), v->end());
  }
  return key;
}

namespace {

struct Memo {
  std::mutex mutex;
  std::map<std::vector<int>, AlgoChoice> chosen;  // key + device
  std::map<std::vector<int>, int> loaded;         // key + device: from a timing cache
};
Memo& memo() {
  static Memo m;
  return m;
}

int current_device() {
  int device = 0;
  REFORGE_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  REFORGE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

constexpr const char* kHeader = "reforge timing cache 1";

}  // namespace

AlgoChoice cached_algo(std::vector<int> key, const std::function<AlgoChoice(int loaded)>& choose) {
  key.push_back(current_device());
  Memo& m = memo();
  int loaded = -1;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    auto it = m.chosen.find(key);
    if (it != m.chosen.end()) return it->second;
    auto l = m.loaded.find(key);
    if (l != m.loaded.end()) loaded = l->second;
  }
  const AlgoChoice c = choose(loaded);  // outside the lock: a query may take a while
  std::lock_guard<std::mutex> lock(m.mutex);
  return m.chosen.emplace(std::move(key), c).first->second;
}

std::string save_timing_cache() {
  const int device = current_device();
  std::ostringstream out;
  out << kHeader << "\ndevice " << device_name(device) << "\ncudnn " << cudnnGetVersion() << "\n";
  Memo& m = memo();
  std::map<std::vector<int>, int> all;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    for (const auto& [key, algo] : m.loaded)
      if (key.back() == device) all[key] = algo;
    for (const auto& [key, c] : m.chosen)
      if (key.back() == device) all[key] = c.algo;
  }
  for (const auto& [key, algo] : all) {
    for (size_t i = 0; i + 1 < key.size(); ++i) out << (i ? " " : "") << key[i];
    out << " -> " << algo << "\n";
  }
  return out.str();
}

void load_timing_cache(const std::string& text, const std::string& where) {
  std::istringstream in(text);
  std::string line;
  size_t n = 0;
  auto bad = [&](const std::string& what) { fail(where, ": line ", n, ": ", what); };
  std::string device, version;
  std::vector<std::pair<std::vector<int>, int>> entries;
  while (std::getline(in, line)) {
    ++n;
    if (n == 1) {
      if (line != kHeader) bad("not a reforge timing cache (the first line must be '" + std::string(kHeader) + "')");
      continue;
    }
    if (n == 2 || n == 3) {
      const std::string tag = n == 2 ? "device " : "cudnn ";
      if (line.rfind(tag, 0) != 0) bad("expected '" + tag + "...'");
      (n == 2 ? device : version) = line.substr(tag.size());
      continue;
    }
    if (line.empty()) continue;
    const size_t arrow = line.find(" -> ");
    if (arrow == std::string::npos) bad("expected '<geometry> -> <algorithm>'");
    std::vector<int> key;
    std::istringstream ks(line.substr(0, arrow));
    long long v = 0;
    while (ks >> v) {
      if (v < INT32_MIN || v > INT32_MAX) bad("a number beyond 32 bits");
      key.push_back(static_cast<int>(v));
    }
    if (!ks.eof() || key.size() < 3) bad("the geometry is not a list of integers (kind, type, group, dimensions)");
    std::istringstream as(line.substr(arrow + 4));
    long long algo = -1;
    std::string rest;
    if (!(as >> algo) || (as >> rest)) bad("the algorithm is not one integer");
    const long long count = key[0] == 0   ? CUDNN_CONVOLUTION_FWD_ALGO_COUNT
                            : key[0] == 1 ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
                                          : -1;
    if (count < 0) bad("kind " + std::to_string(key[0]) + " is not a convolution (0) or a transposed one (1)");
    if (algo < 0 || algo >= count)
      bad("algorithm " + std::to_string(algo) + " is outside cuDNN's range [0, " + std::to_string(count) + ")");
    entries.emplace_back(std::move(key), static_cast<int>(algo));
  }
  if (n < 3) fail(where, ": not a reforge timing cache (it ends before its device and cuDNN lines)");
  const int dev = current_device();
  const std::string here = device_name(dev);
  if (device != here) fail(where, ": the timing cache was made on ", device, "; this device is ", here);
  if (version != std::to_string(cudnnGetVersion()))
    fail(where, ": the timing cache was made with cuDNN ", version, "; this process has cuDNN ", cudnnGetVersion());
  Memo& m = memo();
  std::lock_guard<std::mutex> lock(m.mutex);
  for (auto& [key, algo] : entries) {
    key.push_back(dev);
    m.chosen.erase(key);
    m.loaded[key] = algo;
  }
}

}  // namespace reforge::cuda
