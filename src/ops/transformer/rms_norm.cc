// RMSNormalization (opset 23): Y = X / sqrt(mean(X^2 over axes [axis, rank)) + epsilon) * scale.
//
// Stage one (the normalization) runs in the stash_type precision (float32 by default, float64 for
// stash_type 11) and rounds to X's type, as the ONNX function body casts back before the scale
// multiplication; stage two multiplies by `scale`, which broadcasts unidirectionally to X, and
// writes the result in scale's type (Y's type constraint is scale's).
//
// reforge::AddRmsNorm(X, scale, R) -> (Y, S), which fuse-add-rms-norm makes of a residual Add and
// the RMSNormalization that reads it: S = X + R as Add computes it, Y = RMSNormalization(S, scale).
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/nn/norm_setup.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

template <typename X, typename S, typename Acc>
void rms_typed(const Tensor& x, const Tensor& scale, Tensor& out, int64_t outer, int64_t inner, double eps,
               const std::vector<int64_t>& scale_index) {
  const X* xd = x.data<X>();
  const S* sd = scale.data<S>();
  S* od = out.mutable_data<S>();
  const Acc e = static_cast<Acc>(eps);
  parallel_for(outer, outer * inner > (1 << 16) ? omp_get_max_threads() : 1, 1, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const X* row = xd + o * inner;
      Acc sum = 0;
      for (int64_t i = 0; i < inner; ++i) {
        const Acc v = static_cast<Acc>(to_compute(row[i]));
        sum += v * v;
      }
      const Acc rms = std::sqrt(sum / static_cast<Acc>(inner) + e);
      const Acc inv = Acc(1) / rms;
      S* orow = od + o * inner;
      for (int64_t i = 0; i < inner; ++i) {
        // Normalized value rounded to X's type, then scaled in the wider of the two compute types.
        const auto n = to_compute(from_compute<X>(static_cast<Acc>(to_compute(row[i])) * inv));
        const int64_t si = scale_index.empty() ? i : scale_index[o * inner + i];
        orow[i] = from_compute<S>(static_cast<double>(n) * static_cast<double>(to_compute(sd[si])));
      }
    }
  });
}

// RMSNormalization of `x` by `scale` into output 0 of ctx (checked by rms_norm_setup).
void rms_normalize(KernelContext& ctx, const Tensor& x, const Tensor& scale, const RmsNormSetup& rs) {
  const int64_t rank = x.rank(), axis = rs.axis, outer = rs.outer, inner = rs.inner;
  // Scale usually has exactly the normalized shape (possibly with leading 1s): then element i of
  // each row maps to scale[i]. Otherwise precompute a full broadcast index.
  std::vector<int64_t> scale_index;
  bool simple = scale.numel() == inner;
  for (int64_t i = 0; simple && i < scale.rank(); ++i) {
    const int64_t ax = rank - scale.rank() + i;
    if (ax < axis && scale.dim(i) != 1) simple = false;
    if (ax >= axis && scale.dim(i) != x.dim(ax)) simple = false;
  }
  if (!simple) {
    scale_index.resize(static_cast<size_t>(x.numel()));
    std::vector<int64_t> stride(static_cast<size_t>(rank), 0);
    int64_t s = 1;
    for (int64_t i = scale.rank() - 1; i >= 0; --i) {
      const int64_t ax = rank - scale.rank() + i;
      stride[ax] = scale.dim(i) == 1 ? 0 : s;
      s *= scale.dim(i);
    }
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    for (int64_t n = 0; n < x.numel(); ++n) {
      int64_t off = 0;
      for (int64_t i = 0; i < rank; ++i) off += idx[i] * stride[i];
      scale_index[n] = off;
      for (int64_t i = rank - 1; i >= 0; --i) {
        if (++idx[i] < x.dim(i)) break;
        idx[i] = 0;
      }
    }
  }
  Tensor& out = ctx.allocate_output(0, scale.dtype(), x.shape());
  const double eps = rs.eps;
  const bool stash_double = rs.stash_double;
  dispatch_float(
      x.dtype(),
      [&](auto xt) {
        using X = typename decltype(xt)::type;
        dispatch_float(
            scale.dtype(),
            [&](auto st) {
              using S = typename decltype(st)::type;
              if (stash_double)
                rms_typed<X, S, double>(x, scale, out, outer, inner, eps, scale_index);
              else
                rms_typed<X, S, float>(x, scale, out, outer, inner, eps, scale_index);
            },
            "RMSNormalization");
      },
      "RMSNormalization");
}

void rms_kernel(KernelContext& ctx) { rms_normalize(ctx, ctx.input(0), ctx.input(1), rms_norm_setup(ctx)); }

// reforge::AddRmsNorm(X, scale, R) -> (Y, S): S = X + R (Add: each sum rounded to X's type), Y =
// RMSNormalization(S, scale) with the node's axis, epsilon and stash_type.
void add_rms_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& r = ctx.input(2);
  const RmsNormSetup rs = rms_norm_setup(ctx);
  REFORGE_CHECK(r.dtype() == x.dtype() && r.shape() == x.shape(), ctx.node().label(), ": the residual ", r.describe(),
                " is not of X's type and shape ", x.describe());
  Tensor& sum = ctx.allocate_output_uninit(1, x.dtype(), x.shape());
  dispatch_float(
      x.dtype(),
      [&](auto xt) {
        using X = typename decltype(xt)::type;
        const X* a = x.data<X>();
        const X* b = r.data<X>();
        X* o = sum.mutable_data<X>();
        for (int64_t i = 0; i < x.numel(); ++i) o[i] = from_compute<X>(to_compute(a[i]) + to_compute(b[i]));
      },
      "AddRmsNorm");
  rms_normalize(ctx, sum, ctx.input(1), rs);
}

}  // namespace

void register_rms_normalization(OpRegistry& r) {
  r.add({"",
         "RMSNormalization",
         23,
         INT_MAX,
         rms_kernel,
         rms_norm_check,
         nullptr,
         {InputRole::kData, InputRole::kWeight}});
  r.add({"reforge", "AddRmsNorm", 1, INT_MAX, add_rms_kernel, rms_norm_check});
}

}  // namespace reforge::ops
