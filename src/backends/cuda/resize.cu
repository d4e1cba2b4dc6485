// Resize on the GPU with the CPU kernel's semantics (src/ops/transformer/resize.cc): the host
// resolves the output shape and each resized axis's taps (ops/transformer/resize_setup.h; roi,
// scales and sizes arrive on the host), uploads the taps, and the device applies one axis at a
// time to float64 data in the CPU's order, with the CPU's arithmetic (separate multiply and add
// roundings, no fused multiply-add), so results match the CPU's bit for bit before the final
// saturating cast to the input type.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"
#include "core/dispatch.h"
#include "ops/transformer/resize_setup.h"

namespace reforge::cuda {

namespace {

template <typename T>
__global__ void to_double_dev(const T* x, double* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = static_cast<double>(load_c(x, i));
}

// One axis: src [outer, in, inner] -> dst [outer, out, inner] through the taps.
__global__ void resize_axis_dev(const double* src, double* dst, const int64_t* idx, const double* w,
                                const char* extrapolated, int64_t in, int64_t out, int64_t inner, int64_t n,
                                bool nearest, double extrapolation, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / inner, j = i - r * inner;
    const int64_t o = r / out, y = r - o * out;
    if (extrapolated[y]) {
      dst[i] = extrapolation;
      continue;
    }
    const int64_t* iy = idx + y * n;
    const double* wy = w + y * n;
    const double* s = src + o * in * inner + j;
    if (nearest) {  // weights are one 1 and one 0: the chosen row (none: exclude_outside)
      const int64_t k = wy[0] == 1.0 ? 0 : wy[1] == 1.0 ? 1 : -1;
      dst[i] = k < 0 ? 0.0 : s[iy[k] * inner];
      continue;
    }
    double acc = 0.0;
    for (int64_t k = 0; k < n; ++k) acc = __dadd_rn(acc, __dmul_rn(wy[k], s[iy[k] * inner]));
    dst[i] = acc;
  }
}

// double -> float rounding to odd (the CPU's float_round_odd): the float -> 16-bit rounding
// that follows then gives the correctly rounded double -> 16-bit value.
__device__ __forceinline__ float float_round_odd(double d) {
  float f = __double2float_rn(d);
  if (!isfinite(d) || static_cast<double>(f) == d) return f;
  if (fabs(static_cast<double>(f)) > fabs(d)) f = nextafterf(f, 0.0f);
  return __uint_as_float(__float_as_uint(f) | 1u);
}

// The CPU's saturating cast of a float64 result (integers round half to even).
template <typename T>
__device__ __forceinline__ T saturate(double v) {
  if constexpr (std::is_integral_v<T>) {
    if (isnan(v)) return T(0);
    v = rint(v);
    const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    if (v <= lo) return std::numeric_limits<T>::lowest();
    if (v >= hi) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    if (!isnan(v)) v = fmin(fmax(v, -65504.0), 65504.0);
    return __float2half_rn(float_round_odd(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (!isnan(v)) v = fmin(fmax(v, -3.3895313892515355e38), 3.3895313892515355e38);
    return __float2bfloat16_rn(float_round_odd(v));
  } else {
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    if (!isnan(v)) v = fmin(fmax(v, -hi), hi);
    return static_cast<T>(v);
  }
}

template <typename T>
__global__ void from_double_dev(const double* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = saturate<T>(x[i]);
}

void resize_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const ops::resize::ResizePlan plan = ops::resize::resize_plan(ctx);
  const Tensor& x = ctx.input(0);
  Tensor& out = ctx.allocate_output_uninit(0, x.dtype(), plan.out_shape);
  if (out.numel() == 0) return;
  dispatch_numeric(
      x.dtype(), [](auto) {}, "Resize");  // the CPU kernel's types (no bool), its error
  Tensor data = device_tensor(DType::Float64, x.shape());
  dispatch_device(x.dtype(), where.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    to_double_dev<T><<<grid_for(x.numel()), 256, 0, stream()>>>(x.data<T>(), data.mutable_data<double>(), x.numel());
    check_launch("resize to_double");
  });
  Shape shape = x.shape();
  for (const ops::resize::AxisTaps& t : plan.steps) {
    int64_t inner = 1;
    for (size_t i = static_cast<size_t>(t.axis) + 1; i < shape.size(); ++i) inner *= shape[i];
    shape[static_cast<size_t>(t.axis)] = t.out;
    Tensor next = device_tensor(DType::Float64, shape);
    const int64_t total = next.numel();
    if (total > 0) {
      const int64_t nt = t.out * t.n;
      const Tensor idx = to_device(Tensor::copy_of(DType::Int64, {nt}, t.idx.data()));
      const Tensor w = to_device(Tensor::copy_of(DType::Float64, {nt}, t.w.data()));
      const Tensor ex = to_device(Tensor::copy_of(DType::UInt8, {t.out}, t.extrapolated.data()));
      resize_axis_dev<<<grid_for(total), 256, 0, stream()>>>(
          data.data<double>(), next.mutable_data<double>(), idx.data<int64_t>(), w.data<double>(),
          reinterpret_cast<const char*>(ex.data<uint8_t>()), t.in, t.out, inner, t.n,
          plan.attrs.mode == ops::resize::Mode::Nearest, plan.attrs.extrapolation, total);
      check_launch("resize_axis");
    }
    data = std::move(next);
  }
  dispatch_device(x.dtype(), where.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      from_double_dev<T>
          <<<grid_for(out.numel()), 256, 0, stream()>>>(data.data<double>(), out.mutable_data<T>(), out.numel());
      check_launch("resize from_double");
    }
  });
}

}  // namespace

void register_resize_kernels(backends::KernelRegistry& r) { add_kernel(r, "", "Resize", resize_kernel); }

}  // namespace reforge::cuda
