// Helpers shared by the nn op family (MatMul/Gemm, Conv/ConvTranspose, pools, normalizations):
// the generic batched matrix product, the spatial geometry of windowed ops (kernel, strides,
// dilations, pads and auto_pad resolved to concrete numbers), and parameter reading.
//
// Geometry is resolved once per call from the node's attributes and the actual input shape;
// every kernel then works on plain integers and checks nothing further, so all validation
// (attribute lengths, positive strides, windows that fit) happens here with the node's label.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::ops::nn {

// Resolved geometry of a windowed op over `nsp` spatial dimensions.
struct Window {
  std::vector<int64_t> in;         // input spatial dims
  std::vector<int64_t> kernel;     // kernel spatial dims
  std::vector<int64_t> strides;    // >= 1
  std::vector<int64_t> dilations;  // >= 1
  std::vector<int64_t> pad_begin;  // may grow with auto_pad
  std::vector<int64_t> pad_end;
  std::vector<int64_t> out;  // output spatial dims, >= 1

  size_t rank() const { return in.size(); }
  int64_t span(size_t i) const { return (kernel[i] - 1) * dilations[i] + 1; }  // dilated extent
};

// A Window of 1 to 3 spatial dims padded at the front to exactly 3 (size 1, kernel 1, stride 1),
// so that reference loops need only one 3-deep loop nest.
struct Geo3 {
  int64_t in[3], k[3], s[3], d[3], pb[3], out[3];
};
Geo3 to_geo3(const Window& w);

// Reads strides, dilations, pads and auto_pad for a window with the given kernel over `in`.
// `ceil_mode` selects pooling's ceil rounding of the output size. Throws an Error naming the
// node for malformed attributes or a window larger than the padded input.
Window resolve_window(const KernelContext& ctx, const std::vector<int64_t>& in, const std::vector<int64_t>& kernel,
                      bool ceil_mode);

// The node's kernel_shape attribute, validated for `nsp` spatial dims (or empty if absent).
std::vector<int64_t> kernel_shape_attr(const KernelContext& ctx, size_t nsp);

// For every output index along one dimension, the kernel taps that land inside [lo, hi) of
// the input coordinates.
struct TapRange {
  std::vector<int64_t> first, last;  // taps [first, last)
};
TapRange tap_range(int64_t out, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t lo, int64_t hi);

// Checker of the pools (MaxPool, AveragePool, reforge::MaxPool): kernel_shape, auto_pad.
std::string check_pool(const ir::Node& node);

// Checker shared by Conv and ConvTranspose: auto_pad value, at most 3 spatial dims, group.
std::string check_conv_like(const ir::Node& node);

// The elements of a float tensor as doubles (any float dtype), for small parameter tensors.
std::vector<double> to_doubles(const Tensor& t);

// 16-bit float tensors computed in float32: widen a tensor's elements (any float dtype) to
// float, and round float results into `out` (same element count).
std::vector<float> to_floats(const Tensor& t);
void store_floats(const std::vector<float>& v, Tensor& out);

// Row-major strides of `shape`.
std::vector<int64_t> strides_of(const Shape& shape);

struct Moments {
  double mean = 0;
  double variance = 0;  // population variance
};
// Mean and variance of x[0..n) in double precision, two passes (exact enough for the norms).
template <typename T>
Moments moments(const T* x, int64_t n) {
  double s = 0, q = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(to_compute(x[i]));
  const double m = s / static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    const double dv = static_cast<double>(to_compute(x[i])) - m;
    q += dv * dv;
  }
  return {m, q / static_cast<double>(n)};
}

}  // namespace reforge::ops::nn
