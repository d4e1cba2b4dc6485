// Finding NaN and Inf in float tensors: the one scan that refit (CommitOptions::check_finite)
// and build (BuildOptions::check_finite) run over weight values, so that both refuse the same
// values and name them the same way.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace reforge {

// Flat index of the first NaN or Inf among the `n` elements of type `dt` at `p`, or -1. Types
// other than float32, float64, float16 and bfloat16 hold no non-finite value: -1.
int64_t first_nonfinite(DType dt, const void* p, int64_t n);
// Of a whole host tensor.
int64_t first_nonfinite(const Tensor& t);

// "NaN", "inf" or "-inf": element `i` of float tensor `t`, which first_nonfinite found.
std::string nonfinite_str(const Tensor& t, int64_t i);

// Flat index `flat` of `shape` as a multi-index: "[1, 2]" ("[]" for a scalar).
std::string multi_index_str(const Shape& shape, int64_t flat);

// "holds NaN at index [1, 2] (flat index 6 of float32[4,4])": element `i` of `t`, which
// first_nonfinite found.
std::string nonfinite_at(const Tensor& t, int64_t i);

// A refit's refusal of element `i` of `t`, which `what` names ("source 'w@3:1'"): "refit: WHAT
// holds NaN at index ...; refit refuses non-finite values (...)". Every refit path refuses with it.
[[noreturn]] void fail_refit_nonfinite(const std::string& what, const Tensor& t, int64_t i);

}  // namespace reforge
