// Small helpers the operator tests share.
#pragma once

#include <gtest/gtest.h>

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

}  // namespace reforge::test_support
