// Recorded replay of the CUDA backend's work (backends/device_replay.h) as CUDA graphs: the
// calling thread's stream is captured (relaxed mode, so that a library creating its per-thread
// handle or workspace inside the capture does so for real instead of failing it), instantiated
// once, and launched on that stream. Values allocated while capturing become the graph's own
// memory (stream-ordered allocation nodes), which CUDA reserves once per graph and reuses on
// every launch: the recording holds the activation memory of its signature, planned by CUDA
// from the recorded lifetimes. Kernels that would wait for the device to check a failure flag
// (an index out of range) defer the check instead (deferred_check): the flags are read back
// after every replay, which raises the eager kernel's error.
#include <cstring>
#include <functional>
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/device_replay.h"

namespace reforge::cuda {

namespace {

// A kernel's failure flag that a recording reads back after every replay.
struct Check {
  void* device = nullptr;  // plain cudaMalloc: outlives the graph's own memory
  size_t bytes = 0;
  std::function<void(const void*)> check;
};

// The calling thread's checks of the recording under way.
thread_local std::vector<Check> pending_checks;

void free_checks(std::vector<Check>& checks) {
  for (Check& c : checks) (void)cudaFree(c.device);
  checks.clear();
}

// An instantiated recording and the checks to run after each replay.
struct Recorded {
  cudaGraphExec_t exec = nullptr;
  std::vector<Check> checks;
  Recorded() = default;
  Recorded(const Recorded&) = delete;
  Recorded& operator=(const Recorded&) = delete;
  ~Recorded() {
    if (exec) (void)cudaGraphExecDestroy(exec);
    free_checks(checks);
  }
};

class CudaRecorder : public backends::DeviceRecorder {
 public:
  void begin() override {
    if (std::string why = unavailable_reason(); !why.empty()) fail("the CUDA backend cannot run here: ", why);
    free_checks(pending_checks);
    REFORGE_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeRelaxed));
  }

  std::shared_ptr<const void> end() override {
    cudaGraph_t graph = nullptr;
    cudaError_t status = cudaStreamEndCapture(stream(), &graph);
    if (status != cudaSuccess) {
      if (graph) (void)cudaGraphDestroy(graph);
      free_checks(pending_checks);
      (void)cudaGetLastError();
      fail("the run's device work cannot be recorded for replay: ", cudaGetErrorName(status), " (",
           cudaGetErrorString(status), ")");
    }
    auto r = std::make_shared<Recorded>();
    status = cudaGraphInstantiateWithFlags(&r->exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (status != cudaSuccess) {
      r->exec = nullptr;
      free_checks(pending_checks);
      (void)cudaGetLastError();
      fail("the recorded device work cannot be instantiated: ", cudaGetErrorName(status), " (",
           cudaGetErrorString(status), ")");
    }
    r->checks = std::move(pending_checks);
    pending_checks.clear();
    return r;
  }

  void abandon() noexcept override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t graph = nullptr;
      (void)cudaStreamEndCapture(stream(), &graph);
      if (graph) (void)cudaGraphDestroy(graph);
    }
    free_checks(pending_checks);
    (void)cudaGetLastError();
  }

  void replay(const void* recording) override {
    const auto& r = *static_cast<const Recorded*>(recording);
    REFORGE_CUDA_CHECK(cudaGraphLaunch(r.exec, stream()));
    if (r.checks.empty()) return;
    // The kernels' failure flags: the replay's errors, raised as the eager run raises them.
    std::vector<std::vector<unsigned char>> flags(r.checks.size());
    for (size_t i = 0; i < r.checks.size(); ++i) {
      flags[i].resize(r.checks[i].bytes);
      REFORGE_CUDA_CHECK(
          cudaMemcpyAsync(flags[i].data(), r.checks[i].device, r.checks[i].bytes, cudaMemcpyDeviceToHost, stream()));
    }
    REFORGE_CUDA_CHECK(cudaStreamSynchronize(stream()));
    for (size_t i = 0; i < r.checks.size(); ++i) r.checks[i].check(flags[i].data());
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

void* deferred_check(size_t bytes, std::function<void(const void*)> check) {
  REFORGE_CHECK(recording(), "internal error: deferred_check outside a recording");
  Check c;
  c.bytes = bytes;
  c.check = std::move(check);
  // Not recorded (relaxed capture): the flag's memory outlives every replay of the graph.
  REFORGE_CUDA_CHECK(cudaMalloc(&c.device, bytes));
  pending_checks.push_back(std::move(c));
  return pending_checks.back().device;
}

void replay_memory(size_t& now, size_t& peak) {
  uint64_t used = 0, high = 0;
  if (cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used) == cudaSuccess) now = used;
  if (cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high) == cudaSuccess) peak = high;
  (void)cudaGetLastError();
}

}  // namespace reforge::cuda
