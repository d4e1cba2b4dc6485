// The instruction-set levels (core/simd.h) this CPU runs, for tests that check each kernel
// variant: force one with SimdOverride, compare against a reference.
#pragma once

#include <vector>

#include "core/simd.h"

namespace reforge::test_support {

// Generic, then AVX2 and AVX-512 where the CPU has them.
inline std::vector<SimdLevel> simd_levels() {
  std::vector<SimdLevel> out = {SimdLevel::Generic};
  if (simd_level() >= SimdLevel::Avx2) out.push_back(SimdLevel::Avx2);
  if (simd_level() >= SimdLevel::Avx512) out.push_back(SimdLevel::Avx512);
  return out;
}

inline const char* simd_level_name(SimdLevel l) {
  return l == SimdLevel::Avx512 ? "avx512" : l == SimdLevel::Avx2 ? "avx2" : "generic";
}

}  // namespace reforge::test_support
