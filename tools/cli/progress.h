// Progress of long phases on stderr (importing, building: passes and weight packing, refitting,
// writing), as `--quiet` and `--verbose` ask. By default a phase that is still running after
// two seconds is announced ("reforge: building 'model.onnx' ...") and, when it ends, its time is
// printed; quicker phases print nothing. --verbose prints every phase as it starts and ends;
// --quiet prints no phase and no notes (synthesized inputs, refit summaries).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace reforge::cli {

enum class Verbosity { Quiet, Normal, Verbose };
void set_verbosity(Verbosity v);
Verbosity verbosity();

// One phase, from construction to destruction.
class Phase {
 public:
  explicit Phase(std::string what);
  ~Phase();
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  std::string what_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false, announced_ = false;
  std::thread watcher_;
};

}  // namespace reforge::cli
