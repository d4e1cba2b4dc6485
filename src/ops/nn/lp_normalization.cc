// LpNormalization: x divided by its L1 (p = 1) or L2 (p = 2) norm along `axis` (default -1). A
// lane whose norm is 0 (all zeros) gives zeros, not 0/0 = NaN, as the ONNX reference does. Norms
// accumulate in double and each output is rounded once.
#include <cmath>

#include "core/dispatch.h"
#include "ops/nn/nn_common.h"

namespace reforge::ops::nn {
namespace {

std::string check_lp_normalization(const ir::Node& node) {
  const int64_t p = node.attr_int("p", 2);
  if (p != 1 && p != 2) return "p must be 1 or 2, got " + std::to_string(p);
  return "";
}

void lp_normalization_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t p = ctx.attr_int("p", 2);
  REFORGE_CHECK(p == 1 || p == 2, label, ": p must be 1 or 2, got ", p);
  const int64_t rank = x.rank();
  int64_t axis = ctx.attr_int("axis", -1);
  REFORGE_CHECK(rank >= 1 && axis >= -rank && axis < rank, label, ": axis ", axis, " is out of range for input ",
                x.describe());
  if (axis < 0) axis += rank;
  int64_t outer = 1, n = x.dim(axis), inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.dim(i);
  for (int64_t i = axis + 1; i < rank; ++i) inner *= x.dim(i);
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  if (y.numel() == 0) return;
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xs = x.data<T>();
        T* ys = y.mutable_data<T>();
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t j = 0; j < inner; ++j) {
            const int64_t base = o * n * inner + j;
            double norm = 0;
            for (int64_t k = 0; k < n; ++k) {
              const double v = static_cast<double>(to_compute(xs[base + k * inner]));
              norm += p == 1 ? std::abs(v) : v * v;
            }
            if (p == 2) norm = std::sqrt(norm);
            for (int64_t k = 0; k < n; ++k) {
              const double v = static_cast<double>(to_compute(xs[base + k * inner]));
              ys[base + k * inner] = from_compute<T>(static_cast<compute_t<T>>(norm == 0.0 ? 0.0 : v / norm));
            }
          }
      },
      label.c_str());
}

}  // namespace

void register_lp_normalization_ops(OpRegistry& r) {
  r.add({"", "LpNormalization", 1, INT_MAX, lp_normalization_kernel, check_lp_normalization});
}

}  // namespace reforge::ops::nn
