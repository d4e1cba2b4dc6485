// The reforge fused activations on the GPU, as the CPU runs them (backends/cpu/gelu.cc, silu.cc):
// reforge::Gelu(X[, constants]) with approximate = none | tanh, reforge::Silu(X) = X * sigmoid(X)
// and reforge::SiluMul(X, U) = X * sigmoid(X) * U (X and U broadcasting as in Mul). Gelu with its
// decomposition's constants as float32 scalar inputs (fuse-gelu keeps them refittable) computes
// the formula as written with those values, read on the device: (x * half) * (one + erf(x / k))
// (x * k when k_op = mul), or (x * half) * (one + tanh(c1 (x + c2 x^p))); for other element types
// the constants are ignored and the standard Gelu runs, as on the CPU. 16-bit floats compute in
// float32.
#include <string>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"
#include "ops/broadcast.h"

namespace reforge::cuda {

namespace {

__device__ __forceinline__ float d_exp(float x) { return expf(x); }
__device__ __forceinline__ double d_exp(double x) { return exp(x); }
__device__ __forceinline__ float d_erfc(float x) { return erfcf(x); }
__device__ __forceinline__ double d_erfc(double x) { return erfc(x); }

template <typename C>
__device__ __forceinline__ C sigmoid(C x) {
  const C e = d_exp(x < C(0) ? x : -x);
  const C s = C(1) / (C(1) + e);
  return x < C(0) ? e * s : s;
}

#define REFORGE_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)

// Standard Gelu: x * Phi(x) (erf form) or x * sigmoid(2u) (tanh form).
template <typename T>
__global__ void gelu_standard(const T* x, T* y, int64_t n, bool tanh_form) {
  using C = compute_t<T>;
  REFORGE_GRID_LOOP(i, n) {
    const C v = load_c(x, i);
    const C r = tanh_form ? v * sigmoid(C(1.5957691216057307) * (v + C(0.044715) * (v * v * v)))
                          : v * (C(0.5) * d_erfc(-v * C(0.70710678118654752440)));
    y[i] = store_c<T>(r);
  }
}

// The erf form with constants k (divisor or factor), one, half.
__global__ void gelu_erf_consts(const float* x, float* y, int64_t n, bool div, const float* k, const float* one,
                                const float* half) {
  const float kk = *k, o = *one, h = *half;
  REFORGE_GRID_LOOP(i, n) {
    const float v = x[i];
    y[i] = (v * h) * (o + erff(div ? v / kk : v * kk));
  }
}

// The tanh form with constants c1, c2, p, one, half.
__global__ void gelu_tanh_consts(const float* x, float* y, int64_t n, const float* c1, const float* c2, const float* p,
                                 const float* one, const float* half) {
  const float a = *c1, b = *c2, e = *p, o = *one, h = *half;
  REFORGE_GRID_LOOP(i, n) {
    const float v = x[i];
    y[i] = (v * h) * (o + tanhf(a * (v + b * powf(v, e))));
  }
}

const float* scalar_in(const ops::KernelContext& ctx, size_t i) {
  const Tensor& t = ctx.input(i);
  REFORGE_CHECK(t.numel() == 1 && t.dtype() == DType::Float32, ctx.node().label(), ": constant input ", i,
                " must be a float32 scalar, got ", t.describe());
  return t.data<float>();
}

std::string gelu_check(const ir::Node& node) {
  std::string a = node.attr_string("approximate", "none");
  if (a == "none" || a == "tanh") return "";
  return "approximate '" + a + "' is not supported (expected 'none' or 'tanh')";
}

void gelu_kernel(ops::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::string who = ctx.node().label();
  const std::string why = gelu_check(ctx.node());
  if (!why.empty()) fail(who, ": ", why);
  const bool tanh_form = ctx.attr_string("approximate", "none") == "tanh";
  if (!is_float(x.dtype())) fail(who, " does not support element type ", dtype_name(x.dtype()));
  const int64_t n = x.numel();
  if (x.dtype() == DType::Float32 && ctx.num_inputs() > 1) {
    Tensor& y = ctx.allocate_output_uninit(0, DType::Float32, x.shape());
    if (!tanh_form) {
      REFORGE_CHECK(ctx.num_inputs() == 4, who, ": expects x, k, one, half");
      const bool div = ctx.attr_string("k_op", "div") == "div";
      const float *k = scalar_in(ctx, 1), *one = scalar_in(ctx, 2), *half = scalar_in(ctx, 3);
      if (n == 0) return;
      gelu_erf_consts<<<grid_for(n), 256, 0, stream()>>>(x.data<float>(), y.mutable_data<float>(), n, div, k, one,
                                                         half);
    } else {
      REFORGE_CHECK(ctx.num_inputs() == 6, who, ": expects x, c1, c2, p, one, half");
      const float *c1 = scalar_in(ctx, 1), *c2 = scalar_in(ctx, 2), *p = scalar_in(ctx, 3), *one = scalar_in(ctx, 4),
                  *half = scalar_in(ctx, 5);
      if (n == 0) return;
      gelu_tanh_consts<<<grid_for(n), 256, 0, stream()>>>(x.data<float>(), y.mutable_data<float>(), n, c1, c2, p, one,
                                                          half);
    }
    check_launch(who.c_str());
    return;
  }
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  if (n == 0) return;
  dispatch_device(
      x.dtype(), who.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!std::is_integral_v<T>) {
          gelu_standard<T><<<grid_for(n), 256, 0, stream()>>>(x.data<T>(), y.mutable_data<T>(), n, tanh_form);
          check_launch(who.c_str());
        }
      },
      true);
}

template <typename T>
__global__ void silu(const T* x, T* y, int64_t n) {
  using C = compute_t<T>;
  REFORGE_GRID_LOOP(i, n) {
    const C v = load_c(x, i);
    y[i] = store_c<T>(v * sigmoid(v));
  }
}

// X * sigmoid(X) * U, X and U indexed through their broadcast strides.
template <typename T>
__global__ void silu_mul(const T* x, const T* u, T* y, Strides<2> s, int64_t n) {
  using C = compute_t<T>;
  REFORGE_GRID_LOOP(i, n) {
    int64_t off[2];
    s.offsets(i, off);
    const C v = load_c(x, off[0]);
    y[i] = store_c<T>(v * sigmoid(v) * load_c(u, off[1]));
  }
}

void silu_kernel(ops::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::string who = ctx.node().label();
  if (!is_float(x.dtype())) fail(who, " does not support element type ", dtype_name(x.dtype()));
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_device(
      x.dtype(), who.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!std::is_integral_v<T>) {
          silu<T><<<grid_for(n), 256, 0, stream()>>>(x.data<T>(), y.mutable_data<T>(), n);
          check_launch(who.c_str());
        }
      },
      true);
}

void silu_mul_kernel(ops::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& u = ctx.input(1);
  const std::string who = ctx.node().label();
  if (!is_float(x.dtype())) fail(who, " does not support element type ", dtype_name(x.dtype()));
  REFORGE_CHECK(x.dtype() == u.dtype(), who, ": inputs have different element types (", x.describe(), " and ",
                u.describe(), ")");
  const Shape out = ops::broadcast_shapes({x.shape(), u.shape()}, who);
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), out);
  const int64_t n = y.numel();
  if (n == 0) return;
  const Shape* shapes[2] = {&x.shape(), &u.shape()};
  const Strides<2> st = make_strides<2>(out, shapes, who);
  dispatch_device(
      x.dtype(), who.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!std::is_integral_v<T>) {
          silu_mul<T><<<grid_for(n), 256, 0, stream()>>>(x.data<T>(), u.data<T>(), y.mutable_data<T>(), st, n);
          check_launch(who.c_str());
        }
      },
      true);
}

}  // namespace

void register_fused_unary_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "reforge", "Gelu", gelu_kernel, gelu_check);
  add_kernel(r, "reforge", "Silu", silu_kernel);
  add_kernel(r, "reforge", "SiluMul", silu_mul_kernel);
}

}  // namespace reforge::cuda
