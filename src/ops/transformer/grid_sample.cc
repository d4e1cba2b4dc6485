// GridSample and AffineGrid: sampling an image at normalized coordinates, and making those
// coordinates from affine matrices. Both follow the ONNX reference (itself PyTorch's
// grid_sampler and affine_grid) to the rounding rule.
//
// GridSample reads X [N, C, D1, ..., Dr] and grid [N, O1, ..., Or, r], whose last axis holds the
// coordinates innermost-spatial-axis first (x for W, then y for H, then z for D), each in
// [-1, 1]. A coordinate maps to a pixel position by ((v + 1) / 2) * (D - 1) with align_corners,
// else ((v + 1) * D - 1) / 2; mode 'nearest' then rounds it half to even (numpy.rint, in 2-D and
// 3-D alike). A position outside [lo, hi] (0 and D - 1 with align_corners, -0.5 and D - 0.5
// without) is clamped into [0, D - 1] for padding_mode 'border' and reflected off lo/hi for
// 'reflection'; 'zeros' leaves it. 'nearest' reads the one pixel there, 'linear' weighs the 2
// neighbours per axis and 'cubic' the 4 (Keys kernel, alpha -0.75), every tap read through the
// padding rule again (0 outside for zeros, clamped for border, reflected for reflection).
// Weights multiply per axis; sums run in double and each output is rounded once.
//
// AffineGrid turns theta [N, 2, 3] (2-D) or [N, 3, 4] (3-D) and size [N, C, (D,) H, W] into the
// grid [N, (D,) H, W, 2 or 3]: theta times the homogeneous base coordinates (x, y, (z), 1), each
// axis of length L spanning -1 + 2i / (L - 1) with align_corners (-1 alone when L is 1), else the
// pixel centers -1 + (2i + 1) / L.
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

enum class Mode { Nearest, Linear, Cubic };
enum class Padding { Zeros, Border, Reflection };

std::string check_grid_sample(const ir::Node& node) {
  const std::string m = node.attr_string("mode", node.opset >= 20 ? "linear" : "bilinear");
  if (m != "nearest" && m != "linear" && m != "bilinear" && m != "cubic" && m != "bicubic")
    return "mode '" + m + "' is not supported";
  const std::string p = node.attr_string("padding_mode", "zeros");
  if (p != "zeros" && p != "border" && p != "reflection") return "padding_mode '" + p + "' is not supported";
  return "";
}

double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (x < lo) {
    const double dx = lo - x;
    const int64_t n = static_cast<int64_t>(dx / range);
    const double r = dx - static_cast<double>(n) * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const int64_t n = static_cast<int64_t>(dx / range);
    const double r = dx - static_cast<double>(n) * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

// The pixel index read for tap index i along an axis of length d, or -1 for "zero".
int64_t tap_index(int64_t i, int64_t d, Padding pad, double lo, double hi) {
  switch (pad) {
    case Padding::Zeros:
      return i >= 0 && i < d ? i : -1;
    case Padding::Border:
      return std::min(std::max<int64_t>(i, 0), d - 1);
    case Padding::Reflection:
      return static_cast<int64_t>(reflect(static_cast<double>(i), lo, hi));
  }
  return -1;
}

void cubic_coeffs(double t, double c[4]) {
  constexpr double a = -0.75;
  t = std::abs(t);
  c[0] = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a;
  c[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
  c[2] = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1;
  c[3] = ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a;
}

void grid_sample_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& grid = ctx.input(1);
  const int64_t r = x.rank() - 2;
  REFORGE_CHECK(r >= 1, label, ": X must be [N, C, spatial...], got ", x.describe());
  REFORGE_CHECK(grid.rank() == r + 2 && grid.dim(0) == x.dim(0) && grid.dim(grid.rank() - 1) == r, label, ": grid ",
                grid.describe(), " must be [N, out spatial..., ", r, "] for X ", x.describe());
  REFORGE_CHECK(is_float(grid.dtype()), label, ": grid must be a float tensor, got ", grid.describe());
  const std::string why = check_grid_sample(ctx.node());
  REFORGE_CHECK(why.empty(), label, ": ", why);
  const std::string ms = ctx.attr_string("mode", ctx.opset() >= 20 ? "linear" : "bilinear");
  const Mode mode = ms == "nearest" ? Mode::Nearest : (ms == "cubic" || ms == "bicubic") ? Mode::Cubic : Mode::Linear;
  const std::string ps = ctx.attr_string("padding_mode", "zeros");
  const Padding pad = ps == "border" ? Padding::Border : ps == "reflection" ? Padding::Reflection : Padding::Zeros;
  const bool align = ctx.attr_int("align_corners", 0) != 0;
  const int64_t n = x.dim(0), c = x.dim(1);
  std::vector<int64_t> dims(static_cast<size_t>(r));
  int64_t plane = 1;
  for (int64_t i = 0; i < r; ++i) plane *= (dims[static_cast<size_t>(i)] = x.dim(i + 2));
  Shape out_shape{n, c};
  int64_t points = 1;
  for (int64_t i = 1; i <= r; ++i) {
    out_shape.push_back(grid.dim(i));
    points *= grid.dim(i);
  }
  Tensor& y = ctx.allocate_output(0, x.dtype(), out_shape);
  if (y.numel() == 0) return;
  REFORGE_CHECK(plane > 0, label, ": cannot sample an empty image ", x.describe());
  std::vector<double> lo(static_cast<size_t>(r)), hi(static_cast<size_t>(r));
  for (size_t i = 0; i < dims.size(); ++i) {
    lo[i] = align ? 0.0 : -0.5;
    hi[i] = align ? static_cast<double>(dims[i]) - 1.0 : static_cast<double>(dims[i]) - 0.5;
  }
  const int taps = mode == Mode::Nearest ? 1 : mode == Mode::Linear ? 2 : 4;
  // Per point: for each axis the pixel indices (-1: zero) and weights of its taps.
  std::vector<int64_t> idx(static_cast<size_t>(r * taps));
  std::vector<double> wt(static_cast<size_t>(r * taps));
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xs = x.data<T>();
        T* ys = y.mutable_data<T>();
        dispatch_float(
            grid.dtype(),
            [&](auto gtag) {
              using G = typename decltype(gtag)::type;
              const G* gs = grid.data<G>();
              for (int64_t b = 0; b < n; ++b)
                for (int64_t p = 0; p < points; ++p) {
                  const G* g = gs + (b * points + p) * r;
                  for (int64_t i = 0; i < r; ++i) {
                    const size_t a = static_cast<size_t>(i);
                    const double d = static_cast<double>(dims[a]);
                    const double v = static_cast<double>(to_compute(g[r - 1 - i]));
                    // The reference denormalizes into float32.
                    double pos = static_cast<float>(align ? (v + 1) / 2.0 * (d - 1) : ((v + 1) * d - 1) / 2.0);
                    if (mode == Mode::Nearest) pos = std::nearbyint(pos);  // half to even, as numpy.rint
                    if (pos < lo[a] || pos > hi[a]) {
                      if (pad == Padding::Border)
                        pos = std::min(std::max(pos, 0.0), d - 1);
                      else if (pad == Padding::Reflection)
                        pos = reflect(pos, lo[a], hi[a]);
                    }
                    int64_t* ti = &idx[a * static_cast<size_t>(taps)];
                    double* tw = &wt[a * static_cast<size_t>(taps)];
                    if (mode == Mode::Nearest) {
                      ti[0] = tap_index(static_cast<int64_t>(pos), dims[a], pad, lo[a], hi[a]);
                      tw[0] = 1.0;
                      continue;
                    }
                    const double f = std::floor(pos);
                    const int64_t i0 = static_cast<int64_t>(f);
                    const double t = pos - f;
                    if (mode == Mode::Linear) {
                      ti[0] = tap_index(i0, dims[a], pad, lo[a], hi[a]);
                      ti[1] = tap_index(i0 + 1, dims[a], pad, lo[a], hi[a]);
                      tw[0] = 1.0 - t;
                      tw[1] = t;
                    } else {
                      cubic_coeffs(t, tw);
                      for (int k = 0; k < 4; ++k) ti[k] = tap_index(i0 - 1 + k, dims[a], pad, lo[a], hi[a]);
                    }
                  }
                  for (int64_t ch = 0; ch < c; ++ch) {
                    const T* img = xs + (b * c + ch) * plane;
                    double acc = 0.0;
                    std::vector<int> k(static_cast<size_t>(r), 0);
                    while (true) {
                      double w = 1.0;
                      int64_t flat = 0;
                      bool zero = false;
                      for (int64_t i = 0; i < r; ++i) {
                        const size_t a = static_cast<size_t>(i);
                        const int64_t at = idx[a * static_cast<size_t>(taps) + static_cast<size_t>(k[a])];
                        w *= wt[a * static_cast<size_t>(taps) + static_cast<size_t>(k[a])];
                        zero = zero || at < 0;
                        flat = flat * dims[a] + (at < 0 ? 0 : at);
                      }
                      if (!zero) acc += w * static_cast<double>(to_compute(img[flat]));
                      int64_t i = r - 1;
                      while (i >= 0 && ++k[static_cast<size_t>(i)] == taps) k[static_cast<size_t>(i--)] = 0;
                      if (i < 0) break;
                    }
                    ys[(b * c + ch) * points + p] = from_compute<T>(static_cast<compute_t<T>>(acc));
                  }
                }
            },
            label.c_str());
      },
      label.c_str());
}

void affine_grid_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& theta = ctx.input(0);
  const Tensor& size_t_ = ctx.input(1);
  REFORGE_CHECK(
      size_t_.dtype() == DType::Int64 && size_t_.rank() == 1 && (size_t_.numel() == 4 || size_t_.numel() == 5), label,
      ": size must be an int64 tensor [N, C, H, W] or [N, C, D, H, W], got ", size_t_.describe());
  const int64_t r = size_t_.numel() - 2;  // 2 or 3 spatial axes
  std::vector<int64_t> sz(static_cast<size_t>(size_t_.numel()));
  for (int64_t i = 0; i < size_t_.numel(); ++i) sz[static_cast<size_t>(i)] = size_t_.as_int64(i);
  const int64_t n = sz[0];
  REFORGE_CHECK(theta.rank() == 3 && theta.dim(0) == n && theta.dim(1) == r && theta.dim(2) == r + 1, label,
                ": theta must be [N, ", r, ", ", r + 1, "] for size of ", r, " spatial axes, got ", theta.describe());
  Shape out_shape{n};
  int64_t points = 1;
  for (int64_t i = 0; i < r; ++i) {
    const int64_t l = sz[static_cast<size_t>(i + 2)];
    REFORGE_CHECK(l > 0, label, ": spatial size ", l, " must be positive");
    out_shape.push_back(l);
    points *= l;
  }
  out_shape.push_back(r);
  const bool align = ctx.attr_int("align_corners", 0) != 0;
  auto base = [align](int64_t i, int64_t l) {
    if (align) return l == 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(l - 1);
    return -1.0 + (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(l);
  };
  Tensor& y = ctx.allocate_output_uninit(0, theta.dtype(), out_shape);
  if (y.numel() == 0) return;
  dispatch_float(
      theta.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* th = theta.data<T>();
        T* ys = y.mutable_data<T>();
        std::vector<double> hom(static_cast<size_t>(r + 1));
        for (int64_t b = 0; b < n; ++b)
          for (int64_t p = 0; p < points; ++p) {
            // Homogeneous coordinates (x, y, (z), 1): x runs along the last spatial axis.
            for (int64_t i = r - 1, rest = p; i >= 0; --i) {
              const int64_t l = sz[static_cast<size_t>(i + 2)];
              hom[static_cast<size_t>(r - 1 - i)] = base(rest % l, l);
              rest /= l;
            }
            hom[static_cast<size_t>(r)] = 1.0;
            for (int64_t o = 0; o < r; ++o) {
              double acc = 0.0;
              for (int64_t k = 0; k <= r; ++k)
                acc += static_cast<double>(to_compute(th[(b * r + o) * (r + 1) + k])) * hom[static_cast<size_t>(k)];
              ys[(b * points + p) * r + o] = from_compute<T>(static_cast<compute_t<T>>(acc));
            }
          }
      },
      label.c_str());
}

}  // namespace

void register_grid_sample(OpRegistry& r) {
  r.add({"", "GridSample", 16, INT_MAX, grid_sample_kernel, check_grid_sample});
  r.add({"", "AffineGrid", 20, INT_MAX, affine_grid_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kShape}});
}

}  // namespace reforge::ops
