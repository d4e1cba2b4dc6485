// The reference kernels (src/ops) of the ops whose CPU kernels take other paths (oneDNN, OpenBLAS,
// Winograd, vectorized rows, exp and per-instruction-set loops: src/backends/cpu), run on the same inputs as the CPU
// kernels: both agree within float32 rounding of the sums, and the reference kernels match hand-computed values. Every
// backend is held to the reference kernels the same way.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "support/make_tensor.h"
#include "support/run_op.h"

using namespace reforge;
using test_support::make;
using test_support::random_floats;

namespace {

ir::Node make_node(const std::string& op, int opset, size_t inputs, std::vector<ir::Attribute> attrs = {}) {
  ir::Node n;
  n.name = "n";
  n.op_type = op;
  n.opset = opset;
  for (size_t i = 0; i < inputs; ++i) n.inputs.push_back(std::string(1, 'x').append(std::to_string(i)));
  n.outputs = {"y"};
  for (auto& a : attrs) n.attrs[a.name] = a;
  return n;
}

// Both kernels on `inputs`; checks the CPU kernel is not the reference (so the comparison means
// something) and that the outputs agree within `tol` relative to the largest output magnitude.
void compare(const ir::Node& n, const std::vector<const Tensor*>& inputs, double tol = 2e-5) {
  backends::Resolved r;
  ASSERT_EQ(backends::resolve(n, "cpu", &r), "");
  EXPECT_FALSE(r.reference) << n.op_type << " has no CPU kernel of its own";
  const Tensor cpu = test_support::run_node(n, inputs)[0];
  const Tensor ref = test_support::run_reference_node(n, inputs)[0];
  ASSERT_EQ(cpu.shape(), ref.shape());
  ASSERT_EQ(cpu.dtype(), ref.dtype());
  ASSERT_GT(ref.numel(), 0);
  const Tensor a = cpu.dtype() == DType::Float32 ? cpu : cast_tensor(cpu, DType::Float32);
  const Tensor b = ref.dtype() == DType::Float32 ? ref : cast_tensor(ref, DType::Float32);
  double scale = 1e-30;
  for (int64_t i = 0; i < b.numel(); ++i) scale = std::max(scale, std::fabs(double(b.data<float>()[i])));
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i], tol * scale) << n.op_type << " element " << i;
}

TEST(ReferenceKernels, MatMulByHand) {
  const Tensor a = make<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = make<float>({3, 2}, {7, 8, 9, 10, 11, 12});
  const Tensor y = test_support::run_reference_node(make_node("MatMul", 13, 2), {&a, &b})[0];
  ASSERT_EQ(y.shape(), (Shape{2, 2}));
  const std::vector<float> want = {58, 64, 139, 154};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.data<float>()[i], want[i]);
}

TEST(ReferenceKernels, MatMulAgreesWithTheCpuKernel) {
  const Tensor a = random_floats({3, 1, 17, 33}, 1), b = random_floats({2, 33, 19}, 2);
  compare(make_node("MatMul", 13, 2), {&a, &b});  // broadcast batches
  const Tensor v = random_floats({33}, 3), m = random_floats({4, 33, 5}, 4);
  compare(make_node("MatMul", 13, 2), {&v, &m});  // 1-D left operand
  const Tensor h = cast_tensor(random_floats({8, 64}, 5), DType::Float16),
               k = cast_tensor(random_floats({64, 9}, 6), DType::Float16);
  compare(make_node("MatMul", 13, 2), {&h, &k}, 2e-3);
}

TEST(ReferenceKernels, GemmByHandAndAgainstTheCpuKernel) {
  const Tensor a = make<float>({2, 2}, {1, 2, 3, 4}), b = make<float>({2, 2}, {1, 0, 0, 1});
  const Tensor c = make<float>({2}, {10, 20});
  const ir::Node n = make_node(
      "Gemm", 13, 3, {ir::float_attr("alpha", 2.0f), ir::float_attr("beta", 0.5f), ir::int_attr("transA", 1)});
  const Tensor y = test_support::run_reference_node(n, {&a, &b, &c})[0];
  // 2 * A^T + 0.5 * [10, 20] per row: A^T = [[1, 3], [2, 4]].
  const std::vector<float> want = {7, 16, 9, 18};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.data<float>()[i], want[i]);

  const Tensor x = random_floats({7, 40}, 7), w = random_floats({24, 40}, 8), bias = random_floats({1, 24}, 9);
  compare(make_node("Gemm", 13, 3, {ir::int_attr("transB", 1)}), {&x, &w, &bias});
  compare(make_node("Gemm", 13, 3, {ir::int_attr("transB", 1), ir::float_attr("alpha", 0.25f)}), {&x, &w, &bias});
}

TEST(ReferenceKernels, ConvByHandAndAgainstTheCpuKernel) {
  // 1 x 1 x 3 x 3 input, 2 x 2 kernel of ones, bias 1: each output is its window's sum + 1.
  const Tensor x = make<float>({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  const Tensor w = make<float>({1, 1, 2, 2}, {1, 1, 1, 1});
  const Tensor b = make<float>({1}, {1});
  const Tensor y = test_support::run_reference_node(make_node("Conv", 11, 3), {&x, &w, &b})[0];
  ASSERT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  const std::vector<float> want = {13, 17, 25, 29};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.data<float>()[i], want[i]);

  const Tensor x2 = random_floats({2, 8, 11, 13}, 10), w2 = random_floats({16, 4, 3, 3}, 11);
  const Tensor b2 = random_floats({16}, 12);
  compare(make_node("Conv", 11, 3,
                    {ir::int_attr("group", 2), ir::ints_attr("pads", {1, 0, 1, 2}), ir::ints_attr("strides", {2, 1}),
                     ir::ints_attr("dilations", {1, 2})}),
          {&x2, &w2, &b2});
  const Tensor w1 = random_floats({12, 8, 1, 1}, 13);
  compare(make_node("Conv", 11, 2), {&x2, &w1});  // pointwise: a product on the CPU
  const Tensor x3 = random_floats({1, 3, 5, 6, 7}, 14), w3 = random_floats({4, 3, 2, 3, 2}, 15);
  compare(make_node("Conv", 11, 2, {ir::string_attr("auto_pad", "SAME_UPPER")}), {&x3, &w3});
}

TEST(ReferenceKernels, ConvTransposeAgreesWithTheCpuKernel) {
  const Tensor x = random_floats({2, 6, 5, 4}, 16), w = random_floats({6, 3, 3, 2}, 17), b = random_floats({6}, 18);
  compare(make_node("ConvTranspose", 11, 3,
                    {ir::int_attr("group", 2), ir::ints_attr("strides", {2, 3}), ir::ints_attr("pads", {1, 0, 0, 1})}),
          {&x, &w, &b});
}

TEST(ReferenceKernels, LayerNormalizationAgreesWithTheCpuKernel) {
  const Tensor x = random_floats({4, 6, 40}, 19), s = random_floats({40}, 20), b = random_floats({40}, 21);
  compare(make_node("LayerNormalization", 17, 3, {ir::float_attr("epsilon", 1e-3f)}), {&x, &s, &b});
  // By hand: [1, 3] normalizes to [-1, 1] (eps 0), times scale 2 plus bias 1.
  const Tensor x1 = make<float>({1, 2}, {1, 3}), s1 = make<float>({2}, {2, 2}), b1 = make<float>({2}, {1, 1});
  const Tensor y = test_support::run_reference_node(
      make_node("LayerNormalization", 17, 3, {ir::float_attr("epsilon", 0.0f)}), {&x1, &s1, &b1})[0];
  EXPECT_FLOAT_EQ(y.data<float>()[0], -1.0f);
  EXPECT_FLOAT_EQ(y.data<float>()[1], 3.0f);
}

TEST(ReferenceKernels, ArithmeticAgreesWithTheCpuKernel) {
  // Same operation per element on both sides: equal bits, through every broadcast pattern.
  const Tensor a = random_floats({3, 1, 40}, 24, 0.5f, 2.0f), b = random_floats({5, 40}, 25, 0.5f, 2.0f);
  const Tensor s = random_floats({1}, 26, 0.5f, 2.0f), c = random_floats({3, 5, 1}, 27, 0.5f, 2.0f);
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    compare(make_node(op, 14, 2), {&a, &b}, 0.0);
    compare(make_node(op, 14, 2), {&s, &b}, 0.0);
    compare(make_node(op, 14, 2), {&c, &a}, 0.0);
  }
  // Pow by a constant: the CPU multiplies (x * x, x * x * x) where the reference calls powf.
  const Tensor x = random_floats({1000}, 28, -3.0f, 3.0f);
  for (float e : {2.0f, 3.0f, 0.5f, -1.0f}) {
    const Tensor ex = make<float>({}, {e});
    const Tensor base = e == 0.5f || e == -1.0f ? random_floats({1000}, 29, 0.25f, 3.0f) : x;
    compare(make_node("Pow", 15, 2), {&base, &ex}, 1e-6);
  }
  const Tensor by_hand = make<float>({3}, {2.0f, -3.0f, 0.5f}), two = make<float>({}, {2.0f});
  const Tensor sq = test_support::run_reference_node(make_node("Pow", 15, 2), {&by_hand, &two})[0];
  EXPECT_EQ(sq.data<float>()[0], 4.0f);
  EXPECT_EQ(sq.data<float>()[1], 9.0f);
  EXPECT_EQ(sq.data<float>()[2], 0.25f);
}

TEST(ReferenceKernels, SoftmaxByHandAndAgainstTheCpuKernel) {
  const Tensor x = make<float>({1, 2}, {0.0f, std::log(3.0f)});
  const Tensor y = test_support::run_reference_node(make_node("Softmax", 13, 1), {&x})[0];
  EXPECT_NEAR(y.data<float>()[0], 0.25f, 1e-7f);
  EXPECT_NEAR(y.data<float>()[1], 0.75f, 1e-7f);
  const Tensor a = random_floats({3, 7, 5}, 22, -8.0f, 8.0f), b = random_floats({4, 33}, 23, -8.0f, 8.0f);
  compare(make_node("Softmax", 13, 1, {ir::int_attr("axis", 1)}), {&a});
  compare(make_node("Softmax", 13, 1), {&b});
  compare(make_node("LogSoftmax", 13, 1, {ir::int_attr("axis", 1)}), {&a});
  compare(make_node("Softmax", 11, 1, {ir::int_attr("axis", 1)}), {&a});  // the 2-D coercion before opset 13
}

}  // namespace
