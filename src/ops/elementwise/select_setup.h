// The validation and output shapes of Where, the variadic folds (Min, Max, Sum, Mean), PRelu and
// Mod's checker, shared by the CPU reference kernels (compare_logic.cc, variadic.cc, binary_arith.cc)
// and the CUDA kernels (backends/cuda/select.cu), so that both refuse the same inputs with the
// same messages. Host code only (select_setup.cc).
#pragma once

#include <string>

#include "core/tensor.h"
#include "ops/registry.h"

namespace reforge::ops {

// Where(cond, X, Y): cond bool, X and Y of one (supported) type; the broadcast output shape.
Shape where_setup(const KernelContext& ctx);

// Min/Max/Sum/Mean: at least one input, all of one type (a float type for Mean); the broadcast
// output shape.
Shape variadic_setup(const KernelContext& ctx, bool mean);

// PRelu: X and slope of one type, slope broadcasting unidirectionally to X.
void prelu_check(const KernelContext& ctx);

// Mod's checker: fmod is 0 or 1.
std::string mod_check(const ir::Node& node);

}  // namespace reforge::ops
