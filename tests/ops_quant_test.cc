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

// com.microsoft MatMulNBits. B holds N rows of k_blocks blobs; codes are packed low bits first.
namespace {

ir::Node nbits_node(int64_t K, int64_t N, int64_t bits, int64_t block, std::vector<bool> present) {
  ir::Node n =
      node("MatMulNBits", 1, 0,
           {ir::int_attr("K", K), ir::int_attr("N", N), ir::int_attr("bits", bits), ir::int_attr("block_size", block)});
  n.domain = "com.microsoft";
  for (size_t i = 0; i < present.size(); ++i) n.inputs.push_back(present[i] ? "in" + std::to_string(i) : "");
  return n;
}

std::vector<double> run_nbits(const ir::Node& n, const std::vector<const Tensor*>& ins) {
  return doubles(test_support::run_node(n, ins)[0]);
}

// K = 20 (not a multiple of block_size 16: the second block holds 4 codes and 12 codes of
// padding, set to 0xF so that reading them would show), N = 2, 4 bits.
//   row 0: block 0 codes 9; block 1 codes 1, 2, 3, 4.   scales 0.5, 2
//   row 1: block 0 codes 0 (even k), 15 (odd k); block 1 codes 8.   scales 0.25, 1
// A row 0 is k + 1, row 1 all ones.
struct NBitsCase {
  Tensor A = Tensor::empty(DType::Float32, {2, 1, 20});
  Tensor B = make<uint8_t>(DType::UInt8, {2, 2, 8}, {0x99, 0x99, 0x99, 0x99, 0x99, 0x99, 0x99, 0x99, 0x21, 0x43, 0xFF,
                                                     0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xF0, 0xF0, 0xF0, 0xF0, 0xF0, 0xF0,
                                                     0xF0, 0xF0, 0x88, 0x88, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF});
  Tensor S = make<float>(DType::Float32, {2, 2}, {0.5f, 2.0f, 0.25f, 1.0f});
  NBitsCase() {
    for (int k = 0; k < 20; ++k) {
      A.mutable_data<float>()[k] = static_cast<float>(k + 1);
      A.mutable_data<float>()[20 + k] = 1.0f;
    }
  }
};

}  // namespace

// No zero points: every zero point is 8. W row 0 = 0.5 (k < 16), -14, -12, -10, -8; row 1 = -2
// (even k < 16), 1.75 (odd k < 16), 0.
//   A row 0: y0 = 0.5 * 136 - (14*17 + 12*18 + 10*19 + 8*20) = 68 - 804 = -736;
//            y1 = -2 * (1+3+...+15) + 1.75 * (2+4+...+16) = -128 + 126 = -2.
//   A row 1: y0 = 0.5 * 16 - 44 = -36; y1 = -16 + 14 = -2.
TEST(MatMulNBits, PartialBlockDefaultZeroPoint) {
  NBitsCase c;
  const ir::Node n = nbits_node(20, 2, 4, 16, {true, true, true});
  Tensor y = test_support::run_node(n, {&c.A, &c.B, &c.S})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(doubles(y), (std::vector<double>{-736, -2, -36, -2}));
  // bias [1, 0.5] is added to each row.
  Tensor bias = make<float>(DType::Float32, {2}, {1.0f, 0.5f});
  const ir::Node nb = nbits_node(20, 2, 4, 16, {true, true, true, false, false, true});
  EXPECT_EQ(run_nbits(nb, {&c.A, &c.B, &c.S, nullptr, nullptr, &bias}), (std::vector<double>{-735, -1.5, -35, -1.5}));
}

// Packed uint8 zero points, one byte per row (2 blocks of 4 bits): row 0 0x09 (block 0: 9,
// block 1: 0), row 1 0x80 (0, 8). W row 0 = 0 (k < 16), 2, 4, 6, 8; row 1 = 0 (even), 3.75 (odd), 0.
//   A row 0: y0 = 2*17 + 4*18 + 6*19 + 8*20 = 380; y1 = 3.75 * 72 = 270.
//   A row 1: y0 = 20; y1 = 3.75 * 8 = 30.
TEST(MatMulNBits, PackedZeroPoints) {
  NBitsCase c;
  Tensor zp = make<uint8_t>(DType::UInt8, {2, 1}, {0x09, 0x80});
  const ir::Node n = nbits_node(20, 2, 4, 16, {true, true, true, true});
  EXPECT_EQ(run_nbits(n, {&c.A, &c.B, &c.S, &zp}), (std::vector<double>{380, 270, 20, 30}));
}

// Float zero points (unpacked, one per block) and g_idx sending columns 0..15 to block 1 and
// 16..19 to block 0 (the codes stay where they are). zero points row 0: 9, 0; row 1: 0, 8.
//   row 0: k < 16: (9 - 0) * 2 = 18; k = 16..19: (code - 9) * 0.5 = -4, -3.5, -3, -2.5.
//          y0 = 18 * 136 - (4*17 + 3.5*18 + 3*19 + 2.5*20) = 2448 - 238 = 2210.
//   row 1: k < 16: (0 - 8) * 1 = -8 (even), 7 (odd); k >= 16: (8 - 0) * 0.25 = 2.
//          y1 = -8 * 64 + 7 * 72 + 2 * (17+18+19+20) = -512 + 504 + 148 = 140.
TEST(MatMulNBits, FloatZeroPointsAndGroupIndex) {
  NBitsCase c;
  Tensor zp = make<float>(DType::Float32, {2, 2}, {9, 0, 0, 8});
  Tensor g = Tensor::empty(DType::Int32, {20});
  for (int k = 0; k < 20; ++k) g.mutable_data<int32_t>()[k] = k < 16 ? 1 : 0;
  const ir::Node n = nbits_node(20, 2, 4, 16, {true, true, true, true, true});
  const std::vector<double> y = run_nbits(n, {&c.A, &c.B, &c.S, &zp, &g});
  EXPECT_EQ(y[0], 2210);
  EXPECT_EQ(y[1], 140);
  g.mutable_data<int32_t>()[3] = 2;  // outside [0, k_blocks)
  EXPECT_THROW(run_nbits(n, {&c.A, &c.B, &c.S, &zp, &g}), Error);
}

// 8 bits, odd K = 5 in one block of 16: codes 130, 126, 128, 140, 100 (then padding), zero point
// 128 by default, scale 0.5: W = 1, -1, 0, 6, -14; A = 1..5: y = 1 - 2 + 0 + 24 - 70 = -47.
// 2 bits, K = 16: bytes 0xE4 hold codes 0, 1, 2, 3 (low bits first), zero point 2 by default,
// scale 1: W = -2, -1, 0, 1 repeated; A = k + 1: each group of 4 gives -8j, y = -8 * (0+1+2+3) = -48.
TEST(MatMulNBits, EightAndTwoBits) {
  Tensor a5 = make<float>(DType::Float32, {1, 5}, {1, 2, 3, 4, 5});
  std::vector<uint8_t> codes(16, 7);
  codes[0] = 130, codes[1] = 126, codes[2] = 128, codes[3] = 140, codes[4] = 100;
  Tensor b8 = make<uint8_t>(DType::UInt8, {1, 1, 16}, codes);
  Tensor s = make<float>(DType::Float32, {1}, {0.5f});
  EXPECT_EQ(run_nbits(nbits_node(5, 1, 8, 16, {true, true, true}), {&a5, &b8, &s}), (std::vector<double>{-47}));
  Tensor a16 = Tensor::empty(DType::Float32, {16});
  for (int k = 0; k < 16; ++k) a16.mutable_data<float>()[k] = static_cast<float>(k + 1);
  Tensor b2 = make<uint8_t>(DType::UInt8, {1, 1, 4}, {0xE4, 0xE4, 0xE4, 0xE4});
  Tensor s1 = make<float>(DType::Float32, {1}, {1.0f});
  EXPECT_EQ(run_nbits(nbits_node(16, 1, 2, 16, {true, true, true}), {&a16, &b2, &s1}), (std::vector<double>{-48}));
}

TEST(MatMulNBits, RefusesBadShapesAndAttributes) {
  NBitsCase c;
  const auto& reg = ops::OpRegistry::global();
  EXPECT_NE(reg.why_unsupported(nbits_node(20, 2, 3, 16, {true, true, true})), "");  // bits 3
  EXPECT_NE(reg.why_unsupported(nbits_node(20, 2, 4, 24, {true, true, true})), "");  // block 24
  EXPECT_EQ(reg.why_unsupported(nbits_node(20, 2, 4, 16, {true, true, true})), "");
  EXPECT_THROW(run_nbits(nbits_node(21, 2, 4, 16, {true, true, true}), {&c.A, &c.B, &c.S}), Error);  // K
  EXPECT_THROW(run_nbits(nbits_node(20, 3, 4, 16, {true, true, true}), {&c.A, &c.B, &c.S}), Error);  // N
  Tensor zp = make<uint8_t>(DType::UInt8, {3}, {0, 0, 0});
  EXPECT_THROW(run_nbits(nbits_node(20, 2, 4, 16, {true, true, true, true}), {&c.A, &c.B, &c.S, &zp}), Error);
}

// The inputs a quantizer writes (ops::is_quantized_input): checkpoint binding refuses them, and
// their integer values are sources rather than literals (build/fingerprint.h).
TEST(QuantizedInputs, MarkedOnTheRegistry) {
  auto q = [](const char* domain, const char* op, int opset, size_t slot) {
    ir::Node n = node(op, opset, 0);
    n.domain = domain;
    return ops::is_quantized_input(n, slot);
  };
  EXPECT_TRUE(q("", "DequantizeLinear", 21, 0));
  EXPECT_TRUE(q("", "DequantizeLinear", 21, 2));
  EXPECT_FALSE(q("", "QuantizeLinear", 21, 0));  // a float weight quantized at run time binds
  EXPECT_TRUE(q("", "QuantizeLinear", 21, 1));
  EXPECT_TRUE(q("", "QLinearConv", 10, 8));
  EXPECT_TRUE(q("", "MatMulInteger", 10, 3));
  for (size_t s : {1, 2, 3, 4}) EXPECT_TRUE(q("com.microsoft", "MatMulNBits", 1, s)) << s;
  EXPECT_FALSE(q("com.microsoft", "MatMulNBits", 1, 0));
  EXPECT_FALSE(q("com.microsoft", "MatMulNBits", 1, 5));  // the float bias binds
  EXPECT_FALSE(q("", "MatMul", 13, 1));
}

// float16 A, scales and bias: the output is float16. The 8-bit case above (y = -47) plus a bias of
// 0.5 is exact in float16.
TEST(MatMulNBits, Float16) {
  Tensor a = Tensor::empty(DType::Float16, {1, 5});
  for (int k = 0; k < 5; ++k) a.mutable_data<float16>()[k] = float16(static_cast<float>(k + 1));
  std::vector<uint8_t> codes(16, 0);
  codes[0] = 130, codes[1] = 126, codes[2] = 128, codes[3] = 140, codes[4] = 100;
  Tensor b = make<uint8_t>(DType::UInt8, {1, 1, 16}, codes);
  Tensor s = Tensor::empty(DType::Float16, {1});
  s.mutable_data<float16>()[0] = float16(0.5f);
  Tensor bias = Tensor::empty(DType::Float16, {1});
  bias.mutable_data<float16>()[0] = float16(0.5f);
  Tensor y = test_support::run_node(nbits_node(5, 1, 8, 16, {true, true, true, false, false, true}),
                                    {&a, &b, &s, nullptr, nullptr, &bias})[0];
  EXPECT_EQ(y.dtype(), DType::Float16);
  EXPECT_EQ(doubles(y), (std::vector<double>{-46.5}));
  Tensor s32 = make<float>(DType::Float32, {1}, {0.5f});  // scales must have A's type
  EXPECT_THROW(run_nbits(nbits_node(5, 1, 8, 16, {true, true, true}), {&a, &b, &s32}), Error);
}
