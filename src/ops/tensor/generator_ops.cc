// Ops that make values from a size or a shape: EyeLike and the window functions (HannWindow,
// HammingWindow, BlackmanWindow), and ReverseSequence.
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

}  // namespace

void register_generator_ops(OpRegistry& r) {
  r.add({"", "EyeLike", 9, INT_MAX, eye_like_kernel, nullptr});
  r.add({"", "HannWindow", 17, INT_MAX, window_kernel<Window::Hann>, nullptr, nullptr, {InputRole::kShape}});
  r.add({"", "HammingWindow", 17, INT_MAX, window_kernel<Window::Hamming>, nullptr, nullptr, {InputRole::kShape}});
  r.add({"", "BlackmanWindow", 17, INT_MAX, window_kernel<Window::Blackman>, nullptr, nullptr, {InputRole::kShape}});
  r.add({"", "ReverseSequence", 10, INT_MAX, reverse_sequence_kernel, nullptr});
}

}  // namespace reforge::ops
