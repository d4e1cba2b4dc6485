// Broadcasting ops beyond plain binary arithmetic, on the GPU, with the CPU reference kernels'
// semantics (src/ops/elementwise): Where(cond, X, Y) (3-way broadcast, elements copied as raw
// bits of their width, cond bytes tested != 0), the variadic Min, Max, Sum and Mean (folded one
// input at a time in the storage type, so 16-bit floats round after each step as on the CPU;
// Min/Max propagate NaN; integer sums wrap), Mod (fmod = 1: C fmod / %, the dividend's sign;
// fmod = 0: Python/numpy mod, the divisor's sign; integer x mod 0 = 0) and PRelu (slope
// broadcast unidirectionally to X; integer products wrap).
#include <string>
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"
#include "ops/broadcast.h"
#include "ops/elementwise/mod_math.h"
#include "ops/elementwise/select_setup.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::cuda {

namespace {

template <typename C>
using wide_unsigned = std::conditional_t<(sizeof(C) <= 4), uint32_t, uint64_t>;

#define REFORGE_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)

// ---- Where -------------------------------------------------------------------------------

template <typename B>
__global__ void where_kernel(B* out, const uint8_t* c, const B* x, const B* y, Strides<3> s, int64_t n) {
  REFORGE_GRID_LOOP(i, n) {
    int64_t off[3];
    s.offsets(i, off);
    out[i] = c[off[0]] ? x[off[1]] : y[off[2]];
  }
}

void where(ops::KernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  const std::string what = ctx.node().label();
  const Shape os = ops::where_setup(ctx);
  Tensor& out = ctx.allocate_output_uninit(0, x.dtype(), os);
  const int64_t n = out.numel();
  if (n == 0) return;
  const Shape* shapes[3] = {&c.shape(), &x.shape(), &y.shape()};
  const Strides<3> st = make_strides<3>(os, shapes, what);
  auto run = [&](auto tag) {
    using B = typename decltype(tag)::type;
    where_kernel<B>
        <<<grid_for(n), 256, 0, stream()>>>(out.mutable_data<B>(), c.data<uint8_t>(), x.data<B>(), y.data<B>(), st, n);
  };
  // where_setup refused every type whose size is not 1, 2, 4 or 8 bytes.
  ops::dispatch_bytes(x.dtype(), run, what);
  check_launch(what.c_str());
}

// ---- Min, Max, Sum, Mean -----------------------------------------------------------------

enum class Fold { Min, Max, Sum, Mean };

template <Fold F, typename C>
__device__ __forceinline__ C fold_one(C acc, C v) {
  if constexpr (F == Fold::Min) {
    if constexpr (std::is_floating_point_v<C>)
      return (acc != acc || acc < v) ? acc : v;
    else
      return acc < v ? acc : v;
  } else if constexpr (F == Fold::Max) {
    if constexpr (std::is_floating_point_v<C>)
      return (acc != acc || acc > v) ? acc : v;
    else
      return acc > v ? acc : v;
  } else if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(wide_unsigned<C>(acc) + wide_unsigned<C>(v));
  } else {
    return acc + v;
  }
}

// out = in (first) or fold(out, in), `in` indexed through its broadcast strides.
template <Fold F, typename T>
__global__ void fold_kernel(T* out, const T* in, Strides<1> s, int64_t n, bool first) {
  REFORGE_GRID_LOOP(i, n) {
    int64_t off[1];
    s.offsets(i, off);
    const compute_t<T> v = load_c(in, off[0]);
    out[i] = store_c<T>(first ? v : fold_one<F>(load_c(out, i), v));
  }
}

// Mean's last step: the stored sum divided by the input count, in the compute type.
template <typename T>
__global__ void divide_kernel(T* out, int64_t n, int count) {
  using C = compute_t<T>;
  REFORGE_GRID_LOOP(i, n) out[i] = store_c<T>(load_c(out, i) / static_cast<C>(count));
}

template <Fold F>
void variadic(ops::KernelContext& ctx) {
  const std::string what = ctx.node().label();
  const size_t n_in = ctx.num_inputs();
  const Shape os = ops::variadic_setup(ctx, F == Fold::Mean);
  const DType dt = ctx.input(0).dtype();
  REFORGE_CHECK(dt != DType::Bool, what, " does not support element type ", dtype_name(dt));
  Tensor& out = ctx.allocate_output_uninit(0, dt, os);
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_device(dt, what.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      T* o = out.mutable_data<T>();
      for (size_t k = 0; k < n_in; ++k) {
        const Tensor& t = ctx.input(k);
        const Shape* in_shape[1] = {&t.shape()};
        const Strides<1> st = make_strides<1>(os, in_shape, what);
        fold_kernel<F, T><<<grid_for(n), 256, 0, stream()>>>(o, t.data<T>(), st, n, k == 0);
        check_launch(what.c_str());
      }
      if constexpr (F == Fold::Mean) {
        if (n_in > 1) {
          divide_kernel<T><<<grid_for(n), 256, 0, stream()>>>(o, n, static_cast<int>(n_in));
          check_launch(what.c_str());
        }
      }
    }
  });
}

// ---- Mod ---------------------------------------------------------------------------------

template <typename T, typename Op>
__global__ void binary_kernel(T* out, const T* a, const T* b, Strides<2> s, int64_t n, Op op) {
  REFORGE_GRID_LOOP(i, n) {
    int64_t off[2];
    s.offsets(i, off);
    out[i] = store_c<T>(op(load_c(a, off[0]), load_c(b, off[1])));
  }
}

template <typename Op>
void run_mod(ops::KernelContext& ctx, Op op) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const std::string what = ctx.node().label();
  REFORGE_CHECK(a.dtype() == b.dtype(), what, ": inputs have different element types (", a.describe(), " and ",
                b.describe(), ")");
  const ops::BinaryShapes s = ops::binary_shapes(ctx);
  REFORGE_CHECK(a.dtype() != DType::Bool, what, " does not support element type ", dtype_name(a.dtype()));
  Tensor& out = ctx.allocate_output_uninit(0, a.dtype(), s.out);
  const int64_t n = out.numel();
  if (n == 0) return;
  const Shape* shapes[2] = {&s.a, &s.b};
  const Strides<2> st = make_strides<2>(s.out, shapes, what);
  dispatch_device(a.dtype(), what.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      binary_kernel<T><<<grid_for(n), 256, 0, stream()>>>(out.mutable_data<T>(), a.data<T>(), b.data<T>(), st, n, op);
      check_launch(what.c_str());
    }
  });
}

void mod(ops::KernelContext& ctx) {
  const std::string why = ops::mod_check(ctx.node());
  if (!why.empty()) fail(ctx.node().label(), ": ", why);
  if (ctx.attr_int("fmod", 0) != 0)
    run_mod(ctx, ops::FmodOp{});
  else
    run_mod(ctx, ops::PyModOp{});
}

// ---- PRelu -------------------------------------------------------------------------------

// x < 0 ? slope * x : x; integer products wrap.
struct PReluF {
  template <typename C>
  __device__ C operator()(C x, C slope) const {
    if constexpr (std::is_unsigned_v<C>) {
      return x;  // never below zero
    } else {
      if (!(x < C(0))) return x;
      if constexpr (std::is_integral_v<C>)
        return static_cast<C>(wide_unsigned<C>(x) * wide_unsigned<C>(slope));
      else
        return x * slope;
    }
  }
};

void prelu(ops::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& slope = ctx.input(1);
  const std::string what = ctx.node().label();
  ops::prelu_check(ctx);
  const Shape& ss = slope.shape();
  REFORGE_CHECK(x.dtype() != DType::Bool, what, " does not support element type ", dtype_name(x.dtype()));
  Tensor& out = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  const int64_t n = out.numel();
  if (n == 0) return;
  const Shape* shapes[2] = {&x.shape(), &ss};
  const Strides<2> st = make_strides<2>(x.shape(), shapes, what);
  dispatch_device(x.dtype(), what.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      binary_kernel<T>
          <<<grid_for(n), 256, 0, stream()>>>(out.mutable_data<T>(), x.data<T>(), slope.data<T>(), st, n, PReluF{});
      check_launch(what.c_str());
    }
  });
}

}  // namespace

void register_select_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "Where", where);
  add_kernel(r, "", "Min", variadic<Fold::Min>);
  add_kernel(r, "", "Max", variadic<Fold::Max>);
  add_kernel(r, "", "Sum", variadic<Fold::Sum>);
  add_kernel(r, "", "Mean", variadic<Fold::Mean>);
  add_kernel(r, "", "Mod", mod, ops::mod_check);
  add_kernel(r, "", "PRelu", prelu);
}

}  // namespace reforge::cuda
