// Small helpers the operator tests share.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/dispatch.h"
#include "core/tensor.h"

namespace reforge::test_support {

// A tensor of `shape` holding `values` (row major); the count must match the shape.
template <typename T>
Tensor make(Shape shape, std::vector<T> values) {
  Tensor t = Tensor::empty(dtype_of<T>, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  for (size_t i = 0; i < values.size(); ++i) t.mutable_data<T>()[i] = values[i];
  return t;
}

// A float32 tensor of `shape` drawn uniformly from [lo, hi) by std::mt19937(seed): the same
// values on every run and platform.
inline Tensor random_floats(const Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t = Tensor::empty(DType::Float32, shape);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng);
  return t;
}

}  // namespace reforge::test_support
