// DFT and STFT. DFT: the discrete Fourier transform along one axis of a real ([..., 1]) or complex ([..., 2],
// real and imaginary parts) signal, with the output always complex except for the one-sided
// inverse.
//
// The axis is an attribute (default 1) before opset 20 and an optional scalar input (default -2)
// from then on; it counts the trailing real/imaginary axis. n = dft_length (input 1) when given,
// else the signal's length along the axis (2 * (m - 1) for a one-sided inverse of m bins); the
// signal is zero-padded or truncated to n. Forward: X[k] = sum_t x[t] e^(-2 pi i k t / n), the
// first n / 2 + 1 bins when onesided. Inverse: x[t] = 1/n sum_k X[k] e^(2 pi i k t / n); with
// onesided the input holds bins 0..n/2 of a Hermitian spectrum (the rest are their conjugates)
// and the output is the real signal [..., n, ..., 1], as numpy.fft.irfft. Sums run in double
// (the direct O(n^2) transform) and each output is rounded once.
//
// STFT: signal [batch, length, 1 or 2] cut into frames of frame_length (the frame_length input,
// else the window's length) every frame_step samples, each multiplied by the window (default all
// ones) and transformed: output [batch, frames, bins, 2] with frames = (length - frame_length) /
// frame_step + 1 and bins = frame_length / 2 + 1 when onesided (default), else frame_length.
#include <cmath>
#include <numbers>
#include <vector>

#include "core/dispatch.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

// out[k] = sum_t in[t] e^(sign 2 pi i k t / n) for k < out_len (k * t reduced mod n first so the
// angle stays exact for long signals).
void dft_direct(const std::vector<double>& re, const std::vector<double>& im, int64_t n, int64_t out_len, double sign,
                std::vector<double>& out_re, std::vector<double>& out_im) {
  for (int64_t k = 0; k < out_len; ++k) {
    double sr = 0, si = 0;
    for (int64_t t = 0; t < n; ++t) {
      const double a = sign * 2.0 * std::numbers::pi * static_cast<double>((k * t) % n) / static_cast<double>(n);
      const double c = std::cos(a), s = std::sin(a);
      sr += re[static_cast<size_t>(t)] * c - im[static_cast<size_t>(t)] * s;
      si += re[static_cast<size_t>(t)] * s + im[static_cast<size_t>(t)] * c;
    }
    out_re[static_cast<size_t>(k)] = sr;
    out_im[static_cast<size_t>(k)] = si;
  }
}

void dft_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  REFORGE_CHECK(rank >= 2 && (x.dim(rank - 1) == 1 || x.dim(rank - 1) == 2), label,
                ": input must be [..., signal, 1] or [..., signal, 2], got ", x.describe());
  int64_t axis = ctx.opset() < 20 ? ctx.attr_int("axis", 1) : -2;
  if (ctx.opset() >= 20 && ctx.has_input(2)) {
    const Tensor& a = ctx.input(2);
    REFORGE_CHECK(is_integer(a.dtype()) && a.numel() == 1, label, ": axis must be an integer scalar, got ",
                  a.describe());
    axis = a.as_int64(0);
  }
  if (axis < 0) axis += rank;
  REFORGE_CHECK(axis >= 0 && axis < rank - 1, label, ": axis ", axis, " is out of range for input ", x.describe(),
                " (the last axis holds the real and imaginary parts)");
  const bool inverse = ctx.attr_int("inverse", 0) != 0;
  const bool onesided = ctx.attr_int("onesided", 0) != 0;
  const bool complex_in = x.dim(rank - 1) == 2;
  const int64_t m = x.dim(axis);
  int64_t n = inverse && onesided ? 2 * (m - 1) : m;
  if (ctx.has_input(1)) {
    const Tensor& l = ctx.input(1);
    REFORGE_CHECK(is_integer(l.dtype()) && l.numel() == 1, label, ": dft_length must be an integer scalar, got ",
                  l.describe());
    n = l.as_int64(0);
  }
  REFORGE_CHECK(n >= 1, label, ": dft_length must be positive, got ", n);
  const int64_t out_len = inverse ? n : (onesided ? n / 2 + 1 : n);
  const int64_t out_parts = inverse && onesided ? 1 : 2;
  Shape out_shape = x.shape();
  out_shape[static_cast<size_t>(axis)] = out_len;
  out_shape[static_cast<size_t>(rank - 1)] = out_parts;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < rank - 1; ++d) inner *= x.dim(d);
  const int64_t in_parts = complex_in ? 2 : 1;
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), out_shape);
  if (y.numel() == 0) return;
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xs = x.data<T>();
        T* ys = y.mutable_data<T>();
        std::vector<double> re(static_cast<size_t>(n)), im(static_cast<size_t>(n));
        std::vector<double> fr(static_cast<size_t>(out_len)), fi(static_cast<size_t>(out_len));
        const double sign = inverse ? 1.0 : -1.0;
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t j = 0; j < inner; ++j) {
            auto in_at = [&](int64_t t, int64_t part) {
              return static_cast<double>(to_compute(xs[((o * m + t) * inner + j) * in_parts + part]));
            };
            // The length-n sequence to transform.
            for (int64_t t = 0; t < n; ++t) {
              double r = 0, i = 0;
              if (inverse && onesided) {
                const int64_t k = t <= n / 2 ? t : n - t;
                if (k < m) {
                  r = in_at(k, 0);
                  i = complex_in ? in_at(k, 1) : 0.0;
                  if (t > n / 2) i = -i;
                }
              } else if (t < m) {
                r = in_at(t, 0);
                i = complex_in ? in_at(t, 1) : 0.0;
              }
              re[static_cast<size_t>(t)] = r;
              im[static_cast<size_t>(t)] = i;
            }
            dft_direct(re, im, n, out_len, sign, fr, fi);
            for (int64_t k = 0; k < out_len; ++k) {
              double sr = fr[static_cast<size_t>(k)], si = fi[static_cast<size_t>(k)];
              if (inverse) sr /= static_cast<double>(n), si /= static_cast<double>(n);
              T* out = ys + ((o * out_len + k) * inner + j) * out_parts;
              out[0] = from_compute<T>(static_cast<compute_t<T>>(sr));
              if (out_parts == 2) out[1] = from_compute<T>(static_cast<compute_t<T>>(si));
            }
          }
      },
      label.c_str());
}

void stft_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(x.rank() == 3 && (x.dim(2) == 1 || x.dim(2) == 2), label,
                ": signal must be [batch, length, 1 or 2], got ", x.describe());
  const Tensor& st = ctx.input(1);
  REFORGE_CHECK(is_integer(st.dtype()) && st.numel() == 1, label, ": frame_step must be an integer scalar, got ",
                st.describe());
  const int64_t step = st.as_int64(0);
  const Tensor* window = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  int64_t flen = -1;
  if (ctx.has_input(3)) {
    const Tensor& fl = ctx.input(3);
    REFORGE_CHECK(is_integer(fl.dtype()) && fl.numel() == 1, label, ": frame_length must be an integer scalar, got ",
                  fl.describe());
    flen = fl.as_int64(0);
  }
  if (window) {
    REFORGE_CHECK(window->rank() == 1 && window->dtype() == x.dtype() && (flen < 0 || window->dim(0) == flen), label,
                  ": window must be a 1-D tensor of the signal's type and frame_length, got ", window->describe());
    flen = window->dim(0);
  }
  REFORGE_CHECK(flen >= 1, label, ": frame_length (or a window) is required and must be positive");
  const int64_t batch = x.dim(0), length = x.dim(1), parts = x.dim(2);
  REFORGE_CHECK(step >= 1 && length >= flen, label, ": frame_step ", step, " and frame_length ", flen,
                " do not fit a signal of length ", length);
  const bool onesided = ctx.attr_int("onesided", 1) != 0;
  const int64_t frames = (length - flen) / step + 1, bins = onesided ? flen / 2 + 1 : flen;
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), Shape{batch, frames, bins, 2});
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xs = x.data<T>();
        T* ys = y.mutable_data<T>();
        std::vector<double> re(static_cast<size_t>(flen)), im(static_cast<size_t>(flen));
        std::vector<double> fr(static_cast<size_t>(bins)), fi(static_cast<size_t>(bins));
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t f = 0; f < frames; ++f) {
            for (int64_t t = 0; t < flen; ++t) {
              const double w = window ? static_cast<double>(to_compute(window->data<T>()[t])) : 1.0;
              const T* p = xs + (b * length + f * step + t) * parts;
              re[static_cast<size_t>(t)] = w * static_cast<double>(to_compute(p[0]));
              im[static_cast<size_t>(t)] = parts == 2 ? w * static_cast<double>(to_compute(p[1])) : 0.0;
            }
            dft_direct(re, im, flen, bins, -1.0, fr, fi);
            T* out = ys + (b * frames + f) * bins * 2;
            for (int64_t k = 0; k < bins; ++k) {
              out[2 * k] = from_compute<T>(static_cast<compute_t<T>>(fr[static_cast<size_t>(k)]));
              out[2 * k + 1] = from_compute<T>(static_cast<compute_t<T>>(fi[static_cast<size_t>(k)]));
            }
          }
      },
      label.c_str());
}

}  // namespace

void register_dft_kernels(OpRegistry& r) {
  r.add({"",
         "STFT",
         17,
         INT_MAX,
         stft_kernel,
         nullptr,
         nullptr,
         {InputRole::kData, InputRole::kShape, InputRole::kData, InputRole::kShape}});
  r.add(
      {"", "DFT", 17, INT_MAX, dft_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kShape, InputRole::kShape}});
}

}  // namespace reforge::ops
