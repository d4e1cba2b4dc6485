// The validation and shape arithmetic of Gather, GatherElements, GatherND, ScatterND,
// ScatterElements and Scatter, shared by the CPU reference kernels (gather_scatter.cc) and the
// CUDA kernels (backends/cuda/gather.cu), so that both refuse the same inputs with the same
// messages. Index values are not read here: each backend resolves and range-checks them where
// they live. Host code only (gather_setup.cc), but for with_reduction, which both compile.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::ops {

// Gather: Y = X[..., ind, ...] along `axis`, seen as [outer, dim, inner] with the indices' shape
// in place of dim.
struct GatherSetup {
  int64_t axis = 0;
  int64_t dim = 0;  // X's extent along axis: what indices resolve against
  int64_t outer = 1, inner = 1;
  Shape out;
};
GatherSetup gather_setup(const KernelContext& ctx);

// GatherElements and ScatterElements: data has rank >= 1, indices the same rank and no larger
// than data off `axis`. Returns the normalized axis.
int64_t elements_axis(const KernelContext& ctx);
// ScatterElements: elements_axis, and updates (input 2) of the indices' shape.
int64_t scatter_elements_axis(const KernelContext& ctx);

// GatherND (batch_dims from opset 12) and ScatterND (no batch dims): index tuples of length `k`
// address data dims [b, b + k); each tuple selects a `slice` of the elements after them.
struct NdSetup {
  int64_t b = 0, k = 0;
  int64_t slice = 0;
  Shape out;  // GatherND's output; ScatterND's updates shape
};
NdSetup gather_nd_setup(const KernelContext& ctx);
// Also checks that updates (input 2) have the shape `out`.
NdSetup scatter_nd_setup(const KernelContext& ctx);

// Scatter reductions: add/mul from opset 16, max/min from 18.
enum class Reduction { None, Add, Mul, Max, Min };
// The checker of the scatters.
std::string reduction_check(const ir::Node& node);
// The node's reduction; an Error naming the node when this opset does not have it. Also checks
// that updates (input 2) have the data's element type.
Reduction scatter_reduction(const KernelContext& ctx);

// Calls f(std::integral_constant<Reduction, R>) for the runtime reduction.
template <typename F>
void with_reduction(Reduction r, F&& f) {
  switch (r) {
    case Reduction::None:
      return f(std::integral_constant<Reduction, Reduction::None>{});
    case Reduction::Add:
      return f(std::integral_constant<Reduction, Reduction::Add>{});
    case Reduction::Mul:
      return f(std::integral_constant<Reduction, Reduction::Mul>{});
    case Reduction::Max:
      return f(std::integral_constant<Reduction, Reduction::Max>{});
    case Reduction::Min:
      return f(std::integral_constant<Reduction, Reduction::Min>{});
  }
}

}  // namespace reforge::ops
