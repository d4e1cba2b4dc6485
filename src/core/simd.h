// Run-time selection of the vector instruction set for hand-written kernels.
//
// The build has no -march flag (a plan and its binary must run on any x86-64), so kernels that
// want AVX2 or AVX-512 compile their hot loop two or three times with a GCC/Clang `target`
// attribute and pick one per call with simd_level(). The generic variant (SSE2 on x86-64) is
// always there; tests force each level with SimdOverride to check the variants against each
// other, and the environment variable REFORGE_SIMD=generic|avx2 caps it for a whole process. REFORGE_TARGET_* also
// flattens: every helper the loop calls is inlined into it and so compiled for that instruction set (helpers are
// default-target inline functions, which a function with a superset target may inline).
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace reforge {

enum class SimdLevel : int { Generic = 0, Avx2 = 1, Avx512 = 2 };

namespace detail {
inline std::atomic<int> simd_override{-1};
inline SimdLevel detect_simd_level() {
  // REFORGE_SIMD=generic|avx2 caps the level (to compare variants, or to rule one out).
  const char* cap = std::getenv("REFORGE_SIMD");
  if (cap && std::strcmp(cap, "generic") == 0) return SimdLevel::Generic;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const bool allow512 = !(cap && std::strcmp(cap, "avx2") == 0);
  __builtin_cpu_init();
  if (allow512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
    return SimdLevel::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdLevel::Avx2;
#endif
  return SimdLevel::Generic;
}
}  // namespace detail

// The widest level this CPU runs (or the one a SimdOverride asked for, if lower).
inline SimdLevel simd_level() {
  static const SimdLevel detected = detail::detect_simd_level();
  const int o = detail::simd_override.load(std::memory_order_relaxed);
  if (o >= 0 && o < static_cast<int>(detected)) return static_cast<SimdLevel>(o);
  return detected;
}

// Scoped cap on simd_level() (tests: run a kernel at each level). Not for concurrent use.
class SimdOverride {
 public:
  explicit SimdOverride(SimdLevel cap) : prev_(detail::simd_override.exchange(static_cast<int>(cap))) {}
  ~SimdOverride() { detail::simd_override.store(prev_); }
  SimdOverride(const SimdOverride&) = delete;
  SimdOverride& operator=(const SimdOverride&) = delete;

 private:
  int prev_;
};

}  // namespace reforge

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define REFORGE_HAVE_SIMD_TARGETS 1
#define REFORGE_TARGET_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c"), flatten))
#define REFORGE_TARGET_AVX2 __attribute__((target("avx2,fma,f16c"), flatten))
#define REFORGE_TARGET_GENERIC __attribute__((flatten))
#else
#define REFORGE_HAVE_SIMD_TARGETS 0
#define REFORGE_TARGET_AVX512
#define REFORGE_TARGET_AVX2
#define REFORGE_TARGET_GENERIC
#endif

// Defines NAME_avx512, NAME_avx2 and NAME_generic from one body, plus NAME, which calls the
// widest the CPU has. Use inside a namespace: REFORGE_SIMD_FUNCTION(template <...>, void, name,
// (params), (args), { body }).
#define REFORGE_SIMD_VARIANTS(TEMPLATE_HEAD, RET, NAME, PARAMS, ARGS, ...)                                       \
  TEMPLATE_HEAD REFORGE_TARGET_AVX512 RET NAME##_avx512 PARAMS __VA_ARGS__ TEMPLATE_HEAD REFORGE_TARGET_AVX2 RET \
      NAME##_avx2 PARAMS __VA_ARGS__ TEMPLATE_HEAD REFORGE_TARGET_GENERIC RET NAME##_generic PARAMS __VA_ARGS__  \
          TEMPLATE_HEAD inline RET NAME PARAMS {                                                                 \
    switch (::reforge::simd_level()) {                                                                           \
      case ::reforge::SimdLevel::Avx512:                                                                         \
        return NAME##_avx512 ARGS;                                                                               \
      case ::reforge::SimdLevel::Avx2:                                                                           \
        return NAME##_avx2 ARGS;                                                                                 \
      default:                                                                                                   \
        return NAME##_generic ARGS;                                                                              \
    }                                                                                                            \
  }
