// Cast and CastLike on the GPU between every pair of standard types (bool, the integers,
// float16, bfloat16, float32, float64) with cast_tensor's rules (core/tensor.cc): float ->
// integer truncates toward zero, NaN gives 0 and out-of-range values saturate; anything -> bool
// is x != 0 (NaN: true); bool bytes are read as != 0; integer narrowing wraps; float64 and the
// 64-bit integers reach float16/bfloat16 through float rounded to odd, so the result is one
// correct rounding of the value. A cast to the same type passes the input through.
#include <string>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"
#include "ops/elementwise/cast_setup.h"

namespace reforge::cuda {

namespace {

// double -> float rounded to odd (truncated, lowest mantissa bit set when inexact).
__device__ __forceinline__ float double_to_float_round_odd(double d) {
  float f = static_cast<float>(d);
  if (isnan(d) || isinf(d) || static_cast<double>(f) == d) return f;
  if (fabs(static_cast<double>(f)) > fabs(d)) f = nextafterf(f, 0.0f);
  return __uint_as_float(__float_as_uint(f) | 1u);
}

template <typename To, typename C>
__device__ __forceinline__ To float_to_int(C c) {
  if (c != c) return To(0);
  const double x = trunc(static_cast<double>(c));
  // Every bound is exact in double or is 2^63 / 2^64, and x is an integer: >= the rounded bound
  // is >= the bound itself.
  if (x <= static_cast<double>(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
  if (x >= static_cast<double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
  return static_cast<To>(x);
}

template <typename To, typename From>
__device__ __forceinline__ To convert_one(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    const auto c = load_c(&v, 0);
    return c != decltype(c)(0);
  } else if constexpr (std::is_same_v<To, __half> || std::is_same_v<To, __nv_bfloat16>) {
    if constexpr (std::is_same_v<From, double>)
      return store_c<To>(double_to_float_round_odd(v));
    else if constexpr (std::is_same_v<From, int64_t> || std::is_same_v<From, uint64_t>)
      return store_c<To>(double_to_float_round_odd(static_cast<double>(v)));
    else
      return store_c<To>(static_cast<float>(load_c(&v, 0)));
  } else if constexpr (std::is_integral_v<To>) {
    const auto c = load_c(&v, 0);
    if constexpr (std::is_floating_point_v<decltype(c)>)
      return float_to_int<To>(c);
    else
      return static_cast<To>(c);
  } else {
    return static_cast<To>(load_c(&v, 0));
  }
}

// Bool sources arrive as bytes (From = uint8_t, from_bool): normalized to 0/1 first.
template <typename From, typename To>
__global__ void cast_kernel(const From* in, To* out, int64_t n, bool from_bool) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    if constexpr (std::is_same_v<From, uint8_t>) {
      if (from_bool) {
        out[i] = convert_one<To>(static_cast<bool>(in[i] != 0));
        continue;
      }
    }
    out[i] = convert_one<To>(in[i]);
  }
}

void run_cast(ops::KernelContext& ctx, const Tensor& x, DType to) {
  const std::string who = ctx.node().label();
  if (x.dtype() == to) {
    ctx.set_output(0, x);
    return;
  }
  Tensor& y = ctx.allocate_output_uninit(0, to, x.shape());
  const int64_t n = x.numel();
  if (n == 0) return;
  const bool from_bool = x.dtype() == DType::Bool;
  const DType from = from_bool ? DType::UInt8 : x.dtype();
  dispatch_device(from, who.c_str(), [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    dispatch_device(to, who.c_str(), [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      if constexpr (!std::is_same_v<From, bool>) {
        cast_kernel<From, To><<<grid_for(n), 256, 0, stream()>>>(x.data<From>(), y.mutable_data<To>(), n, from_bool);
        check_launch(who.c_str());
      }
    });
  });
}

std::string cast_check(const ir::Node& node) {
  std::string why;
  ops::cast_target(node, is_supported, why);
  return why;
}

void cast(ops::KernelContext& ctx) {
  std::string why;
  const DType to = ops::cast_target(ctx.node(), is_supported, why);
  if (to == DType::Undefined) fail(ctx.node().label(), ": ", why);
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(is_supported(x.dtype()), ctx.node().label(), ": casting from ", dtype_name(x.dtype()),
                " is not supported");
  run_cast(ctx, x, to);
}

void cast_like(ops::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const DType to = ctx.input(1).dtype();
  REFORGE_CHECK(is_supported(x.dtype()) && is_supported(to), ctx.node().label(), ": casting ", x.describe(), " to ",
                dtype_name(to), " is not supported");
  run_cast(ctx, x, to);
}

}  // namespace

void register_cast_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "Cast", cast, cast_check);
  add_kernel(r, "", "CastLike", cast_like);
}

}  // namespace reforge::cuda
