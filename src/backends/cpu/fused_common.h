// What the CPU's fused transformer kernels (rms_norm.cc, silu.cc, attention.cc, rotary.cc) share.
// Each computes exactly the subgraph the fusion pass (src/passes/fusion_transformer.cc) replaced,
// for any values of its scalar inputs (a refit may change them), in float32. Kernels are written
// once over the vector type of simd_vec.h and instantiated for AVX-512 (16 lanes), AVX2 + FMA
// (8 lanes) and generic SSE2 (4 lanes), the widest the CPU has chosen per call; OpenMP over rows
// or (batch, head, query block) when the work is large enough.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "ops/reforge/unfused.h"
#include "ops/registry.h"

namespace reforge::ops::fused {

// Runs the host kernel of an unfused op (the CPU's kernel, else the op's reference) on the given
// inputs: the fallback for dtypes and shapes the fast paths do not cover.
inline Tensor run_op(const KernelContext& ctx, const char* op, int opset, std::vector<const Tensor*> ins,
                     std::map<std::string, ir::Attribute> attrs = {}) {
  const ir::Node node = unfused_node(ctx.node(), op, opset, ins.size(), std::move(attrs));
  const backends::Resolved kernel = backends::host_kernel(node);
  KernelContext inner(node, std::move(ins), ctx.threads());
  (*kernel.kernel)(inner);
  return std::move(inner.outputs()[0]);
}

// run_op as an ops::RunOp: the unfused forms of fused ops (ops/reforge/unfused.h) on the host.
inline RunOp host_ops(const KernelContext& ctx) {
  RunOp r;
  r.op = [&ctx](const char* op, int opset, std::vector<const Tensor*> ins, std::map<std::string, ir::Attribute> attrs) {
    return run_op(ctx, op, opset, std::move(ins), std::move(attrs));
  };
  r.zeros = [](DType dtype, Shape shape) { return Tensor::empty(dtype, std::move(shape)); };
  return r;
}

inline double read_scalar(const KernelContext& ctx, size_t i, double def, const char* what) {
  if (!ctx.has_input(i)) return def;
  const Tensor& t = ctx.input(i);
  REFORGE_CHECK(t.numel() == 1, ctx.node().label(), ": ", what, " must have one element, got ", t.describe());
  switch (t.dtype()) {
    case DType::Float32:
      return t.data<float>()[0];
    case DType::Float64:
      return t.data<double>()[0];
    case DType::Int64:
      return static_cast<double>(t.data<int64_t>()[0]);
    case DType::Int32:
      return t.data<int32_t>()[0];
    default:
      fail(ctx.node().label(), ": ", what, " has unsupported type ", dtype_name(t.dtype()));
  }
}

inline bool big_enough(int64_t work) { return work >= (int64_t{1} << 15); }

}  // namespace reforge::ops::fused
