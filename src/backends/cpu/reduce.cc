// The CPU's ReduceMax, ReduceMin, ReduceLogSumExp (whose first pass is a max), ArgMax and ArgMin:
// the reference kernels (ops/reduce) run with max/min scans compiled once per instruction set
// (AVX-512, AVX2, generic SSE2: core/simd.h), each on vectors one register of its own width (64,
// 32 or 16 bytes), and picked per call. Max and min are exact: the variants differ from the
// reference only in which of -0 and +0 they keep when both occur (and exp(x - max) is the same
// for either). Every other reduction runs its reference kernel.
#include "backends/cpu/cpu_backend.h"
#include "core/simd.h"
#include "ops/reduce/extremum_scan.h"

namespace reforge::cpu {
namespace {

using ops::extremum::extremum_col_impl;
using ops::extremum::extremum_row_impl;

template <typename S, bool IsMax>
REFORGE_TARGET_AVX512 S extremum_row_avx512(const S* x, int64_t n, S init, bool* nan) {
  return extremum_row_impl<S, IsMax, 64>(x, n, init, nan);
}
template <typename S, bool IsMax>
REFORGE_TARGET_AVX2 S extremum_row_avx2(const S* x, int64_t n, S init, bool* nan) {
  return extremum_row_impl<S, IsMax, 32>(x, n, init, nan);
}
template <typename S, bool IsMax>
REFORGE_TARGET_GENERIC S extremum_row_generic(const S* x, int64_t n, S init, bool* nan) {
  return extremum_row_impl<S, IsMax, 16>(x, n, init, nan);
}
template <typename S, bool IsMax>
REFORGE_TARGET_AVX512 void extremum_col_avx512(S* acc, const S* x, int64_t n) {
  extremum_col_impl<S, IsMax, 64>(acc, x, n);
}
template <typename S, bool IsMax>
REFORGE_TARGET_AVX2 void extremum_col_avx2(S* acc, const S* x, int64_t n) {
  extremum_col_impl<S, IsMax, 32>(acc, x, n);
}
template <typename S, bool IsMax>
REFORGE_TARGET_GENERIC void extremum_col_generic(S* acc, const S* x, int64_t n) {
  extremum_col_impl<S, IsMax, 16>(acc, x, n);
}

// The widest variant simd_level() allows, chosen per call (so a SimdOverride takes effect).
template <typename S, bool IsMax>
S extremum_row(const S* x, int64_t n, S init, bool* nan) {
  switch (simd_level()) {
    case SimdLevel::Avx512:
      return extremum_row_avx512<S, IsMax>(x, n, init, nan);
    case SimdLevel::Avx2:
      return extremum_row_avx2<S, IsMax>(x, n, init, nan);
    default:
      return extremum_row_generic<S, IsMax>(x, n, init, nan);
  }
}
template <typename S, bool IsMax>
void extremum_col(S* acc, const S* x, int64_t n) {
  switch (simd_level()) {
    case SimdLevel::Avx512:
      return extremum_col_avx512<S, IsMax>(acc, x, n);
    case SimdLevel::Avx2:
      return extremum_col_avx2<S, IsMax>(acc, x, n);
    default:
      return extremum_col_generic<S, IsMax>(acc, x, n);
  }
}

const ops::extremum::ExtremumScans& cpu_scans() {
  static const ops::extremum::ExtremumScans scans = {
      {extremum_row<float, true>, extremum_row<float, false>, extremum_col<float, true>, extremum_col<float, false>},
      {extremum_row<double, true>, extremum_row<double, false>, extremum_col<double, true>,
       extremum_col<double, false>}};
  return scans;
}

}  // namespace

void register_reduce_kernels(KernelRegistry& r) {
  r.add({"cpu", "", "ReduceMax", 1, INT_MAX,
         [](ops::KernelContext& ctx) { ops::extremum::reduce_extremum_kernel(ctx, true, cpu_scans()); }});
  r.add({"cpu", "", "ReduceMin", 1, INT_MAX,
         [](ops::KernelContext& ctx) { ops::extremum::reduce_extremum_kernel(ctx, false, cpu_scans()); }});
  r.add({"cpu", "", "ReduceLogSumExp", 1, INT_MAX,
         [](ops::KernelContext& ctx) { ops::extremum::reduce_log_sum_exp_kernel(ctx, cpu_scans()); }});
  r.add({"cpu", "", "ArgMax", 1, INT_MAX,
         [](ops::KernelContext& ctx) { ops::extremum::arg_extremum_kernel(ctx, true, cpu_scans()); }});
  r.add({"cpu", "", "ArgMin", 1, INT_MAX,
         [](ops::KernelContext& ctx) { ops::extremum::arg_extremum_kernel(ctx, false, cpu_scans()); }});
}

}  // namespace reforge::cpu
