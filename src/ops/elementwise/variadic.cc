// Variadic elementwise ops: Min, Max, Sum, Mean (one or more inputs, multidirectional
// broadcasting; opsets before 8 required equal shapes, which broadcasting also covers).
//
// The output is folded one input at a time in the storage type (out = op(out, input_k)), so
// float16 results round after each step exactly like numpy's pairwise reference. Min and Max
// propagate NaN (numpy minimum/maximum), which is what the ONNX reference computes.
#include <cmath>
#include <type_traits>

#include "core/dispatch.h"
#include "ops/broadcast.h"
#include "ops/elementwise/select_setup.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

enum class Fold { Min, Max, Sum, Mean };

template <typename C>
inline bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>)
    return v != v;
  else
    return false;
}

template <Fold F, typename C>
inline C fold_one(C acc, C v) {
  if constexpr (F == Fold::Min)
    return (is_nan(acc) || acc < v) ? acc : v;
  else if constexpr (F == Fold::Max)
    return (is_nan(acc) || acc > v) ? acc : v;
  else if constexpr (std::is_integral_v<C>) {
    using U = std::conditional_t<(sizeof(C) <= 4), uint32_t, uint64_t>;  // wrap, no signed overflow
    return static_cast<C>(U(acc) + U(v));
  } else
    return acc + v;
}

template <Fold F>
void variadic_kernel(KernelContext& ctx) {
  const std::string what = ctx.node().label();
  const size_t n = ctx.num_inputs();
  const Shape os = variadic_setup(ctx, F == Fold::Mean);
  const DType dt = ctx.input(0).dtype();
  dispatch_numeric(
      dt,
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        Tensor& out = ctx.allocate_output(0, dtype_of<T>, os);
        T* o = out.mutable_data<T>();
        const Tensor& first = ctx.input(0);
        broadcast_map(
            o, os, [](T v) { return v; }, Operand{first.data<T>(), first.shape()});
        for (size_t i = 1; i < n; ++i) {
          const Tensor& t = ctx.input(i);
          // The output is both an operand and the destination; element i reads index i only.
          broadcast_map(
              o, os, [](T acc, T v) { return from_compute<T>(fold_one<F>(to_compute(acc), to_compute(v))); },
              Operand{static_cast<const T*>(o), os}, Operand{t.data<T>(), t.shape()});
        }
        if constexpr (F == Fold::Mean) {
          if (n > 1) {
            const auto inv = static_cast<compute_t<T>>(n);
            broadcast_map(
                o, os, [inv](T v) { return from_compute<T>(to_compute(v) / inv); },
                Operand{static_cast<const T*>(o), os});
          }
        }
      },
      what.c_str());
}

}  // namespace

void register_variadic_ops(OpRegistry& r) {
  r.add({"", "Min", 1, INT_MAX, variadic_kernel<Fold::Min>, nullptr});
  r.add({"", "Max", 1, INT_MAX, variadic_kernel<Fold::Max>, nullptr});
  r.add({"", "Sum", 1, INT_MAX, variadic_kernel<Fold::Sum>, nullptr});
  r.add({"", "Mean", 1, INT_MAX, variadic_kernel<Fold::Mean>, nullptr});
}

}  // namespace reforge::ops
