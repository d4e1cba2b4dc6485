// Resize (opsets 10 to 19): nearest, (bi/tri)linear and cubic interpolation of N-D tensors.
//
// Interpolation is separable, so the kernel resizes one axis at a time in float64, exactly as
// the ONNX reference (onnx/reference/ops/op_resize.py) does: for every output index along the
// axis it maps the index back to a source coordinate (coordinate_transformation_mode), derives
// a fixed-size set of taps (2 for nearest/linear, 4 for cubic, wider with antialias when
// downscaling) with edge-clamped source indices and weights, and sums. The final values are
// cast to the input type with saturation (integers round half to even first). The host-side
// part (attributes, output shape, per-axis taps) is resize_setup.h's, shared with the CUDA kernel.
//
// Opset differences: opset 10 has inputs (X, scales) and the asymmetric transform; opsets 11+
// take (X, roi, scales, sizes) with coordinate_transformation_mode, cubic_coeff_a,
// exclude_outside, extrapolation_value and nearest_mode; 18 adds antialias, axes and
// keep_aspect_ratio_policy; 19 adds half_pixel_symmetric.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/registry.h"
#include "ops/transformer/resize_setup.h"

namespace reforge::ops::resize {

std::string parse_attrs(const ir::Node& node, ResizeAttrs& a) {
  const std::string mode = node.attr_string("mode", "nearest");
  if (mode == "nearest")
    a.mode = Mode::Nearest;
  else if (mode == "linear")
    a.mode = Mode::Linear;
  else if (mode == "cubic")
    a.mode = Mode::Cubic;
  else
    return "mode '" + mode + "' is not one of nearest, linear, cubic";
  if (node.opset < 11) {
    a.coord = Coord::Asymmetric;
    return "";
  }
  const std::string ctm = node.attr_string("coordinate_transformation_mode", "half_pixel");
  if (ctm == "half_pixel")
    a.coord = Coord::HalfPixel;
  else if (ctm == "half_pixel_symmetric")
    a.coord = Coord::HalfPixelSymmetric;
  else if (ctm == "pytorch_half_pixel")
    a.coord = Coord::PytorchHalfPixel;
  else if (ctm == "align_corners")
    a.coord = Coord::AlignCorners;
  else if (ctm == "asymmetric")
    a.coord = Coord::Asymmetric;
  else if (ctm == "tf_crop_and_resize")
    a.coord = Coord::TfCropAndResize;
  else if (ctm == "tf_half_pixel_for_nn")
    a.coord = Coord::TfHalfPixelForNN;
  else
    return "coordinate_transformation_mode '" + ctm + "' is not supported";
  const std::string nm = node.attr_string("nearest_mode", "round_prefer_floor");
  if (nm == "round_prefer_floor")
    a.nearest = NearestMode::RoundPreferFloor;
  else if (nm == "round_prefer_ceil")
    a.nearest = NearestMode::RoundPreferCeil;
  else if (nm == "floor")
    a.nearest = NearestMode::Floor;
  else if (nm == "ceil")
    a.nearest = NearestMode::Ceil;
  else
    return "nearest_mode '" + nm + "' is not one of round_prefer_floor, round_prefer_ceil, floor, ceil";
  a.cubic_a = node.attr_float("cubic_coeff_a", -0.75f);
  a.exclude_outside = node.attr_int("exclude_outside", 0) != 0;
  a.extrapolation = node.attr_float("extrapolation_value", 0.0f);
  a.antialias = node.attr_int("antialias", 0) != 0;
  const std::string policy = node.attr_string("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
    return "keep_aspect_ratio_policy '" + policy + "' is not one of stretch, not_larger, not_smaller";
  return "";
}

namespace {

// Tap weights for one output position (ratio in (0, 1], 1 meaning "exactly on a source pixel").
void coeffs_for(const ResizeAttrs& a, double ratio, double scale, std::vector<double>& c) {
  c.clear();
  switch (a.mode) {
    case Mode::Nearest: {
      if (ratio == 1.0) {
        c = {0, 1};
        break;
      }
      bool right = false;
      switch (a.nearest) {
        case NearestMode::RoundPreferFloor:
          right = ratio > 0.5;
          break;
        case NearestMode::RoundPreferCeil:
          right = ratio >= 0.5;
          break;
        case NearestMode::Floor:
          right = false;
          break;
        case NearestMode::Ceil:
          right = true;
          break;
      }
      c = {right ? 0.0 : 1.0, right ? 1.0 : 0.0};
      break;
    }
    case Mode::Linear: {
      if (!a.antialias) {
        c = {1 - ratio, ratio};
        break;
      }
      const double s = std::min(scale, 1.0);
      const int64_t start = static_cast<int64_t>(std::floor(-1 / s) + 1);
      const int64_t footprint = 2 - 2 * start;
      double sum = 0;
      for (int64_t i = 0; i < footprint; ++i) {
        const double arg = (static_cast<double>(start + i) - ratio) * s;
        const double v = std::clamp(1 - std::abs(arg), 0.0, 1.0);
        c.push_back(v);
        sum += v;
      }
      for (double& v : c) v /= sum;
      break;
    }
    case Mode::Cubic: {
      // The reference computes cubic weights in float32 (its cubic_coeff_a is a float32
      // scalar and numpy keeps that precision), so do the same: it decides integer outputs
      // that land near .5.
      const float A = static_cast<float>(a.cubic_a);
      if (!a.antialias) {
        const float r = static_cast<float>(ratio), r1 = static_cast<float>(ratio + 1);
        const float q = static_cast<float>(1 - ratio), q1 = static_cast<float>((1 - ratio) + 1);
        c = {((A * r1 - 5 * A) * r1 + 8 * A) * r1 - 4 * A, ((A + 2) * r - (A + 3)) * r * r + 1,
             ((A + 2) * q - (A + 3)) * q * q + 1, ((A * q1 - 5 * A) * q1 + 8 * A) * q1 - 4 * A};
        break;
      }
      const double s = std::min(scale, 1.0);
      const int64_t i_start = static_cast<int64_t>(std::floor(-2 / s) + 1);
      const int64_t i_end = 2 - i_start;
      std::vector<float> cf;
      bool has_zero = false;  // a tap beyond the support makes the reference's weights float64
      for (int64_t i = i_start; i < i_end; ++i) {
        const double x = std::abs(s * (static_cast<double>(i) - ratio));
        const float x1 = static_cast<float>(x), x2 = static_cast<float>(x * x), x3 = static_cast<float>(x * (x * x));
        float v = 0;
        if (x <= 1)
          v = (A + 2) * x3 - (A + 3) * x2 + 1;
        else if (x < 2)
          v = A * x3 - 5 * A * x2 + 8 * A * x1 - 4 * A;
        else
          has_zero = true;
        cf.push_back(v);
      }
      if (has_zero) {
        double sum = 0;
        for (float v : cf) sum += v;
        for (float v : cf) c.push_back(static_cast<double>(v) / sum);
      } else {
        float sum = 0;
        for (float v : cf) sum += v;
        for (float v : cf) c.push_back(static_cast<double>(v / sum));
      }
      break;
    }
  }
}

// double -> float rounding to odd, so that the float -> 16-bit rounding that follows gives the
// correctly rounded double -> 16-bit value (two plain roundings can differ by one ulp).
inline float float_round_odd(double d) {
  float f = static_cast<float>(d);
  if (!std::isfinite(d) || static_cast<double>(f) == d) return f;
  if (std::abs(static_cast<double>(f)) > std::abs(d)) f = std::nextafter(f, 0.0f);
  return bits_to_float(float_to_bits(f) | 1u);
}

// Rounds an intermediate of the roi arithmetic to roi's element type.
double roi_round(DType t, double v) {
  switch (t) {
    case DType::Float32:
      return static_cast<float>(v);
    case DType::Float16:
      return float16(float_round_odd(v));
    case DType::BFloat16:
      return bfloat16(float_round_odd(v));
    default:
      return v;
  }
}

// Source coordinate of output index y along an axis.
double source_coord(const ResizeAttrs& a, double y, double scale, int64_t in, int64_t out, double roi_start,
                    double roi_end) {
  const double out_w = scale * static_cast<double>(in);
  const double in_d = static_cast<double>(in);
  switch (a.coord) {
    case Coord::AlignCorners:
      return out_w == 1 ? 0.0 : y * (in_d - 1) / (out_w - 1);
    case Coord::Asymmetric:
      return y / scale;
    case Coord::TfCropAndResize: {
      const DType rt = a.roi_type;
      const double extent = roi_round(rt, roi_end - roi_start);
      const double x =
          out_w == 1 ? roi_round(rt, roi_round(rt, extent * (in_d - 1)) / 2) : y * extent * (in_d - 1) / (out_w - 1);
      return x + roi_round(rt, roi_start * (in_d - 1));
    }
    case Coord::PytorchHalfPixel:
      return out_w == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
    case Coord::HalfPixel:
      return (y + 0.5) / scale - 0.5;
    case Coord::HalfPixelSymmetric: {
      const double adjustment = static_cast<double>(out) / out_w;
      const double center = in_d / 2;
      const double offset = center * (1 - adjustment);
      return offset + (y + 0.5) / scale - 0.5;
    }
    case Coord::TfHalfPixelForNN:
      return (y + 0.5) / scale;
  }
  return 0;
}

// The taps of axis `axis` (size `in`) resized to `out` entries.
AxisTaps axis_taps(int64_t axis, int64_t in, int64_t out, double scale, double roi_start, double roi_end,
                   const ResizeAttrs& a, const std::string& where) {
  AxisTaps t;
  t.axis = axis, t.in = in, t.out = out;
  REFORGE_CHECK(in > 0, where, ": cannot resize an empty axis ", axis, " to ", out, " entries");
  std::vector<double> c;
  coeffs_for(a, 1.0, scale, c);
  const int64_t n = static_cast<int64_t>(c.size());
  REFORGE_CHECK(n > 0 && n <= 8 * in + 16, where, ": resize filter of ", n, " taps is too wide for axis ", axis,
                " of size ", in);
  t.n = n;
  t.idx.resize(static_cast<size_t>(out * n));
  t.w.resize(static_cast<size_t>(out * n));
  t.extrapolated.assign(static_cast<size_t>(out), 0);
  const int64_t pad = (n + 1) / 2;
  const double limit = 4.0 * static_cast<double>(in) + 16;  // keeps float->int conversions defined
  for (int64_t y = 0; y < out; ++y) {
    double x = source_coord(a, static_cast<double>(y), scale, in, out, roi_start, roi_end);
    if (a.coord == Coord::TfCropAndResize && (x < 0 || x > static_cast<double>(in - 1) || std::isnan(x)))
      t.extrapolated[y] = 1;
    if (std::isnan(x)) x = 0;
    x = std::clamp(x, -limit, limit);
    const double x_int = std::floor(x);
    const double ratio = x == x_int ? 1.0 : x - x_int;
    coeffs_for(a, ratio, scale, c);
    const double xp = x + static_cast<double>(pad);
    const double p = std::floor(xp);
    const double frac = xp - p;
    int64_t off;
    if (n % 2 == 0)
      off = frac == 0 ? -(n / 2) : -(n / 2) + 1;
    else
      off = frac <= 0.5 ? -((n - 1) / 2) : -((n - 1) / 2) + 1;
    const int64_t start = static_cast<int64_t>(p) + off - pad;
    if (a.exclude_outside) {
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t s = start + k;
        if (s < 0 || s >= in) c[k] = 0;
        sum += c[k];
      }
      if (sum == 0) sum = 1;
      for (double& v : c) v /= sum;
    }
    for (int64_t k = 0; k < n; ++k) {
      t.idx[y * n + k] = std::clamp<int64_t>(start + k, 0, in - 1);
      t.w[y * n + k] = c[k];
    }
  }
  return t;
}

}  // namespace

ResizePlan resize_plan(const KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string where = node.label();
  ResizePlan plan;
  ResizeAttrs& a = plan.attrs;
  std::string err = parse_attrs(node, a);
  REFORGE_CHECK(err.empty(), where, ": ", err);
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();

  // Axes the scales/sizes/roi refer to (opset 18+), normalized and unique.
  std::vector<int64_t> axes;
  const bool has_axes = node.opset >= 18 && node.has_attr("axes");
  if (has_axes) {
    axes = ctx.attr_ints("axes");
    std::vector<char> seen(static_cast<size_t>(rank), 0);
    for (int64_t& ax : axes) {
      REFORGE_CHECK(ax >= -rank && ax < rank, where, ": axis ", ax, " is out of range for rank ", rank);
      if (ax < 0) ax += rank;
      REFORGE_CHECK(!seen[ax], where, ": axis ", ax, " appears twice in axes");
      seen[ax] = 1;
    }
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  const size_t naxes = axes.size();

  const Tensor* roi = nullptr;
  const Tensor* scales = nullptr;
  const Tensor* sizes = nullptr;
  if (node.opset < 11) {
    scales = &ctx.input(1);
  } else {
    if (ctx.has_input(1) && ctx.input(1).numel() > 0) roi = &ctx.input(1);
    if (ctx.has_input(2) && ctx.input(2).numel() > 0) scales = &ctx.input(2);
    if (ctx.has_input(3) && ctx.input(3).numel() > 0) sizes = &ctx.input(3);
  }
  REFORGE_CHECK(scales || sizes, where, ": one of scales and sizes must be given (non-empty)");
  REFORGE_CHECK(!(scales && sizes), where, ": only one of scales and sizes may be given");

  // Per-axis output size and scale (rank-long; untouched axes keep size and scale 1).
  Shape& out_shape = plan.out_shape;
  out_shape = x.shape();
  std::vector<double> scale(static_cast<size_t>(rank), 1.0);
  if (sizes) {
    REFORGE_CHECK(is_integer(sizes->dtype()) && sizes->rank() == 1 && sizes->numel() == static_cast<int64_t>(naxes),
                  where, ": sizes must be an integer vector of length ", naxes, ", got ", sizes->describe());
    std::vector<int64_t> sz = sizes->to_int64_vector();
    for (size_t i = 0; i < naxes; ++i) {
      REFORGE_CHECK(sz[i] >= 0, where, ": sizes[", i, "] = ", sz[i], " is negative");
      REFORGE_CHECK(x.dim(axes[i]) > 0 || sz[i] == 0, where, ": cannot resize empty axis ", axes[i], " to ", sz[i]);
      out_shape[axes[i]] = sz[i];
      scale[axes[i]] = x.dim(axes[i]) > 0 ? static_cast<double>(sz[i]) / static_cast<double>(x.dim(axes[i])) : 1.0;
    }
    const std::string policy = node.opset >= 18 ? node.attr_string("keep_aspect_ratio_policy", "stretch") : "stretch";
    if (policy != "stretch" && naxes > 0) {
      double s = scale[axes[0]];
      for (int64_t ax : axes) s = policy == "not_larger" ? std::min(s, scale[ax]) : std::max(s, scale[ax]);
      for (int64_t ax : axes) {
        scale[ax] = s;
        out_shape[ax] = static_cast<int64_t>(s * static_cast<double>(x.dim(ax)) + 0.5);
      }
    }
  } else {
    REFORGE_CHECK(is_float(scales->dtype()) && scales->rank() == 1 && scales->numel() == static_cast<int64_t>(naxes),
                  where, ": scales must be a float vector of length ", naxes, ", got ", scales->describe());
    for (size_t i = 0; i < naxes; ++i) {
      const double s = scales->as_double(static_cast<int64_t>(i));
      REFORGE_CHECK(s > 0 && std::isfinite(s), where, ": scales[", i, "] = ", s, " must be positive and finite");
      const double o = s * static_cast<double>(x.dim(axes[i]));
      REFORGE_CHECK(o < 4.0e18, where, ": scales[", i, "] = ", s, " gives an output dimension that is too large");
      scale[axes[i]] = s;
      out_shape[axes[i]] = static_cast<int64_t>(o);
    }
  }
  (void)shape_numel(out_shape);  // throws on overflow

  std::vector<double> roi_start(static_cast<size_t>(rank), 0.0), roi_end(static_cast<size_t>(rank), 1.0);
  if (a.coord == Coord::TfCropAndResize) {
    REFORGE_CHECK(roi != nullptr, where, ": coordinate_transformation_mode tf_crop_and_resize needs the roi input");
    REFORGE_CHECK(roi->rank() == 1 && roi->numel() == static_cast<int64_t>(2 * naxes) && is_float(roi->dtype()), where,
                  ": roi must be a float vector of length ", 2 * naxes, ", got ", roi->describe());
    a.roi_type = roi->dtype();
    for (size_t i = 0; i < naxes; ++i) {
      roi_start[axes[i]] = roi->as_double(static_cast<int64_t>(i));
      roi_end[axes[i]] = roi->as_double(static_cast<int64_t>(i + naxes));
    }
  }

  if (shape_numel(out_shape) == 0) return plan;
  auto close = [](double v, double t) { return std::abs(v - t) <= 1e-9 * std::max(std::abs(v), std::abs(t)); };
  for (int64_t ax : axes) {
    const bool identity =
        close(scale[ax], 1.0) && out_shape[ax] == x.dim(ax) &&
        (a.coord != Coord::TfCropAndResize || (std::abs(roi_start[ax]) <= 0.0 && close(roi_end[ax], 1.0)));
    if (identity) continue;
    plan.steps.push_back(axis_taps(ax, x.dim(ax), out_shape[ax], scale[ax], roi_start[ax], roi_end[ax], a, where));
  }
  return plan;
}

}  // namespace reforge::ops::resize

namespace reforge::ops {
namespace {

using resize::AxisTaps;
using resize::float_round_odd;
using resize::Mode;
using resize::ResizeAttrs;

std::string resize_check(const ir::Node& node) {
  ResizeAttrs a;
  return resize::parse_attrs(node, a);
}

// Applies one axis's taps to `data` (shape `shape`, float64).
std::vector<double> resize_axis(const std::vector<double>& data, Shape& shape, const AxisTaps& t,
                                const ResizeAttrs& a) {
  const int64_t axis = t.axis, in = t.in, out = t.out, n = t.n;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
  for (size_t i = static_cast<size_t>(axis) + 1; i < shape.size(); ++i) inner *= shape[i];
  shape[axis] = out;
  std::vector<double> res(static_cast<size_t>(outer * out * inner));
  if (res.empty()) return res;
  const int64_t* idx = t.idx.data();
  const double* w = t.w.data();
  const char* extrapolated = t.extrapolated.data();
  const bool nearest = a.mode == Mode::Nearest;
  parallel_for(outer, outer * out * inner * n > (1 << 16) ? omp_get_max_threads() : 1, 1, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const double* src = data.data() + o * in * inner;
      double* dst = res.data() + o * out * inner;
      for (int64_t y = 0; y < out; ++y) {
        double* drow = dst + y * inner;
        if (extrapolated[y]) {
          std::fill(drow, drow + inner, a.extrapolation);
          continue;
        }
        const int64_t* iy = idx + y * n;
        const double* wy = w + y * n;
        if (nearest) {  // weights are one 1 and one 0: copy the chosen row (none: exclude_outside)
          const int64_t k = wy[0] == 1.0 ? 0 : wy[1] == 1.0 ? 1 : -1;
          if (k < 0)
            std::fill(drow, drow + inner, 0.0);
          else
            std::copy(src + iy[k] * inner, src + iy[k] * inner + inner, drow);
          continue;
        }
        for (int64_t i = 0; i < inner; ++i) drow[i] = 0;
        for (int64_t k = 0; k < n; ++k) {
          const double* srow = src + iy[k] * inner;
          const double wk = wy[k];
          for (int64_t i = 0; i < inner; ++i) drow[i] += wk * srow[i];
        }
      }
    }
  });
  return res;
}

// Saturating cast of float64 results to the output type (integers round half to even).
template <typename T>
T saturate(double v) {
  if constexpr (std::is_integral_v<T>) {
    if (std::isnan(v)) return T(0);
    v = std::nearbyint(v);
    const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    if (v <= lo) return std::numeric_limits<T>::lowest();
    if (v >= hi) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    double hi;
    if constexpr (std::is_same_v<T, float16>)
      hi = 65504.0;
    else if constexpr (std::is_same_v<T, bfloat16>)
      hi = 3.3895313892515355e38;
    else
      hi = static_cast<double>(std::numeric_limits<T>::max());
    if (!std::isnan(v)) v = std::clamp(v, -hi, hi);
    if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
      return T(float_round_odd(v));
    else
      return static_cast<T>(v);
  }
}

void resize_kernel(KernelContext& ctx) {
  const resize::ResizePlan plan = resize::resize_plan(ctx);
  const Tensor& x = ctx.input(0);
  Tensor& out = ctx.allocate_output(0, x.dtype(), plan.out_shape);
  if (out.numel() == 0) return;
  dispatch_numeric(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xd = x.data<T>();
        std::vector<double> data(static_cast<size_t>(x.numel()));
        for (int64_t i = 0; i < x.numel(); ++i) data[i] = static_cast<double>(to_compute(xd[i]));
        Shape shape = x.shape();
        for (const AxisTaps& t : plan.steps) data = resize_axis(data, shape, t, plan.attrs);
        T* od = out.mutable_data<T>();
        for (int64_t i = 0; i < out.numel(); ++i) od[i] = saturate<T>(data[i]);
      },
      "Resize");
}

}  // namespace

void register_resize(OpRegistry& r) {
  r.add({"",
         "Resize",
         10,
         INT_MAX,
         resize_kernel,
         resize_check,
         nullptr,
         {InputRole::kData, InputRole::kShape, InputRole::kShape, InputRole::kShape}});
}

}  // namespace reforge::ops
