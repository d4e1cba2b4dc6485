// TopK: the k largest (or smallest) values along an axis and their int64 indices.
//
// k is an attribute before opset 10 and a one-element input from then on; `largest` and `sorted`
// exist from opset 11. Each slice along the axis is copied out (so strided axes cost one gather);
// a small k keeps a sorted list of the k best in one pass, a large k uses nth_element and sorts
// the winners. The order is total, so results
// are deterministic: equal values keep the lower index first, and NaN counts as larger than any
// number (numpy's sort order). Results are always sorted, which sorted=0 allows.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/dispatch.h"
#include "core/thread_pool.h"
#include "ops/reduce/scan_setup.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

template <typename C>
inline bool greater(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a)) return !std::isnan(b);
    if (std::isnan(b)) return false;
  }
  return a > b;
}

template <typename T>
void topk_typed(const T* x, T* vals, int64_t* inds, int64_t outer, int64_t n, int64_t inner, int64_t k, bool largest,
                int threads) {
  using C = compute_t<T>;
  const int64_t slices = outer * inner;
  const bool par = threads > 1 && slices > 1 && slices * n >= (1 << 14);
  parallel_for(slices, par ? threads : 1, 1, [&](int64_t s0, int64_t s1) {
    std::vector<C> v(static_cast<size_t>(n));
    std::vector<int64_t> idx(static_cast<size_t>(n));
    std::vector<C> best_v(static_cast<size_t>(std::min<int64_t>(k, 64)));
    std::vector<int64_t> best_i(best_v.size());
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t o = s / inner, i = s % inner;
      const T* src = x + o * n * inner + i;
      for (int64_t r = 0; r < n; ++r) v[static_cast<size_t>(r)] = to_compute(src[r * inner]);
      T* vo = vals + o * k * inner + i;
      int64_t* io = inds + o * k * inner + i;
      auto better = [largest](C a, C b) { return largest ? greater(a, b) : greater(b, a); };
      if (k > 0 && k <= 64 && k * 8 <= n) {
        // Small k: one pass keeping the k best in order; most elements fail the first compare.
        // Scanning in index order and inserting after equal values keeps ties by lower index.
        C* bv = best_v.data();
        int64_t* bi = best_i.data();
        int64_t cnt = 0;
        for (int64_t r = 0; r < n; ++r) {
          const C val = v[static_cast<size_t>(r)];
          if (cnt == k && !better(val, bv[k - 1])) continue;
          int64_t p = cnt < k ? cnt++ : k - 1;
          for (; p > 0 && better(val, bv[p - 1]); --p) {
            bv[p] = bv[p - 1];
            bi[p] = bi[p - 1];
          }
          bv[p] = val;
          bi[p] = r;
        }
        for (int64_t r = 0; r < k; ++r) {
          vo[r * inner] = src[bi[r] * inner];
          io[r * inner] = bi[r];
        }
        continue;
      }
      std::iota(idx.begin(), idx.end(), int64_t{0});
      auto before = [&](int64_t a, int64_t b) {
        const C va = v[static_cast<size_t>(a)], vb = v[static_cast<size_t>(b)];
        const bool ab = largest ? greater(va, vb) : greater(vb, va);
        if (ab) return true;
        const bool ba = largest ? greater(vb, va) : greater(va, vb);
        return !ba && a < b;
      };
      if (k < n) std::nth_element(idx.begin(), idx.begin() + k, idx.end(), before);
      std::sort(idx.begin(), idx.begin() + k, before);
      for (int64_t r = 0; r < k; ++r) {
        const int64_t j = idx[static_cast<size_t>(r)];
        vo[r * inner] = src[j * inner];
        io[r * inner] = j;
      }
    }
  });
}

void topk_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const TopKSetup ts = topk_setup(ctx);
  const int64_t k = ts.k, n = ts.split.n, outer = ts.split.outer, inner = ts.split.inner;
  const bool largest = ts.largest;
  const Shape& out_shape = ts.out_shape;
  Tensor& vals = ctx.allocate_output(0, x.dtype(), out_shape);
  // Indices are computed anyway; a node that does not declare the output gets a scratch tensor.
  Tensor scratch;
  Tensor& inds = ctx.num_outputs() > 1 ? ctx.allocate_output(1, DType::Int64, out_shape)
                                       : (scratch = Tensor::empty(DType::Int64, out_shape));
  if (vals.numel() == 0) return;
  const int threads = ctx.threads() > 0 ? ctx.threads() : omp_get_max_threads();
  dispatch_numeric(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        topk_typed<T>(x.data<T>(), vals.mutable_data<T>(), inds.mutable_data<int64_t>(), outer, n, inner, k, largest,
                      threads);
      },
      "TopK");
}

}  // namespace

void register_topk_kernels(OpRegistry& r) {
  r.add({"", "TopK", 1, INT_MAX, topk_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kShape}});
}

}  // namespace reforge::ops
