#include "runtime/run_trace.h"

namespace reforge::runtime {

RunTrace::RunTrace(std::vector<NodeProfile> steps, bool profile) {
  if (profile) profile_ = std::move(steps);
}

double RunTrace::since_created_us(std::chrono::steady_clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - created_).count();
}

void RunTrace::add_run(const std::vector<double>& start_us, const std::vector<double>& ms) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t si = 0; si < ms.size() && si < profile_.size(); ++si) {
    profile_[si].calls += 1;
    profile_[si].total_ms += ms[si];
  }
  const auto thread = threads_.emplace(std::this_thread::get_id(), static_cast<int>(threads_.size())).first;
  std::vector<TraceEvent> events(ms.size());
  for (size_t si = 0; si < ms.size(); ++si) events[si] = {si, runs_, thread->second, start_us[si], 1000.0 * ms[si]};
  ++runs_;
  trace_.push_back(std::move(events));
  if (trace_.size() > kTraceRuns) trace_.pop_front();
}

std::vector<NodeProfile> RunTrace::profile() const {
  std::lock_guard<std::mutex> lock(mu_);
  return profile_;
}

std::vector<TraceEvent> RunTrace::trace() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TraceEvent> all;
  for (const auto& run : trace_) all.insert(all.end(), run.begin(), run.end());
  return all;
}

void RunTrace::keep(std::vector<std::vector<Tensor>> inputs, std::vector<std::shared_ptr<const void>> prepared) {
  std::lock_guard<std::mutex> lock(mu_);
  kept_inputs_ = std::move(inputs);
  kept_prepared_ = std::move(prepared);
}

void RunTrace::kept(size_t step, std::vector<Tensor>& inputs, std::shared_ptr<const void>& prepared) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (step < kept_inputs_.size()) inputs = kept_inputs_[step];
  if (step < kept_prepared_.size()) prepared = kept_prepared_[step];
}

}  // namespace reforge::runtime
