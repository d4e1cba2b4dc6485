// ArgMax and ArgMin: index (int64) of the extreme value along one axis.
//
// The input is viewed as [outer, n, inner] around the axis. With inner == 1 each output scans one
// contiguous run; otherwise a whole [n, inner] block is scanned row by row, updating `inner`
// running winners at once, so memory is read in order either way. Ties go to the first index, or
// the last with select_last_index; NaN wins over numbers (as in numpy), and ties among NaNs
// follow the same first/last rule.
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/thread_pool.h"
#include "ops/reduce/extremum_scan.h"
#include "ops/reduce/reduce_setup.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

template <typename C, bool IsMax, bool Last>
inline bool wins(C v, C best) {
  if (v != v) return Last || best == best;  // NaN beats numbers; a later NaN only with Last
  if (best != best) return false;
  if constexpr (IsMax)
    return Last ? v >= best : v > best;
  else
    return Last ? v <= best : v < best;
}

template <typename T, bool IsMax, bool Last>
void arg_typed(const T* x, int64_t* y, int64_t outer, int64_t n, int64_t inner, int threads,
               const extremum::ExtremumScans& scans) {
  using C = compute_t<T>;
  const bool par = threads > 1 && outer * n * inner >= (1 << 15) && outer > 1;
  parallel_for(outer, par ? threads : 1, 1, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const T* block = x + o * n * inner;
      int64_t* out = y + o * inner;
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        if (inner == 1) {  // vector scan for the extreme value, then find its first/last position
          bool nan = false;
          const T m = scans.of<T>().template row<IsMax>(block, n, block[0], &nan);
          auto hit = [&](int64_t r) { return nan ? block[r] != block[r] : block[r] == m; };
          int64_t bi = 0;
          if (Last) {
            for (bi = n - 1; bi > 0 && !hit(bi); --bi) {
            }
          } else {
            for (bi = 0; bi < n - 1 && !hit(bi); ++bi) {
            }
          }
          out[0] = bi;
          continue;
        }
      }
      if (inner == 1) {
        C best = to_compute(block[0]);
        int64_t bi = 0;
        for (int64_t r = 1; r < n; ++r) {
          C v = to_compute(block[r]);
          if (wins<C, IsMax, Last>(v, best)) {
            best = v;
            bi = r;
          }
        }
        out[0] = bi;
      } else {
        std::vector<C> best(static_cast<size_t>(inner));
        for (int64_t i = 0; i < inner; ++i) best[static_cast<size_t>(i)] = to_compute(block[i]);
        // out[] starts zeroed: index 0 is the winner so far.
        for (int64_t r = 1; r < n; ++r) {
          const T* row = block + r * inner;
          for (int64_t i = 0; i < inner; ++i) {
            C v = to_compute(row[i]);
            if (wins<C, IsMax, Last>(v, best[static_cast<size_t>(i)])) {
              best[static_cast<size_t>(i)] = v;
              out[i] = r;
            }
          }
        }
      }
    }
  });
}

template <bool IsMax>
void arg_kernel(KernelContext& ctx, const extremum::ExtremumScans& scans) {
  const Tensor& x = ctx.input(0);
  const ArgSetup s = arg_setup(ctx, IsMax);
  const bool last = s.last;
  const int64_t outer = s.outer, n = s.n, inner = s.inner;
  Tensor& y = ctx.allocate_output(0, DType::Int64, s.out);
  if (y.numel() == 0) return;
  const int threads = ctx.threads() > 0 ? ctx.threads() : omp_get_max_threads();
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (last)
      arg_typed<T, IsMax, true>(x.data<T>(), y.mutable_data<int64_t>(), outer, n, inner, threads, scans);
    else
      arg_typed<T, IsMax, false>(x.data<T>(), y.mutable_data<int64_t>(), outer, n, inner, threads, scans);
  };
  if (x.dtype() == DType::Bool)
    run(TypeTag<bool>{});
  else
    dispatch_numeric(x.dtype(), run, IsMax ? "ArgMax" : "ArgMin");
}

}  // namespace

namespace extremum {
void arg_extremum_kernel(KernelContext& ctx, bool is_max, const ExtremumScans& scans) {
  if (is_max)
    arg_kernel<true>(ctx, scans);
  else
    arg_kernel<false>(ctx, scans);
}
}  // namespace extremum

void register_arg_kernels(OpRegistry& r) {
  r.add({"", "ArgMax", 1, INT_MAX, [](KernelContext& ctx) { arg_kernel<true>(ctx, extremum::reference_scans()); },
         nullptr});
  r.add({"", "ArgMin", 1, INT_MAX, [](KernelContext& ctx) { arg_kernel<false>(ctx, extremum::reference_scans()); },
         nullptr});
}

}  // namespace reforge::ops
