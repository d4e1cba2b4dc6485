#include "backends/cpu/conv_layout.h"

#include "ops/tensor/tensor_common.h"

namespace reforge::ops::nn {

using cpu::ActLayout;

ActLayout parse_layout(const std::string& s) {
  return s == "NHWC" ? ActLayout::Nhwc : s == "NCHWc" ? cpu::native_layout() : ActLayout::Nchw;
}

// The stored shape of an [N, C, H, W] activation in layout `l` (see cpu::ActLayout).
Shape physical_shape(const Shape& s, ActLayout l) {
  if (l == ActLayout::Nhwc) return {s[0], s[2], s[3], s[1]};
  if (l == ActLayout::Blocked) {
    const int64_t b = cpu::activation_block();
    return {s[0], s[1] / b, s[2], s[3], b};
  }
  return s;
}

// The [N, C, H, W] shape of an activation stored in layout `l`.
Shape logical_shape(const Tensor& t, ActLayout l, const ir::Node& node) {
  if (l == ActLayout::Nchw) {
    REFORGE_CHECK(t.rank() == 4, node.label(), ": expected a 2-D activation [N, C, H, W], got ", t.describe());
    return t.shape();
  }
  if (l == ActLayout::Nhwc) {
    REFORGE_CHECK(t.rank() == 4, node.label(), ": layout NHWC needs [N, H, W, C], got ", t.describe());
    return {t.dim(0), t.dim(3), t.dim(1), t.dim(2)};
  }
  REFORGE_CHECK(t.rank() == 5 && t.dim(4) == cpu::activation_block(), node.label(), ": layout NCHWc needs [N, C/",
                cpu::activation_block(), ", H, W, ", cpu::activation_block(), "], got ", t.describe());
  return {t.dim(0), t.dim(1) * t.dim(4), t.dim(2), t.dim(3)};
}

// Copies between NCHW and layout `l`, any element type (the fallback path).
Tensor from_nchw(const Tensor& t, ActLayout l) {
  if (l == ActLayout::Nchw) return t;
  const Shape& s = t.shape();
  const Shape out_shape = physical_shape(s, l);
  Tensor out = Tensor::empty(t.dtype(), out_shape);
  if (l == ActLayout::Nhwc) {  // out[n][h][w][c] = t[n][c][h][w]
    strided_copy(out.mutable_raw(), t.raw(), dtype_size(t.dtype()), out_shape,
                 {s[1] * s[2] * s[3], s[3], 1, s[2] * s[3]}, 0);
  } else {  // out[n][cb][h][w][i] = t[n][cb * b + i][h][w]
    const int64_t b = out_shape[4], plane = s[2] * s[3];
    strided_copy(out.mutable_raw(), t.raw(), dtype_size(t.dtype()), out_shape,
                 {s[1] * plane, b * plane, s[3], 1, plane}, 0);
  }
  return out;
}
Tensor to_nchw(const Tensor& t, ActLayout l, const ir::Node& node) {
  if (l == ActLayout::Nchw) return t;
  const Shape s = logical_shape(t, l, node);
  Tensor out = Tensor::empty(t.dtype(), s);
  if (l == ActLayout::Nhwc) {
    strided_copy(out.mutable_raw(), t.raw(), dtype_size(t.dtype()), s, {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]}, 0);
  } else {  // walk the output as [N, C/b, b, H, W]
    const int64_t b = t.dim(4), cb = t.dim(1), plane = s[2] * s[3];
    strided_copy(out.mutable_raw(), t.raw(), dtype_size(t.dtype()), {s[0], cb, b, s[2], s[3]},
                 {cb * plane * b, plane * b, 1, s[3] * b, b}, 0);
  }
  return out;
}

}  // namespace reforge::ops::nn
