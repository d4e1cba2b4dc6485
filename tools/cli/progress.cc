#include "progress.h"

#include <cstdio>
#include <exception>
#include <iostream>

namespace reforge::cli {

namespace {
Verbosity g_verbosity = Verbosity::Normal;
constexpr auto kAnnounceAfter = std::chrono::seconds(2);

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
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
        std::cerr << "reforge: " << what_ << " ..." << std::endl;
        announced_ = true;
      }
    });
  }
}

Phase::~Phase() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (announced_) {
    char secs[32];
    double s = seconds_since(start_);
    if (s < 1)
      std::snprintf(secs, sizeof secs, "%.1f ms", 1000 * s);
    else
      std::snprintf(secs, sizeof secs, "%.2f s", s);
    std::cerr << "reforge: " << what_ << (std::uncaught_exceptions() ? ": stopped by an error after " : ": done in ")
              << secs << std::endl;
  }
}

}  // namespace reforge::cli
