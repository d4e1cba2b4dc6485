// RunTrace: what an engine remembers of its runs for profiling and for timing device steps alone.
//
// With EngineOptions::profile the executor times every step of every run and hands the timings
// here: per-step totals (Engine::profile) and a timeline of the last kTraceRuns runs
// (Engine::trace). With EngineOptions::device_trace it hands over the inputs each device step read
// in the most recent traced run, with the weight version's prepared state, so that
// Engine::rerun_step can run that step again alone. Thread-safe: runs on several threads record
// into one trace.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "runtime/engine.h"

namespace reforge::runtime {

class RunTrace {
 public:
  explicit RunTrace(std::vector<NodeProfile> steps, bool profile);

  // Microseconds from the engine's creation to `t`.
  double since_created_us(std::chrono::steady_clock::time_point t) const;
  // One profiled run: per step its start (since_created_us) and duration in milliseconds.
  void add_run(const std::vector<double>& start_us, const std::vector<double>& ms);
  std::vector<NodeProfile> profile() const;
  std::vector<TraceEvent> trace() const;

  // The inputs of each device step in a traced run (empty for steps that did not run traced),
  // with the prepared state of the run's weight version.
  void keep(std::vector<std::vector<Tensor>> inputs, std::vector<std::shared_ptr<const void>> prepared);
  // What keep() kept of `step`.
  void kept(size_t step, std::vector<Tensor>& inputs, std::shared_ptr<const void>& prepared) const;

 private:
  const std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  std::vector<NodeProfile> profile_;           // per step, when profiling
  std::deque<std::vector<TraceEvent>> trace_;  // the last kTraceRuns runs' events
  int64_t runs_ = 0;
  std::map<std::thread::id, int> threads_;
  std::vector<std::vector<Tensor>> kept_inputs_;
  std::vector<std::shared_ptr<const void>> kept_prepared_;
};

}  // namespace reforge::runtime
