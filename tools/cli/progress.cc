#include "progress.h"

#include <cstdio>
#include <exception>
#include <iostream>

namespace reforge::cli {

namespace {
Verbosity g_verbosity = Verbosity::Normal;
constexpr auto kAnnounceAfter = std::chrono::seconds(2);
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
}  // namespace

void set_verbosity(Verbosity v) { g_verbosity = v; }
Verbosity verbosity() { return g_verbosity; }

Phase::Phase(std::string what) : what_(std::move(what)), start_(std::chrono::steady_clock::now()) {
  if (g_verbosity == Verbosity::Verbose) {
    std::cerr << "reforge: " << what_ << " ..." << std::endl;
    announced_ = true;
  } else if (g_verbosity == Verbosity::Normal) {
    watcher_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_for(lock, kAnnounceAfter, [this] { return done_; })) {
        std::cerr << "reforge: " << what_;
        if (!step_.empty()) std::cerr << " (" << step_ << ")";
        std::cerr << " ..." << std::endl;
        announced_ = true;
      }
    });
  }
}

void Phase::step(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  end_step(now);
  step_ = name;
  step_start_ = now;
}

void Phase::end_step(std::chrono::steady_clock::time_point now) {
  if (step_.empty()) return;
  const double s = std::chrono::duration<double>(now - step_start_).count();
  if (g_verbosity == Verbosity::Verbose || (announced_ && s >= kReportStepSeconds))
    std::cerr << "reforge:   " << step_ << ": " << format_seconds(s) << std::endl;
  step_.clear();
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
