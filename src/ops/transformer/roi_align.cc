// RoiAlign (opset 10; coordinate_transformation_mode from 16): average or max of bilinear
// samples over each output bin of each region of interest, as the ONNX reference (Detectron's
// RoIAlign) computes it.
//
// X [N, C, H, W], rois [R, 4] as (x1, y1, x2, y2) in input coordinates times spatial_scale,
// batch_indices [R]. A region starts at x1 * spatial_scale - 0.5 with half_pixel (the default
// from opset 16; 'output_half_pixel', the only mode before, subtracts nothing and forces sizes
// below 1 to 1) and is split into output_height x output_width bins, each sampled on a grid of
// sampling_ratio (or ceil(bin size)) points per axis at the grid cells' centers. A sample beyond
// [-1, H] x [-1, W] counts as 0; others are clamped into the image and interpolated from their 4
// neighbours. 'avg' averages a bin's samples; 'max' takes the largest of the weighted neighbour
// values over the samples.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

std::string check_roi_align(const ir::Node& node) {
  const std::string m = node.attr_string("mode", "avg");
  if (m != "avg" && m != "max") return "mode must be 'avg' or 'max', got '" + m + "'";
  const std::string c = node.attr_string("coordinate_transformation_mode", "half_pixel");
  if (c != "half_pixel" && c != "output_half_pixel")
    return "coordinate_transformation_mode must be 'half_pixel' or 'output_half_pixel', got '" + c + "'";
  return "";
}

struct Sample {
  int64_t pos[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

void roi_align_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const std::string why = check_roi_align(ctx.node());
  REFORGE_CHECK(why.empty(), label, ": ", why);
  const Tensor& x = ctx.input(0);
  const Tensor& rois = ctx.input(1);
  const Tensor& bi = ctx.input(2);
  REFORGE_CHECK(x.rank() == 4, label, ": X must be [N, C, H, W], got ", x.describe());
  REFORGE_CHECK(rois.rank() == 2 && rois.dim(1) == 4 && rois.dtype() == x.dtype(), label,
                ": rois must be [num_rois, 4] of X's type, got ", rois.describe());
  REFORGE_CHECK(is_integer(bi.dtype()) && bi.rank() == 1 && bi.dim(0) == rois.dim(0), label,
                ": batch_indices must be an integer [", rois.dim(0), "] tensor, got ", bi.describe());
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), R = rois.dim(0);
  const int64_t oh = ctx.attr_int("output_height", 1), ow = ctx.attr_int("output_width", 1);
  REFORGE_CHECK(oh >= 1 && ow >= 1, label, ": output_height and output_width must be positive");
  const int64_t ratio = ctx.attr_int("sampling_ratio", 0);
  const double scale = ctx.attr_float("spatial_scale", 1.0f);
  const bool avg = ctx.attr_string("mode", "avg") == "avg";
  const bool half_pixel = ctx.attr_string("coordinate_transformation_mode",
                                          ctx.opset() >= 16 ? "half_pixel" : "output_half_pixel") == "half_pixel";
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), Shape{R, C, oh, ow});
  if (y.numel() == 0) return;
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xs = x.data<T>();
        const T* rs = rois.data<T>();
        T* ys = y.mutable_data<T>();
        std::vector<Sample> samples;
        for (int64_t r = 0; r < R; ++r) {
          const int64_t b = bi.as_int64(r);
          REFORGE_CHECK(b >= 0 && b < N, label, ": batch_indices[", r, "] = ", b, " is outside [0, ", N, ")");
          const double off = half_pixel ? 0.5 : 0.0;
          const double sw = static_cast<double>(to_compute(rs[r * 4 + 0])) * scale - off;
          const double sh = static_cast<double>(to_compute(rs[r * 4 + 1])) * scale - off;
          const double ew = static_cast<double>(to_compute(rs[r * 4 + 2])) * scale - off;
          const double eh = static_cast<double>(to_compute(rs[r * 4 + 3])) * scale - off;
          double rw = ew - sw, rh = eh - sh;
          if (!half_pixel) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
          const double bh = rh / static_cast<double>(oh), bw = rw / static_cast<double>(ow);
          const int64_t gh = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rh / static_cast<double>(oh)));
          const int64_t gw = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rw / static_cast<double>(ow)));
          const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
          samples.assign(static_cast<size_t>(std::max<int64_t>(oh * ow * gh * gw, 0)), Sample{});
          size_t si = 0;
          for (int64_t ph = 0; ph < oh; ++ph)
            for (int64_t pw = 0; pw < ow; ++pw)
              for (int64_t iy = 0; iy < gh; ++iy) {
                const double yy =
                    sh + static_cast<double>(ph) * bh + (static_cast<double>(iy) + 0.5) * bh / static_cast<double>(gh);
                for (int64_t ix = 0; ix < gw; ++ix, ++si) {
                  double xx = sw + static_cast<double>(pw) * bw +
                              (static_cast<double>(ix) + 0.5) * bw / static_cast<double>(gw);
                  double yv = yy;
                  if (yv < -1.0 || yv > static_cast<double>(H) || xx < -1.0 || xx > static_cast<double>(W)) continue;
                  yv = std::max(yv, 0.0);
                  xx = std::max(xx, 0.0);
                  int64_t yl = static_cast<int64_t>(yv), xl = static_cast<int64_t>(xx), yh2, xh2;
                  if (yl >= H - 1) {
                    yh2 = yl = H - 1;
                    yv = static_cast<double>(yl);
                  } else {
                    yh2 = yl + 1;
                  }
                  if (xl >= W - 1) {
                    xh2 = xl = W - 1;
                    xx = static_cast<double>(xl);
                  } else {
                    xh2 = xl + 1;
                  }
                  const double ly = yv - static_cast<double>(yl), lx = xx - static_cast<double>(xl);
                  const double hy = 1.0 - ly, hx = 1.0 - lx;
                  Sample& s = samples[si];
                  s.pos[0] = yl * W + xl, s.pos[1] = yl * W + xh2, s.pos[2] = yh2 * W + xl, s.pos[3] = yh2 * W + xh2;
                  s.w[0] = hy * hx, s.w[1] = hy * lx, s.w[2] = ly * hx, s.w[3] = ly * lx;
                }
              }
          for (int64_t c = 0; c < C; ++c) {
            const T* img = xs + (b * C + c) * H * W;
            size_t k = 0;
            for (int64_t p = 0; p < oh * ow; ++p) {
              double acc = 0.0;
              bool first = true;
              for (int64_t g = 0; g < gh * gw; ++g, ++k) {
                const Sample& s = samples[k];
                double v[4];
                for (int q = 0; q < 4; ++q) v[q] = s.w[q] * static_cast<double>(to_compute(img[s.pos[q]]));
                if (avg) {
                  acc += v[0] + v[1] + v[2] + v[3];
                } else {
                  const double m = std::max(std::max(v[0], v[1]), std::max(v[2], v[3]));
                  acc = first ? m : std::max(acc, m);
                  first = false;
                }
              }
              if (avg) acc /= count;
              ys[(r * C + c) * oh * ow + p] = from_compute<T>(static_cast<compute_t<T>>(acc));
            }
          }
        }
      },
      label.c_str());
}

}  // namespace

void register_roi_align(OpRegistry& r) { r.add({"", "RoiAlign", 10, INT_MAX, roi_align_kernel, check_roi_align}); }

}  // namespace reforge::ops
