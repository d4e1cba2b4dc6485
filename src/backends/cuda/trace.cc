// The CUDA backend's DeviceTracer (backends/device_trace.h) and memory account, through CUPTI's
// activity API.
//
// CUPTI (libcupti, part of the CUDA toolkit) is opened with dlopen on the first start(), not
// linked: reforge runs where the toolkit's profiling library is absent, and only a trace needs
// it. The tracer records kernels (CONCURRENT_KERNEL), copies and memsets, plus the runtime and
// driver API calls that launched them: an API record is what an external correlation record
// (the tag pushed by the launching thread) is attached to, so kernel -> API call -> tag.
#include <cupti.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "backends/cuda/cuda_common.h"
#include "core/error.h"

namespace reforge::cuda {

namespace {

// The CUPTI entry points the tracer calls, resolved from libcupti.
struct Cupti {
  void* lib = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped_records = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) push = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) pop = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  std::string error;  // why it could not be opened, or ""

  Cupti() {
    for (const char* name : {"libcupti.so", "libcupti.so.13", "libcupti.so.12"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (!lib) {
      const char* why = dlerror();
      error = std::string("CUPTI (libcupti.so, the CUDA toolkit's profiling library) cannot be loaded: ") +
              (why ? why : "not found") +
              "; add its folder (the toolkit's lib64 or extras/CUPTI/lib64) to LD_LIBRARY_PATH";
      return;
    }
    auto get = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      if (!fn && error.empty()) error = std::string("CUPTI lacks ") + symbol;
    };
    get(register_callbacks, "cuptiActivityRegisterCallbacks");
    get(enable, "cuptiActivityEnable");
    get(disable, "cuptiActivityDisable");
    get(flush_all, "cuptiActivityFlushAll");
    get(next_record, "cuptiActivityGetNextRecord");
    get(dropped_records, "cuptiActivityGetNumDroppedRecords");
    get(push, "cuptiActivityPushExternalCorrelationId");
    get(pop, "cuptiActivityPopExternalCorrelationId");
    get(result_string, "cuptiGetResultString");
  }
  void check(CUptiResult r, const char* what) const {
    if (r == CUPTI_SUCCESS) return;
    const char* text = nullptr;
    if (result_string) result_string(r, &text);
    fail("CUPTI error in ", what, ": ", text ? text : "unknown");
  }
};

const Cupti& cupti() {
  static Cupti c;
  return c;
}

constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
constexpr size_t kBufferBytes = size_t{8} << 20;

// What the buffer callbacks collected (CUPTI calls them on its own thread).
struct Collected {
  std::mutex mu;
  std::vector<backends::DeviceActivity> activities;  // tag still -1: resolved at stop()
  std::vector<uint32_t> correlation;                 // per activity: its API call's correlation id
  std::unordered_map<uint32_t, uint64_t> tags;       // API correlation id -> external id
  size_t dropped = 0;
  void clear() {
    activities.clear();
    correlation.clear();
    tags.clear();
    dropped = 0;
  }
};
Collected& collected() {
  static Collected c;
  return c;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid) {
  const Cupti& c = cupti();
  Collected& out = collected();
  std::lock_guard<std::mutex> lock(out.mu);
  CUpti_Activity* record = nullptr;
  while (valid > 0 && c.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    backends::DeviceActivity a;
    uint32_t corr = 0;
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        a = {backends::DeviceActivity::Kind::Kernel, k->name ? k->name : "?", k->start, k->end, -1};
        corr = k->correlationId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        a = {backends::DeviceActivity::Kind::Copy, "memcpy " + std::to_string(m->bytes) + " bytes", m->start, m->end,
             -1};
        corr = m->correlationId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        a = {backends::DeviceActivity::Kind::Memset, "memset " + std::to_string(m->bytes) + " bytes", m->start, m->end,
             -1};
        corr = m->correlationId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) out.tags[e->correlationId] = e->externalId;
        continue;
      }
      default:
        continue;  // API records: only their correlation ids matter, carried by the others
    }
    out.activities.push_back(std::move(a));
    out.correlation.push_back(corr);
  }
  size_t dropped = 0;
  if (c.dropped_records(context, stream_id, &dropped) == CUPTI_SUCCESS) out.dropped += dropped;
  std::free(buffer);
}

class CuptiTracer : public backends::DeviceTracer {
 public:
  void start() override {
    std::lock_guard<std::mutex> lock(mu_);
    REFORGE_CHECK(!running_, "a device trace is already being recorded");
    const Cupti& c = cupti();
    if (!c.error.empty()) fail("--device-trace: ", c.error);
    if (std::string why = unavailable_reason(); !why.empty()) fail("--device-trace: ", why);
    {
      Collected& out = collected();
      std::lock_guard<std::mutex> l(out.mu);
      out.clear();
    }
    REFORGE_CUDA_CHECK(cudaDeviceSynchronize());
    if (!registered_) {
      c.check(c.register_callbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
      registered_ = true;
    }
    for (CUpti_ActivityKind k : kKinds) c.check(c.enable(k), "cuptiActivityEnable");
    running_ = true;
  }
  bool recording() const override { return running_.load(); }
  void push_tag(int64_t tag) override {
    if (!running_.load()) return;
    cupti().check(cupti().push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, static_cast<uint64_t>(tag)),
                  "cuptiActivityPushExternalCorrelationId");
  }
  void pop_tag() override {
    if (!running_.load()) return;
    uint64_t last = 0;
    cupti().check(cupti().pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last), "cuptiActivityPopExternalCorrelationId");
  }
  std::vector<backends::DeviceActivity> stop(size_t& dropped) override {
    std::lock_guard<std::mutex> lock(mu_);
    REFORGE_CHECK(running_, "no device trace is being recorded");
    const Cupti& c = cupti();
    REFORGE_CUDA_CHECK(cudaDeviceSynchronize());
    for (CUpti_ActivityKind k : kKinds) (void)c.disable(k);
    running_ = false;
    c.check(c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    Collected& out = collected();
    std::lock_guard<std::mutex> l(out.mu);
    std::vector<backends::DeviceActivity> result = std::move(out.activities);
    for (size_t i = 0; i < result.size(); ++i) {
      auto it = out.tags.find(out.correlation[i]);
      if (it != out.tags.end()) result[i].tag = static_cast<int64_t>(it->second);
    }
    std::stable_sort(result.begin(), result.end(),
                     [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
    dropped = out.dropped;
    out.clear();
    return result;
  }

 private:
  std::mutex mu_;
  std::atomic<bool> running_{false};
  bool registered_ = false;
};

}  // namespace

backends::DeviceTracer* tracer() {
  static CuptiTracer t;
  return &t;
}

}  // namespace reforge::cuda
