// Wall-clock phase timing for reports (refit phases, bench, binding): milliseconds since t0.
#pragma once

#include <chrono>

namespace reforge {

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace reforge
