// What the C++ benchmarks (bench/*.cc) share: a millisecond clock and the median of samples.
#pragma once

#include <time.h>

#include <algorithm>
#include <vector>

namespace reforge::bench {

// Milliseconds on the monotonic clock, or on the process's CPU-time clock when `cpu_clock` (with
// one thread, a kernel's own time even while other work loads the machine).
inline double now_ms(bool cpu_clock = false) {
  timespec ts;
  clock_gettime(cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// The upper median of `v` (not empty).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace reforge::bench
