// The validation and shape arithmetic of GroupNormalization (opsets 18 and 21), shared by the CPU
// reference kernel (ops/nn/norm_local.cc) and the CUDA kernel (backends/cuda/norm2.cu), so that
// both refuse the same inputs with the same messages. Header-only: the CUDA compiler includes it.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"
#include "ops/registry.h"

namespace reforge::ops {

// The schema's checker: num_groups has no default.
inline std::string group_norm_check(const ir::Node& node) {
  return node.has_attr("num_groups") ? "" : std::string("num_groups is required");
}

struct GroupNormSetup {
  int64_t n = 0, c = 0, groups = 0;
  int64_t cg = 0;            // channels per group
  int64_t spatial = 0;       // elements per channel
  bool per_channel = false;  // scale/bias per channel (opset 21) or per group (18)
  double eps = 1e-5;
};

// Checks X [N, C, ...] (a float type), num_groups dividing C, and scale/bias [C] (opset 21) or
// [num_groups] (18) of X's type.
inline GroupNormSetup group_norm_setup(const KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor& bias = ctx.input(2);
  REFORGE_CHECK(x.rank() >= 2, label, ": X must be [N, C, ...], got ", x.describe());
  REFORGE_CHECK(ctx.node().has_attr("num_groups"), label, ": num_groups is required");
  REFORGE_CHECK(is_float(x.dtype()), label, ": element type ", dtype_name(x.dtype()), " is not supported");
  GroupNormSetup s;
  s.groups = ctx.node().attr_int("num_groups");
  s.n = x.dim(0);
  s.c = x.dim(1);
  REFORGE_CHECK(s.groups >= 1 && s.c % s.groups == 0, label, ": num_groups ", s.groups, " must divide the ", s.c,
                " channels");
  const int64_t per_param = ctx.opset() >= 21 ? s.c : s.groups;
  REFORGE_CHECK(scale.shape() == (Shape{per_param}) && bias.shape() == (Shape{per_param}) &&
                    scale.dtype() == x.dtype() && bias.dtype() == x.dtype(),
                label, ": scale and bias must be [", per_param, "] of X's type at opset ", ctx.opset(), ", got ",
                scale.describe(), " and ", bias.describe());
  s.per_channel = per_param == s.c;
  s.eps = ctx.attr_float("epsilon", 1e-5f);
  s.cg = s.c / s.groups;
  s.spatial = s.n * s.c == 0 ? 0 : x.numel() / (s.n * s.c);
  return s;
}

}  // namespace reforge::ops
