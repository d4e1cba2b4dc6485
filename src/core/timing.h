// Wall-clock phase timing for reports (refit phases, bench, binding, generation): milliseconds
// since t0, and the nearest-rank percentile of a set of timings.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace reforge {

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Nearest-rank percentile of sorted values: the smallest value with at least p% of them at or
// below it (0 for none).
inline double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

}  // namespace reforge
