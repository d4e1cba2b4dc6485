// Helpers the quantization ops share: which scale / zero-point element applies to each element
// of a tensor (per tensor, per axis, blocked), the value ranges of the quantized types, and
// conversions of whole tensors to double / int64 vectors (narrow types included, core/narrow.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/narrow.h"
#include "core/tensor.h"

namespace reforge::ops::quant {

// Maps the flat index of an element of x to the flat index of its scale (and zero point).
// Per tensor: the scale has one element. Per axis: a 1-D scale of x.dim(axis) elements. Blocked
// (block_size > 0): the scale has x's rank and shape except along `axis`, where it has
// ceil(x.dim(axis) / block_size) elements, each covering block_size consecutive positions.
class ScaleMap {
 public:
  // Validates the scale's shape against x; throws an Error starting with `where`.
  ScaleMap(const Shape& x, const Shape& scale, int64_t axis, int64_t block_size, const std::string& where);
  int64_t operator()(int64_t i) const {
    if (per_tensor_) return 0;
    const int64_t a = (i / inner_) % dim_;
    if (block_ == 0) return a;
    const int64_t outer = i / (inner_ * dim_);
    return (outer * blocks_ + a / block_) * inner_ + i % inner_;
  }

 private:
  bool per_tensor_ = true;
  int64_t inner_ = 1, dim_ = 1, block_ = 0, blocks_ = 1;
};

// Every element as a double (exact for every type but int64/uint64 beyond 2^53).
std::vector<double> to_double_vector(const Tensor& t);
// Every element of an integer (standard or 4-/2-bit) tensor as int64.
std::vector<int64_t> to_int64_values(const Tensor& t);

// [min, max] of an integer quantized type (uint8, int8, uint16, int16, int32, uint4, int4,
// uint2, int2); false for other types.
bool quant_int_range(DType t, int64_t& lo, int64_t& hi);
// True for the float formats a quantization may target: float8 E4M3FN/E4M3FNUZ/E5M2/E5M2FNUZ
// and float4 E2M1.
bool is_quant_float(DType t);

// A tensor of dtype `to` and `shape` holding `v`, each value already within `to`'s range.
Tensor int_tensor(const std::vector<int64_t>& v, DType to, const Shape& shape);

}  // namespace reforge::ops::quant
