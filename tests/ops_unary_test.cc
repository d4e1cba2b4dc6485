// Unary op family: accuracy of the float32 SIMD math against double-precision libm, special
// values, integer edge cases, Clip's bound forms, 16-bit types, the parallel and tail paths, and
// errors for bad input. The ONNX node suite covers the common float32 cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ops/registry.h"
#include "ops/unary/unary_common.h"
#include "support/run_op.h"
#include "support/simd_levels.h"

using namespace reforge;
using namespace reforge::ops;
using test_support::simd_level_name;
using test_support::simd_levels;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using ir::float_attr;
using ir::int_attr;
using ir::string_attr;

// Runs one node of `op` on `inputs` (nullptr = absent optional input) and returns output 0.
Tensor run(const std::string& op, std::vector<const Tensor*> inputs, std::vector<ir::Attribute> attrs = {},
           int opset = 22, int threads = 1) {
  ir::Node node;
  node.name = "n";
  node.op_type = op;
  node.opset = opset;
  // (Not "x" + std::to_string(i): GCC 12 warns falsely (-Wrestrict) on that inlined concat.)
  for (size_t i = 0; i < inputs.size(); ++i)
    node.inputs.push_back(inputs[i] ? std::string(1, 'x').append(std::to_string(i)) : std::string());
  node.outputs = {"y"};
  for (auto& a : attrs) node.attrs[a.name] = a;
  std::string why = OpRegistry::global().why_unsupported(node);
  if (!why.empty()) throw Error(why);
  return test_support::run_node(node, inputs, threads)[0];
}

template <typename T>
Tensor make(DType dt, std::vector<T> v) {
  return Tensor::copy_of(dt, {static_cast<int64_t>(v.size())}, v.data());
}
Tensor floats(std::vector<float> v) { return make(DType::Float32, std::move(v)); }

template <typename T>
std::vector<T> values(const Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  if (!v.empty()) std::memcpy(v.data(), t.raw(), t.nbytes());
  return v;
}

// Distance in float ulps between a float result and a double reference.
double ulp_error(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : 1e30;
  float wf = static_cast<float>(want);
  if (std::isinf(wf)) return got == wf ? 0 : 1e30;
  double ulp = std::max(static_cast<double>(std::nextafter(std::fabs(wf), kInf) - std::fabs(wf)), 1.4e-45);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

// Max ulp error of `op` (float32 kernel) against `ref` over n random points in [lo, hi].
template <typename Ref>
double max_ulp(const std::string& op, Ref ref, float lo, float hi, std::vector<ir::Attribute> attrs = {},
               int n = 100000) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<float> xs(static_cast<size_t>(n));
  for (auto& x : xs) x = static_cast<float>(d(rng));
  Tensor x = floats(xs);
  std::vector<float> ys = values<float>(run(op, {&x}, attrs));
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) worst = std::max(worst, ulp_error(ys[i], ref(static_cast<double>(xs[i]))));
  return worst;
}

double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double ref_gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

}  // namespace

TEST(UnaryMath, Float32AccuracyAgainstLibm) {
  EXPECT_LE(max_ulp(
                "Exp", [](double x) { return std::exp(x); }, -105, 89),
            2);
  EXPECT_LE(max_ulp(
                "Log", [](double x) { return std::log(x); }, 0, 100),
            2);
  EXPECT_LE(max_ulp(
                "Log", [](double x) { return std::log(x); }, 0, 1e-37f),
            2);  // subnormals
  EXPECT_LE(max_ulp(
                "Erf", [](double x) { return std::erf(x); }, -5, 5),
            5);
  EXPECT_LE(max_ulp(
                "Erf", [](double x) { return std::erf(x); }, -1e-3f, 1e-3f),
            5);
  EXPECT_LE(max_ulp(
                "Tanh", [](double x) { return std::tanh(x); }, -12, 12),
            4);
  EXPECT_LE(max_ulp(
                "Tanh", [](double x) { return std::tanh(x); }, -1e-4f, 1e-4f),
            4);
  EXPECT_LE(max_ulp("Sigmoid", ref_sigmoid, -100, 100), 4);
  EXPECT_LE(max_ulp(
                "Softplus", [](double x) { return std::log1p(std::exp(x)); }, -100, 100),
            6);
  EXPECT_LE(max_ulp(
                "Elu", [](double x) { return x > 0 ? x : std::expm1(x); }, -1e-3f, 1e-3f),
            4);
  // Gelu keeps relative accuracy deep into the negative tail (no 1 + erf cancellation).
  EXPECT_LE(max_ulp("Gelu", ref_gelu, -12, 6), 12);
  // The tanh form is ill-conditioned in its negative tail (the cubic's rounding is amplified by
  // ~|2u|), so it is measured where float evaluation can be accurate.
  EXPECT_LE(max_ulp("Gelu", [](double x) { return x * ref_sigmoid(1.5957691216057307 * (x + 0.044715 * x * x * x)); },
                    -2, 6, {string_attr("approximate", "tanh")}),
            16);
  EXPECT_LE(max_ulp(
                "Mish", [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }, -30, 30),
            8);
}

TEST(UnaryMath, SpecialValues) {
  Tensor x = floats({kInf, -kInf, kNaN, 0.0f, -0.0f, 100.0f, -100.0f});
  auto exp = values<float>(run("Exp", {&x}));
  EXPECT_EQ(exp[0], kInf);
  EXPECT_EQ(exp[1], 0.0f);
  EXPECT_TRUE(std::isnan(exp[2]));
  EXPECT_EQ(exp[3], 1.0f);
  EXPECT_EQ(exp[5], kInf);                        // overflow
  EXPECT_NEAR(exp[6], 3.7200760e-44f, 1.5e-45f);  // subnormal result, not flushed

  auto sig = values<float>(run("Sigmoid", {&x}));
  EXPECT_EQ(sig[0], 1.0f);
  EXPECT_EQ(sig[1], 0.0f);
  EXPECT_TRUE(std::isnan(sig[2]));
  EXPECT_NEAR(sig[6], 3.7200760e-44f, 1.5e-45f);

  auto softsign = values<float>(run("Softsign", {&x}));
  EXPECT_EQ(softsign[0], 1.0f);
  EXPECT_EQ(softsign[1], -1.0f);
  EXPECT_NEAR(softsign[5], 100.0f / 101.0f, 1e-7f);

  auto softplus = values<float>(run("Softplus", {&x}));
  EXPECT_EQ(softplus[0], kInf);
  EXPECT_EQ(softplus[1], 0.0f);
  EXPECT_EQ(softplus[5], 100.0f);
  EXPECT_NEAR(softplus[6], 3.7200760e-44f, 1.5e-45f);

  auto tanh = values<float>(run("Tanh", {&x}));
  EXPECT_EQ(tanh[0], 1.0f);
  EXPECT_EQ(tanh[1], -1.0f);
  EXPECT_TRUE(std::isnan(tanh[2]));
  EXPECT_TRUE(std::signbit(tanh[4]));  // tanh(-0) = -0

  auto log = values<float>(run("Log", {&x}));
  EXPECT_EQ(log[0], kInf);
  EXPECT_TRUE(std::isnan(log[1]));
  EXPECT_EQ(log[3], -kInf);
  EXPECT_TRUE(std::isnan(values<float>(run("Sqrt", {&x}))[6]));

  // Relu, Clip, HardSigmoid and Sign keep NaN (numpy.maximum / clip semantics).
  EXPECT_TRUE(std::isnan(values<float>(run("Relu", {&x}))[2]));
  EXPECT_TRUE(std::isnan(values<float>(run("Sign", {&x}))[2]));
  EXPECT_TRUE(std::isnan(values<float>(run("HardSigmoid", {&x}))[2]));
  Tensor lo = Tensor::scalar<float>(DType::Float32, -1.0f), hi = Tensor::scalar<float>(DType::Float32, 1.0f);
  auto clip = values<float>(run("Clip", {&x, &lo, &hi}));
  EXPECT_EQ(clip[0], 1.0f);
  EXPECT_EQ(clip[1], -1.0f);
  EXPECT_TRUE(std::isnan(clip[2]));
}

TEST(UnaryMath, RoundingHalfToEven) {
  Tensor x = floats({0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 3.49999976f, 8388609.0f, -16777217.0f, 0.49999997f, kInf});
  EXPECT_EQ(values<float>(run("Round", {&x})),
            (std::vector<float>{0, 2, 2, -0.0f, -2, 3, 8388609.0f, -16777217.0f, 0, kInf}));
  Tensor y = floats({-0.3f, 0.3f, -1.0f, 2.7f, -2.7f, 8388607.5f, -8388607.5f});
  EXPECT_EQ(values<float>(run("Floor", {&y})), (std::vector<float>{-1, 0, -1, 2, -3, 8388607.0f, -8388608.0f}));
  EXPECT_EQ(values<float>(run("Ceil", {&y})), (std::vector<float>{-0.0f, 1, -1, 3, -2, 8388608.0f, -8388607.0f}));
  EXPECT_TRUE(std::signbit(values<float>(run("Ceil", {&y}))[0]));  // ceil(-0.3) = -0
  Tensor d = make<double>(DType::Float64, {2.5, -3.5, 0.5});
  EXPECT_EQ(values<double>(run("Round", {&d})), (std::vector<double>{2, -4, 0}));
}

TEST(UnaryMath, IntegerTypes) {
  Tensor i8 = make<int8_t>(DType::Int8, {-128, -5, 0, 7, 127});
  EXPECT_EQ(values<int8_t>(run("Abs", {&i8})), (std::vector<int8_t>{-128, 5, 0, 7, 127}));  // wraps like numpy
  EXPECT_EQ(values<int8_t>(run("Neg", {&i8})), (std::vector<int8_t>{-128, 5, 0, -7, -127}));
  EXPECT_EQ(values<int8_t>(run("Sign", {&i8})), (std::vector<int8_t>{-1, -1, 0, 1, 1}));
  EXPECT_EQ(values<int8_t>(run("Relu", {&i8})), (std::vector<int8_t>{0, 0, 0, 7, 127}));
  Tensor i64 = make<int64_t>(DType::Int64, {INT64_MIN, -3, 4});
  EXPECT_EQ(values<int64_t>(run("Abs", {&i64})), (std::vector<int64_t>{INT64_MIN, 3, 4}));
  EXPECT_EQ(values<int64_t>(run("Neg", {&i64})), (std::vector<int64_t>{INT64_MIN, 3, -4}));
  Tensor u8 = make<uint8_t>(DType::UInt8, {0, 3, 255});
  EXPECT_EQ(values<uint8_t>(run("Abs", {&u8})), (std::vector<uint8_t>{0, 3, 255}));
  EXPECT_EQ(values<uint8_t>(run("Sign", {&u8})), (std::vector<uint8_t>{0, 1, 1}));
  // Float-only ops refuse integers with an Error naming the node.
  try {
    run("Exp", {&i8});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Exp"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("int8"), std::string::npos) << e.what();
  }
  Tensor b = make<uint8_t>(DType::Bool, {1, 0});
  EXPECT_THROW(run("Abs", {&b}), Error);
}

TEST(UnaryMath, ClipBounds) {
  Tensor x = make<int32_t>(DType::Int32, {-100, -1, 0, 5, 100});
  Tensor lo = Tensor::scalar<int32_t>(DType::Int32, -2), hi = Tensor::scalar<int32_t>(DType::Int32, 10);
  EXPECT_EQ(values<int32_t>(run("Clip", {&x, &lo, &hi}, {}, 13)), (std::vector<int32_t>{-2, -1, 0, 5, 10}));
  EXPECT_EQ(values<int32_t>(run("Clip", {&x, &lo}, {}, 13)), (std::vector<int32_t>{-2, -1, 0, 5, 100}));
  EXPECT_EQ(values<int32_t>(run("Clip", {&x, nullptr, &hi}, {}, 13)), (std::vector<int32_t>{-100, -1, 0, 5, 10}));
  EXPECT_EQ(values<int32_t>(run("Clip", {&x}, {}, 13)), (std::vector<int32_t>{-100, -1, 0, 5, 100}));
  // min > max: everything becomes max.
  EXPECT_EQ(values<int32_t>(run("Clip", {&x, &hi, &lo}, {}, 13)), (std::vector<int32_t>{-2, -2, -2, -2, -2}));
  // Opset 6: attributes; an absent one is no bound.
  Tensor f = floats({-3.0f, 0.5f, 3.0f});
  EXPECT_EQ(values<float>(run("Clip", {&f}, {float_attr("min", -1.0f)}, 6)), (std::vector<float>{-1.0f, 0.5f, 3.0f}));
  EXPECT_EQ(values<float>(run("Clip", {&f}, {float_attr("max", 1.0f)}, 6)), (std::vector<float>{-3.0f, 0.5f, 1.0f}));
  // Bound of another type, or not a scalar: Error.
  Tensor flo = Tensor::scalar<float>(DType::Float32, 0.0f);
  EXPECT_THROW(run("Clip", {&x, &flo}, {}, 13), Error);
  Tensor two = make<int32_t>(DType::Int32, {1, 2});
  EXPECT_THROW(run("Clip", {&x, &two}, {}, 13), Error);
  // float16 goes through the float path.
  Tensor h = make<float16>(DType::Float16, {float16(-5.0f), float16(0.25f), float16(5.0f)});
  Tensor hlo = Tensor::scalar<float16>(DType::Float16, float16(-1.0f));
  auto hy = values<float16>(run("Clip", {&h, &hlo}, {}, 13));
  EXPECT_EQ(static_cast<float>(hy[0]), -1.0f);
  EXPECT_EQ(static_cast<float>(hy[1]), 0.25f);
  EXPECT_EQ(static_cast<float>(hy[2]), 5.0f);
}

TEST(UnaryMath, Predicates) {
  Tensor x = floats({kInf, -kInf, kNaN, 1.0f});
  EXPECT_EQ(values<uint8_t>(run("IsNaN", {&x}, {}, 20)), (std::vector<uint8_t>{0, 0, 1, 0}));
  EXPECT_EQ(values<uint8_t>(run("IsInf", {&x}, {}, 20)), (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_EQ(values<uint8_t>(run("IsInf", {&x}, {int_attr("detect_positive", 0)}, 20)),
            (std::vector<uint8_t>{0, 1, 0, 0}));
  EXPECT_EQ(values<uint8_t>(run("IsInf", {&x}, {int_attr("detect_negative", 0)}, 20)),
            (std::vector<uint8_t>{1, 0, 0, 0}));
  Tensor d = make<double>(DType::Float64, {-INFINITY, NAN});
  EXPECT_EQ(values<uint8_t>(run("IsNaN", {&d}, {}, 20)), (std::vector<uint8_t>{0, 1}));
}

TEST(UnaryMath, Activations) {
  Tensor x = floats({-2.0f, -0.5f, 0.0f, 0.5f, 2.0f});
  EXPECT_EQ(values<float>(run("LeakyRelu", {&x}, {float_attr("alpha", 0.5f)})),
            (std::vector<float>{-1.0f, -0.25f, 0, 0.5f, 2}));
  EXPECT_EQ(values<float>(run("ThresholdedRelu", {&x}, {float_attr("alpha", 0.5f)})),
            (std::vector<float>{0, 0, 0, 0, 2}));
  EXPECT_EQ(values<float>(run("Shrink", {&x}, {float_attr("lambd", 0.5f), float_attr("bias", 1.0f)}, 9)),
            (std::vector<float>{-1.0f, 0, 0, 0, 1.0f}));
  auto hswish = values<float>(run("HardSwish", {&x}));
  const double hswish_want[] = {-2.0 / 6.0, -0.5 * 5.0 / 12.0, 0.0, 0.5 * 7.0 / 12.0, 2.0 * 5.0 / 6.0};
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(hswish[i], hswish_want[i], 1e-6) << i;
  auto celu = values<float>(run("Celu", {&x}, {float_attr("alpha", 2.0f)}, 12));
  EXPECT_NEAR(celu[0], 2.0 * std::expm1(-1.0), 1e-7);
  EXPECT_EQ(celu[4], 2.0f);
  auto selu = values<float>(run("Selu", {&x}));
  EXPECT_NEAR(selu[0], 1.0507009873554805 * 1.6732632423543772 * std::expm1(-2.0), 1e-6);
  EXPECT_NEAR(selu[4], 1.0507009873554805 * 2.0, 1e-6);
  auto swish = values<float>(run("Swish", {&x}, {float_attr("alpha", 2.0f)}, 24));
  EXPECT_NEAR(swish[0], -2.0 * ref_sigmoid(-4.0), 1e-7);
  // Shrink on integers computes in double and truncates like numpy's astype.
  Tensor i = make<int32_t>(DType::Int32, {-5, 0, 5});
  EXPECT_EQ(values<int32_t>(run("Shrink", {&i}, {float_attr("lambd", 1.0f), float_attr("bias", 1.5f)}, 9)),
            (std::vector<int32_t>{-3, 0, 3}));
  // Celu with alpha = 0 divides by zero: rejected up front.
  EXPECT_THROW(run("Celu", {&x}, {float_attr("alpha", 0.0f)}, 12), Error);
  EXPECT_THROW(run("Gelu", {&x}, {string_attr("approximate", "fast")}, 20), Error);
}

TEST(UnaryMath, HalfTypesUseTheFloatPath) {
  std::vector<float16> h;
  std::vector<bfloat16> b;
  for (float v : {-3.0f, -0.5f, 0.0f, 1.0f, 4.0f}) {
    h.push_back(float16(v));
    b.push_back(bfloat16(v));
  }
  Tensor th = make(DType::Float16, h), tb = make(DType::BFloat16, b);
  auto eh = values<float16>(run("Exp", {&th}));
  auto eb = values<bfloat16>(run("Sigmoid", {&tb}));
  for (size_t i = 0; i < h.size(); ++i) {
    float x = static_cast<float>(h[i]);
    EXPECT_EQ(eh[i].bits, float16(static_cast<float>(std::exp(static_cast<double>(x)))).bits) << x;
    EXPECT_EQ(eb[i].bits, bfloat16(static_cast<float>(ref_sigmoid(static_cast<double>(x)))).bits) << x;
  }
  auto sh = values<float16>(run("Sin", {&th}));
  EXPECT_EQ(sh[4].bits, float16(std::sin(4.0f)).bits);
}

// Large tensors run on several threads; odd sizes and unaligned inputs take the tail path. All
// must agree with the single-threaded result element for element.
TEST(UnaryMath, ParallelTailAndUnalignedInput) {
  const int64_t n = 200003;
  std::vector<float> buf(static_cast<size_t>(n) + 1);
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (auto& v : buf) v = d(rng);
  auto keep = std::make_shared<std::vector<float>>(buf);
  Tensor unaligned = Tensor::wrap(DType::Float32, {n}, keep, keep->data() + 1);
  Tensor aligned = Tensor::copy_of(DType::Float32, {n}, keep->data() + 1);
  for (const char* op : {"Gelu", "Exp", "Tanh", "Relu", "Round"}) {
    auto one = values<float>(run(op, {&aligned}, {}, 22, 1));
    auto many = values<float>(run(op, {&unaligned}, {}, 22, 4));
    ASSERT_EQ(one.size(), static_cast<size_t>(n));
    EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0) << op;
  }
  // Every tail length 0..7 gives the same values as the vector body.
  for (int len = 0; len < 8; ++len) {
    Tensor t = Tensor::copy_of(DType::Float32, {len}, keep->data());
    auto y = values<float>(run("Exp", {&t}));
    for (int i = 0; i < len; ++i)
      EXPECT_EQ(y[static_cast<size_t>(i)], unary::fast_exp((*keep)[static_cast<size_t>(i)]));
  }
}

namespace {

// Every op with a float32 SIMD form, its float64 reference, a range and a bound: ulps of the
// reference's float rounding plus an absolute slack (HardSigmoid's alpha * x + beta cancels near
// 0, and FMA contraction rounds it differently per variant).
struct SimdCase {
  const char* op;
  int opset;
  std::vector<ir::Attribute> attrs;
  double (*ref)(double);
  float lo, hi;
  double ulps, abs = 0;
};
const std::vector<SimdCase>& simd_cases() {
  static const std::vector<SimdCase> cases = {
      {"Exp", 22, {}, [](double x) { return std::exp(x); }, -105, 89, 2},
      {"Log", 22, {}, [](double x) { return std::log(x); }, 0, 100, 2},
      {"Log", 22, {}, [](double x) { return std::log(x); }, 0, 1e-37f, 2},
      {"Erf", 22, {}, [](double x) { return std::erf(x); }, -5, 5, 5},
      {"Tanh", 22, {}, [](double x) { return std::tanh(x); }, -12, 12, 4},
      {"Sigmoid", 22, {}, ref_sigmoid, -100, 100, 4},
      {"Softplus",
       22,
       {},
       [](double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); },
       -100,
       100,
       6},
      {"Elu", 22, {}, [](double x) { return x > 0 ? x : std::expm1(x); }, -20, 5, 4},
      {"Selu",
       22,
       {},
       [](double x) { return 1.05070102214813232421875 * (x > 0 ? x : 1.67326319217681884765625 * std::expm1(x)); },
       -20,
       5,
       5},
      {"Celu",
       22,
       {float_attr("alpha", 2.0f)},
       [](double x) { return x > 0 ? x : 2.0 * std::expm1(x / 2.0); },
       -20,
       5,
       4},
      {"Gelu", 22, {}, ref_gelu, -12, 6, 12},
      {"Gelu",
       22,
       {string_attr("approximate", "tanh")},
       [](double x) { return x * ref_sigmoid(1.5957691216057307 * (x + 0.044715 * x * x * x)); },
       -2,
       6,
       16},
      {"Mish", 22, {}, [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }, -30, 30, 8},
      // alpha * x is rounded to float first (its rounding is amplified ~|alpha x| times in the tail).
      {"Swish",
       24,
       {float_attr("alpha", 1.5f)},
       [](double x) { return x * ref_sigmoid(static_cast<float>(1.5f * static_cast<float>(x))); },
       -30,
       30,
       6},
      {"HardSigmoid",
       22,
       {},
       [](double x) { return std::clamp(static_cast<double>(0.2f) * x + 0.5, 0.0, 1.0); },
       -4,
       4,
       1,
       6e-8},
      {"HardSwish",
       22,
       {},
       [](double x) { return x * std::clamp(static_cast<double>(1.0f / 6.0f) * x + 0.5, 0.0, 1.0); },
       -4,
       4,
       2,
       6e-8},
      {"Softsign",
       22,
       {},
       [](double x) { return std::isinf(x) ? std::copysign(1.0, x) : x / (1 + std::fabs(x)); },
       -100,
       100,
       2},
      {"Sqrt", 22, {}, [](double x) { return std::sqrt(x); }, 0, 1e6f, 0.5},
      {"Reciprocal", 22, {}, [](double x) { return 1 / x; }, -100, 100, 0.5},
      {"Floor", 22, {}, [](double x) { return std::floor(x); }, -2e7f, 2e7f, 0},
      {"Ceil", 22, {}, [](double x) { return std::ceil(x); }, -100, 100, 0},
      {"Round", 22, {}, [](double x) { return std::nearbyint(x); }, -100, 100, 0},
      {"Abs", 22, {}, [](double x) { return std::fabs(x); }, -100, 100, 0},
      {"Neg", 22, {}, [](double x) { return -x; }, -100, 100, 0},
      {"Sign", 22, {}, [](double x) { return x > 0   ? 1.0
                                             : x < 0 ? -1.0
                                                     : x; }, -2, 2, 0},
      {"Relu", 22, {}, [](double x) { return x < 0 ? 0.0 : x; }, -100, 100, 0},
      {"LeakyRelu", 22, {}, [](double x) { return x < 0 ? static_cast<double>(0.01f) * x : x; }, -100, 100, 0.5},
      {"ThresholdedRelu", 22, {}, [](double x) { return x > 1 ? x : 0.0; }, -3, 3, 0},
      {"Shrink", 22, {}, [](double x) { return x < -0.5  ? x
                                               : x > 0.5 ? x
                                                         : 0.0; }, -3, 3, 0},
      {"Clip",
       6,
       {float_attr("min", -1.5f), float_attr("max", 2.5f)},
       [](double x) { return std::clamp(x, -1.5, 2.5); },
       -4,
       4,
       0},
  };
  return cases;
}

}  // namespace

// The float32 SIMD math of every op at every vector instruction set the CPU has (each variant
// runs its own register width), against float64 references.
TEST(UnaryMath, Float32AccuracyAtEveryLevel) {
  std::mt19937 rng(11);
  for (const SimdCase& c : simd_cases()) {
    std::uniform_real_distribution<double> d(c.lo, c.hi);
    std::vector<float> xs(20011);
    for (auto& x : xs) x = static_cast<float>(d(rng));
    Tensor x = floats(xs);
    for (SimdLevel l : simd_levels()) {
      SimdOverride cap(l);
      std::vector<float> ys = values<float>(run(c.op, {&x}, c.attrs, c.opset));
      double worst = 0;
      size_t at = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        const double want = c.ref(xs[i]);
        const double slack = std::fabs(ys[i] - want) <= c.abs ? 0 : ulp_error(ys[i], want);
        if (slack > worst) worst = slack, at = i;
      }
      EXPECT_LE(worst, c.ulps) << c.op << " at " << simd_level_name(l) << ": " << xs[at] << " -> " << ys[at]
                               << ", want " << c.ref(xs[at]);
    }
  }
}

// Every length 0..40 (straddling each variant's 4, 8 or 16 lanes and their tails) gives, element
// for element, the values of one long run at the same level; special values agree across levels.
TEST(UnaryMath, TailsAndSpecialValuesAtEveryLevel) {
  std::mt19937 rng(12);
  for (const SimdCase& c : simd_cases()) {
    std::uniform_real_distribution<double> d(c.lo, c.hi);
    std::vector<float> xs(40);
    for (auto& x : xs) x = static_cast<float>(d(rng));
    Tensor all = floats(xs);
    const std::vector<float> specials = {kNaN, kInf, -kInf, 0.0f, -0.0f, 1e-40f, -1e-40f, 3e38f, -3e38f};
    Tensor sp = floats(specials);
    std::vector<float> first;
    for (SimdLevel l : simd_levels()) {
      SimdOverride cap(l);
      std::vector<float> want = values<float>(run(c.op, {&all}, c.attrs, c.opset));
      for (size_t n = 0; n <= xs.size(); ++n) {
        Tensor part = floats(std::vector<float>(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(n)));
        std::vector<float> got = values<float>(run(c.op, {&part}, c.attrs, c.opset));
        ASSERT_EQ(got.size(), n);
        // n == 0: got.data() may be null, and memcmp of a null pointer is undefined even for 0 bytes.
        EXPECT_TRUE(n == 0 || std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0)
            << c.op << " length " << n << " at " << simd_level_name(l);
      }
      std::vector<float> s = values<float>(run(c.op, {&sp}, c.attrs, c.opset));
      for (size_t i = 0; i < specials.size(); ++i) {
        const double r = c.ref(specials[i]);
        if (std::isnan(r) || std::isinf(r)) {
          EXPECT_TRUE(std::isnan(r) ? std::isnan(s[i]) : s[i] == r)
              << c.op << "(" << specials[i] << ") at " << simd_level_name(l) << ": " << s[i];
        }
      }
      if (first.empty()) {
        first = s;
      } else {
        for (size_t i = 0; i < specials.size(); ++i)
          EXPECT_TRUE((std::isnan(s[i]) && std::isnan(first[i])) || s[i] == first[i])
              << c.op << "(" << specials[i] << ") at " << simd_level_name(l) << ": " << s[i] << " vs generic "
              << first[i];
      }
    }
  }
}
