// The validation and shape arithmetic of ConstantOfShape, Range, OneHot and Dropout, shared by
// the CPU reference kernels (tensor_misc.cc) and the CUDA kernels (backends/cuda/tensor_misc.cu,
// norm2.cu), so that both refuse the same inputs with the same messages, size their outputs the
// same way and, for a seeded Dropout, draw the same mask. Host code only (tensor_misc_setup.cc).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::ops {

// Input i, which must hold one element ("input '<name>' must be a scalar" otherwise).
const Tensor& scalar_input(const KernelContext& ctx, size_t i, const char* name);

// ConstantOfShape: the checker, and the output shape (input 0, no negative dims) and value (the
// attribute, or a float32 0).
std::string constant_of_shape_check(const ir::Node& node);
struct ConstantOfShapeSetup {
  Shape shape;
  Tensor value;
};
ConstantOfShapeSetup constant_of_shape_setup(const KernelContext& ctx);

// Range: start, limit and delta are scalars of one type; the output has
// max(ceil((limit - start) / delta), 0) elements, counted exactly for integers and in double for
// floats, at most 2^40.
struct RangeSetup {
  DType dtype = DType::Undefined;
  int64_t n = 0;
};
RangeSetup range_setup(const KernelContext& ctx);

// OneHot: depth (input 1) and the axis where it goes into the indices' shape; the output is
// [outer, depth, inner] around it.
struct OneHotSetup {
  int64_t depth = 0;
  int64_t outer = 1, inner = 1;
  Shape out;
};
OneHotSetup one_hot_setup(const KernelContext& ctx);

// Dropout: identity at inference; from opset 12 the training_mode input can turn it on. Scalars
// ratio (input 1) and training_mode (input 2) are read through `read(i, name)`, which gives a host
// tensor of one element (a backend brings device inputs over).
struct DropoutSetup {
  double ratio = 0.5;
  bool drop = false;       // training with a non-zero ratio
  bool want_mask = false;  // output 1 is asked for
  DType mask_type = DType::Bool;
};
template <typename Read>
DropoutSetup dropout_setup(const KernelContext& ctx, Read&& read) {
  DropoutSetup s;
  bool training = false;
  if (ctx.opset() >= 12) {
    if (ctx.has_input(1)) s.ratio = read(1, "ratio").as_double();
    if (ctx.has_input(2)) training = read(2, "training_mode").as_int64() != 0;
  }
  s.drop = training && s.ratio != 0;
  if (s.drop && !(s.ratio > 0 && s.ratio < 1)) fail(ctx.node().label(), ": ratio ", s.ratio, " must be in [0, 1)");
  s.want_mask = ctx.num_outputs() > 1 && ctx.output_wanted(1);
  s.mask_type = ctx.opset() >= 10 ? DType::Bool : ctx.input(0).dtype();
  return s;
}

// Dropout draws only from opset 12, when a training_mode input can turn it on, and only
// without a `seed` (a seeded draw is reproducible). Inference graphs leave training_mode out.
bool dropout_draws_random(const ir::Node& n);

// The mask of `n` elements drawn from `seed`: keep[i] when a uniform draw in [0, 1) is >= ratio.
// The draws are numpy's legacy RandomState(seed).uniform(0, 1, shape) — MT19937 seeded with
// init_genrand and 53-bit doubles — which is what the ONNX reference and its test data use, so a
// seeded model reproduces them exactly.
void dropout_keep_mask(uint32_t seed, double ratio, int64_t n, bool* keep);

}  // namespace reforge::ops
