// The unfused forms of the fused ops that fuse-attention and fuse-rotary make: the ONNX ops the
// pass replaced, in their order, each run by a backend's kernel through `RunOp`. A backend's
// fused kernel runs them for the inputs its fast path does not take (other types, shapes that do
// not broadcast the fast path's way, a K/V repeat that is not one), so a fused node computes, and
// fails, exactly as the ops it replaced: the CPU with its host kernels, the CUDA backend with its
// device kernels.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "ops/registry.h"

namespace reforge::ops {

// How a backend runs the unfused form.
struct RunOp {
  // Runs op `op` (default domain, `opset`) on `inputs` with `attrs` and returns its one output.
  // The axes the unfused form makes itself are host tensors (structure inputs, read on the host).
  std::function<Tensor(const char* op, int opset, std::vector<const Tensor*> inputs,
                       std::map<std::string, ir::Attribute> attrs)>
      op;
  // A zero-filled tensor in the memory the backend's kernels read data from.
  std::function<Tensor(DType dtype, Shape shape)> zeros;
};

// The node of one op of the unfused form: named as the fused node `of` (its errors name that
// node), inputs "in0".., one output "out".
ir::Node unfused_node(const ir::Node& of, const char* op, int opset, size_t inputs,
                      std::map<std::string, ir::Attribute> attrs);

// reforge::Attention (backends/cpu/attention.cc) as Transpose, Unsqueeze/Expand/Reshape (the K/V
// repeat), Mul, MatMul, Div/Mul, Add/Where, Softmax, IsNaN/Where, MatMul, Transpose.
Tensor attention_unfused(const KernelContext& ctx, const RunOp& run);

// reforge::Rotary (backends/cpu/rotary.cc) as Transpose, Slice, Slice, Neg, Concat, Mul, Mul, Add.
Tensor rotary_unfused(const KernelContext& ctx, const RunOp& run);

}  // namespace reforge::ops
