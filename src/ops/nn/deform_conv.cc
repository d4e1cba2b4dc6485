// DeformConv (opset 19): 2-D convolution whose kernel taps are displaced per output position.
//
// X [N, C, H, W], W [M, C / group, kH, kW], offset [N, offset_group * kH * kW * 2, oH, oW] (for
// each offset group and tap: the displacement along H, then along W), optional B [M] and mask
// [N, offset_group * kH * kW, oH, oW] (default 1). Output position (i, j) reads tap (kh, kw) of
// input channel c at (i * stride_h - pad_top + kh * dilation_h + offset_h, j * stride_w -
// pad_left + kw * dilation_w + offset_w), bilinearly interpolated from the 4 neighbours with
// positions outside the image counting as 0, times the mask; the output size is the offset's
// spatial size. Input channels split into `group` convolution groups and `offset_group`
// displacement groups. Sums run in double and each output is rounded once.
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "ops/nn/nn_common.h"

namespace reforge::ops::nn {
namespace {

void deform_conv_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& off = ctx.input(2);
  const Tensor* bias = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  const Tensor* mask = ctx.has_input(4) ? &ctx.input(4) : nullptr;
  REFORGE_CHECK(x.rank() == 4 && w.rank() == 4 && off.rank() == 4, label,
                ": only 2-D DeformConv is supported (X, W and offset of rank 4), got X ", x.describe());
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), Wd = x.dim(3), M = w.dim(0), kh = w.dim(2), kw = w.dim(3);
  const int64_t group = ctx.attr_int("group", 1), og = ctx.attr_int("offset_group", 1);
  REFORGE_CHECK(group >= 1 && og >= 1 && C == w.dim(1) * group && M % group == 0 && C % og == 0, label,
                ": channels do not match: X ", x.describe(), ", W ", w.describe(), ", group ", group, ", offset_group ",
                og);
  const std::vector<int64_t> ks = ctx.attr_ints("kernel_shape", {kh, kw});
  REFORGE_CHECK(ks.size() == 2 && ks[0] == kh && ks[1] == kw, label, ": kernel_shape does not match W ", w.describe());
  const std::vector<int64_t> st = ctx.attr_ints("strides", {1, 1}), dl = ctx.attr_ints("dilations", {1, 1});
  const std::vector<int64_t> pads = ctx.attr_ints("pads", {0, 0, 0, 0});
  REFORGE_CHECK(st.size() == 2 && dl.size() == 2 && pads.size() == 4, label,
                ": strides and dilations need 2 values, pads 4");
  const int64_t oh = off.dim(2), ow = off.dim(3);
  REFORGE_CHECK(off.dim(0) == N && off.dim(1) == og * kh * kw * 2, label, ": offset must be [", N, ", ",
                og * kh * kw * 2, ", oH, oW], got ", off.describe());
  const int64_t eh = (kh - 1) * dl[0] + 1, ew = (kw - 1) * dl[1] + 1;
  REFORGE_CHECK(oh == (H - eh + pads[0] + pads[2]) / st[0] + 1 && ow == (Wd - ew + pads[1] + pads[3]) / st[1] + 1,
                label, ": offset's spatial size [", oh, ", ", ow, "] does not match the convolution's output");
  if (mask)
    REFORGE_CHECK(mask->shape() == (Shape{N, og * kh * kw, oh, ow}), label, ": mask must be [", N, ", ", og * kh * kw,
                  ", ", oh, ", ", ow, "], got ", mask->describe());
  if (bias) REFORGE_CHECK(bias->shape() == (Shape{M}), label, ": B must be [", M, "], got ", bias->describe());
  for (const Tensor* t : {&w, &off, bias, mask})
    if (t)
      REFORGE_CHECK(t->dtype() == x.dtype(), label, ": ", t->describe(), " must have X's type ", dtype_name(x.dtype()));
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), Shape{N, M, oh, ow});
  if (y.numel() == 0) return;
  const int64_t cpg = C / group, mpg = M / group, cpog = C / og;
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        auto v = [](const T* p, int64_t i) { return static_cast<double>(to_compute(p[i])); };
        const T* xs = x.data<T>();
        const T* ws = w.data<T>();
        const T* os = off.data<T>();
        auto pixel = [&](const T* img, int64_t r, int64_t c) {
          return r >= 0 && r < H && c >= 0 && c < Wd ? v(img, r * Wd + c) : 0.0;
        };
        for (int64_t b = 0; b < N; ++b)
          for (int64_t m = 0; m < M; ++m)
            for (int64_t i = 0; i < oh; ++i)
              for (int64_t j = 0; j < ow; ++j) {
                double acc = bias ? v(bias->data<T>(), m) : 0.0;
                const int64_t g = m / mpg;
                for (int64_t ci = 0; ci < cpg; ++ci) {
                  const int64_t c = g * cpg + ci, o = c / cpog;
                  const T* img = xs + (b * C + c) * H * Wd;
                  for (int64_t a = 0; a < kh; ++a)
                    for (int64_t e = 0; e < kw; ++e) {
                      const int64_t tap = (o * kh + a) * kw + e;
                      const double dh = v(os, ((b * og * kh * kw * 2 + tap * 2) * oh + i) * ow + j);
                      const double dw = v(os, ((b * og * kh * kw * 2 + tap * 2 + 1) * oh + i) * ow + j);
                      const double py = static_cast<double>(i * st[0] - pads[0] + a * dl[0]) + dh;
                      const double px = static_cast<double>(j * st[1] - pads[1] + e * dl[1]) + dw;
                      const double fy = std::floor(py), fx = std::floor(px);
                      const int64_t y0 = static_cast<int64_t>(fy), x0 = static_cast<int64_t>(fx);
                      const double ly = py - fy, lx = px - fx;
                      const double sample = (1 - ly) * ((1 - lx) * pixel(img, y0, x0) + lx * pixel(img, y0, x0 + 1)) +
                                            ly * ((1 - lx) * pixel(img, y0 + 1, x0) + lx * pixel(img, y0 + 1, x0 + 1));
                      const double mk = mask ? v(mask->data<T>(), ((b * og * kh * kw + tap) * oh + i) * ow + j) : 1.0;
                      acc += v(ws, ((m * cpg + ci) * kh + a) * kw + e) * sample * mk;
                    }
                }
                y.mutable_data<T>()[((b * M + m) * oh + i) * ow + j] = from_compute<T>(static_cast<compute_t<T>>(acc));
              }
      },
      label.c_str());
}

}  // namespace

void register_deform_conv_ops(OpRegistry& r) {
  r.add({"",
         "DeformConv",
         19,
         INT_MAX,
         deform_conv_kernel,
         nullptr,
         nullptr,
         {InputRole::kData, InputRole::kWeight, InputRole::kData, InputRole::kWeight, InputRole::kData}});
}

}  // namespace reforge::ops::nn
