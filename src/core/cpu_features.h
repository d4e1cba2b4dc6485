// CPU features that __builtin_cpu_supports does not name on every supported compiler
// (clang 14 does not know "f16c"), read from CPUID.
#pragma once

#include <cpuid.h>

namespace reforge {

// F16C: the half <-> float conversion instructions.
inline bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

}  // namespace reforge
