// The validation and shape arithmetic of LayerNormalization, RMSNormalization and
// BatchNormalization, shared by the CPU reference kernels (ops/nn/layer_normalization.cc,
// ops/transformer/rms_norm.cc, ops/nn/norm_batch.cc) and the CUDA kernels
// (backends/cuda/norm.cu, norm2.cu), so that both refuse the same inputs with the same messages
// and split X into the same rows. Host code only (norm_setup.cc).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::ops {

// LayerNormalization: X seen as [outer, inner] rows normalized from `axis` on; Mean and
// InvStdDev are X.shape[:axis] + [1, ...] of stash_type.
struct LayerNormSetup {
  int64_t axis = 0;
  int64_t outer = 1, inner = 1;
  double eps = 1e-5;
  DType stash_dtype = DType::Float32;
  Shape norm_shape;  // X.shape[axis:]
  Shape stat_shape;
  // Scale and B cover all of X (they have more dims than the normalized ones), else only the
  // normalized dims: `param_shape` is what they broadcast to.
  bool full = false;
  Shape param_shape;
};
LayerNormSetup layer_norm_setup(const KernelContext& ctx);
// The optional Mean and InvStdDev outputs (1 and 2), allocated where wanted, else null.
struct LayerNormStats {
  Tensor* mean = nullptr;
  Tensor* inv_std = nullptr;
};
LayerNormStats layer_norm_stat_outputs(KernelContext& ctx, const LayerNormSetup& s);
// Checks that parameter `p` (named `name`) broadcasts unidirectionally to `target` (numpy rules,
// right-aligned).
void check_norm_param(const Tensor& p, const Shape& target, const std::string& label, const char* name);

// RMSNormalization: X seen as [outer, inner] rows normalized from `axis` on, in float32 or,
// with stash_type 11, float64; scale broadcasts unidirectionally to X.
std::string rms_norm_check(const ir::Node& node);
struct RmsNormSetup {
  int64_t axis = 0;
  int64_t outer = 1, inner = 1;
  double eps = 1e-5;
  bool stash_double = false;
};
RmsNormSetup rms_norm_setup(const KernelContext& ctx);

// BatchNormalization: X [N, C, ...]; training_mode (opset 14+) computes the batch statistics
// and the running ones.
std::string batch_norm_check(const ir::Node& node);
struct BatchNormSetup {
  int64_t n = 0, c = 0, inner = 0;
  double eps = 1e-5, momentum = 0.9;
  bool training = false;
};
BatchNormSetup batch_norm_setup(const KernelContext& ctx);
// Checks scale, B, input_mean and input_var (inputs 1-4): float, per channel or (before opset 9)
// per activation, all of one size, per channel in training. Returns that size.
int64_t batch_norm_param_size(const KernelContext& ctx, const BatchNormSetup& s);

}  // namespace reforge::ops
