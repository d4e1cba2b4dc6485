// Device work as the device's own profiler records it, and what a device holds in memory.
//
// A DeviceTracer records every kernel, copy and memset the process starts on the device, each
// with its start and end on the device's clock and the tag the launching thread had pushed when
// it started the work: the engine tags the work of each step with the step's index
// (runtime::EngineOptions::device_trace), so the records say which node launched which kernels
// and how long they ran, without the host-side waits of a per-node profile. It serves
// `reforge bench --device-trace` (kernel launches per run, time outside the matrix products,
// each product in the run against the same product run alone); tests never time anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace reforge::backends {

struct DeviceActivity {
  enum class Kind { Kernel, Copy, Memset };
  Kind kind = Kind::Kernel;
  std::string name;                   // the kernel's (demangled where the profiler gives it so) or "memcpy"/"memset"
  uint64_t start_ns = 0, end_ns = 0;  // device clock
  int64_t tag = -1;                   // the launching thread's innermost pushed tag, or -1
};

class DeviceTracer {
 public:
  virtual ~DeviceTracer() = default;
  // Starts recording; throws an Error saying why it cannot (the profiling library is missing, or
  // another recording is under way).
  virtual void start() = 0;
  // True between start() and stop().
  virtual bool recording() const = 0;
  // Work that the calling thread launches until the matching pop_tag carries `tag` (while
  // recording; otherwise nothing happens).
  virtual void push_tag(int64_t tag) = 0;
  virtual void pop_tag() = 0;
  // Waits for the device, stops recording and returns what was recorded since start(), ordered by
  // start time. Records the profiler dropped (its buffers full) are counted in `dropped`.
  virtual std::vector<DeviceActivity> stop(size_t& dropped) = 0;
};

// What the device's memory holds for this process, as the backend allocated it.
struct DeviceMemoryStats {
  size_t weights_bytes = 0;                    // engine weights resident now (every engine of the process)
  size_t weights_peak_bytes = 0;               // the most they have been
  size_t workspace_bytes = 0;                  // library workspaces (cuBLASLt's per thread), resident now
  size_t activations_peak_bytes = 0;           // the most that values of runs (and per-call workspaces) used at once
  size_t activations_reserved_peak_bytes = 0;  // the most the allocator has held for them
  size_t replay_bytes = 0;       // what recordings of device work (device_replay.h) hold for their values now
  size_t replay_peak_bytes = 0;  // the most they have held
};

}  // namespace reforge::backends
