// Recorded replay of the CUDA backend's work (backends/device_replay.h) as CUDA graphs: the
// calling thread's stream is captured (relaxed mode, so that a library creating its per-thread
// handle or workspace inside the capture does so for real instead of failing it), instantiated
// once, and launched on that stream. Values allocated while capturing become the graph's own
// memory (stream-ordered allocation nodes), which CUDA reserves once per graph and reuses on
// every launch: the recording holds the activation memory of its signature, planned by CUDA
// from the recorded lifetimes.
#include "backends/cuda/cuda_common.h"
#include "backends/device_replay.h"

namespace reforge::cuda {

namespace {

class CudaRecorder : public backends::DeviceRecorder {
 public:
  void begin() override {
    if (std::string why = unavailable_reason(); !why.empty()) fail("the CUDA backend cannot run here: ", why);
    REFORGE_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeRelaxed));
  }

  std::shared_ptr<const void> end() override {
    cudaGraph_t graph = nullptr;
    cudaError_t status = cudaStreamEndCapture(stream(), &graph);
    if (status != cudaSuccess) {
      if (graph) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      fail("the run's device work cannot be recorded for replay: ", cudaGetErrorName(status), " (",
           cudaGetErrorString(status), ")");
    }
    cudaGraphExec_t exec = nullptr;
    status = cudaGraphInstantiateWithFlags(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      fail("the recorded device work cannot be instantiated: ", cudaGetErrorName(status), " (",
           cudaGetErrorString(status), ")");
    }
    return std::shared_ptr<const void>(
        exec, [](const void* e) { (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(const_cast<void*>(e))); });
  }

  void abandon() noexcept override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t graph = nullptr;
      (void)cudaStreamEndCapture(stream(), &graph);
      if (graph) (void)cudaGraphDestroy(graph);
    }
    (void)cudaGetLastError();
  }

  void replay(const void* recording) override {
    REFORGE_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(const_cast<void*>(recording)), stream()));
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) REFORGE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()));
  }
};

}  // namespace

backends::DeviceRecorder* recorder() {
  static CudaRecorder r;
  return &r;
}

bool recording() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

void replay_memory(size_t& now, size_t& peak) {
  uint64_t used = 0, high = 0;
  if (cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used) == cudaSuccess) now = used;
  if (cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high) == cudaSuccess) peak = high;
  (void)cudaGetLastError();
}

}  // namespace reforge::cuda
