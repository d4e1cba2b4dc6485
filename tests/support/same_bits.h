// Bit-for-bit equality of two tensors (dtype, shape and bytes): what tests of exactness compare.
#pragma once

#include <cstring>

#include "core/tensor.h"

namespace reforge::test_support {

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace reforge::test_support
