// Det: the determinant of each square matrix in the last two axes of X [..., M, M], by LU
// decomposition with partial pivoting in double, rounded once to X's type. A singular matrix
// gives 0 (a zero pivot column); an empty (0 x 0) matrix gives 1.
#include <cmath>
#include <utility>
#include <vector>

#include "core/dispatch.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

void det_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(x.rank() >= 2 && x.dim(x.rank() - 1) == x.dim(x.rank() - 2), label, ": input must be [..., M, M], got ",
                x.describe());
  const int64_t m = x.dim(x.rank() - 1);
  const Shape out_shape(x.shape().begin(), x.shape().end() - 2);
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), out_shape);
  const int64_t count = y.numel();
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xs = x.data<T>();
        T* ys = y.mutable_data<T>();
        std::vector<double> a(static_cast<size_t>(m * m));
        for (int64_t b = 0; b < count; ++b) {
          for (int64_t i = 0; i < m * m; ++i)
            a[static_cast<size_t>(i)] = static_cast<double>(to_compute(xs[b * m * m + i]));
          double det = 1.0;
          for (int64_t col = 0; col < m && det != 0.0; ++col) {
            int64_t piv = col;
            for (int64_t r = col + 1; r < m; ++r)
              if (std::abs(a[static_cast<size_t>(r * m + col)]) > std::abs(a[static_cast<size_t>(piv * m + col)]))
                piv = r;
            const double p = a[static_cast<size_t>(piv * m + col)];
            if (p == 0.0) {
              det = 0.0;
              break;
            }
            if (piv != col) {
              for (int64_t k = 0; k < m; ++k)
                std::swap(a[static_cast<size_t>(piv * m + k)], a[static_cast<size_t>(col * m + k)]);
              det = -det;
            }
            det *= p;
            for (int64_t r = col + 1; r < m; ++r) {
              const double f = a[static_cast<size_t>(r * m + col)] / p;
              for (int64_t k = col; k < m; ++k)
                a[static_cast<size_t>(r * m + k)] -= f * a[static_cast<size_t>(col * m + k)];
            }
          }
          ys[b] = from_compute<T>(static_cast<compute_t<T>>(det));
        }
      },
      label.c_str());
}

}  // namespace

void register_det_kernels(OpRegistry& r) { r.add({"", "Det", 11, INT_MAX, det_kernel, nullptr}); }

}  // namespace reforge::ops
