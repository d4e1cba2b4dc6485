#include "progress.h"

#include <cstdio>
#include <exception>
#include <iostream>

namespace reforge::cli {

namespace {
Verbosity g_verbosity = Verbosity::Normal;
constexpr auto kAnnounceAfter = std::chrono::seconds(2);
constexpr auto kCountEvery = std::chrono::seconds(5);
constexpr double kReportStepSeconds = 0.5;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string format_seconds(double s) {
  char buf[32];
  if (s < 1)
    std::snprintf(buf, sizeof buf, "%.1f ms", 1000 * s);
  else
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

std::string format_bytes(uint64_t b) {
  char buf[32];
  if (b >= (uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(b) / (1 << 30));
  else if (b >= (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(b) / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.1f KB", static_cast<double>(b) / 1024);
  return buf;
}
}  // namespace

void set_verbosity(Verbosity v) { g_verbosity = v; }
Verbosity verbosity() { return g_verbosity; }

Phase::Phase(std::string what) : what_(std::move(what)), start_(std::chrono::steady_clock::now()) {
  if (g_verbosity == Verbosity::Quiet) return;
  if (g_verbosity == Verbosity::Verbose) {
    std::cerr << "reforge: " << what_ << " ..." << std::endl;
    announced_ = true;
  }
  watcher_ = std::thread([this] { watch(); });
}

void Phase::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!announced_) {
    if (cv_.wait_for(lock, kAnnounceAfter, [this] { return done_; })) return;
    std::cerr << "reforge: " << what_;
    if (!step_.empty()) std::cerr << " (" << step_state() << ")";
    std::cerr << " ..." << std::endl;
    announced_ = true;
    reported_units_ = done_units_;
  }
  // A counted step that is still running is reported every kCountEvery while it advances.
  while (!cv_.wait_for(lock, kCountEvery, [this] { return done_; })) {
    if (total_units_ == 0 || done_units_ == reported_units_) continue;
    std::cerr << "reforge:   " << step_state() << std::endl;
    reported_units_ = done_units_;
  }
}

std::string Phase::step_state() const {
  if (total_units_ == 0) return step_;
  if (unit_ == "bytes") return step_ + ": " + format_bytes(done_units_) + " of " + format_bytes(total_units_);
  return step_ + ": " + std::to_string(done_units_) + " of " + std::to_string(total_units_) + " " + unit_;
}

void Phase::step(const std::string& name) { progress(Progress{name}); }

void Phase::progress(const Progress& p) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (p.step != step_) {
    const auto now = std::chrono::steady_clock::now();
    end_step(now);
    step_ = p.step;
    step_start_ = now;
    reported_units_ = 0;
  }
  done_units_ = p.done;
  total_units_ = p.total;
  unit_ = p.unit;
}

void Phase::end_step(std::chrono::steady_clock::time_point now) {
  if (step_.empty()) return;
  const double s = std::chrono::duration<double>(now - step_start_).count();
  if (g_verbosity == Verbosity::Verbose || (announced_ && s >= kReportStepSeconds)) {
    std::cerr << "reforge:   " << step_;
    if (total_units_ > 0)
      std::cerr << " (" << (unit_ == "bytes" ? format_bytes(total_units_) : std::to_string(total_units_) + " " + unit_)
                << ")";
    std::cerr << ": " << format_seconds(s) << std::endl;
  }
  step_.clear();
  total_units_ = done_units_ = 0;
}

Phase::~Phase() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  end_step(std::chrono::steady_clock::now());
  if (announced_)
    std::cerr << "reforge: " << what_ << (std::uncaught_exceptions() ? ": stopped by an error after " : ": done in ")
              << format_seconds(seconds_since(start_)) << std::endl;
}

}  // namespace reforge::cli
