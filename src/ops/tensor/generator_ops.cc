// Ops that make values from a size or a shape: EyeLike, the window functions (HannWindow,
// HammingWindow, BlackmanWindow) and MelWeightMatrix; and ReverseSequence.
//
// EyeLike: a 2-D tensor shaped like its input, 1 where column - row == k, else 0, of type `dtype`
// (default: the input's).
//
// The windows take a scalar size and give `size` values of type output_datatype (default
// float32), with N = size for a periodic window (default) and size - 1 for a symmetric one:
//   Hann     0.5 - 0.5 cos(2 pi n / N)
//   Hamming  25/46 - 21/46 cos(2 pi n / N)
//   Blackman 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)
// computed in double and rounded once.
//
// MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz)
// gives [dft_length / 2 + 1, num_mel_bins] triangular filters, as the ONNX reference builds
// them: num_mel_bins + 2 points evenly spaced in mel (2595 log10(1 + f / 700)) from the lower
// edge in steps of (high - low) / (num_mel_bins + 2), each mapped back to hertz and to the bin
// floor((dft_length + 1) * f / sample_rate); filter i rises from point i to point i + 1 (1 at
// the center when they coincide) and falls to point i + 2.
//
// ReverseSequence reverses, for each index b along batch_axis, the first sequence_lens[b]
// elements along time_axis (batch_axis and time_axis are 0 and 1 in either order); the rest is
// copied.
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "core/dispatch.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::ops {
namespace {

DType attr_dtype(const ir::Node& node, const char* name, DType def) {
  if (!node.has_attr(name)) return def;
  return dtype_from_onnx(static_cast<int32_t>(node.attr_int(name, 0)));
}

void eye_like_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(x.rank() == 2, label, ": input must be 2-D, got ", x.describe());
  const DType dt = attr_dtype(ctx.node(), "dtype", x.dtype());
  REFORGE_CHECK(is_supported(dt) && dt != DType::String, label, ": dtype ", dtype_name(dt), " is not supported");
  const int64_t k = ctx.attr_int("k", 0);
  Tensor& y = ctx.allocate_output(0, dt, x.shape());
  dispatch_all(
      dt,
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* ys = y.mutable_data<T>();
        for (int64_t i = 0; i < x.dim(0); ++i) {
          const int64_t j = i + k;
          if (j >= 0 && j < x.dim(1)) ys[i * x.dim(1) + j] = static_cast<T>(1);
        }
      },
      label.c_str());
}

enum class Window { Hann, Hamming, Blackman };

template <Window kWindow>
void window_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& s = ctx.input(0);
  REFORGE_CHECK(is_integer(s.dtype()) && s.numel() == 1 && s.rank() <= 1, label,
                ": size must be an integer scalar, got ", s.describe());
  const int64_t size = s.as_int64(0);
  REFORGE_CHECK(size >= 0, label, ": size ", size, " is negative");
  const DType dt = attr_dtype(ctx.node(), "output_datatype", DType::Float32);
  REFORGE_CHECK(is_supported(dt) && dt != DType::String && dt != DType::Bool, label, ": output_datatype ",
                dtype_name(dt), " is not supported");
  const bool periodic = ctx.attr_int("periodic", 1) != 0;
  const double n_den = static_cast<double>(periodic ? size : size - 1);
  Tensor& y = ctx.allocate_output_uninit(0, dt, Shape{size});
  dispatch_numeric(
      dt,
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* ys = y.mutable_data<T>();
        for (int64_t i = 0; i < size; ++i) {
          const double a = 2.0 * std::numbers::pi * static_cast<double>(i) / n_den;
          double v;
          if constexpr (kWindow == Window::Hann)
            v = 0.5 - 0.5 * std::cos(a);
          else if constexpr (kWindow == Window::Hamming)
            v = 25.0 / 46.0 - 21.0 / 46.0 * std::cos(a);
          else
            v = 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2.0 * a);
          ys[i] = from_compute<T>(static_cast<compute_t<T>>(v));
        }
      },
      label.c_str());
}

void reverse_sequence_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& lens = ctx.input(1);
  const int64_t batch_axis = ctx.attr_int("batch_axis", 1), time_axis = ctx.attr_int("time_axis", 0);
  REFORGE_CHECK(x.rank() >= 2, label, ": input must have rank >= 2, got ", x.describe());
  REFORGE_CHECK((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0), label,
                ": batch_axis and time_axis must be 0 and 1 in either order, got ", batch_axis, " and ", time_axis);
  const int64_t batch = x.dim(batch_axis), steps = x.dim(time_axis);
  const std::vector<int64_t> ls = read_int_tensor(lens, label, "sequence_lens");
  REFORGE_CHECK(lens.rank() == 1 && static_cast<int64_t>(ls.size()) == batch, label, ": sequence_lens must be [", batch,
                "], got ", lens.describe());
  for (size_t b = 0; b < ls.size(); ++b)
    REFORGE_CHECK(ls[b] >= 0 && ls[b] <= steps, label, ": sequence_lens[", b, "] = ", ls[b], " is outside [0, ", steps,
                  "]");
  REFORGE_CHECK(dtype_size(x.dtype()) > 0, label, ": element type ", dtype_name(x.dtype()), " is not supported");
  int64_t inner = 1;
  for (int64_t i = 2; i < x.rank(); ++i) inner *= x.dim(i);
  const size_t row = static_cast<size_t>(inner) * dtype_size(x.dtype());
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  const auto* src = x.data<uint8_t>();
  auto* dst = y.mutable_data<uint8_t>();
  const int64_t d1 = x.dim(1);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t from = t < ls[static_cast<size_t>(b)] ? ls[static_cast<size_t>(b)] - 1 - t : t;
      const int64_t out_row = batch_axis == 0 ? b * d1 + t : t * d1 + b;
      const int64_t in_row = batch_axis == 0 ? b * d1 + from : from * d1 + b;
      std::memcpy(dst + static_cast<size_t>(out_row) * row, src + static_cast<size_t>(in_row) * row, row);
    }
}

void mel_weight_matrix_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  auto scalar = [&](size_t i, const char* what) {
    const Tensor& t = ctx.input(i);
    REFORGE_CHECK(t.numel() == 1, label, ": ", what, " must be a scalar, got ", t.describe());
    return t;
  };
  const int64_t mel_bins = scalar(0, "num_mel_bins").as_int64(0);
  const int64_t dft_length = scalar(1, "dft_length").as_int64(0);
  const int64_t sample_rate = scalar(2, "sample_rate").as_int64(0);
  const double lower = scalar(3, "lower_edge_hertz").as_double(0);
  const double upper = scalar(4, "upper_edge_hertz").as_double(0);
  REFORGE_CHECK(mel_bins >= 1 && dft_length >= 1 && sample_rate >= 1, label,
                ": num_mel_bins, dft_length and sample_rate must be positive");
  const DType dt = attr_dtype(ctx.node(), "output_datatype", DType::Float32);
  REFORGE_CHECK(is_float(dt), label, ": output_datatype ", dtype_name(dt), " is not supported");
  const int64_t spectrogram_bins = dft_length / 2 + 1;
  const double low_mel = 2595.0 * std::log10(1.0 + lower / 700.0);
  const double high_mel = 2595.0 * std::log10(1.0 + upper / 700.0);
  const double step = (high_mel - low_mel) / static_cast<double>(mel_bins + 2);
  std::vector<int64_t> point(static_cast<size_t>(mel_bins + 2));
  for (int64_t i = 0; i < mel_bins + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * step + low_mel) / 2595.0) - 1.0);
    point[static_cast<size_t>(i)] =
        static_cast<int64_t>(std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(sample_rate)));
  }
  std::vector<double> w(static_cast<size_t>(spectrogram_bins * mel_bins), 0.0);
  auto at = [&](int64_t j, int64_t i) -> double& {
    REFORGE_CHECK(j >= 0 && j < spectrogram_bins, label, ": filter ", i, " reaches bin ", j, " outside [0, ",
                  spectrogram_bins, ")");
    return w[static_cast<size_t>(j * mel_bins + i)];
  };
  for (int64_t i = 0; i < mel_bins; ++i) {
    const int64_t lo = point[static_cast<size_t>(i)], mid = point[static_cast<size_t>(i + 1)],
                  hi = point[static_cast<size_t>(i + 2)];
    if (mid == lo)
      at(mid, i) = 1.0;
    else
      for (int64_t j = lo; j <= mid; ++j) at(j, i) = static_cast<double>(j - lo) / static_cast<double>(mid - lo);
    if (hi > mid)
      for (int64_t j = mid; j < hi; ++j) at(j, i) = static_cast<double>(hi - j) / static_cast<double>(hi - mid);
  }
  Tensor& y = ctx.allocate_output_uninit(0, dt, Shape{spectrogram_bins, mel_bins});
  dispatch_float(
      dt,
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* ys = y.mutable_data<T>();
        for (size_t i = 0; i < w.size(); ++i) ys[i] = from_compute<T>(static_cast<compute_t<T>>(w[i]));
      },
      label.c_str());
}

}  // namespace

void register_generator_ops(OpRegistry& r) {
  r.add({"",
         "MelWeightMatrix",
         17,
         INT_MAX,
         mel_weight_matrix_kernel,
         nullptr,
         nullptr,
         {InputRole::kShape, InputRole::kShape, InputRole::kShape, InputRole::kShape, InputRole::kShape}});
  r.add({"", "EyeLike", 9, INT_MAX, eye_like_kernel, nullptr});
  r.add({"", "HannWindow", 17, INT_MAX, window_kernel<Window::Hann>, nullptr, nullptr, {InputRole::kShape}});
  r.add({"", "HammingWindow", 17, INT_MAX, window_kernel<Window::Hamming>, nullptr, nullptr, {InputRole::kShape}});
  r.add({"", "BlackmanWindow", 17, INT_MAX, window_kernel<Window::Blackman>, nullptr, nullptr, {InputRole::kShape}});
  r.add({"", "ReverseSequence", 10, INT_MAX, reverse_sequence_kernel, nullptr});
}

}  // namespace reforge::ops
