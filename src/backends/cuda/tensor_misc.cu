// Tensor-producing ops on the GPU, with the CPU kernels' semantics (src/ops/tensor/shape_ops.cc,
// tensor_misc.cc): Expand (broadcast copy of a device tensor to a shape read on the host),
// ConstantOfShape (fill; shape on the host), OneHot (indices and values on the device, depth on
// the host) and Range (scalars on the host, values computed on
// the device: integers wrap as the CPU's exact arithmetic truncated to the type, floats in double).
#include <cmath>
#include <cstring>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "ops/broadcast.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::cuda {

namespace {

unsigned grid_for(int64_t n) {
  const unsigned b = blocks_for(n);
  return b > 65535u * 4 ? 65535u * 4 : b;
}

template <typename F>
void by_size(DType t, const std::string& where, F&& f) {
  switch (dtype_size(t)) {
    case 1:
      return f(TypeTag<uint8_t>{});
    case 2:
      return f(TypeTag<uint16_t>{});
    case 4:
      return f(TypeTag<uint32_t>{});
    case 8:
      return f(TypeTag<uint64_t>{});
    default:
      fail(where, ": element type ", dtype_name(t), " is not supported on the CUDA backend");
  }
}

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
  by_size(x.dtype(), where, [&](auto tag) {
    using U = typename decltype(tag)::type;
    broadcast_copy_kernel<U>
        <<<grid_for(n), 256, 0, stream()>>>(static_cast<U*>(y.mutable_raw()), static_cast<const U*>(x.raw()), s, n);
  });
  check_launch("expand");
}

template <typename U>
__global__ void fill_kernel(U* dst, U v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = v;
}

std::string check_constant_of_shape(const ir::Node& node) {
  const Tensor* v = node.attr_tensor("value");
  if (v && v->numel() != 1) return "attribute 'value' must hold exactly one element, it is " + v->describe();
  return "";
}

void constant_of_shape_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const std::string reason = check_constant_of_shape(ctx.node());
  if (!reason.empty()) fail(where, ": ", reason);
  const std::vector<int64_t> shape = ops::read_int_tensor(ctx.input(0), where, "input 'shape'");
  for (int64_t d : shape)
    if (d < 0) fail(where, ": shape ", shape_str(shape), " has a negative dimension");
  const Tensor* v = ctx.node().attr_tensor("value");
  const Tensor value = v ? *v : Tensor::scalar<float>(DType::Float32, 0.0f);
  REFORGE_CHECK(value.on_host(), where, ": attribute 'value' is not in host memory");
  Tensor& y = ctx.allocate_output_uninit(0, value.dtype(), shape);
  const int64_t n = y.numel();
  if (n == 0) return;
  by_size(value.dtype(), where, [&](auto tag) {
    using U = typename decltype(tag)::type;
    U bits;
    std::memcpy(&bits, value.raw(), sizeof(U));
    fill_kernel<U><<<grid_for(n), 256, 0, stream()>>>(static_cast<U*>(y.mutable_raw()), bits, n);
  });
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

const Tensor& scalar_input(ops::KernelContext& ctx, size_t i, const char* name) {
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1) fail(ctx.node().label(), ": input '", name, "' must be a scalar, got ", t.describe());
  return t;
}

// Output elements = max(ceil((limit - start) / delta), 0), counted on the host as on the CPU.
void range_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& start = scalar_input(ctx, 0, "start");
  const Tensor& limit = scalar_input(ctx, 1, "limit");
  const Tensor& delta = scalar_input(ctx, 2, "delta");
  const DType t = start.dtype();
  if (limit.dtype() != t || delta.dtype() != t)
    fail(where, ": start, limit and delta must have one element type, got ", start.describe(), ", ", limit.describe(),
         ", ", delta.describe());
  if (is_integer(t)) {
    const __int128 s = start.as_int64(), l = limit.as_int64(), d = delta.as_int64();
    if (d == 0) fail(where, ": delta is 0");
    const __int128 diff = l - s;
    __int128 n = 0;
    if ((diff > 0 && d > 0) || (diff < 0 && d < 0)) n = (diff + d + (d > 0 ? -1 : 1)) / d;
    if (n > (__int128{1} << 40)) fail(where, ": range of ", static_cast<long long>(n), " elements is too large");
    Tensor& y = ctx.allocate_output_uninit(0, t, {static_cast<int64_t>(n)});
    if (n == 0) return;
    dispatch_device(t, where.c_str(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
        range_int_kernel<T><<<grid_for(static_cast<int64_t>(n)), 256, 0, stream()>>>(
            y.mutable_data<T>(), static_cast<uint64_t>(start.as_int64()), static_cast<uint64_t>(delta.as_int64()),
            static_cast<int64_t>(n));
      else
        fail(where, ": element type ", dtype_name(t), " is not an integer type");
    });
    check_launch("range");
    return;
  }
  const double s = start.as_double(), l = limit.as_double(), d = delta.as_double();
  if (d == 0) fail(where, ": delta is 0");
  const double count = std::ceil((l - s) / d);
  if (std::isnan(count)) fail(where, ": range from ", s, " to ", l, " by ", d, " is not finite");
  if (count > static_cast<double>(int64_t{1} << 40)) fail(where, ": range of ", count, " elements is too large");
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  Tensor& y = ctx.allocate_output_uninit(0, t, {n});
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
  const Tensor& depth_t = scalar_input(ctx, 1, "depth");
  const Tensor& values = ctx.input(2);
  if (values.numel() != 2) fail(where, ": values must hold [off_value, on_value], got ", values.describe());
  const double depth_d = depth_t.as_double();
  if (!(depth_d >= 0) || depth_d > static_cast<double>(int64_t{1} << 40))
    fail(where, ": depth ", depth_d, " is not a valid size");
  const int64_t depth = static_cast<int64_t>(depth_d);
  const int64_t r = ind.rank();
  int64_t axis = ctx.attr_int("axis", -1);
  if (axis < -r - 1 || axis > r) fail(where, ": axis ", axis, " is out of range for indices of rank ", r);
  if (axis < 0) axis += r + 1;
  Shape out = ind.shape();
  out.insert(out.begin() + axis, depth);
  int64_t inner = 1;
  for (int64_t d = axis; d < r; ++d) inner *= ind.dim(d);
  if (ind.dtype() == DType::Bool) fail(where, ": indices of type bool are not supported");
  Tensor& y = ctx.allocate_output_uninit(0, values.dtype(), out);
  const int64_t n = y.numel();
  if (n == 0) return;
  dispatch_device(ind.dtype(), "OneHot indices", [&](auto itag) {
    using I = typename decltype(itag)::type;
    by_size(values.dtype(), where, [&](auto vtag) {
      using U = typename decltype(vtag)::type;
      if constexpr (!std::is_same_v<I, bool>)
        one_hot_kernel_dev<I, U><<<grid_for(n), 256, 0, stream()>>>(
            static_cast<U*>(y.mutable_raw()), ind.data<I>(), static_cast<const U*>(values.raw()), depth, inner, n);
    });
  });
  check_launch("one_hot");
}

}  // namespace

void register_tensor_misc_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "Expand", expand_kernel);
  add_kernel(r, "", "ConstantOfShape", constant_of_shape_kernel, check_constant_of_shape);
  add_kernel(r, "", "Range", range_kernel);
  add_kernel(r, "", "OneHot", one_hot_kernel);
}

}  // namespace reforge::cuda
