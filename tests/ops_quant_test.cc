// The quantization family and BitCast on cases the ONNX node suite leaves out: blocked scales
// whose block does not divide the axis, round-half-to-even and saturation of 4-bit targets,
// float8 targets without saturation, per-row / per-column zero points of the integer matrix
// products, Cast's round_mode, BitCast's width and bool checks. Expected values are derived by
// hand in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/narrow.h"
#include "ops/registry.h"
#include "support/run_op.h"

using namespace reforge;

namespace {

template <typename T>
Tensor make(DType dt, Shape shape, std::vector<T> values) {
  Tensor t = Tensor::empty(dt, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i) t.mutable_data<T>()[i] = values[i];
  return t;
}

ir::Node node(const std::string& op, int opset, size_t ninputs, std::vector<ir::Attribute> attrs = {}) {
  ir::Node n;
  n.name = "q";
  n.op_type = op;
  n.opset = opset;
  for (size_t i = 0; i < ninputs; ++i) n.inputs.push_back("in" + std::to_string(i));
  n.outputs = {"out"};
  for (auto& a : attrs) n.attrs[a.name] = a;
  return n;
}

Tensor run(const ir::Node& n, const std::vector<Tensor>& ins) {
  std::vector<const Tensor*> ptrs;
  for (const auto& t : ins) ptrs.push_back(&t);
  return test_support::run_node(n, ptrs)[0];
}

std::vector<double> doubles(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.as_double(i));
  return v;
}

}  // namespace

// x [2,5], axis 1, block 2: the scale has ceil(5/2) = 3 columns, the last block one element.
TEST(Quantize, BlockedWithPartialBlock) {
  Tensor x = make<float>(DType::Float32, {2, 5}, {1, 2, 3, 4, 5, -1, -2, -3, -4, -5});
  Tensor s = make<float>(DType::Float32, {2, 3}, {1, 2, 4, 0.5f, 1, 2});
  Tensor z = make<int8_t>(DType::Int8, {2, 3}, {0, 1, -1, 0, 0, 0});
  Tensor y = run(node("QuantizeLinear", 21, 3, {ir::int_attr("axis", 1), ir::int_attr("block_size", 2)}), {x, s, z});
  ASSERT_EQ(y.dtype(), DType::Int8);
  // Row 0: 1/1, 2/1, 3/2 = 1.5 -> 2 (+1), 4/2 + 1, 5/4 = 1.25 -> 1 (-1).
  // Row 1: -1/0.5, -2/0.5, -3/1, -4/1, -5/2 = -2.5 -> -2 (half to even).
  EXPECT_EQ(doubles(y), (std::vector<double>{1, 2, 3, 3, 0, -2, -4, -3, -4, -2}));
  // A scale with 2 columns does not cover 5 positions in blocks of 2.
  Tensor bad = make<float>(DType::Float32, {2, 2}, {1, 1, 1, 1});
  EXPECT_THROW(run(node("QuantizeLinear", 21, 2, {ir::int_attr("axis", 1), ir::int_attr("block_size", 2)}), {x, bad}),
               Error);
}

TEST(Quantize, Int4RoundsHalfToEvenAndSaturates) {
  Tensor x = make<float>(DType::Float32, {4}, {20, -20, 2.5f, 3.5f});
  Tensor s = make<float>(DType::Float32, {}, {1});
  Tensor z = Tensor::empty(DType::Int4, {});  // code 0
  Tensor y = run(node("QuantizeLinear", 21, 3), {x, s, z});
  ASSERT_EQ(y.dtype(), DType::Int4);
  EXPECT_EQ(doubles(y), (std::vector<double>{7, -8, 2, 4}));
}

TEST(Quantize, DefaultsToUint8) {
  Tensor x = make<float>(DType::Float32, {3}, {-1, 300, 127.5f});
  Tensor s = make<float>(DType::Float32, {}, {1});
  Tensor y = run(node("QuantizeLinear", 13, 2), {x, s});
  ASSERT_EQ(y.dtype(), DType::UInt8);
  EXPECT_EQ(doubles(y), (std::vector<double>{0, 255, 128}));
}

TEST(Quantize, Float8SaturateAttribute) {
  Tensor x = make<float>(DType::Float32, {2}, {1000, -0.3f});
  Tensor s = make<float>(DType::Float32, {}, {1});
  const int64_t e4m3fn = static_cast<int64_t>(DType::Float8E4M3FN);
  Tensor sat = run(node("QuantizeLinear", 21, 2, {ir::int_attr("output_dtype", e4m3fn)}), {x, s});
  ASSERT_EQ(sat.dtype(), DType::Float8E4M3FN);
  EXPECT_EQ(sat.as_double(0), 448.0);
  EXPECT_EQ(sat.as_double(1), -0.3125);  // step 1/32 in [0.25, 0.5): -0.3 is nearest -10/32
  Tensor nosat =
      run(node("QuantizeLinear", 21, 2, {ir::int_attr("output_dtype", e4m3fn), ir::int_attr("saturate", 0)}), {x, s});
  EXPECT_TRUE(std::isnan(nosat.as_double(0)));
}

TEST(Dequantize, PerAxisWithZeroPoints) {
  Tensor x = make<int8_t>(DType::Int8, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor s = make<float>(DType::Float32, {2}, {0.5f, 2});
  Tensor z = make<int8_t>(DType::Int8, {2}, {1, -1});
  Tensor y = run(node("DequantizeLinear", 13, 3, {ir::int_attr("axis", 0)}), {x, s, z});
  ASSERT_EQ(y.dtype(), DType::Float32);
  EXPECT_EQ(doubles(y), (std::vector<double>{0, 0.5, 1, 10, 12, 14}));
  // A float8 input has no zero point other than 0.
  Tensor f8 = cast_tensor(make<float>(DType::Float32, {2}, {1, 2}), DType::Float8E4M3FN);
  Tensor one = cast_tensor(make<float>(DType::Float32, {}, {1}), DType::Float8E4M3FN);
  Tensor s1 = make<float>(DType::Float32, {}, {2});
  EXPECT_EQ(doubles(run(node("DequantizeLinear", 21, 2), {f8, s1})), (std::vector<double>{2, 4}));
  EXPECT_THROW(run(node("DequantizeLinear", 21, 3), {f8, s1, one}), Error);
}

// A' = A - [1, 2] per row = [[2,3],[3,4]]; B' = B - [1, 0] per column = [[0,0],[-1,1]].
TEST(MatMulInteger, PerRowAndPerColumnZeroPoints) {
  Tensor a = make<uint8_t>(DType::UInt8, {2, 2}, {3, 4, 5, 6});
  Tensor b = make<uint8_t>(DType::UInt8, {2, 2}, {1, 0, 0, 1});
  Tensor az = make<uint8_t>(DType::UInt8, {2}, {1, 2});
  Tensor bz = make<uint8_t>(DType::UInt8, {2}, {1, 0});
  Tensor y = run(node("MatMulInteger", 10, 4), {a, b, az, bz});
  ASSERT_EQ(y.dtype(), DType::Int32);
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{-3, 3, -4, 4}));
}

// a' = [10,20] - 10 = [0,10], b' = [3,5] - 1 = [2,4]: acc 40; multiplier 0.5 * 0.25 / s_y.
TEST(QLinearMatMul, Requantizes) {
  Tensor a = make<uint8_t>(DType::UInt8, {1, 2}, {10, 20});
  Tensor as = make<float>(DType::Float32, {}, {0.5f});
  Tensor az = make<uint8_t>(DType::UInt8, {}, {10});
  Tensor b = make<uint8_t>(DType::UInt8, {2, 1}, {3, 5});
  Tensor bs = make<float>(DType::Float32, {}, {0.25f});
  Tensor bz = make<uint8_t>(DType::UInt8, {}, {1});
  Tensor yz = make<uint8_t>(DType::UInt8, {}, {100});
  Tensor ys = make<float>(DType::Float32, {}, {0.25f});  // multiplier 0.5: 20 + 100
  EXPECT_EQ(run(node("QLinearMatMul", 10, 8), {a, as, az, b, bs, bz, ys, yz}).to_int64_vector(),
            (std::vector<int64_t>{120}));
  Tensor ys2 = make<float>(DType::Float32, {}, {0.0078125f});  // multiplier 16: 640 + 100 saturates
  EXPECT_EQ(run(node("QLinearMatMul", 10, 8), {a, as, az, b, bs, bz, ys2, yz}).to_int64_vector(),
            (std::vector<int64_t>{255}));
}

TEST(Cast, E8M0RoundMode) {
  Tensor x = make<float>(DType::Float32, {3}, {0.124f, 0.17f, 0.1875f});
  const int64_t e8m0 = static_cast<int64_t>(DType::Float8E8M0);
  auto cast = [&](const char* mode) {
    return doubles(run(node("Cast", 24, 1, {ir::int_attr("to", e8m0), ir::string_attr("round_mode", mode)}), {x}));
  };
  EXPECT_EQ(cast("up"), (std::vector<double>{0.125, 0.25, 0.25}));
  EXPECT_EQ(cast("down"), (std::vector<double>{0.0625, 0.125, 0.125}));
  EXPECT_EQ(cast("nearest"), (std::vector<double>{0.125, 0.125, 0.25}));  // 0.1875 is the tie: up
  const ir::Node bad = node("Cast", 24, 1, {ir::int_attr("to", e8m0), ir::string_attr("round_mode", "zero")});
  EXPECT_NE(ops::OpRegistry::global().why_unsupported(bad), "");
}

TEST(BitCast, ReinterpretsBytes) {
  Tensor x = make<float>(DType::Float32, {2}, {1.0f, -2.0f});
  Tensor y = run(node("BitCast", 26, 1, {ir::int_attr("to", static_cast<int64_t>(DType::Int32))}), {x});
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{0x3F800000, static_cast<int32_t>(0xC0000000)}));
  Tensor bytes = make<uint8_t>(DType::UInt8, {2}, {1, 2});
  EXPECT_THROW(run(node("BitCast", 26, 1, {ir::int_attr("to", static_cast<int64_t>(DType::Bool))}), {bytes}), Error);
  Tensor i4 = Tensor::empty(DType::Int4, {2});
  EXPECT_THROW(run(node("BitCast", 26, 1, {ir::int_attr("to", static_cast<int64_t>(DType::Int8))}), {i4}), Error);
  Tensor u4 = run(node("BitCast", 26, 1, {ir::int_attr("to", static_cast<int64_t>(DType::UInt4))}), {i4});
  EXPECT_EQ(u4.dtype(), DType::UInt4);
}
