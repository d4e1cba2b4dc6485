// Products with a constant right-hand matrix: Y[..., N] = X[..., K] x W[K, N] (+ bias[N]), the
// shape of every Linear layer (MatMul or Gemm with weights, reforge::MatMulAdd).
//
// The op's prepare step (run by the engine at load and inside every refit that replaces W) makes
// a LinearWeights for W; the kernel then picks by row count: one row (decoding a token) streams
// the plain W once with cpu::gemv_rows, more rows run oneDNN on a copy of W packed into the
// blocked layout oneDNN wants. That copy is made the first time a product with more rows needs
// it (once per prepared W, thread-safe), not in prepare: a decoder that only ever runs one row
// keeps one copy of its weights, and a refit commit does not wait for a re-pack (the new
// LinearWeights packs the new W on its first use). W is float32, or bfloat16 / float16 in plans
// built with --precision bf16 / fp16; activations and accumulation stay float32 on both paths
// (oneDNN's bf16 path multiplies the activations' high and low bfloat16 parts; float16 W, for
// which oneDNN has no float32-activation product, runs many rows as OpenBLAS sgemm on column
// panels widened exactly to float32, as bfloat16 does on CPUs without a bf16 matmul). Plans
// built on AVX2 CPUs hold 16-bit weights packed in panels instead (MatMulAddPacked,
// passes/weight_packing.cc), so this plain path then runs only for unpacked plans.
#pragma once

#include <memory>
#include <mutex>

#include "backends/cpu/dnnl_matmul.h"
#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::ops {

struct LinearWeights {
  int64_t K = 0, N = 0;
  Tensor plain;          // [K, N] row-major, Float32, BFloat16 or Float16
  bool packable = true;  // false: never pack (W made at run time)

  // `plain` packed for oneDNN, made on the first call; null when oneDNN cannot pack it.
  const cpu::PackedWeights* packed() const;

 private:
  mutable std::once_flag pack_once_;
  mutable std::shared_ptr<const cpu::PackedWeights> packed_;
};

// Prepares W (rank 2; [K, N], or [N, K] when `transposed`; Float32, BFloat16 or Float16). Returns null
// when W is not such a matrix or is empty.
std::shared_ptr<const LinearWeights> prepare_linear(const Tensor& w, bool transposed);

// Writes output 0 = X x W + bias (bias: null or N floats) for a Float32 X whose last dimension
// is K; the output has X's shape with the last dimension N. With `round_x` (the node attribute
// bf16_activations, plan.h), X is first rounded to bfloat16 (round_activations). Returns false,
// having allocated nothing, when X does not fit (the caller then takes its generic path).
bool run_linear(KernelContext& ctx, const Tensor& x, const LinearWeights& w, const float* bias, bool round_x = false);

// X (Float32) rounded to bfloat16 values, in a per-thread buffer valid until the next call on
// this thread (cpu::round_to_bf16): the activations of a Linear node with bf16_activations = 1.
const float* round_activations(const Tensor& x);

}  // namespace reforge::ops
