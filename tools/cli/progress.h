// Progress of long phases on stderr (importing, building: passes and weight packing, refitting:
// reading, validating, replaying recipes; writing), as `--quiet` and `--verbose` ask. By default a
// phase that is still running after two seconds is announced ("reforge: building 'model.onnx' (pass
// fuse-attention) ...", naming the step it is in and, for a counted step, how far it is), then a
// counted step still running is reported every five seconds ("reforge:   pass linear-weights-packing:
// 1.2 GB of 4.8 GB"); when the phase ends its time is printed, with every later step of half a
// second or more. Quicker phases print nothing. --verbose prints every phase and step as they end
// (and the counted steps' reports); --quiet prints no phase and no notes (synthesized inputs, refit
// summaries). The library's steps come from its progress callbacks (core/progress.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/progress.h"
#include "session/observer.h"

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
  // A library progress report: a step that starts, or how far a counted step is.
  void progress(const Progress& p);
  // A build::BuildOptions::progress or refit::CommitOptions::progress that reports to this phase
  // (which must outlive its use).
  ProgressCallback reporter() {
    return [this](const Progress& p) { progress(p); };
  }

 private:
  void end_step(std::chrono::steady_clock::time_point now);  // with mutex_ held
  void watch();                                              // the watcher thread
  std::string step_state() const;                            // "pass X: 1.2 GB of 4.8 GB", with mutex_ held

  std::string what_;
  std::chrono::steady_clock::time_point start_;
  std::string step_;
  std::chrono::steady_clock::time_point step_start_;
  uint64_t done_units_ = 0, total_units_ = 0, reported_units_ = 0;
  std::string unit_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false, announced_ = false;
  std::thread watcher_;
};

// The session's phases (session/observer.h) as Phase lines.
class PhaseObserver : public session::Observer {
 public:
  void begin_phase(const std::string& what) override {
    phase_.reset();
    phase_ = std::make_unique<Phase>(what);
  }
  void end_phase() override { phase_.reset(); }
  void progress(const Progress& p) override {
    if (phase_) phase_->progress(p);
  }

 private:
  std::unique_ptr<Phase> phase_;
};

}  // namespace reforge::cli
