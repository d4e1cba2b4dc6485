// Edge cases of the elementwise family that the ONNX node suite does not cover: the broadcast
// helper's layouts, integer division by zero, Python-style integer Mod, Cast of NaN/Inf.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "core/dispatch.h"
#include "ops/broadcast.h"
#include "ops/registry.h"
#include "support/run_op.h"

using namespace reforge;
using namespace reforge::ops;

namespace {
// Reference broadcast by explicit multi-index arithmetic, independent of the layout code.
std::vector<int64_t> naive_add(const std::vector<int64_t>& a, const Shape& sa, const std::vector<int64_t>& b,
                               const Shape& sb, const Shape& so) {
  int64_t n = shape_numel(so);
  std::vector<int64_t> out(static_cast<size_t>(n));
  auto index_of = [&](int64_t flat, const Shape& s) {
    int64_t idx = 0, mul = 1;
    for (size_t j = 0; j < so.size(); ++j) {
      size_t od = so.size() - 1 - j;
      int64_t i = flat % so[od];
      flat /= so[od];
      if (j < s.size()) {
        size_t sd = s.size() - 1 - j;
        if (s[sd] != 1) idx += i * mul;
        mul *= s[sd];
      }
    }
    return idx;
  };
  for (int64_t i = 0; i < n; ++i) out[i] = a[index_of(i, sa)] * 1000 + b[index_of(i, sb)];
  return out;
}

void check_pair(const Shape& sa, const Shape& sb) {
  std::vector<int64_t> a(shape_numel(sa)), b(shape_numel(sb));
  std::iota(a.begin(), a.end(), 1);
  std::iota(b.begin(), b.end(), 7);
  Shape so = broadcast_shapes({sa, sb});
  std::vector<int64_t> out(shape_numel(so), -1);
  broadcast_map(
      out.data(), so, [](int64_t x, int64_t y) { return x * 1000 + y; }, Operand{a.data(), sa}, Operand{b.data(), sb});
  EXPECT_EQ(out, naive_add(a, sa, b, sb, so)) << shape_str(sa) << " op " << shape_str(sb);
}
}  // namespace

TEST(Broadcast, Shapes) {
  EXPECT_EQ(broadcast_shapes({{2, 3, 4}, {4}}), (Shape{2, 3, 4}));
  EXPECT_EQ(broadcast_shapes({{2, 1, 4}, {3, 1}}), (Shape{2, 3, 4}));
  EXPECT_EQ(broadcast_shapes({{}, {5}}), (Shape{5}));
  EXPECT_EQ(broadcast_shapes({{0, 3}, {1, 3}}), (Shape{0, 3}));
  EXPECT_EQ(broadcast_shapes({{2, 1}, {1, 3}, {4, 1, 1}}), (Shape{4, 2, 3}));
  EXPECT_THROW(broadcast_shapes({{2, 3}, {4}}), Error);
  EXPECT_THROW(broadcast_shapes({{0}, {3}}), Error);
  try {
    broadcast_shapes({{2, 3}, {4}}, "node 'n' (Add)");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'n' (Add)"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[2,3]"), std::string::npos);
  }
  EXPECT_TRUE(broadcasts_to({3, 1}, {2, 3, 4}));
  EXPECT_FALSE(broadcasts_to({2, 3, 4}, {3, 4}));
}

TEST(Broadcast, MapMatchesNaive) {
  check_pair({2, 3, 4}, {2, 3, 4});
  check_pair({2, 3, 4}, {});
  check_pair({}, {2, 3, 4});
  check_pair({2, 3, 4}, {4});
  check_pair({2, 3, 4}, {3, 1});
  check_pair({2, 1, 4}, {1, 3, 1});
  check_pair({5, 1}, {1, 7});
  check_pair({1, 1, 1}, {1});
  check_pair({3, 1, 2, 1, 5}, {4, 2, 1, 5});
  check_pair({0, 3}, {3});
  // Large enough to take the parallel, chunked path (chunks start mid-row).
  check_pair({300, 7, 41}, {7, 1});
  check_pair({70000}, {70000});
  check_pair({3, 70001}, {3, 1});
}

TEST(Broadcast, Layout) {
  BroadcastLayout<2> same({4, 5}, {Shape{4, 5}, Shape{4, 5}});
  EXPECT_EQ(same.inner, 20);
  EXPECT_TRUE(same.outer_dims.empty());
  BroadcastLayout<2> scalar({4, 5}, {Shape{4, 5}, Shape{}});
  EXPECT_EQ(scalar.inner, 20);
  EXPECT_EQ(scalar.inner_stride[1], 0);
  BroadcastLayout<2> trailing({4, 5, 6}, {Shape{4, 5, 6}, Shape{6}});
  EXPECT_EQ(trailing.inner, 6);
  EXPECT_EQ(trailing.outer_dims, (std::vector<int64_t>{20}));
  EXPECT_THROW((BroadcastLayout<1>({4}, {Shape{3}})), Error);
}

TEST(Broadcast, ThreeOperands) {
  std::vector<uint8_t> c = {1, 0, 1};
  std::vector<float> x = {10, 20};
  float y = -1;
  Shape so{2, 3};
  std::vector<float> out(6);
  broadcast_map(
      out.data(), so, [](uint8_t ci, float xi, float yi) { return ci ? xi : yi; }, Operand{c.data(), Shape{3}},
      Operand{x.data(), Shape{2, 1}}, Operand{&y, Shape{}});
  EXPECT_EQ(out, (std::vector<float>{10, -1, 10, 20, -1, 20}));
}

// ---- kernels, run through the registry as the executor would ----
namespace {
template <typename T>
Tensor make(DType dt, Shape shape, std::vector<T> values) {
  Tensor t = Tensor::empty(dt, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  for (size_t i = 0; i < values.size(); ++i) t.mutable_data<T>()[i] = values[i];
  return t;
}

ir::Node node(const std::string& op, int opset, size_t ninputs, std::map<std::string, int64_t> int_attrs = {}) {
  ir::Node n;
  n.name = "t";
  n.op_type = op;
  n.opset = opset;
  for (size_t i = 0; i < ninputs; ++i) n.inputs.push_back("in" + std::to_string(i));
  n.outputs = {"out"};
  for (auto& [k, v] : int_attrs) {
    ir::Attribute a;
    a.name = k;
    a.type = ir::AttrType::Int;
    a.i = v;
    n.attrs[k] = a;
  }
  return n;
}

Tensor run(const ir::Node& n, std::vector<Tensor> ins) {
  std::vector<const Tensor*> ptrs;
  for (auto& t : ins) ptrs.push_back(&t);
  return test_support::run_node(n, ptrs)[0];
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}
}  // namespace

TEST(Elementwise, IntegerDivisionByZeroAndOverflow) {
  const int32_t mn = std::numeric_limits<int32_t>::min();
  Tensor a = make<int32_t>(DType::Int32, {4}, {7, -7, mn, 5});
  Tensor b = make<int32_t>(DType::Int32, {4}, {0, 2, -1, 0});
  EXPECT_EQ(values<int32_t>(run(node("Div", 14, 2), {a, b})), (std::vector<int32_t>{0, -3, mn, 0}));
  EXPECT_EQ(values<int32_t>(run(node("Mod", 13, 2), {a, b})), (std::vector<int32_t>{0, 1, 0, 0}));
  EXPECT_EQ(values<int32_t>(run(node("Mod", 13, 2, {{"fmod", 1}}), {a, b})), (std::vector<int32_t>{0, -1, 0, 0}));
}

TEST(Elementwise, IntegerWrapsLikeNumpy) {
  Tensor a = make<uint16_t>(DType::UInt16, {2}, {65535, 300});
  Tensor b = make<uint16_t>(DType::UInt16, {2}, {65535, 300});
  // 65535^2 mod 2^16 = 1; 90000 mod 65536 = 24464.
  EXPECT_EQ(values<uint16_t>(run(node("Mul", 14, 2), {a, b})), (std::vector<uint16_t>{1, 24464}));
  Tensor c = make<int64_t>(DType::Int64, {1}, {std::numeric_limits<int64_t>::max()});
  Tensor one = make<int64_t>(DType::Int64, {}, {1});
  EXPECT_EQ(values<int64_t>(run(node("Add", 14, 2), {c, one}))[0], std::numeric_limits<int64_t>::min());
}

TEST(Elementwise, PythonModSigns) {
  Tensor a = make<int8_t>(DType::Int8, {4}, {-7, 7, -7, 7});
  Tensor b = make<int8_t>(DType::Int8, {4}, {3, -3, -3, 3});
  EXPECT_EQ(values<int8_t>(run(node("Mod", 13, 2), {a, b})), (std::vector<int8_t>{2, -2, -1, 1}));
}

TEST(Elementwise, IntegerPow) {
  Tensor a = make<int32_t>(DType::Int32, {5}, {2, -1, -1, 0, 3});
  Tensor e = make<int64_t>(DType::Int64, {5}, {10, -3, -2, -1, 2});
  EXPECT_EQ(values<int32_t>(run(node("Pow", 15, 2), {a, e})), (std::vector<int32_t>{1024, -1, 1, 0, 9}));
  Tensor f = make<float>(DType::Float32, {2}, {2.0f, 0.5f});
  Tensor ie = make<int32_t>(DType::Int32, {}, {3});
  EXPECT_EQ(values<float>(run(node("Pow", 15, 2), {f, ie})), (std::vector<float>{8.0f, 0.125f}));
}

TEST(Elementwise, LegacyBroadcastAxis) {
  // Opset 6 Add with broadcast=1, axis=0: B [2] lines up with A's first dim.
  Tensor a = make<float>(DType::Float32, {2, 3}, {0, 0, 0, 0, 0, 0});
  Tensor b = make<float>(DType::Float32, {2}, {1, 2});
  EXPECT_EQ(values<float>(run(node("Add", 6, 2, {{"broadcast", 1}, {"axis", 0}}), {a, b})),
            (std::vector<float>{1, 1, 1, 2, 2, 2}));
}

TEST(Elementwise, BadShapesAreErrors) {
  Tensor a = make<float>(DType::Float32, {2, 3}, {0, 0, 0, 0, 0, 0});
  Tensor b = make<float>(DType::Float32, {2}, {1, 2});
  EXPECT_THROW(run(node("Add", 14, 2), {a, b}), Error);
  EXPECT_THROW(run(node("PRelu", 16, 2), {a, b}), Error);
  Tensor i = make<int32_t>(DType::Int32, {2}, {1, 2});
  EXPECT_THROW(run(node("Mul", 14, 2), {b, i}), Error);
  EXPECT_THROW(run(node("Sum", 13, 3), {a, a, b}), Error);
}

TEST(Elementwise, MinMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = make<float>(DType::Float32, {3}, {nan, 1, 2});
  Tensor b = make<float>(DType::Float32, {3}, {0, nan, 1});
  auto mx = values<float>(run(node("Max", 13, 2), {a, b}));
  EXPECT_TRUE(std::isnan(mx[0]));
  EXPECT_TRUE(std::isnan(mx[1]));
  EXPECT_EQ(mx[2], 2);
  auto mn = values<float>(run(node("Min", 13, 2), {a, b}));
  EXPECT_TRUE(std::isnan(mn[0]) && std::isnan(mn[1]));
  EXPECT_EQ(mn[2], 1);
}

TEST(Elementwise, WhereBroadcastsAllThree) {
  Tensor c = make<uint8_t>(DType::Bool, {2, 1}, {1, 0});
  Tensor x = make<int64_t>(DType::Int64, {3}, {1, 2, 3});
  Tensor y = make<int64_t>(DType::Int64, {}, {-1});
  Tensor out = run(node("Where", 16, 3), {c, x, y});
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>(out), (std::vector<int64_t>{1, 2, 3, -1, -1, -1}));
}

TEST(Cast, FloatToIntEdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor f = make<float>(DType::Float32, {6}, {std::nanf(""), inf, -inf, -2.9f, 2.9f, 1e20f});
  EXPECT_EQ(values<int32_t>(cast_tensor(f, DType::Int32)),
            (std::vector<int32_t>{0, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(), -2, 2,
                                  std::numeric_limits<int32_t>::max()}));
  Tensor b = cast_tensor(f, DType::Bool);
  EXPECT_EQ(values<uint8_t>(b), (std::vector<uint8_t>{1, 1, 1, 1, 1, 1}));
  Tensor z = make<float>(DType::Float32, {2}, {0.0f, -0.0f});
  EXPECT_EQ(values<uint8_t>(cast_tensor(z, DType::Bool)), (std::vector<uint8_t>{0, 0}));
}

TEST(Cast, BoolBytesReadAsNonZero) {
  Tensor b = make<uint8_t>(DType::Bool, {3}, {0, 1, 2});  // 2: a malformed bool from a file
  EXPECT_EQ(values<float>(cast_tensor(b, DType::Float32)), (std::vector<float>{0, 1, 1}));
}

TEST(Cast, DoubleToHalfRoundsOnce) {
  // 1 + 2^-11 + 2^-40 lies just above the halfway point between float16 1.0 and 1 + 2^-10, so
  // the correctly rounded result is 1 + 2^-10. Rounding via float first loses the 2^-40 and
  // ties to even (1.0).
  const double d = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  Tensor t = make<double>(DType::Float64, {1}, {d});
  Tensor h = cast_tensor(t, DType::Float16);
  EXPECT_EQ(static_cast<float>(h.data<float16>()[0]), 1.0f + std::ldexp(1.0f, -10));
}

// String and complex targets have no kernels; float8 and the 4-bit types do (core/narrow.h).
TEST(Cast, CheckerRejectsExoticTargets) {
  ir::Node n = node("Cast", 21, 1, {{"to", static_cast<int64_t>(DType::Complex64)}});
  EXPECT_NE(OpRegistry::global().why_unsupported(n), "");
  EXPECT_NE(OpRegistry::global().why_unsupported(node("Cast", 21, 1, {{"to", static_cast<int64_t>(DType::String)}})),
            "");
  for (DType t : {DType::BFloat16, DType::Float8E4M3FN, DType::Int4})
    EXPECT_EQ(OpRegistry::global().why_unsupported(node("Cast", 21, 1, {{"to", static_cast<int64_t>(t)}})), "");
  Tensor f = make<float>(DType::Float32, {1}, {1});
  EXPECT_THROW(run(n, {f}), Error);
}
