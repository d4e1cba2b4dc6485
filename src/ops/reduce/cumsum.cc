// CumSum and CumProd: running sum (product) along an axis given as a scalar (or 1-element)
// int32/int64 input, with the `exclusive` (sum or product of the elements before, not including,
// each position; the first is 0 or 1) and `reverse` (from the end) attributes.
//
// The input is viewed as [outer, n, inner]; each outer block keeps `inner` running sums and walks
// the n rows forwards or backwards, so rows are read contiguously (vectorizable) whatever the
// axis. Floats run in their compute type (float for 16-bit floats, like a float32 cumsum);
// integers run in uint64 so overflow wraps as it does in the element type instead of being
// undefined (products too: the low bits of a product depend only on the low bits of its factors).
#include <omp.h>

#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/thread_pool.h"
#include "ops/reduce/scan_setup.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

template <typename T>
using cum_acc_t = std::conditional_t<std::is_integral_v<T>, uint64_t, compute_t<T>>;

struct SumStep {
  static constexpr int kIdentity = 0;
  template <typename A>
  static void apply(A& acc, A v) {
    acc += v;
  }
};
struct ProdStep {
  static constexpr int kIdentity = 1;
  template <typename A>
  static void apply(A& acc, A v) {
    acc *= v;
  }
};

template <typename T, typename Step>
void cumulate_typed(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse,
                    int threads) {
  using A = cum_acc_t<T>;
  const A identity = static_cast<A>(Step::kIdentity);
  const bool par = threads > 1 && outer > 1 && outer * n * inner >= (1 << 15);
  parallel_for(outer, par ? threads : 1, 1, [&](int64_t o0, int64_t o1) {
    std::vector<A> acc(static_cast<size_t>(inner));
    for (int64_t o = o0; o < o1; ++o) {
      if (inner == 1) {  // contiguous run: one scalar running sum
        const T* xs = x + o * n;
        T* ys = y + o * n;
        A a = identity;
        const int64_t step = reverse ? -1 : 1;
        for (int64_t k = 0, r = reverse ? n - 1 : 0; k < n; ++k, r += step) {
          const A v = static_cast<A>(to_compute(xs[r]));
          if (exclusive) {
            ys[r] = from_compute<T>(a);
            Step::apply(a, v);
          } else {
            Step::apply(a, v);
            ys[r] = from_compute<T>(a);
          }
        }
        continue;
      }
      std::fill(acc.begin(), acc.end(), identity);
      for (int64_t step = 0; step < n; ++step) {
        const int64_t r = reverse ? n - 1 - step : step;
        const T* xr = x + (o * n + r) * inner;
        T* yr = y + (o * n + r) * inner;
        if (exclusive) {
          for (int64_t j = 0; j < inner; ++j) {
            yr[j] = from_compute<T>(acc[static_cast<size_t>(j)]);
            Step::apply(acc[static_cast<size_t>(j)], static_cast<A>(to_compute(xr[j])));
          }
        } else {
          for (int64_t j = 0; j < inner; ++j) {
            Step::apply(acc[static_cast<size_t>(j)], static_cast<A>(to_compute(xr[j])));
            yr[j] = from_compute<T>(acc[static_cast<size_t>(j)]);
          }
        }
      }
    }
  });
}

template <typename Step>
void cumulate_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const AxisSplit sp = cumulate_setup(ctx);
  const int64_t outer = sp.outer, n = sp.n, inner = sp.inner;
  const bool exclusive = ctx.attr_int("exclusive", 0) != 0;
  const bool reverse = ctx.attr_int("reverse", 0) != 0;
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  if (y.numel() == 0) return;
  const int threads = ctx.threads() > 0 ? ctx.threads() : omp_get_max_threads();
  dispatch_numeric(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        cumulate_typed<T, Step>(x.data<T>(), y.mutable_data<T>(), outer, n, inner, exclusive, reverse, threads);
      },
      label.c_str());
}

}  // namespace

void register_cumsum_kernels(OpRegistry& r) {
  r.add({"", "CumSum", 11, INT_MAX, cumulate_kernel<SumStep>, nullptr, nullptr, {InputRole::kData, InputRole::kShape}});
  r.add(
      {"", "CumProd", 26, INT_MAX, cumulate_kernel<ProdStep>, nullptr, nullptr, {InputRole::kData, InputRole::kShape}});
}

}  // namespace reforge::ops
