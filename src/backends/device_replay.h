// Recorded replay of device work: a device backend records the work that the calling thread
// starts on the device and runs it again later as one launch (CUDA graphs), so that a run of many
// small kernels costs the device's time, not the host's time to launch each of them.
//
// The engine uses it per input signature and weight set (runtime/engine.h, EngineOptions::
// device_replay): a run of an engine whose every step is on the device (or is a shape computation
// served from the memo) is recorded once the signature has run eagerly, and replayed from then
// on. Recording is strict: work that cannot be replayed as recorded (a kernel that waits for the
// device, reads device memory on the host, or copies from pageable host memory) makes end()
// throw, and the engine runs that signature eagerly from then on. A recording's addresses are
// fixed: the engine copies the inputs into buffers of the recording before each replay and the
// outputs out of buffers of the recording after it, and never replays one recording on two
// threads at once.
#pragma once

#include <cstddef>
#include <memory>

namespace reforge::backends {

class DeviceRecorder {
 public:
  virtual ~DeviceRecorder() = default;
  // From here on, the device work the calling thread starts is recorded, not run.
  virtual void begin() = 0;
  // Ends the calling thread's recording and returns it, ready to replay; throws an Error saying
  // why when the recorded work cannot be replayed (the recording is discarded).
  virtual std::shared_ptr<const void> end() = 0;
  // Ends and discards the calling thread's recording after a failure, and clears the device's
  // error state; never throws.
  virtual void abandon() noexcept = 0;
  // Starts a recording on the calling thread's stream of work (it runs asynchronously).
  virtual void replay(const void* recording) = 0;
  // Copies `bytes` from `src` to `dst` (each in host or device memory), ordered with the calling
  // thread's device work; recorded while recording. A copy from host memory has read its source
  // when it returns.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
};

}  // namespace reforge::backends
