// LayerNormalization (opset 17): normalizes over the dimensions from `axis` on, with Scale
// and optional B broadcast unidirectionally, and the optional Mean and InvStdDev outputs
// (shape X.shape[:axis] + [1, ...], element type stash_type).
//
// The reference kernel: row statistics are computed in double whatever the stash type, more
// accurate than asked for. The CPU backend's kernel (backends/cpu/layer_normalization.cc) runs
// float32 rows on vectors and comes back here for everything else.
#include <omp.h>

#include <cmath>
#include <type_traits>

#include "core/dispatch.h"
#include "core/thread_pool.h"
#include "ops/nn/nn_common.h"
#include "ops/nn/norm_setup.h"

namespace reforge::ops::nn {

namespace {

// `p` broadcast unidirectionally to `target` (numpy rules, p's dims right-aligned), flattened.
template <typename A>
std::vector<A> expand_param(const Tensor& p, const Shape& target, const std::string& label, const char* name) {
  check_norm_param(p, target, label, name);
  const Shape& ps = p.shape();
  const size_t off = target.size() - ps.size();
  const std::vector<double> src = to_doubles(p);
  const int64_t n = shape_numel(target);
  std::vector<A> out(static_cast<size_t>(n));
  // Source strides aligned to target dims (0 where broadcast).
  std::vector<int64_t> pstr = strides_of(ps), str(target.size(), 0);
  for (size_t i = 0; i < ps.size(); ++i) str[off + i] = ps[i] == 1 ? 0 : pstr[i];
  std::vector<int64_t> idx(target.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t s = 0;
    for (size_t d = 0; d < target.size(); ++d) s += idx[d] * str[d];
    out[e] = static_cast<A>(src[s]);
    for (size_t d = target.size(); d-- > 0;) {
      if (++idx[d] < target[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

void layer_norm_kernel(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const Tensor& S = ctx.input(1);
  const Tensor* B = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const std::string& label = ctx.node().label();
  const LayerNormSetup s = layer_norm_setup(ctx);
  const DType stash_dtype = s.stash_dtype;
  const int64_t outer = s.outer, inner = s.inner;
  Tensor& Y = ctx.allocate_output(0, X.dtype(), X.shape());
  const LayerNormStats stats = layer_norm_stat_outputs(ctx, s);
  Tensor* mean_t = stats.mean;
  Tensor* inv_t = stats.inv_std;
  if (X.numel() == 0) return;

  dispatch_float(
      X.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
        // Parameters cover the normalized dims, or all of X when they have more dims than that.
        const bool full = s.full;
        const Shape& pshape = s.param_shape;
        const std::vector<A> scale = expand_param<A>(S, pshape, label, "Scale");
        const std::vector<A> bias = B ? expand_param<A>(*B, pshape, label, "B") : std::vector<A>(scale.size(), A(0));
        std::vector<double> means(static_cast<size_t>(outer)), invs(static_cast<size_t>(outer));
        const T* x = X.data<T>();
        T* y = Y.mutable_data<T>();
        parallel_for(outer, X.numel() > (1 << 15) ? omp_get_max_threads() : 1, 1, [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const T* xp = x + r * inner;
            T* yp = y + r * inner;
            const Moments mo = moments(xp, inner);
            const double m = mo.mean;
            const double inv = 1.0 / std::sqrt(mo.variance + s.eps);
            means[r] = m;
            invs[r] = inv;
            const A* sp = scale.data() + (full ? r * inner : 0);
            const A* bp = bias.data() + (full ? r * inner : 0);
            const A ma = static_cast<A>(m), ia = static_cast<A>(inv);
            for (int64_t i = 0; i < inner; ++i)
              yp[i] = from_compute<T>((static_cast<A>(to_compute(xp[i])) - ma) * ia * sp[i] + bp[i]);
          }
        });
        auto store = [&](Tensor* t, const std::vector<double>& v) {
          if (!t) return;
          dispatch_float(stash_dtype, [&](auto stag) {
            using U = typename decltype(stag)::type;
            U* p = t->mutable_data<U>();
            for (int64_t r = 0; r < outer; ++r) p[r] = from_compute<U>(static_cast<compute_t<U>>(v[r]));
          });
        };
        store(mean_t, means);
        store(inv_t, invs);
      },
      "LayerNormalization");
}

}  // namespace

void register_layer_norm_ops(OpRegistry& r) {
  r.add({"",
         "LayerNormalization",
         17,
         INT_MAX,
         layer_norm_kernel,
         nullptr,
         nullptr,
         {InputRole::kData, InputRole::kWeight, InputRole::kWeight}});
}

}  // namespace reforge::ops::nn
