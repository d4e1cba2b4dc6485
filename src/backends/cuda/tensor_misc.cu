// Tensor-producing ops on the GPU, with the CPU kernels' semantics (src/ops/tensor/shape_ops.cc,
// tensor_misc.cc): Expand (broadcast copy of a device tensor to a shape read on the host),
// ConstantOfShape (fill; shape on the host), OneHot (indices and values on the device, depth on
// the host) and Range (scalars on the host, values computed on
// the device: integers wrap as the CPU's exact arithmetic truncated to the type, floats in double).
#include <cmath>
#include <cstring>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"
#include "ops/broadcast.h"
#include "ops/tensor/tensor_common.h"
#include "ops/tensor/tensor_misc_setup.h"

namespace reforge::cuda {

namespace {

template <typename U>
__global__ void broadcast_copy_kernel(U* dst, const U* src, Strides<1> s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[1];
    s.offsets(i, off);
    dst[i] = src[off[0]];
  }
}

// Expand broadcasts both ways: a 1 in `shape` keeps the input's dim.
void expand_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> target = ops::read_int_tensor(ctx.input(1), where, "input 'shape'");
  for (int64_t v : target)
    if (v < 0) fail(where, ": shape ", shape_str(target), " has a negative dimension");
  Shape out = ops::broadcast_shapes({x.shape(), target}, where);
  if (out == x.shape()) {
    ctx.set_output(0, x);
    return;
  }
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), out);
  const int64_t n = y.numel();
  if (n == 0) return;
  const Shape* in[1] = {&x.shape()};
  const Strides<1> s = make_strides<1>(out, in, where);
  ops::dispatch_bytes(
      x.dtype(),
      [&](auto tag) {
        using U = typename decltype(tag)::type;
        broadcast_copy_kernel<U>
            <<<grid_for(n), 256, 0, stream()>>>(static_cast<U*>(y.mutable_raw()), static_cast<const U*>(x.raw()), s, n);
      },
      where, kOnCuda);
  check_launch("expand");
}

template <typename U>
__global__ void fill_kernel(U* dst, U v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = v;
}

void constant_of_shape_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const ops::ConstantOfShapeSetup s = ops::constant_of_shape_setup(ctx);
  const Tensor& value = s.value;
  REFORGE_CHECK(value.on_host(), where, ": attribute 'value' is not in host memory");
  Tensor& y = ctx.allocate_output_uninit(0, value.dtype(), s.shape);
  const int64_t n = y.numel();
  if (n == 0) return;
  ops::dispatch_bytes(
      value.dtype(),
      [&](auto tag) {
        using U = typename decltype(tag)::type;
        U bits;
        std::memcpy(&bits, value.raw(), sizeof(U));
        fill_kernel<U><<<grid_for(n), 256, 0, stream()>>>(static_cast<U*>(y.mutable_raw()), bits, n);
      },
      where, kOnCuda);
  check_launch("constant_of_shape");
}

// Integer Range: out[i] = start + i * delta in 64-bit wrapping arithmetic, truncated to T (the
// low bits of the CPU's exact 128-bit value).
template <typename T>
__global__ void range_int_kernel(T* dst, uint64_t start, uint64_t delta, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = static_cast<T>(start + static_cast<uint64_t>(i) * delta);
}

template <typename T>
__global__ void range_float_kernel(T* dst, double start, double delta, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = store_c<T>(start + static_cast<double>(i) * delta);
}

// Output elements counted on the host as on the CPU (ops::range_setup).
void range_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& start = ctx.input(0);
  const Tensor& delta = ctx.input(2);
  const ops::RangeSetup r = ops::range_setup(ctx);
  const DType t = r.dtype;
  const int64_t n = r.n;
  Tensor& y = ctx.allocate_output_uninit(0, t, {n});
  if (is_integer(t)) {
    if (n == 0) return;
    dispatch_device(t, where.c_str(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
        range_int_kernel<T><<<grid_for(n), 256, 0, stream()>>>(
            y.mutable_data<T>(), static_cast<uint64_t>(start.as_int64()), static_cast<uint64_t>(delta.as_int64()), n);
      else
        fail(where, ": element type ", dtype_name(t), " is not an integer type");
    });
    check_launch("range");
    return;
  }
  const double s = start.as_double(), d = delta.as_double();
  dispatch_device(
      t, "Range",
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (n > 0) range_float_kernel<T><<<grid_for(n), 256, 0, stream()>>>(y.mutable_data<T>(), s, d, n);
      },
      /*floats_only=*/true);
  check_launch("range");
}

// OneHot: y[o, k, i] = values[1] where index (o, i) resolves to k, else values[0]. Indices of any
// numeric type are read as double: those outside [-depth, depth) (and NaN) set no position,
// negative ones count from the end, fractions truncate toward zero, as on the CPU.
template <typename I, typename U>
__global__ void one_hot_kernel_dev(U* dst, const I* ind, const U* values, int64_t depth, int64_t inner, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e % inner;
    const int64_t ok = e / inner;
    const int64_t k = ok % depth, o = ok / depth;
    const double v = static_cast<double>(load_c(ind, o * inner + i));
    int64_t want =
        (v >= -static_cast<double>(depth) && v < static_cast<double>(depth)) ? static_cast<int64_t>(v) : -depth - 1;
    if (want < 0) want += depth;
    dst[e] = want == k ? values[1] : values[0];
  }
}

void one_hot_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& ind = ctx.input(0);
  const Tensor& values = ctx.input(2);
  const ops::OneHotSetup s = ops::one_hot_setup(ctx);
  const int64_t depth = s.depth, inner = s.inner;
  const Shape& out = s.out;
  if (ind.dtype() == DType::Bool) fail(where, ": indices of type bool are not supported");
  Tensor& y = ctx.allocate_output_uninit(0, values.dtype(), out);
  const int64_t n = y.numel();
  if (n == 0) return;
  dispatch_device(ind.dtype(), "OneHot indices", [&](auto itag) {
    using I = typename decltype(itag)::type;
    ops::dispatch_bytes(
        values.dtype(),
        [&](auto vtag) {
          using U = typename decltype(vtag)::type;
          if constexpr (!std::is_same_v<I, bool>)
            one_hot_kernel_dev<I, U><<<grid_for(n), 256, 0, stream()>>>(
                static_cast<U*>(y.mutable_raw()), ind.data<I>(), static_cast<const U*>(values.raw()), depth, inner, n);
        },
        where, kOnCuda);
  });
  check_launch("one_hot");
}

}  // namespace

void register_tensor_misc_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "Expand", expand_kernel);
  add_kernel(r, "", "ConstantOfShape", constant_of_shape_kernel, ops::constant_of_shape_check);
  add_kernel(r, "", "Range", range_kernel);
  add_kernel(r, "", "OneHot", one_hot_kernel);
}

}  // namespace reforge::cuda
