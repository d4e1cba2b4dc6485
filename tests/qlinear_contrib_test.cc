// ONNX Runtime's com.microsoft QLinearAdd, QLinearMul, QGemm and QLinearSoftmax
// (ops/quant/qlinear_contrib.cc) on values derived by hand from the ops' definitions; the bundled
// models ORT's quantize_static writes with them (bert_qop, cnn_qop) are compared with ORT's own
// outputs in quant_models_test.cc.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/registry.h"
#include "support/make_tensor.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::make;

namespace {

Tensor run(const std::string& op, const std::vector<Tensor>& in, std::map<std::string, ir::Attribute> attrs = {}) {
  std::vector<const Tensor*> p;
  for (const Tensor& t : in) p.push_back(t.defined() ? &t : nullptr);
  return transforms::evaluate_op("com.microsoft", op, 1, attrs, p, 1)[0];
}

Tensor f(float v) { return make<float>({}, {v}); }
Tensor u8(uint8_t v) { return make<uint8_t>({}, {v}); }
Tensor i8(int8_t v) { return make<int8_t>({}, {v}); }

template <typename T>
std::vector<int> values(const Tensor& t) {
  std::vector<int> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<int>(t.data<T>()[i]));
  return v;
}

// C = round((A_scale (a - A_zp) + B_scale (b - B_zp)) / C_scale) + C_zp, saturated.
TEST(QLinearContrib, AddByHand) {
  // a: (10 - 5) 0.125 = 0.625, (200 - 5) 0.125 = 24.375, (0 - 5) 0.125 = -0.625, (250 - 5) 0.125 = 30.625;
  // b (broadcast over rows): (50 - 10) 0.25 = 10, (60 - 10) 0.25 = 12.5, (10 - 10) 0.25 = 0. Sums / 0.5:
  // 21.25, 73.75, -1.25 | 81.25, 86.25, 61.25; rounded, + 3: 24, 77, 2 | 84, 89, 64.
  const Tensor a = make<uint8_t>({2, 3}, {10, 200, 0, 250, 250, 250});
  const Tensor b = make<uint8_t>({3}, {50, 60, 10});
  const Tensor y = run("QLinearAdd", {a, f(0.125f), u8(5), b, f(0.25f), u8(10), f(0.5f), u8(3)});
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  ASSERT_EQ(y.dtype(), DType::UInt8);
  EXPECT_EQ(values<uint8_t>(y), (std::vector<int>{24, 77, 2, 84, 89, 64}));
  // Saturation at both ends (int8), a scalar operand, absent zero points (0).
  const Tensor sa = make<int8_t>({4}, {127, -128, 3, -3});
  const Tensor y8 = run("QLinearAdd", {sa, f(1.0f), Tensor(), i8(100), f(1.0f), Tensor(), f(1.0f), Tensor()});
  EXPECT_EQ(values<int8_t>(y8), (std::vector<int>{127, -28, 103, 97}));
}

// C = round(A_scale (a - A_zp) B_scale (b - B_zp) / C_scale) + C_zp, saturated.
TEST(QLinearContrib, MulByHand) {
  // (-3 - 1) 0.5 = -2, (4 - 1) 0.5 = 1.5; b 2 0.25 = 0.5, -5 0.25 = -1.25: products -1, -1.875;
  // / 0.125 = -8, -15; - 2 = -10, -17. Third: (100 - 1) 0.5 (120 0.25) / 0.125 = 11880 -> 127.
  const Tensor a = make<int8_t>({3}, {-3, 4, 100});
  const Tensor b = make<int8_t>({3}, {2, -5, 120});
  const Tensor y = run("QLinearMul", {a, f(0.5f), i8(1), b, f(0.25f), i8(0), f(0.125f), i8(-2)});
  EXPECT_EQ(values<int8_t>(y), (std::vector<int>{-10, -17, 127}));
}

// acc = C + sum_k (a - a_zp)(b - b_zp[n]); y = acc alpha a_scale b_scale[n] (float), or requantized.
TEST(QLinearContrib, QGemmByHand) {
  // A (uint8, zp 2) [2, 3] = [[3, 4, 5], [2, 2, 10]] -> [[1, 2, 3], [0, 0, 8]];
  // B (int8, transB: [N, K] = [2, 3]) = [[1, 0, -1], [2, 2, 2]], zero points [0, 1] -> [[1, 0, -1], [1, 1, 1]];
  // products: [[1 - 3, 1 + 2 + 3], [-8, 8]] = [[-2, 6], [-8, 8]]; C = [10, -4]: [[8, 2], [2, 4]].
  const Tensor A = make<uint8_t>({2, 3}, {3, 4, 5, 2, 2, 10});
  const Tensor B = make<int8_t>({2, 3}, {1, 0, -1, 2, 2, 2});
  const Tensor bs = make<float>({2}, {0.5f, 0.25f});
  const Tensor bz = make<int8_t>({2}, {0, 1});
  const Tensor C = make<int32_t>({2}, {10, -4});
  std::map<std::string, ir::Attribute> attrs = {{"transB", ir::int_attr("transB", 1)},
                                                {"alpha", ir::float_attr("alpha", 2.0f)}};
  const Tensor y = run("QGemm", {A, f(0.25f), u8(2), B, bs, bz, C}, attrs);
  ASSERT_EQ(y.dtype(), DType::Float32);
  ASSERT_EQ(y.shape(), (Shape{2, 2}));
  // scales alpha 0.25 b_scale: [0.25, 0.125].
  const std::vector<float> want = {8 * 0.25f, 2 * 0.125f, 2 * 0.25f, 4 * 0.125f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.data<float>()[i], want[static_cast<size_t>(i)]) << i;
  // Requantized with y_scale 0.125 and y_zp 100: acc * [2, 1] + 100 = [[116, 102], [104, 104]].
  const Tensor q = run("QGemm", {A, f(0.25f), u8(2), B, bs, bz, C, f(0.125f), u8(100)}, attrs);
  ASSERT_EQ(q.dtype(), DType::UInt8);
  EXPECT_EQ(values<uint8_t>(q), (std::vector<int>{116, 102, 104, 104}));
}

// QLinearSoftmax: within one output step of round(softmax(X_scale x) / y_scale) + y_zp, the row
// sums to about 1 / y_scale, and the axis of opset 13 selects the rows.
TEST(QLinearContrib, SoftmaxNearTheFloatSoftmax) {
  const float xs = 0.05f, ys = 1.0f / 256.0f;
  const Tensor x = make<uint8_t>({2, 5}, {0, 40, 80, 120, 255, 7, 7, 7, 7, 7});
  std::map<std::string, ir::Attribute> attrs = {{"opset", ir::int_attr("opset", 13)},
                                                {"axis", ir::int_attr("axis", -1)}};
  const Tensor y = run("QLinearSoftmax", {x, f(xs), u8(0), f(ys), u8(0)}, attrs);
  ASSERT_EQ(y.dtype(), DType::UInt8);
  for (int r = 0; r < 2; ++r) {
    double den = 0;
    for (int j = 0; j < 5; ++j) den += std::exp(xs * x.data<uint8_t>()[r * 5 + j]);
    for (int j = 0; j < 5; ++j) {
      const double want = std::exp(xs * x.data<uint8_t>()[r * 5 + j]) / den / ys;
      EXPECT_LE(std::fabs(y.data<uint8_t>()[r * 5 + j] - std::min(255.0, std::nearbyint(want))), 1.0) << r << "," << j;
    }
  }
  // Equal codes: 256 / 5 = 51.2 -> 51 each.
  EXPECT_EQ(values<uint8_t>(y)[5], 51);
  // Axis 0 of the transposed input gives the transposed output.
  const Tensor xt = make<uint8_t>({5, 2}, {0, 7, 40, 7, 80, 7, 120, 7, 255, 7});
  attrs["axis"] = ir::int_attr("axis", 0);
  const Tensor yt = run("QLinearSoftmax", {xt, f(xs), u8(0), f(ys), u8(0)}, attrs);
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 5; ++j) EXPECT_EQ(yt.data<uint8_t>()[j * 2 + r], y.data<uint8_t>()[r * 5 + j]);
}

// What reforge check says before any work, and what a kernel says about inputs it cannot take.
TEST(QLinearContrib, CheckerAndErrorsNameTheProblem) {
  ir::Node n;
  n.name = "sm";
  n.domain = "com.microsoft";
  n.op_type = "QLinearSoftmax";
  n.opset = 1;
  n.inputs = {"x", "xs", "xz", "ys", "yz"};
  n.outputs = {"y"};
  EXPECT_NE(ops::OpRegistry::global().why_unsupported(n).find("needs the attribute opset"), std::string::npos);
  n.attrs["opset"] = ir::int_attr("opset", 13);
  EXPECT_EQ(ops::OpRegistry::global().why_unsupported(n), "");
  std::string err;
  try {
    run("QLinearAdd",
        {make<uint8_t>({2}, {1, 2}), f(1.0f), u8(0), make<int8_t>({2}, {1, 2}), f(1.0f), i8(0), f(1.0f), u8(0)});
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("A and B must be both int8 or both uint8, got uint8[2] and int8[2]"), std::string::npos) << err;
}

}  // namespace
