#include <gtest/gtest.h>

#include "core/tensor.h"

using namespace reforge;

TEST(Tensor, CastFloatToInt) {
  Tensor t = Tensor::empty(DType::Float32, {3});
  float* p = t.mutable_data<float>();
  p[0] = 1.7f; p[1] = -2.5f; p[2] = 3.0f;
  Tensor i = cast_tensor(t, DType::Int64);
  EXPECT_EQ(i.to_int64_vector(), (std::vector<int64_t>{1, -2, 3}));
}

TEST(Tensor, HalfRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(static_cast<float>(float16(f)), f);
  }
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f)), 1.0f);
}
