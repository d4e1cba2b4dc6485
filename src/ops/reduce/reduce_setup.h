// The axes and output shapes of the Reduce* ops and of ArgMax/ArgMin, shared by the CPU
// reference kernels (reduce.cc, reduce_arg.cc) and the CUDA kernels (backends/cuda/reduce.cu),
// so that both read the axes the same way, refuse the same inputs with the same messages and
// produce the same shapes. Host code only (reduce_setup.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::ops {

// Reduce*: axes from the attribute before opset `axes_input_since`, from optional input 1 from
// then on (int32 or int64, at most 1-D); none means all (or, with noop_with_empty_axes, none).
struct ReduceSetup {
  bool identity = false;    // noop_with_empty_axes with no axes: Y is X
  std::vector<char> flags;  // per axis of X: 1 where reduced
  Shape out;                // keepdims keeps reduced axes as 1
};
// `bool_ok`: the reduction takes bool input (ReduceMax and ReduceMin, from opset 20).
ReduceSetup reduce_setup(const KernelContext& ctx, int axes_input_since, bool bool_ok);

// ArgMax/ArgMin: the input seen as [outer, n, inner] around `axis` (a scalar acts as a
// 1-element vector). Refuses an empty axis when the output has elements (`is_max` names the op).
struct ArgSetup {
  int64_t axis = 0;
  bool last = false;  // select_last_index
  int64_t outer = 1, n = 1, inner = 1;
  std::vector<char> flags;  // per axis of X: 1 at `axis`
  Shape out;
};
ArgSetup arg_setup(const KernelContext& ctx, bool is_max);

}  // namespace reforge::ops
