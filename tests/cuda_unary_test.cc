// CUDA kernels of the unary family (math functions, predicates, activations, Clip) and the
// reforge fused activations against the CPU's on the same inputs: a one-node graph run on both,
// held to NMSE 1e-7 (float32, float64), 1e-4 (16-bit floats) and equality (integers, bool).
// Shapes include odd sizes, a scalar-like [1], a size above one block and empty tensors; inputs
// include the special values (NaN, +-inf, +-0, halfway points for Round). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/cuda_compare.h"
#include "support/make_tensor.h"

using namespace reforge;

namespace {

using test_support::expect_same_on_cuda;
using test_support::random_of;

ir::Node op_node(const std::string& op, std::vector<std::string> ins, std::map<std::string, ir::Attribute> attrs,
                 int opset, const std::string& domain = "") {
  ir::Node n;
  n.name = "Y";
  n.op_type = op;
  n.domain = domain;
  n.opset = opset;
  n.inputs = std::move(ins);
  n.outputs = {"Y"};
  n.attrs = std::move(attrs);
  return n;
}

const std::vector<Shape> kShapes = {{3, 5, 7}, {1}, {0, 4}, {2, 1031}};
const std::vector<DType> kFloats = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

std::string label(const std::string& op, DType t, const Shape& s) {
  return op + " " + dtype_name(t) + " " + shape_str(s);
}

// Float values with the special ones first: NaN, +-inf, +-0, halfway points, then `x`'s.
Tensor with_specials(const Tensor& x) {
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             0.0,
                             -0.0,
                             0.5,
                             -2.5,
                             1.5,
                             30.0,
                             -30.0};
  Tensor f = cast_tensor(x, DType::Float64);
  double* p = f.mutable_data<double>();
  for (int64_t i = 0; i < f.numel() && i < 10; ++i) p[i] = specials[i];
  return cast_tensor(f, x.dtype());
}

void check_float_op(const std::string& op, std::map<std::string, ir::Attribute> attrs, int opset, float lo = -4.0f,
                    float hi = 4.0f, bool specials = true) {
  uint32_t seed = 100;
  for (DType t : kFloats)
    for (const Shape& s : kShapes) {
      Tensor x = random_of(t, s, ++seed, lo, hi);
      if (specials) x = with_specials(x);
      expect_same_on_cuda(op_node(op, {"X"}, attrs, opset), {x}, label(op, t, s));
    }
}

void check_integer_op(const std::string& op, std::map<std::string, ir::Attribute> attrs, int opset) {
  uint32_t seed = 200;
  for (DType t : {DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::UInt8, DType::UInt16, DType::UInt32,
                  DType::UInt64})
    for (const Shape& s : kShapes)
      expect_same_on_cuda(op_node(op, {"X"}, attrs, opset), {random_of(t, s, ++seed)}, label(op, t, s));
}

TEST(CudaUnary, MathFunctionsMatchTheCpu) {
  REQUIRE_GPU();
  for (const char* op : {"Abs", "Neg", "Sign", "Reciprocal", "Exp", "Erf", "Floor", "Ceil", "Round", "Sin", "Cos",
                         "Tan", "Atan", "Sinh", "Cosh", "Asinh"})
    check_float_op(op, {}, 13);
  // Domains: Sqrt and Log on positives (their negatives are NaN on both, covered by specials).
  check_float_op("Sqrt", {}, 13, 0.0f, 9.0f);
  check_float_op("Log", {}, 13, 0.0f, 9.0f);
  check_float_op("Acosh", {}, 9, 1.0f, 9.0f, false);
  for (const char* op : {"Asin", "Acos", "Atanh"}) check_float_op(op, {}, 9, -0.99f, 0.99f, false);
}

TEST(CudaUnary, IntegerAbsNegSignReluWrapAndMatchTheCpu) {
  REQUIRE_GPU();
  for (const char* op : {"Abs", "Neg", "Sign", "Relu"}) check_integer_op(op, {}, 14);
  // The wrapping cases: Abs and Neg of the most negative value stay there.
  Tensor x = test_support::make<int8_t>({4}, {-128, -1, 0, 127});
  for (const char* op : {"Abs", "Neg"}) expect_same_on_cuda(op_node(op, {"X"}, {}, 13), {x}, std::string(op) + " int8");
  Tensor y = test_support::make<int64_t>({2}, {std::numeric_limits<int64_t>::min(), 5});
  expect_same_on_cuda(op_node("Abs", {"X"}, {}, 13), {y}, "Abs int64 min");
}

TEST(CudaUnary, PredicatesMatchTheCpu) {
  REQUIRE_GPU();
  check_float_op("IsNaN", {}, 13);
  for (int neg : {0, 1})
    for (int pos : {0, 1})
      check_float_op("IsInf",
                     {{"detect_negative", ir::int_attr("detect_negative", neg)},
                      {"detect_positive", ir::int_attr("detect_positive", pos)}},
                     10);
  uint32_t seed = 300;
  for (const Shape& s : kShapes)
    expect_same_on_cuda(op_node("Not", {"X"}, {}, 1), {random_of(DType::Bool, s, ++seed)},
                        label("Not", DType::Bool, s));
}

TEST(CudaUnary, ActivationsMatchTheCpu) {
  REQUIRE_GPU();
  for (const char* op : {"Tanh", "Sigmoid", "Relu", "HardSwish", "Softplus", "Softsign", "Mish"})
    check_float_op(op, {}, 18);
  check_float_op("Softplus", {}, 18, -100.0f, 100.0f);
  check_float_op("LeakyRelu", {}, 16);
  check_float_op("LeakyRelu", {{"alpha", ir::float_attr("alpha", 0.3f)}}, 16);
  check_float_op("Elu", {{"alpha", ir::float_attr("alpha", 0.7f)}}, 6);
  check_float_op("Selu", {}, 6);
  check_float_op("Selu", {{"alpha", ir::float_attr("alpha", 2.0f)}, {"gamma", ir::float_attr("gamma", 0.5f)}}, 6);
  check_float_op("Celu", {{"alpha", ir::float_attr("alpha", 1.7f)}}, 12);
  check_float_op("HardSigmoid", {}, 6);
  check_float_op("HardSigmoid", {{"alpha", ir::float_attr("alpha", 0.5f)}, {"beta", ir::float_attr("beta", 0.1f)}}, 6);
  check_float_op("ThresholdedRelu", {{"alpha", ir::float_attr("alpha", 0.4f)}}, 10);
  check_float_op("Gelu", {}, 20);
  check_float_op("Gelu", {{"approximate", ir::string_attr("approximate", "tanh")}}, 20);
  check_float_op("Gelu", {}, 20, -12.0f, 12.0f);
  check_float_op("Swish", {{"alpha", ir::float_attr("alpha", 1.5f)}}, 24);
  check_float_op("Shrink", {{"bias", ir::float_attr("bias", 0.25f)}, {"lambd", ir::float_attr("lambd", 1.0f)}}, 9);
  check_integer_op("Shrink", {{"bias", ir::float_attr("bias", 1.5f)}, {"lambd", ir::float_attr("lambd", 2.0f)}}, 9);
}

TEST(CudaUnary, ClipMatchesTheCpuWithAttributesAndBoundInputs) {
  REQUIRE_GPU();
  uint32_t seed = 400;
  // Opset 6: attribute bounds, either or both.
  for (DType t : kFloats)
    for (const Shape& s : kShapes) {
      Tensor x = with_specials(random_of(t, s, ++seed));
      expect_same_on_cuda(op_node("Clip", {"X"}, {{"min", ir::float_attr("min", -0.5f)}}, 6), {x},
                          label("Clip-6 min", t, s));
      expect_same_on_cuda(
          op_node("Clip", {"X"}, {{"min", ir::float_attr("min", -0.5f)}, {"max", ir::float_attr("max", 1.25f)}}, 6),
          {x}, label("Clip-6 min max", t, s));
    }
  // Opset 13: bound inputs of X's type, as graph inputs (device tensors) and as constants; absent
  // ones; min > max (everything becomes max).
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int8, DType::Int32,
                  DType::Int64, DType::UInt8, DType::UInt64})
    for (const Shape& s : kShapes) {
      Tensor x = random_of(t, s, ++seed);
      Tensor lo = cast_tensor(test_support::make<float>({}, {-1.0f}), t);
      Tensor hi = cast_tensor(test_support::make<float>({}, {3.0f}), t);
      if (t == DType::UInt8 || t == DType::UInt64) lo = cast_tensor(test_support::make<float>({}, {2.0f}), t);
      expect_same_on_cuda(op_node("Clip", {"X", "lo", "hi"}, {}, 13), {x, lo, hi}, label("Clip-13", t, s));
      expect_same_on_cuda(op_node("Clip", {"X", "lo", "hi"}, {}, 13), {x, lo, hi}, label("Clip-13 const", t, s),
                          {"lo", "hi"});
      expect_same_on_cuda(op_node("Clip", {"X", "", "hi"}, {}, 13), {x, lo, hi}, label("Clip-13 max only", t, s));
      expect_same_on_cuda(op_node("Clip", {"X", "lo"}, {}, 13), {x, lo}, label("Clip-13 min only", t, s));
      expect_same_on_cuda(op_node("Clip", {"X", "hi", "lo"}, {}, 13), {x, hi, lo}, label("Clip-13 min>max", t, s));
    }
}

TEST(CudaUnary, FusedGeluSiluAndSiluMulMatchTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 500;
  for (DType t : kFloats)
    for (const Shape& s : kShapes) {
      Tensor x = random_of(t, s, ++seed, -6.0f, 6.0f);
      for (const char* form : {"none", "tanh"})
        expect_same_on_cuda(
            op_node("Gelu", {"X"}, {{"approximate", ir::string_attr("approximate", form)}}, 1, "reforge"), {x},
            label(std::string("reforge::Gelu ") + form, t, s));
      expect_same_on_cuda(op_node("Silu", {"X"}, {}, 1, "reforge"), {x}, label("reforge::Silu", t, s));
      Tensor u = random_of(t, s, ++seed);
      expect_same_on_cuda(op_node("SiluMul", {"X", "U"}, {}, 1, "reforge"), {x, u}, label("reforge::SiluMul", t, s));
    }
  // SiluMul broadcasting either way.
  for (const auto& [a, b] : std::vector<std::pair<Shape, Shape>>{{{4, 7}, {7}}, {{7}, {3, 7}}, {{2, 1, 5}, {3, 1}}}) {
    Tensor x = random_of(DType::Float32, a, ++seed), u = random_of(DType::Float32, b, ++seed);
    expect_same_on_cuda(op_node("SiluMul", {"X", "U"}, {}, 1, "reforge"), {x, u},
                        "reforge::SiluMul " + shape_str(a) + " * " + shape_str(b));
  }
  // Gelu with its constants as inputs: the standard values, and others (the formula as written).
  Tensor x = random_of(DType::Float32, {3, 67}, ++seed, -5.0f, 5.0f);
  auto scalar = [](float v) { return test_support::make<float>({}, {v}); };
  for (float k : {1.41421356237309504880f, 1.3f})
    for (const char* k_op : {"div", "mul"})
      expect_same_on_cuda(
          op_node("Gelu", {"X", "k", "one", "half"}, {{"k_op", ir::string_attr("k_op", k_op)}}, 1, "reforge"),
          {x, scalar(k), scalar(1.0f), scalar(0.5f)}, std::string("reforge::Gelu consts ") + k_op,
          {"k", "one", "half"});
  for (float c1 : {0.7978845608f, 0.9f})
    expect_same_on_cuda(op_node("Gelu", {"X", "c1", "c2", "p", "one", "half"},
                                {{"approximate", ir::string_attr("approximate", "tanh")}}, 1, "reforge"),
                        {x, scalar(c1), scalar(0.044715f), scalar(3.0f), scalar(1.0f), scalar(0.5f)},
                        "reforge::Gelu tanh consts", {"c1", "c2", "p", "one", "half"});
}

// DType values are the ONNX TensorProto codes (core/dtype.h), so they serve as Cast's `to`.
const std::vector<DType> kAllTypes = {DType::Bool,     DType::Int8,    DType::Int16,  DType::Int32,  DType::Int64,
                                      DType::UInt8,    DType::UInt16,  DType::UInt32, DType::UInt64, DType::Float16,
                                      DType::BFloat16, DType::Float32, DType::Float64};

// Values that exercise every conversion rule: fractions both ways of zero (truncation), halfway
// points, NaN and +-inf, values beyond each integer range (saturation from floats, wrapping
// between integers), values that round differently through float (double -> float16).
Tensor cast_source(DType t) {
  const std::vector<double> v = {0.0,        -0.0,    0.4,     -0.6,     1.5,     -2.5,     127.0,        128.0,
                                 -129.0,     255.0,   256.0,   65535.0,  65536.0, -32769.0, 3.0e9,        -3.0e9,
                                 1.0e19,     -1.0e19, 1.0e300, -1.0e300, 65520.0, 65519.99, 1.0009765625, 2049.0,
                                 16777217.0, 3.4e38,  7.0,     -7.0,     0.1,     1.0e-8};
  Tensor d = test_support::make<double>({static_cast<int64_t>(v.size())}, v);
  if (is_float(t)) {
    Tensor f = cast_tensor(d, t);
    if (t != DType::Float64) return f;
    double* p = f.mutable_data<double>();
    p[0] = std::numeric_limits<double>::quiet_NaN();
    p[1] = std::numeric_limits<double>::infinity();
    p[2] = -std::numeric_limits<double>::infinity();
    return f;
  }
  if (t == DType::Bool) return random_of(DType::Bool, {static_cast<int64_t>(v.size())}, 7);
  // Integers: wrapped values of the type from a 64-bit pattern.
  std::vector<int64_t> iv;
  for (double x : v) iv.push_back(static_cast<int64_t>(std::fmod(x, 9.0e18)));
  iv.push_back(std::numeric_limits<int64_t>::min());
  iv.push_back(std::numeric_limits<int64_t>::max());
  iv.push_back(-1);
  return cast_tensor(test_support::make<int64_t>({static_cast<int64_t>(iv.size())}, iv), t);
}

TEST(CudaCast, EveryPairOfTypesMatchesTheCpu) {
  REQUIRE_GPU();
  for (DType from : kAllTypes)
    for (DType to : kAllTypes) {
      const std::string what = std::string("Cast ") + dtype_name(from) + " -> " + dtype_name(to);
      Tensor x = cast_source(from);
      expect_same_on_cuda(op_node("Cast", {"X"}, {{"to", ir::int_attr("to", static_cast<int64_t>(to))}}, 19), {x},
                          what);
      // A larger random tensor (several blocks) and an empty one.
      expect_same_on_cuda(op_node("Cast", {"X"}, {{"to", ir::int_attr("to", static_cast<int64_t>(to))}}, 19),
                          {random_of(from, {3, 1029}, 11, -300.0f, 300.0f)}, what + " random");
      expect_same_on_cuda(op_node("Cast", {"X"}, {{"to", ir::int_attr("to", static_cast<int64_t>(to))}}, 19),
                          {random_of(from, {0, 3}, 12)}, what + " empty");
      expect_same_on_cuda(op_node("CastLike", {"X", "L"}, {}, 19), {x, random_of(to, {2}, 13)}, "CastLike " + what);
    }
  // The legacy string form of `to` (Cast-1..5).
  expect_same_on_cuda(op_node("Cast", {"X"}, {{"to", ir::string_attr("to", "INT32")}}, 1),
                      {cast_source(DType::Float32)}, "Cast-1 FLOAT -> INT32");
}

const std::vector<std::vector<Shape>> kTriples = {{{3, 5}, {3, 5}, {3, 5}},
                                                  {{5}, {3, 1}, {1, 5}},
                                                  {{1}, {2, 3, 4}, {4}},
                                                  {{0, 3}, {3}, {1}},
                                                  {{4, 1, 7}, {1, 6, 1}, {7}}};

TEST(CudaSelect, WhereBroadcastsThreeWaysForEveryType) {
  REQUIRE_GPU();
  uint32_t seed = 600;
  for (DType t : kAllTypes)
    for (const auto& s : kTriples)
      expect_same_on_cuda(
          op_node("Where", {"C", "X", "B"}, {}, 16),
          {random_of(DType::Bool, s[0], ++seed), random_of(t, s[1], ++seed), random_of(t, s[2], ++seed)},
          std::string("Where ") + dtype_name(t) + " " + shape_str(s[0]) + shape_str(s[1]) + shape_str(s[2]));
}

TEST(CudaSelect, VariadicMinMaxSumMeanMatchTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 700;
  for (const char* op : {"Min", "Max", "Sum", "Mean"})
    for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int8, DType::Int32,
                    DType::Int64, DType::UInt8, DType::UInt32}) {
      if (std::string(op) == "Mean" && !is_float(t)) continue;
      for (size_t count : {1, 2, 3}) {
        for (const auto& s : kTriples) {
          std::vector<std::string> names;
          std::vector<Tensor> inputs;
          for (size_t k = 0; k < count; ++k) {
            names.push_back(str_cat("I", k));
            Tensor x = random_of(t, s[k], ++seed);
            if (is_float(t) && k == 1) x = with_specials(x);
            inputs.push_back(x);
          }
          expect_same_on_cuda(
              op_node(op, names, {}, 13), inputs,
              std::string(op) + " " + dtype_name(t) + " x" + std::to_string(count) + " " + shape_str(s[0]));
        }
      }
    }
  // Integer sums wrap.
  Tensor big = test_support::make<int8_t>({3}, {127, -128, 100});
  expect_same_on_cuda(op_node("Sum", {"A", "B"}, {}, 13), {big, big}, "Sum int8 wraps");
}

TEST(CudaSelect, ModAndPReluMatchTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 800;
  const std::vector<std::pair<Shape, Shape>> pairs = {{{3, 5}, {3, 5}}, {{4, 7}, {7}}, {{1}, {2, 3}}, {{0, 2}, {2}}};
  for (int fmod : {0, 1})
    for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::Int8, DType::Int32, DType::Int64,
                    DType::UInt8, DType::UInt64})
      for (const auto& [a, b] : pairs) {
        Tensor x = random_of(t, a, ++seed, -9.0f, 9.0f), y = random_of(t, b, ++seed, -3.0f, 3.0f);
        expect_same_on_cuda(
            op_node("Mod", {"A", "B"}, {{"fmod", ir::int_attr("fmod", fmod)}}, 13), {x, y},
            "Mod fmod=" + std::to_string(fmod) + " " + dtype_name(t) + " " + shape_str(a) + shape_str(b));
      }
  // fmod = 0 on floats: Python's mod (sign of the divisor), zero divisors, infinities.
  Tensor fx = test_support::make<float>({8}, {5.5f, -5.5f, 5.5f, -5.5f, 3.0f, -3.0f, 1.0f, -1.0f});
  Tensor fy =
      test_support::make<float>({8}, {2.0f, 2.0f, -2.0f, -2.0f, 0.0f, 3.0f, std::numeric_limits<float>::infinity(),
                                      std::numeric_limits<float>::infinity()});
  for (int fmod : {0, 1})
    expect_same_on_cuda(op_node("Mod", {"A", "B"}, {{"fmod", ir::int_attr("fmod", fmod)}}, 13), {fx, fy},
                        "Mod float specials fmod=" + std::to_string(fmod));
  // PRelu: slope broadcasting to X, as a graph input and as a weight.
  const std::vector<std::pair<Shape, Shape>> slopes = {
      {{2, 3, 5}, {3, 1}}, {{2, 3, 5}, {5}}, {{4, 7}, {1}}, {{0, 3}, {3}}, {{3, 5}, {3, 5}}};
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64})
    for (const auto& [a, b] : slopes) {
      Tensor x = random_of(t, a, ++seed), sl = random_of(t, b, ++seed);
      const std::string what = std::string("PRelu ") + dtype_name(t) + " " + shape_str(a) + shape_str(b);
      expect_same_on_cuda(op_node("PRelu", {"X", "S"}, {}, 16), {x, sl}, what);
      expect_same_on_cuda(op_node("PRelu", {"X", "S"}, {}, 16), {x, sl}, what + " weight", {"S"});
    }
}

}  // namespace
