// Progress of long phases on stderr (importing, building: passes and weight packing, refitting,
// writing), as `--quiet` and `--verbose` ask. By default a phase that is still running after
// two seconds is announced ("reforge: building 'model.onnx' (pass fuse-attention) ...", naming the
// step it is in) and, when it ends, its time is printed, with every later step of half a second
// or more; quicker phases print nothing. --verbose prints every phase and step as they end;
// --quiet prints no phase and no notes (synthesized inputs, refit summaries).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
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

  // Marks the start of a step of the phase (a build pass, hashing weights); the step before ends.
  void step(const std::string& name);
  // A build::BuildOptions::on_step that reports to this phase (which must outlive its use).
  std::function<void(const std::string&)> step_reporter() {
    return [this](const std::string& name) { step(name); };
  }

 private:
  void end_step(std::chrono::steady_clock::time_point now);  // with mutex_ held

  std::string what_;
  std::chrono::steady_clock::time_point start_;
  std::string step_;
  std::chrono::steady_clock::time_point step_start_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false, announced_ = false;
  std::thread watcher_;
};

}  // namespace reforge::cli
