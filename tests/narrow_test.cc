// Narrow element types (core/narrow.h): float8/float4 rounding, saturation and special values by
// the ONNX Cast tables, E8M0 rounding modes, 4-/2-bit integer wrapping, ONNX sub-byte packing.
// Expected codes are derived by hand from each format's layout (sign, exponent with bias,
// mantissa), e.g. E4M3FN 1.0 = exponent 7 (bias 7), mantissa 0 = 0b0'0111'000 = 0x38.
#include "core/narrow.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"

namespace reforge {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const NarrowCastOptions kSat{true, E8M0Rounding::kUp};
const NarrowCastOptions kNoSat{false, E8M0Rounding::kUp};

TEST(Narrow, Float8E4M3FN) {
  const DType t = DType::Float8E4M3FN;
  EXPECT_EQ(narrow_from_double(t, 1.0), 0x38);
  EXPECT_EQ(narrow_from_double(t, -2.0), 0xC0);
  EXPECT_EQ(narrow_from_double(t, 448.0), 0x7E);
  EXPECT_EQ(narrow_from_double(t, 464.0, kNoSat), 0x7E);  // tie between 448 (even) and 480
  EXPECT_EQ(narrow_from_double(t, 470.0, kSat), 0x7E);
  EXPECT_EQ(narrow_from_double(t, 470.0, kNoSat), 0x7F);  // rounds past the largest: NaN
  EXPECT_EQ(narrow_from_double(t, kInf, kSat), 0x7E);
  EXPECT_EQ(narrow_from_double(t, -kInf, kSat), 0xFE);
  EXPECT_EQ(narrow_from_double(t, kInf, kNoSat), 0x7F);
  EXPECT_EQ(narrow_from_double(t, -kInf, kNoSat), 0xFF);
  EXPECT_EQ(narrow_from_double(t, kNaN), 0x7F);
  EXPECT_EQ(narrow_from_double(t, -0.0), 0x80);
  EXPECT_EQ(narrow_from_double(t, std::ldexp(1.0, -9)), 0x01);   // smallest subnormal
  EXPECT_EQ(narrow_from_double(t, std::ldexp(1.0, -10)), 0x00);  // tie with 0: even
  EXPECT_EQ(narrow_from_double(t, std::ldexp(1.5, -10)), 0x01);  // above the tie
  EXPECT_EQ(narrow_from_double(t, std::ldexp(7.5, -9)), 0x08);   // rounds up into the normals
  EXPECT_EQ(narrow_to_double(t, 0x7E), 448.0);
  EXPECT_EQ(narrow_to_double(t, 0x01), std::ldexp(1.0, -9));
  EXPECT_TRUE(std::isnan(narrow_to_double(t, 0xFF)));
}

TEST(Narrow, Float8E4M3FNUZ) {
  const DType t = DType::Float8E4M3FNUZ;
  EXPECT_EQ(narrow_from_double(t, 1.0), 0x40);   // bias 8
  EXPECT_EQ(narrow_from_double(t, -0.0), 0x00);  // no negative zero
  EXPECT_EQ(narrow_from_double(t, -1e-7), 0x00);
  EXPECT_EQ(narrow_from_double(t, kNaN), 0x80);
  EXPECT_EQ(narrow_from_double(t, 240.0), 0x7F);
  EXPECT_EQ(narrow_from_double(t, kInf, kSat), 0x7F);
  EXPECT_EQ(narrow_from_double(t, -kInf, kSat), 0xFF);
  EXPECT_EQ(narrow_from_double(t, kInf, kNoSat), 0x80);
  EXPECT_EQ(narrow_from_double(t, 300.0, kNoSat), 0x80);
  EXPECT_TRUE(std::isnan(narrow_to_double(t, 0x80)));
  EXPECT_EQ(narrow_to_double(t, 0xFF), -240.0);
}

TEST(Narrow, Float8E5M2) {
  const DType t = DType::Float8E5M2;
  EXPECT_EQ(narrow_from_double(t, 1.0), 0x3C);
  EXPECT_EQ(narrow_from_double(t, 57344.0), 0x7B);
  EXPECT_EQ(narrow_from_double(t, 61439.0, kNoSat), 0x7B);
  EXPECT_EQ(narrow_from_double(t, 61440.0, kNoSat), 0x7C);  // tie, rounds to even 2^16: infinity
  EXPECT_EQ(narrow_from_double(t, 61440.0, kSat), 0x7B);
  EXPECT_EQ(narrow_from_double(t, -kInf, kNoSat), 0xFC);
  EXPECT_EQ(narrow_from_double(t, -kInf, kSat), 0xFB);
  EXPECT_EQ(narrow_from_double(t, -0.0), 0x80);
  EXPECT_TRUE(std::isnan(narrow_to_double(t, narrow_from_double(t, kNaN))));
  EXPECT_EQ(narrow_to_double(t, 0x7C), kInf);
  EXPECT_EQ(narrow_to_double(t, 0x01), std::ldexp(1.0, -16));
}

TEST(Narrow, Float8E5M2FNUZ) {
  const DType t = DType::Float8E5M2FNUZ;
  EXPECT_EQ(narrow_from_double(t, 1.0), 0x40);  // bias 16
  EXPECT_EQ(narrow_from_double(t, -kInf, kNoSat), 0x80);
  EXPECT_EQ(narrow_from_double(t, -kInf, kSat), 0xFF);
  EXPECT_EQ(narrow_to_double(t, 0x7F), 57344.0);
  EXPECT_EQ(narrow_to_double(t, 0x01), std::ldexp(1.0, -17));
}

TEST(Narrow, Float4E2M1) {
  const DType t = DType::Float4E2M1;            // values 0, 0.5, 1, 1.5, 2, 3, 4, 6
  EXPECT_EQ(narrow_from_double(t, 0.25), 0x0);  // tie with 0: even
  EXPECT_EQ(narrow_from_double(t, 0.26), 0x1);
  EXPECT_EQ(narrow_from_double(t, 0.75), 0x2);         // tie 0.5 (code 1) / 1.0 (code 2): even
  EXPECT_EQ(narrow_from_double(t, 5.0), 0x6);          // tie 4 / 6: even
  EXPECT_EQ(narrow_from_double(t, -3.5), 0xE);         // tie 3 / 4: even, -4
  EXPECT_EQ(narrow_from_double(t, 1e9, kNoSat), 0x7);  // float4 always saturates
  EXPECT_EQ(narrow_from_double(t, -kInf, kNoSat), 0xF);
  EXPECT_EQ(narrow_from_double(t, kNaN), 0x8);  // no NaN: a zero of the opposite sign
  EXPECT_EQ(narrow_from_double(t, -kNaN), 0x0);
  EXPECT_EQ(narrow_to_double(t, 0x7), 6.0);
  EXPECT_EQ(narrow_to_double(t, 0x9), -0.5);
}

TEST(Narrow, Float8E8M0) {
  const DType t = DType::Float8E8M0;
  const NarrowCastOptions down{true, E8M0Rounding::kDown}, nearest{true, E8M0Rounding::kNearest};
  EXPECT_EQ(narrow_from_double(t, 1.0), 127);
  EXPECT_EQ(narrow_from_double(t, 0.124), 124);  // up: 2^-3
  EXPECT_EQ(narrow_from_double(t, 0.124, down), 123);
  EXPECT_EQ(narrow_from_double(t, 0.1875, nearest), 125);  // 1.5 * 2^-3: ties up
  EXPECT_EQ(narrow_from_double(t, 0.17, nearest), 124);
  EXPECT_EQ(narrow_from_double(t, 0.0, kSat), 0x00);
  EXPECT_EQ(narrow_from_double(t, 0.0, kNoSat), 0xFF);
  EXPECT_EQ(narrow_from_double(t, kInf, kSat), 0xFE);
  EXPECT_EQ(narrow_from_double(t, kInf, kNoSat), 0xFF);
  EXPECT_EQ(narrow_from_double(t, std::ldexp(1.5, 127), kSat), 0xFE);  // up would be 2^128
  EXPECT_EQ(narrow_from_double(t, std::ldexp(1.5, 127), kNoSat), 0xFF);
  EXPECT_EQ(narrow_from_double(t, kNaN), 0xFF);
  EXPECT_EQ(narrow_to_double(t, 0), std::ldexp(1.0, -127));
  EXPECT_EQ(narrow_to_double(t, 0xFE), std::ldexp(1.0, 127));
  EXPECT_TRUE(std::isnan(narrow_to_double(t, 0xFF)));
}

TEST(Narrow, SubByteIntegersWrap) {
  EXPECT_EQ(narrow_from_double(DType::Int4, 9.0), 0x9);
  EXPECT_EQ(narrow_to_double(DType::Int4, 0x9), -7.0);
  EXPECT_EQ(narrow_from_double(DType::Int4, -9.0), 0x7);
  EXPECT_EQ(narrow_from_double(DType::Int4, -2.7), 0xE);  // truncated to -2
  EXPECT_EQ(narrow_from_double(DType::Int4, kNaN), 0x0);
  EXPECT_EQ(narrow_from_int64(DType::UInt4, -1), 0xF);
  EXPECT_EQ(narrow_from_int64(DType::Int4, 100), 0x4);
  EXPECT_EQ(narrow_from_int64(DType::Int2, 3), 0x3);
  EXPECT_EQ(narrow_to_double(DType::Int2, 0x3), -1.0);
  EXPECT_EQ(narrow_to_double(DType::UInt2, 0x3), 3.0);
}

// Every finite code of each minifloat format decodes to a value that encodes back to it.
TEST(Narrow, EveryCodeRoundTrips) {
  for (DType t :
       {DType::Float8E4M3FN, DType::Float8E4M3FNUZ, DType::Float8E5M2, DType::Float8E5M2FNUZ, DType::Float8E8M0}) {
    for (int c = 0; c < 256; ++c) {
      double v = narrow_to_double(t, static_cast<uint8_t>(c));
      if (std::isnan(v)) continue;
      EXPECT_EQ(narrow_from_double(t, v, kNoSat), c) << dtype_name(t) << " code " << c;
    }
  }
  for (int c = 0; c < 16; ++c)
    EXPECT_EQ(narrow_from_double(DType::Float4E2M1, narrow_to_double(DType::Float4E2M1, static_cast<uint8_t>(c))), c);
}

TEST(Narrow, SubBytePacking) {
  const std::vector<uint8_t> int4{0x1, 0xE, 0x3};  // 1, -2, 3
  std::vector<uint8_t> packed(onnx_packed_bytes(DType::Int4, 3));
  ASSERT_EQ(packed.size(), 2u);
  pack_subbyte(DType::Int4, int4.data(), 3, packed.data());
  EXPECT_EQ(packed, (std::vector<uint8_t>{0xE1, 0x03}));
  std::vector<uint8_t> back(3);
  unpack_subbyte(DType::Int4, packed.data(), 3, back.data());
  EXPECT_EQ(back, int4);

  const std::vector<uint8_t> uint2{1, 2, 3, 0, 1};
  packed.assign(onnx_packed_bytes(DType::UInt2, 5), 0);
  ASSERT_EQ(packed.size(), 2u);
  pack_subbyte(DType::UInt2, uint2.data(), 5, packed.data());
  EXPECT_EQ(packed, (std::vector<uint8_t>{0x39, 0x01}));
}

// An ONNX file packs 4- and 2-bit initializers (odd counts included); importing unpacks them to
// the same codes, and float8 codes travel as they are.
TEST(Narrow, OnnxFileRoundTrip) {
  ir::Graph g;
  g.name = "narrow";
  g.ir_version = 10;
  g.opsets[""] = 21;
  auto codes = [](DType t, std::vector<uint8_t> v) {
    Tensor x = Tensor::empty(t, {static_cast<int64_t>(v.size())});
    for (size_t i = 0; i < v.size(); ++i) x.mutable_data<uint8_t>()[i] = v[i];
    return x;
  };
  g.initializers["i4"] = codes(DType::Int4, {0x1, 0xE, 0x3});
  g.initializers["u2"] = codes(DType::UInt2, {1, 2, 3, 0, 1});
  g.initializers["f8"] = codes(DType::Float8E5M2, {0x3C, 0xFC});
  ir::Node n;
  n.name = "cast";
  n.op_type = "Cast";
  n.opset = 21;
  n.inputs = {"i4"};
  n.outputs = {"y"};
  n.attrs["to"] = ir::int_attr("to", static_cast<int64_t>(DType::Float32));
  g.nodes.push_back(n);
  ir::ValueInfo y;
  y.name = "y";
  y.dtype = DType::Float32;
  g.outputs.push_back(y);
  const std::string path = testing::TempDir() + "/narrow_roundtrip.onnx";
  onnx::write_model_file(g, path);
  ir::Graph back = onnx::import_model_file(path);
  for (const char* name : {"i4", "u2", "f8"}) {
    const Tensor& a = g.initializers.at(name);
    const Tensor& b = back.initializers.at(name);
    ASSERT_EQ(b.dtype(), a.dtype()) << name;
    ASSERT_EQ(b.shape(), a.shape()) << name;
    EXPECT_EQ(std::vector<uint8_t>(b.data<uint8_t>(), b.data<uint8_t>() + b.numel()),
              std::vector<uint8_t>(a.data<uint8_t>(), a.data<uint8_t>() + a.numel()))
        << name;
  }
}

TEST(Narrow, CastTensor) {
  Tensor x = Tensor::empty(DType::Float32, {4});
  float* p = x.mutable_data<float>();
  p[0] = -9.0f;
  p[1] = 7.0f;
  p[2] = 8.0f;
  p[3] = 2.9f;
  Tensor i4 = cast_tensor(x, DType::Int4);
  ASSERT_EQ(i4.dtype(), DType::Int4);
  Tensor i8 = cast_tensor(i4, DType::Int8);
  EXPECT_EQ(i8.to_int64_vector(), (std::vector<int64_t>{7, 7, -8, 2}));
  Tensor f8 = cast_tensor(x, DType::Float8E4M3FN, NarrowCastOptions{false, E8M0Rounding::kUp});
  Tensor back = cast_tensor(f8, DType::Float32);
  EXPECT_EQ(back.data<float>()[0], -9.0f);
  EXPECT_EQ(back.data<float>()[3], 3.0f);  // step 0.25 in [2, 4): 2.9 is nearest 3.0
}

}  // namespace
}  // namespace reforge
