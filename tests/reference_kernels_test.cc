// The reference kernels (src/ops) of the ops whose CPU kernels take other paths (oneDNN, OpenBLAS,
// Winograd, vectorized rows, exp and per-instruction-set loops: src/backends/cpu), run on the same inputs as the CPU
// kernels: both agree within float32 rounding of the sums, and the reference kernels match hand-computed values. Every
// backend is held to the reference kernels the same way.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/simd.h"
#include "support/make_tensor.h"
#include "support/run_op.h"
#include "support/simd_levels.h"

using namespace reforge;
using test_support::make;
using test_support::random_floats;
using test_support::simd_level_name;
using test_support::simd_levels;

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

// Distance of two floats in units in the last place, counted through the ordered bit patterns
// (0 for the same bits; -0 and +0 are 1 apart). Two NaNs are 0 apart, a NaN and a number are not
// comparable (returned as INT64_MAX).
int64_t ulp_distance(float a, float b) {
  if (a != a || b != b) return (a != a && b != b) ? 0 : INT64_MAX;
  auto ordered = [](float v) {
    const int64_t bits = std::bit_cast<int32_t>(v);
    return bits < 0 ? int64_t{INT32_MIN} - bits : bits;
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

// The reference kernel's and the CPU kernel's outputs, element by element: their largest ulp
// distance, or INT64_MAX when the shapes or NaN positions differ.
int64_t max_ulp_distance(const Tensor& cpu, const Tensor& ref) {
  if (cpu.shape() != ref.shape() || cpu.dtype() != DType::Float32 || ref.dtype() != DType::Float32) return INT64_MAX;
  int64_t worst = 0;
  for (int64_t i = 0; i < ref.numel(); ++i)
    worst = std::max(worst, ulp_distance(cpu.data<float>()[i], ref.data<float>()[i]));
  return worst;
}

// "x -> cpu vs ref" at the element of largest ulp distance, for failure messages.
std::string worst_element(const Tensor& x, const Tensor& cpu, const Tensor& ref) {
  int64_t worst = -1, at = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const int64_t d = ulp_distance(cpu.data<float>()[i], ref.data<float>()[i]);
    if (d > worst) worst = d, at = i;
  }
  std::ostringstream o;
  o.precision(9);
  o << "x = " << x.data<float>()[at] << ": " << cpu.data<float>()[at] << " vs " << ref.data<float>()[at];
  return o.str();
}

// Inputs of odd sizes (vector tails in every variant: 4, 8 and 16 lanes), uniform over [lo, hi)
// with the special values first: zeros of both signs, infinities, NaN, subnormals, the ends of
// exp's range.
Tensor unary_input(int64_t n, uint32_t seed, float lo, float hi) {
  Tensor t = random_floats({n}, seed, lo, hi);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            1e-40f,
                            -1e-40f,
                            88.5f,
                            -104.0f,
                            0.5f,
                            -2.5f};
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(std::size(specials)); ++i)
    t.mutable_data<float>()[i] = specials[i];
  return t;
}

// The unary ops' CPU kernels (backends/cpu/unary.cc) run the reference kernels' element functions
// (ops/unary) in a loop compiled per instruction set. The generic variant computes exactly what
// the reference does (the same 4-lane vectors, no FMA in the base instruction set): bit-identical.
// The AVX2 and AVX-512 variants let the compiler contract a * b + c into one FMA, one rounding
// fewer per step; each case states how far that can move its result:
// - 8 ulp by default: the rounding differences of the polynomial steps (exp, log, erfc) stay in
//   the last bits, since every polynomial is evaluated on a reduced argument.
// - HardSigmoid, HardSwish: alpha * x + beta cancels near the lower clamp, so the one rounding of
//   alpha * x that the FMA saves (at most 2^-25, |alpha * x| <= 0.5) is many ulps of a result
//   near 0: bounded in absolute terms, 2^-23 (three roundings below 1), times |x| <= 3 for HardSwish.
// - Gelu (tanh): the argument 2u = 1.596 (x + 0.044715 x^3) of exp is itself rounded
//   differently, and exp turns an argument difference of d into a relative difference of d: one
//   ulp of |2u| <= 142 is up to 2^-23 * 142 relative, ~142 ulps (256 allowed). The erf form has no
//   such step (its exp arguments are split exactly, ops/unary/unary_common.h: vnormal_cdf).
TEST(ReferenceKernels, UnaryOpsAgreeWithTheCpuKernels) {
  struct Case {
    std::string op;
    int opset;
    std::vector<ir::Attribute> attrs = {};
    float lo = -12.0f, hi = 12.0f;
    int64_t max_ulp = 8;   // the CPU's AVX variants against the reference, in ulps
    double abs_tol = 0.0;  // or this far apart in absolute terms
  };
  const std::vector<Case> cases = {
      {"Abs", 13},
      {"Neg", 13},
      {"Sign", 13},
      {"Sqrt", 13, {}, 0.0f, 1e6f},
      {"Reciprocal", 13},
      {"Exp", 13, {}, -105.0f, 89.0f},
      {"Log", 13, {}, 0.0f, 100.0f},
      {"Erf", 13, {}, -5.0f, 5.0f},
      {"Floor", 13, {}, -1e7f, 1e7f},
      {"Ceil", 13, {}, -3.0f, 3.0f},
      {"Round", 11, {}, -3.0f, 3.0f},
      {"Tanh", 13},
      {"Sigmoid", 13, {}, -100.0f, 100.0f},
      {"Relu", 14},
      {"LeakyRelu", 16, {ir::float_attr("alpha", 0.1f)}},
      {"Elu", 6, {ir::float_attr("alpha", 0.7f)}},
      {"Selu", 6},
      {"Celu", 12, {ir::float_attr("alpha", 1.5f)}},
      {"HardSigmoid", 6, {}, -12.0f, 12.0f, 8, std::ldexp(1.0, -23)},
      {"HardSwish", 14, {}, -12.0f, 12.0f, 8, 3 * std::ldexp(1.0, -23)},
      {"Softplus", 1, {}, -100.0f, 100.0f},
      {"Softsign", 1},
      {"Gelu", 20, {}, -12.0f, 6.0f},
      {"Gelu", 20, {ir::string_attr("approximate", "tanh")}, -12.0f, 6.0f, 256},
      {"Mish", 18, {}, -30.0f, 30.0f},
      {"Swish", 24, {ir::float_attr("alpha", 1.25f)}},
      {"ThresholdedRelu", 10, {ir::float_attr("alpha", 0.5f)}},
      {"Shrink", 9, {ir::float_attr("bias", 0.25f), ir::float_attr("lambd", 0.75f)}},
      {"Clip", 6, {ir::float_attr("min", -0.5f), ir::float_attr("max", 2.0f)}},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    const ir::Node n = make_node(c.op, c.opset, 1, c.attrs);
    backends::Resolved r;
    ASSERT_EQ(backends::resolve(n, "cpu", &r), "") << c.op;
    EXPECT_FALSE(r.reference) << c.op << " has no CPU kernel of its own";
    for (int64_t size : {1, 3, 7, 13, 37, 1001}) {
      const Tensor x = unary_input(size, ++seed, c.lo, c.hi);
      const Tensor ref = test_support::run_reference_node(n, {&x})[0];
      for (SimdLevel level : simd_levels()) {
        SimdOverride cap(level);
        const Tensor cpu = test_support::run_node(n, {&x})[0];
        if (level == SimdLevel::Generic) {
          EXPECT_EQ(max_ulp_distance(cpu, ref), 0)
              << c.op << " size " << size
              << ": the generic CPU variant differs from the reference: " << worst_element(x, cpu, ref);
          continue;
        }
        ASSERT_EQ(cpu.shape(), ref.shape());
        for (int64_t i = 0; i < ref.numel(); ++i) {
          const float a = cpu.data<float>()[i], b = ref.data<float>()[i];
          if (ulp_distance(a, b) <= c.max_ulp || std::fabs(double(a) - double(b)) <= c.abs_tol) continue;
          ADD_FAILURE() << c.op << " " << c.attrs.size() << " attrs, size " << size << " at " << simd_level_name(level)
                        << ": x = " << x.data<float>()[i] << " gives " << a << " vs " << b << " (" << ulp_distance(a, b)
                        << " ulp)";
          break;
        }
      }
    }
  }
  // float16 goes through the same float32 loop after conversion: bit-identical at the generic level.
  const Tensor h = cast_tensor(unary_input(37, 7, -4.0f, 4.0f), DType::Float16);
  for (const char* op : {"Exp", "Tanh", "Sigmoid"}) {
    const ir::Node n = make_node(op, 13, 1);
    SimdOverride cap(SimdLevel::Generic);
    const Tensor cpu = cast_tensor(test_support::run_node(n, {&h})[0], DType::Float32);
    const Tensor ref = cast_tensor(test_support::run_reference_node(n, {&h})[0], DType::Float32);
    EXPECT_EQ(max_ulp_distance(cpu, ref), 0) << op << " float16";
  }
}

// ReduceMax, ReduceMin, ReduceLogSumExp, ArgMax and ArgMin on the CPU (backends/cpu/reduce.cc) run
// the reference kernels with max/min scans compiled per instruction set. Max and min are exact, so
// every variant gives the reference's bits (inputs without zeros: a variant's width only decides
// which of -0 and +0 is kept) and the same indices, NaN rows included.
TEST(ReferenceKernels, ExtremaAgreeWithTheCpuKernels) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x32 = random_floats({5, 37, 3}, 41, -8.0f, 8.0f);
    x32.mutable_data<float>()[2 * 37 * 3 + 10 * 3 + 1] = std::numeric_limits<float>::quiet_NaN();
    const Tensor x = dt == DType::Float32 ? x32 : cast_tensor(x32, dt);
    const Tensor row = cast_tensor(random_floats({3, 1001}, 42, -8.0f, 8.0f), dt);
    std::vector<std::pair<ir::Node, std::vector<const Tensor*>>> runs;
    const std::vector<std::vector<int64_t>> axes_sets = {{1}, {2}, {0, 2}, {0, 1, 2}};
    std::vector<Tensor> axes;
    axes.reserve(axes_sets.size());
    for (const auto& a : axes_sets) axes.push_back(make<int64_t>({static_cast<int64_t>(a.size())}, a));
    for (const char* op : {"ReduceMax", "ReduceMin", "ReduceLogSumExp"}) {
      for (const Tensor& a : axes) runs.push_back({make_node(op, 18, 2), {&x, &a}});
      runs.push_back({make_node(op, 18, 2), {&row, &axes[0]}});
    }
    for (const char* op : {"ArgMax", "ArgMin"})
      for (int64_t axis : {1, 2})
        for (int64_t last : {0, 1}) {
          runs.push_back(
              {make_node(op, 13, 1, {ir::int_attr("axis", axis), ir::int_attr("select_last_index", last)}), {&x}});
          runs.push_back(
              {make_node(op, 13, 1, {ir::int_attr("axis", 1), ir::int_attr("select_last_index", last)}), {&row}});
        }
    for (const auto& [n, inputs] : runs) {
      backends::Resolved r;
      ASSERT_EQ(backends::resolve(n, "cpu", &r), "") << n.op_type;
      EXPECT_FALSE(r.reference) << n.op_type << " has no CPU kernel of its own";
      const Tensor ref = test_support::run_reference_node(n, inputs)[0];
      for (SimdLevel level : simd_levels()) {
        SimdOverride cap(level);
        const Tensor cpu = test_support::run_node(n, inputs)[0];
        ASSERT_EQ(cpu.shape(), ref.shape()) << n.op_type;
        ASSERT_EQ(cpu.dtype(), ref.dtype()) << n.op_type;
        EXPECT_EQ(std::memcmp(cpu.raw(), ref.raw(), ref.nbytes()), 0)
            << n.op_type << " " << dtype_name(dt) << " at " << simd_level_name(level) << " differs from the reference";
      }
    }
  }
  // By hand: the NaN row's maximum is NaN; ArgMax points at the NaN.
  const Tensor v = make<float>({1, 5}, {1.0f, 3.0f, std::numeric_limits<float>::quiet_NaN(), 7.0f, 3.0f});
  const Tensor m =
      test_support::run_reference_node(make_node("ReduceMax", 13, 1, {ir::ints_attr("axes", {1})}), {&v})[0];
  EXPECT_TRUE(std::isnan(m.data<float>()[0]));
  const Tensor i = test_support::run_reference_node(make_node("ArgMax", 13, 1, {ir::int_attr("axis", 1)}), {&v})[0];
  EXPECT_EQ(i.data<int64_t>()[0], 2);
  const Tensor w = make<float>({1, 5}, {1.0f, 3.0f, -2.0f, 7.0f, 3.0f});
  const Tensor j = test_support::run_reference_node(
      make_node("ArgMin", 13, 1, {ir::int_attr("axis", 1), ir::int_attr("select_last_index", 1)}), {&w})[0];
  EXPECT_EQ(j.data<int64_t>()[0], 2);
}

}  // namespace
