// Broadcasting binary ops on the GPU: arithmetic (Add, Sub, Mul, Div, Pow), comparisons (Equal,
// Less, LessOrEqual, Greater, GreaterOrEqual) and logic (And, Or, Xor). One grid-stride kernel
// per (op, type) indexes each operand through its broadcast strides; 16-bit floats compute in
// float32 and round once, as the CPU kernels do; integer arithmetic wraps and integer division
// truncates toward zero with x / 0 = 0, as on the CPU.
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"
#include "ops/broadcast.h"

namespace reforge::cuda {

namespace {

template <typename C>
using wide_unsigned = std::conditional_t<(sizeof(C) <= 4), uint32_t, uint64_t>;

struct AddF {
  template <typename C>
  __device__ C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>)
      return static_cast<C>(wide_unsigned<C>(x) + wide_unsigned<C>(y));
    else
      return x + y;
  }
};
struct SubF {
  template <typename C>
  __device__ C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>)
      return static_cast<C>(wide_unsigned<C>(x) - wide_unsigned<C>(y));
    else
      return x - y;
  }
};
struct MulF {
  template <typename C>
  __device__ C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>)
      return static_cast<C>(wide_unsigned<C>(x) * wide_unsigned<C>(y));
    else
      return x * y;
  }
};
struct DivF {
  template <typename C>
  __device__ C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) {
      if (y == 0) return 0;
      if constexpr (std::is_signed_v<C>)
        if (y == C(-1)) return static_cast<C>(wide_unsigned<C>(0) - wide_unsigned<C>(x));
      return static_cast<C>(x / y);
    } else {
      return x / y;
    }
  }
};
struct EqualF {
  template <typename C>
  __device__ bool operator()(C x, C y) const {
    return x == y;
  }
};
struct LessF {
  template <typename C>
  __device__ bool operator()(C x, C y) const {
    return x < y;
  }
};
struct LessEqualF {
  template <typename C>
  __device__ bool operator()(C x, C y) const {
    return x <= y;
  }
};
struct GreaterF {
  template <typename C>
  __device__ bool operator()(C x, C y) const {
    return x > y;
  }
};
struct GreaterEqualF {
  template <typename C>
  __device__ bool operator()(C x, C y) const {
    return x >= y;
  }
};
struct AndF {
  __device__ bool operator()(bool x, bool y) const { return x && y; }
};
struct OrF {
  __device__ bool operator()(bool x, bool y) const { return x || y; }
};
struct XorF {
  __device__ bool operator()(bool x, bool y) const { return x != y; }
};

template <typename Out, typename A, typename B, typename Op>
__global__ void binary_kernel(Out* out, const A* a, const B* b, Strides<2> s, int64_t n, Op op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[2];
    s.offsets(i, off);
    out[i] = store_c<Out>(op(load_c(a, off[0]), load_c(b, off[1])));
  }
}

template <typename Out, typename A, typename B, typename Op>
void launch(Tensor& out, const Tensor& a, const Tensor& b, const ops::BinaryShapes& s, Op op,
            const std::string& where) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const Shape* shapes[2] = {&s.a, &s.b};
  Strides<2> st = make_strides<2>(s.out, shapes, where);
  binary_kernel<Out, A, B, Op>
      <<<grid_for(n), 256, 0, stream()>>>(out.mutable_data<Out>(), a.data<A>(), b.data<B>(), st, n, op);
  check_launch(where.c_str());
}

void require_same_type(const ops::KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  REFORGE_CHECK(a.dtype() == b.dtype(), ctx.node().label(), ": inputs have different element types (", a.describe(),
                " and ", b.describe(), ")");
}

// Same-type arithmetic: output of the inputs' type.
template <typename Op>
ops::KernelFn arithmetic(Op op) {
  return [op](ops::KernelContext& ctx) {
    require_same_type(ctx);
    const ops::BinaryShapes s = ops::binary_shapes(ctx);
    const std::string where = ctx.node().label();
    const Tensor& a = ctx.input(0);
    Tensor& out = ctx.allocate_output_uninit(0, a.dtype(), s.out);
    dispatch_device(a.dtype(), where.c_str(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>)
        fail(where, ": arithmetic on bool tensors is not defined");
      else
        launch<T, T, T>(out, a, ctx.input(1), s, op, where);
    });
  };
}

// Comparisons: bool output.
template <typename Op>
ops::KernelFn comparison(Op op) {
  return [op](ops::KernelContext& ctx) {
    require_same_type(ctx);
    const ops::BinaryShapes s = ops::binary_shapes(ctx);
    const std::string where = ctx.node().label();
    const Tensor& a = ctx.input(0);
    Tensor& out = ctx.allocate_output_uninit(0, DType::Bool, s.out);
    dispatch_device(a.dtype(), where.c_str(), [&](auto tag) {
      launch<bool, typename decltype(tag)::type, typename decltype(tag)::type>(out, a, ctx.input(1), s, op, where);
    });
  };
}

template <typename Op>
ops::KernelFn logic(Op op) {
  return [op](ops::KernelContext& ctx) {
    const ops::BinaryShapes s = ops::binary_shapes(ctx);
    const std::string where = ctx.node().label();
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    REFORGE_CHECK(a.dtype() == DType::Bool && b.dtype() == DType::Bool, where, ": inputs must be bool, not ",
                  a.describe(), " and ", b.describe());
    Tensor& out = ctx.allocate_output_uninit(0, DType::Bool, s.out);
    launch<bool, bool, bool>(out, a, b, s, op, where);
  };
}

// Pow, as the CPU's reference: the base's type out, the exponent of any numeric type (opset 12).
// Integers to integer powers by squaring, wrapping; a negative integer exponent gives
// trunc(1 / x^-e). Float32 with float32 uses powf; other mixes compute in double, an integer base
// truncating the result toward zero (0 when it is NaN or outside int64).
struct PowF {
  template <typename X, typename E>
  __device__ X operator()(X x, E e) const {
    if constexpr (std::is_integral_v<X> && std::is_integral_v<E>) {
      using U = wide_unsigned<X>;
      if constexpr (std::is_signed_v<E>) {
        if (e < 0) {
          if (x == 1) return 1;
          if constexpr (std::is_signed_v<X>)
            if (x == X(-1)) return (e % 2 == 0) ? X(1) : X(-1);
          return 0;
        }
      }
      U result = 1, base = static_cast<U>(x);
      auto n = static_cast<std::make_unsigned_t<E>>(e);
      while (n) {
        if (n & 1u) result *= base;
        base *= base;
        n >>= 1;
      }
      return static_cast<X>(result);
    } else if constexpr (std::is_same_v<X, float> && std::is_same_v<E, float>) {
      return powf(x, e);
    } else {
      const double r = pow(static_cast<double>(x), static_cast<double>(e));
      if constexpr (std::is_integral_v<X>) {
        if (!(r > -9.3e18 && r < 9.3e18)) return 0;
        return static_cast<X>(static_cast<int64_t>(r));
      } else {
        return static_cast<X>(r);
      }
    }
  }
};

void pow_kernel(ops::KernelContext& ctx) {
  const ops::BinaryShapes s = ops::binary_shapes(ctx);
  const std::string where = ctx.node().label();
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  REFORGE_CHECK(ctx.opset() >= 12 || a.dtype() == b.dtype(), where, ": inputs have different element types (",
                a.describe(), " and ", b.describe(), "), allowed only from opset 12");
  Tensor& out = ctx.allocate_output_uninit(0, a.dtype(), s.out);
  dispatch_device(a.dtype(), where.c_str(), [&](auto ta) {
    using A = typename decltype(ta)::type;
    dispatch_device(b.dtype(), where.c_str(), [&](auto tb) {
      using B = typename decltype(tb)::type;
      if constexpr (std::is_same_v<A, bool> || std::is_same_v<B, bool>)
        fail(where, ": Pow of bool tensors is not defined");
      else
        launch<A, A, B>(out, a, b, s, PowF{}, where);
    });
  });
}

}  // namespace

void register_elementwise_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "Add", arithmetic(AddF{}));
  add_kernel(r, "", "Sub", arithmetic(SubF{}));
  add_kernel(r, "", "Mul", arithmetic(MulF{}));
  add_kernel(r, "", "Div", arithmetic(DivF{}));
  add_kernel(r, "", "Pow", pow_kernel);
  add_kernel(r, "", "Equal", comparison(EqualF{}));
  add_kernel(r, "", "Less", comparison(LessF{}));
  add_kernel(r, "", "LessOrEqual", comparison(LessEqualF{}));
  add_kernel(r, "", "Greater", comparison(GreaterF{}));
  add_kernel(r, "", "GreaterOrEqual", comparison(GreaterEqualF{}));
  add_kernel(r, "", "And", logic(AndF{}));
  add_kernel(r, "", "Or", logic(OrF{}));
  add_kernel(r, "", "Xor", logic(XorF{}));
}

}  // namespace reforge::cuda
