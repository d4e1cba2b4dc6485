// Edge cases of the reduce family that the ONNX node suite does not cover: reductions over every
// axes pattern and every threading split (checked against a naive multi-index sum), NaN and empty
// sets, integer overflow, the pre-13 Softmax coercion, TopK ties and NaN, CumSum on a middle axis,
// and Einsum equations (diagonals, ellipsis broadcasting, implicit output, several operands, the
// transposed and GEMM-sized paths) checked against a naive sum over all label values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/simd.h"
#include "ops/numerics.h"
#include "ops/registry.h"
#include "support/make_tensor.h"
#include "support/run_op.h"
#include "support/simd_levels.h"

using namespace reforge;
using namespace reforge::ops;

namespace {

using test_support::make;
using test_support::random_floats;

struct Attrs {
  std::map<std::string, int64_t> ints = {};
  std::map<std::string, std::vector<int64_t>> lists = {};
  std::map<std::string, std::string> strings = {};
};

ir::Node node(const std::string& op, int opset, size_t ninputs, const Attrs& at = {}, size_t noutputs = 1) {
  ir::Node n;
  n.name = "t";
  n.op_type = op;
  n.opset = opset;
  for (size_t i = 0; i < ninputs; ++i) n.inputs.push_back("in" + std::to_string(i));
  for (size_t i = 0; i < noutputs; ++i) n.outputs.push_back("out" + std::to_string(i));
  for (const auto& [k, v] : at.ints) {
    ir::Attribute a;
    a.name = k;
    a.type = ir::AttrType::Int;
    a.i = v;
    n.attrs[k] = a;
  }
  for (const auto& [k, v] : at.lists) {
    ir::Attribute a;
    a.name = k;
    a.type = ir::AttrType::Ints;
    a.ints = v;
    n.attrs[k] = a;
  }
  for (const auto& [k, v] : at.strings) {
    ir::Attribute a;
    a.name = k;
    a.type = ir::AttrType::String;
    a.s = v;
    n.attrs[k] = a;
  }
  return n;
}

std::vector<Tensor> run_all(const ir::Node& n, const std::vector<Tensor>& ins, int threads = 1) {
  std::vector<const Tensor*> ptrs;
  for (const auto& t : ins) ptrs.push_back(&t);
  return test_support::run_node(n, ptrs, threads);
}
Tensor run(const ir::Node& n, const std::vector<Tensor>& ins, int threads = 1) { return run_all(n, ins, threads)[0]; }

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

Tensor axes_tensor(std::vector<int64_t> axes) {
  const int64_t n = static_cast<int64_t>(axes.size());
  return make<int64_t>({n}, std::move(axes));
}

// Naive reduction by multi-index: out[kept index] = sum (or max) of x over the reduced axes.
std::vector<double> naive_reduce(const Tensor& x, const std::vector<int64_t>& axes, bool is_max) {
  const Shape& s = x.shape();
  std::vector<bool> red(s.size(), axes.empty());
  for (int64_t a : axes) red[static_cast<size_t>(a < 0 ? a + x.rank() : a)] = true;
  int64_t out_n = 1;
  for (size_t i = 0; i < s.size(); ++i)
    if (!red[i]) out_n *= s[i];
  std::vector<double> out(static_cast<size_t>(out_n), is_max ? -INFINITY : 0.0);
  std::vector<int64_t> idx(s.size(), 0);
  for (int64_t flat = 0; flat < x.numel(); ++flat) {
    int64_t rest = flat;
    for (size_t d = s.size(); d-- > 0;) {
      idx[d] = rest % s[d];
      rest /= s[d];
    }
    int64_t o = 0;
    for (size_t d = 0; d < s.size(); ++d)
      if (!red[d]) o = o * s[d] + idx[d];
    const double v = x.as_double(flat);
    double& acc = out[static_cast<size_t>(o)];
    acc = is_max ? std::max(acc, v) : acc + v;
  }
  return out;
}

}  // namespace

TEST(Reduce, AllAxesPatternsAndThreadSplitsMatchNaive) {
  // Small shapes cover every alternation of kept/reduced dims; the large ones cross the parallel
  // threshold so each split (outer kept, inner columns, per-thread partial rows, serial) runs
  // with 2 and 4 threads.
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
  };
  const std::vector<Case> cases = {
      {{3, 4, 5, 6}, {0}},    {{3, 4, 5, 6}, {3}},     {{3, 4, 5, 6}, {1, 2}}, {{3, 4, 5, 6}, {0, 2}},
      {{3, 4, 5, 6}, {1, 3}}, {{3, 4, 5, 6}, {0, 3}},  {{3, 4, 5, 6}, {}},     {{3, 1, 5, 1}, {1, 3}},
      {{3, 1, 5}, {0, -1}},   {{64, 300, 40}, {1}},    {{64, 300, 40}, {0}},   {{64, 300, 40}, {2}},
      {{64, 300, 40}, {}},    {{64, 300, 40}, {0, 2}}, {{5, 20000}, {0}},      {{2, 30000}, {1}},
      {{3, 20000}, {1}},
  };
  for (const Case& c : cases) {
    Tensor x = random_floats(c.shape, 7, -2, 2);
    for (int threads : {1, 2, 4}) {
      for (int keep : {0, 1}) {
        ir::Node sum = node("ReduceSum", 13, 2, {{{"keepdims", keep}}});
        Tensor y = run(sum, {x, axes_tensor(c.axes)}, threads);
        std::vector<double> want = naive_reduce(x, c.axes, false);
        ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size()));
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(y.data<float>()[i], want[i], 1e-4 * (1 + std::fabs(want[i])))
              << shape_str(c.shape) << " threads " << threads << " i " << i;
        ir::Node mx = node("ReduceMax", 18, 2, {{{"keepdims", keep}}});
        Tensor z = run(mx, {x, axes_tensor(c.axes)}, threads);
        std::vector<double> wmax = naive_reduce(x, c.axes, true);
        for (size_t i = 0; i < wmax.size(); ++i) ASSERT_EQ(z.data<float>()[i], static_cast<float>(wmax[i]));
      }
    }
  }
}

TEST(Reduce, KeepdimsShapesAndAttributeAxes) {
  Tensor x = random_floats({2, 3, 4}, 1, -2, 2);
  EXPECT_EQ(run(node("ReduceSum", 13, 2), {x, axes_tensor({1})}).shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(run(node("ReduceSum", 13, 2, {{{"keepdims", 0}}}), {x, axes_tensor({1})}).shape(), (Shape{2, 4}));
  // Before opset 13 (ReduceSum) / 18 (others) the axes are an attribute.
  EXPECT_EQ(run(node("ReduceSum", 11, 1, {{{"keepdims", 0}}, {{"axes", {0, 2}}}}), {x}).shape(), (Shape{3}));
  EXPECT_EQ(run(node("ReduceMean", 17, 1, {{}, {{"axes", {-1}}}}), {x}).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(run(node("ReduceMean", 17, 1, {{{"keepdims", 0}}}), {x}).shape(), (Shape{}));
  // noop_with_empty_axes: no axes means identity; without it, reduce everything.
  Tensor same = run(node("ReduceSum", 13, 1, {{{"noop_with_empty_axes", 1}}}), {x});
  EXPECT_EQ(same.shape(), x.shape());
  EXPECT_EQ(values<float>(same), values<float>(x));
  EXPECT_EQ(run(node("ReduceSum", 13, 1), {x}).shape(), (Shape{1, 1, 1}));
}

TEST(Reduce, BadAxesAreErrors) {
  Tensor x = random_floats({2, 3}, 1, -2, 2);
  EXPECT_THROW(run(node("ReduceSum", 13, 2), {x, axes_tensor({2})}), Error);
  EXPECT_THROW(run(node("ReduceSum", 13, 2), {x, axes_tensor({-3})}), Error);
  EXPECT_THROW(run(node("ReduceSum", 13, 2), {x, axes_tensor({1, -1})}), Error);
  EXPECT_THROW(run(node("ReduceMax", 11, 1, {{}, {{"axes", {5}}}}), {x}), Error);
  Tensor b = make<bool>({2}, {true, false});
  EXPECT_THROW(run(node("ReduceSum", 13, 1), {b}), Error);
}

TEST(Reduce, NaNEmptySetsAndSpecialValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Tensor x = make<float>({2, 3}, {1, nan, 3, 4, 5, 6});
  Tensor mx = run(node("ReduceMax", 18, 2, {{{"keepdims", 0}}}), {x, axes_tensor({1})});
  EXPECT_TRUE(std::isnan(mx.data<float>()[0]));
  EXPECT_EQ(mx.data<float>()[1], 6.0f);
  Tensor mn = run(node("ReduceMin", 18, 2, {{{"keepdims", 0}}}), {x, axes_tensor({0})});
  EXPECT_EQ(mn.data<float>()[0], 1.0f);
  EXPECT_TRUE(std::isnan(mn.data<float>()[1]));

  Tensor empty = Tensor::empty(DType::Float32, {2, 0, 3});
  auto reduce1 = [&](const char* op, const Tensor& t) {
    return run(node(op, 18, 2, {{{"keepdims", 0}}}), {t, axes_tensor({1})});
  };
  for (float v : values<float>(reduce1("ReduceMax", empty))) EXPECT_EQ(v, -inf);
  for (float v : values<float>(reduce1("ReduceMin", empty))) EXPECT_EQ(v, inf);
  for (float v : values<float>(reduce1("ReduceProd", empty))) EXPECT_EQ(v, 1.0f);
  for (float v : values<float>(reduce1("ReduceSumSquare", empty))) EXPECT_EQ(v, 0.0f);
  for (float v : values<float>(reduce1("ReduceLogSum", empty))) EXPECT_EQ(v, -inf);
  for (float v : values<float>(reduce1("ReduceLogSumExp", empty))) EXPECT_EQ(v, -inf);
  Tensor iempty = Tensor::empty(DType::Int32, {2, 0});
  EXPECT_EQ(values<int32_t>(run(node("ReduceMin", 18, 2, {{{"keepdims", 0}}}), {iempty, axes_tensor({1})})),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::max()}));
  EXPECT_EQ(values<int32_t>(run(node("ReduceMean", 18, 2, {{{"keepdims", 0}}}), {iempty, axes_tensor({1})})),
            (std::vector<int32_t>{0, 0}));

  // LogSumExp stays finite for large inputs: log(e^1000 + e^1000) = 1000 + log 2.
  Tensor big = make<float>({1, 2}, {1000, 1000});
  EXPECT_NEAR(run(node("ReduceLogSumExp", 18, 1), {big}).data<float>()[0], 1000.0f + std::log(2.0f), 1e-3);
  // Several long rows with different maxima, reduced by per-thread partials.
  Tensor rows = Tensor::empty(DType::Float32, {3, 40000});
  for (int64_t i = 0; i < rows.numel(); ++i) rows.mutable_data<float>()[i] = float(i / 40000) * 100.0f;
  Tensor lse = run(node("ReduceLogSumExp", 18, 2, {{{"keepdims", 0}}}), {rows, axes_tensor({1})}, 4);
  for (int r = 0; r < 3; ++r) EXPECT_NEAR(lse.data<float>()[r], r * 100.0f + std::log(40000.0f), 1e-3);
  Tensor neg = make<float>({2}, {-inf, -inf});
  EXPECT_EQ(run(node("ReduceLogSumExp", 18, 1), {neg}).data<float>()[0], -inf);
  Tensor l = make<float>({2, 2}, {3, -4, 1, -1});
  EXPECT_EQ(values<float>(run(node("ReduceL1", 18, 2, {{{"keepdims", 0}}}), {l, axes_tensor({1})})),
            (std::vector<float>{7, 2}));
  EXPECT_EQ(values<float>(run(node("ReduceL2", 18, 2, {{{"keepdims", 0}}}), {l, axes_tensor({1})})),
            (std::vector<float>{5, std::sqrt(2.0f)}));
}

TEST(Reduce, IntegersWrapAndTruncate) {
  Tensor x = make<int32_t>({4}, {std::numeric_limits<int32_t>::max(), 1, 7, 0});
  // Sum wraps like int32 arithmetic: max + 8 = min + 7.
  EXPECT_EQ(run(node("ReduceSum", 13, 1, {{{"keepdims", 0}}}), {x}).data<int32_t>()[0],
            std::numeric_limits<int32_t>::min() + 7);
  Tensor y = make<int64_t>({3}, {-7, 0, 0});
  EXPECT_EQ(run(node("ReduceMean", 18, 1, {{{"keepdims", 0}}}), {y}).data<int64_t>()[0], -2);  // -7/3 truncated
  Tensor u = make<uint8_t>({3}, {200, 100, 7});
  EXPECT_EQ(run(node("ReduceMax", 18, 1, {{{"keepdims", 0}}}), {u}).data<uint8_t>()[0], 200);
  EXPECT_EQ(run(node("ReduceSum", 13, 1, {{{"keepdims", 0}}}), {u}).data<uint8_t>()[0], uint8_t(307 % 256));
  Tensor b = make<bool>({2, 2}, {true, false, false, false});
  EXPECT_EQ(values<bool>(run(node("ReduceMax", 20, 2, {{{"keepdims", 0}}}), {b, axes_tensor({1})})),
            (std::vector<bool>{true, false}));
  EXPECT_EQ(values<bool>(run(node("ReduceMin", 20, 2, {{{"keepdims", 0}}}), {b, axes_tensor({0})})),
            (std::vector<bool>{false, false}));
}

TEST(Reduce, HalfInputsAccumulateInFloat) {
  // 4096 ones in float16: a float16 accumulator would stop at 2048.
  std::vector<float16> ones(4096, float16(1.0f));
  Tensor x = make<float16>({4096}, ones);
  EXPECT_EQ(static_cast<float>(run(node("ReduceSum", 13, 1), {x}).data<float16>()[0]), 4096.0f);
  std::vector<bfloat16> bones(1000, bfloat16(1.0f));
  Tensor bx = make<bfloat16>({1000}, bones);
  EXPECT_EQ(static_cast<float>(run(node("ReduceMean", 18, 1), {bx}).data<bfloat16>()[0]), 1.0f);
}

TEST(ArgMax, TiesNaNAndMiddleAxis) {
  Tensor x = make<float>({2, 3}, {1, 5, 5, 2, 2, 0});
  EXPECT_EQ(values<int64_t>(run(node("ArgMax", 13, 1, {{{"axis", 1}, {"keepdims", 0}}}), {x})),
            (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(
      values<int64_t>(run(node("ArgMax", 13, 1, {{{"axis", 1}, {"keepdims", 0}, {"select_last_index", 1}}}), {x})),
      (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(
      values<int64_t>(run(node("ArgMin", 13, 1, {{{"axis", 0}, {"keepdims", 0}, {"select_last_index", 1}}}), {x})),
      (std::vector<int64_t>{0, 1, 1}));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor n = make<float>({4}, {1, nan, 9, nan});
  EXPECT_EQ(run(node("ArgMax", 13, 1, {{{"keepdims", 0}}}), {n}).data<int64_t>()[0], 1);
  EXPECT_EQ(run(node("ArgMin", 13, 1, {{{"keepdims", 0}}}), {n}).data<int64_t>()[0], 1);
  // [2, 3, 2] along axis 1: the strided path.
  Tensor m = make<int32_t>({2, 3, 2}, {1, 9, 7, 3, 4, 8, 0, 0, -1, 2, 5, 2});
  Tensor am = run(node("ArgMax", 13, 1, {{{"axis", 1}}}), {m});
  EXPECT_EQ(am.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(values<int64_t>(am), (std::vector<int64_t>{1, 0, 2, 1}));
  EXPECT_THROW(run(node("ArgMax", 13, 1, {{{"axis", 1}}}), {Tensor::empty(DType::Float32, {2, 0})}), Error);
  EXPECT_THROW(run(node("ArgMax", 13, 1, {{{"axis", 2}}}), {x}), Error);
}

TEST(Softmax, Opset11CoercesTo2DAndOpset13UsesOneAxis) {
  Tensor x = make<float>({2, 3}, {0, 1, 2, 3, 4, 5});
  double total = 0;
  for (int i = 0; i < 6; ++i) total += std::exp(i - 5.0);
  // opset 11, axis 0: one row of all 6 values.
  Tensor y11 = run(node("Softmax", 11, 1, {{{"axis", 0}}}), {x});
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y11.data<float>()[i], std::exp(i - 5.0) / total, 1e-6);
  // opset 13, axis 0: each column of 2 values.
  Tensor y13 = run(node("Softmax", 13, 1, {{{"axis", 0}}}), {x});
  const double lo = 1.0 / (1.0 + std::exp(3.0));
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(y13.data<float>()[i], lo, 1e-6);
    EXPECT_NEAR(y13.data<float>()[3 + i], 1 - lo, 1e-6);
  }
  Tensor ls = run(node("LogSoftmax", 11, 1, {{{"axis", 0}}}), {x});
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(ls.data<float>()[i], (i - 5.0) - std::log(total), 1e-5);
}

// 16-bit sums (ops/numerics.h): by default exp(x - max) accumulates in float32 and the sum is
// rounded once, so a uniform row of 512 gives 1/512 (exact in bfloat16); with the ONNX
// reference's rounding (the node marked by BuildOptions::reference_rounding) a bfloat16 sum
// rounds after each addition and stops at 256 (256 + 1 is a tie that rounds to even), so each
// weight comes out as 1/256, as numpy on bfloat16 arrays computes it.
TEST(Softmax, SixteenBitSumsAccumulateInFloatUnlessTheReferenceRoundingIsAsked) {
  for (DType t : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor x = cast_tensor(make<float>({2, 512}, std::vector<float>(1024, 0.25f)), t);
    ir::Node n = node("Softmax", 13, 1);
    const Tensor y = run(n, {x});
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.as_double(i), 1.0 / 512) << i;
    ops::mark_reference_rounding_of(n);
    const Tensor r = run(n, {x});
    // float16 over the last axis sums in float in the reference too (numpy's pairwise half sum).
    const double want = t == DType::BFloat16 ? 1.0 / 256 : 1.0 / 512;
    for (int64_t i = 0; i < r.numel(); ++i) ASSERT_EQ(r.as_double(i), want) << i;
  }
  // Over a middle axis float16 rounds per addition as well: 2048 + 1 ties to 2048.
  Tensor x = cast_tensor(make<float>({4096, 2}, std::vector<float>(8192, 1.0f)), DType::Float16);
  ir::Node n = node("Softmax", 13, 1, {{{"axis", 0}}});
  EXPECT_EQ(run(n, {x}).as_double(0), 1.0 / 4096);
  ops::mark_reference_rounding_of(n);
  EXPECT_EQ(run(n, {x}).as_double(0), 1.0 / 2048);
}

TEST(Softmax, MaskedLogitsAndLongRows) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = make<float>({1, 4}, {-inf, 0, -inf, 0});
  EXPECT_EQ(values<float>(run(node("Softmax", 13, 1), {x})), (std::vector<float>{0, 0.5f, 0, 0.5f}));
  // A long row, checked against the formula in double (exercises the vectorized exp).
  const int n = 5000;
  Tensor r = random_floats({2, n}, 3, -2, 2);
  for (int i = 0; i < n; ++i) r.mutable_data<float>()[i] *= 40.0f;  // values in [-80, 80]
  for (int threads : {1, 2}) {
    Tensor y = run(node("Softmax", 13, 1), {r}, threads);
    Tensor ly = run(node("LogSoftmax", 13, 1), {r}, threads);
    for (int row = 0; row < 2; ++row) {
      const float* xs = r.data<float>() + row * n;
      double m = -INFINITY, s = 0;
      for (int i = 0; i < n; ++i) m = std::max(m, double(xs[i]));
      for (int i = 0; i < n; ++i) s += std::exp(xs[i] - m);
      for (int i = 0; i < n; ++i) {
        const double want = std::exp(xs[i] - m) / s;
        ASSERT_NEAR(y.data<float>()[row * n + i], want, 2e-5 * want + 1e-30) << i;  // x - max rounds in float
        ASSERT_NEAR(ly.data<float>()[row * n + i], xs[i] - m - std::log(s), 1e-4) << i;
      }
    }
  }
}

TEST(Softmax, HalfLogSoftmaxStaysFinite) {
  // exp(-30) underflows float16, so log(Softmax) would give -inf; LogSoftmax computes
  // x - max - log(sum) in float instead.
  Tensor x = make<float16>({2}, {float16(0.0f), float16(-30.0f)});
  Tensor y = run(node("LogSoftmax", 13, 1), {x});
  EXPECT_EQ(static_cast<float>(y.data<float16>()[0]), 0.0f);
  EXPECT_EQ(static_cast<float>(y.data<float16>()[1]), -30.0f);
  Tensor p = run(node("Softmax", 13, 1), {x});
  EXPECT_EQ(static_cast<float>(p.data<float16>()[0]), 1.0f);
  EXPECT_EQ(static_cast<float>(p.data<float16>()[1]), 0.0f);
}

TEST(TopK, TiesSmallestNaNAndMiddleAxis) {
  Tensor x = make<float>({1, 6}, {3, 1, 3, 2, 1, 3});
  auto outs = run_all(node("TopK", 11, 2, {{{"axis", -1}}}, 2), {x, make<int64_t>({1}, {4})});
  EXPECT_EQ(values<float>(outs[0]), (std::vector<float>{3, 3, 3, 2}));
  EXPECT_EQ(values<int64_t>(outs[1]), (std::vector<int64_t>{0, 2, 5, 3}));
  outs = run_all(node("TopK", 11, 2, {{{"largest", 0}}}, 2), {x, make<int64_t>({1}, {3})});
  EXPECT_EQ(values<float>(outs[0]), (std::vector<float>{1, 1, 2}));
  EXPECT_EQ(values<int64_t>(outs[1]), (std::vector<int64_t>{1, 4, 3}));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor n = make<float>({4}, {1, nan, 5, 2});
  outs = run_all(node("TopK", 11, 2, {}, 2), {n, make<int64_t>({1}, {2})});
  EXPECT_TRUE(std::isnan(outs[0].data<float>()[0]));
  EXPECT_EQ(values<int64_t>(outs[1]), (std::vector<int64_t>{1, 2}));
  // Axis 1 of [2, 3, 2].
  Tensor m = make<int32_t>({2, 3, 2}, {1, 9, 7, 3, 4, 8, 0, 0, -1, 2, 5, 2});
  outs = run_all(node("TopK", 11, 2, {{{"axis", 1}}}, 2), {m, make<int64_t>({1}, {2})});
  EXPECT_EQ(outs[0].shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(values<int32_t>(outs[0]), (std::vector<int32_t>{7, 9, 4, 8, 5, 2, 0, 2}));
  EXPECT_EQ(values<int64_t>(outs[1]), (std::vector<int64_t>{1, 0, 2, 2, 2, 1, 0, 2}));
  // k as an attribute before opset 10; k out of range is an error.
  outs = run_all(node("TopK", 1, 1, {{{"k", 1}}}, 2), {x});
  EXPECT_EQ(values<int64_t>(outs[1]), (std::vector<int64_t>{0}));
  EXPECT_THROW(run_all(node("TopK", 11, 2, {}, 2), {x, make<int64_t>({1}, {7})}), Error);
  EXPECT_THROW(run_all(node("TopK", 11, 2, {}, 2), {x, make<int64_t>({1}, {-1})}), Error);
}

TEST(CumSum, MiddleAxisReverseExclusiveAndIntegerWrap) {
  Tensor x = make<int32_t>({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Tensor y = run(node("CumSum", 14, 2, {{{"reverse", 1}, {"exclusive", 1}}}), {x, make<int64_t>({}, {1})});
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{8, 10, 5, 6, 0, 0, 20, 22, 11, 12, 0, 0}));
  Tensor w = make<int32_t>({2}, {std::numeric_limits<int32_t>::max(), 2});
  EXPECT_EQ(values<int32_t>(run(node("CumSum", 14, 2), {w, make<int32_t>({1}, {0})})),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min() + 1}));
  EXPECT_THROW(run(node("CumSum", 14, 2), {w, make<int32_t>({}, {1})}), Error);
}

// ---- Einsum against a naive sum over every assignment of label values ----
namespace {

// `eq` uses letters only and an explicit output; size-1 input dims broadcast.
std::vector<double> naive_einsum(const std::string& eq, const std::vector<Tensor>& ins, Shape* out_shape) {
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  std::string lhs = eq.substr(0, arrow), out = eq.substr(arrow + 2);
  for (size_t s = 0;;) {
    size_t c = lhs.find(',', s);
    terms.push_back(lhs.substr(s, c == std::string::npos ? std::string::npos : c - s));
    if (c == std::string::npos) break;
    s = c + 1;
  }
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) size[terms[i][d]] = std::max(size[terms[i][d]], ins[i].dim(d));
  std::vector<char> labels;
  for (auto& [c, n] : size) labels.push_back(c);
  out_shape->clear();
  for (char c : out) out_shape->push_back(size[c]);
  std::vector<double> result(static_cast<size_t>(shape_numel(*out_shape)), 0.0);
  std::map<char, int64_t> v;
  std::function<void(size_t)> rec = [&](size_t li) {
    if (li == labels.size()) {
      double p = 1;
      for (size_t i = 0; i < terms.size(); ++i) {
        int64_t off = 0;
        for (size_t d = 0; d < terms[i].size(); ++d)
          off = off * ins[i].dim(d) + (ins[i].dim(d) == 1 ? 0 : v[terms[i][d]]);
        p *= ins[i].as_double(off);
      }
      int64_t o = 0;
      for (char c : out) o = o * size[c] + v[c];
      result[static_cast<size_t>(o)] += p;
      return;
    }
    for (int64_t k = 0; k < size[labels[li]]; ++k) {
      v[labels[li]] = k;
      rec(li + 1);
    }
  };
  rec(0);
  return result;
}

Tensor einsum(const std::string& eq, const std::vector<Tensor>& ins, int threads = 1) {
  return run(node("Einsum", 12, ins.size(), {{}, {}, {{"equation", eq}}}), ins, threads);
}

void check_einsum(const std::string& eq, const std::string& naive_eq, std::vector<Shape> shapes, int threads = 1) {
  std::vector<Tensor> ins;
  for (size_t i = 0; i < shapes.size(); ++i) ins.push_back(random_floats(shapes[i], 11 + unsigned(i), -2, 2));
  Shape want_shape;
  std::vector<double> want = naive_einsum(naive_eq, ins, &want_shape);
  Tensor got = einsum(eq, ins, threads);
  ASSERT_EQ(got.shape(), want_shape) << eq;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << eq << " element " << i;
}

}  // namespace

TEST(Einsum, GeneralEquationsMatchNaive) {
  check_einsum("ij,jk->ik", "ij,jk->ik", {{3, 4}, {4, 5}});
  check_einsum("ij,jk", "ij,jk->ik", {{3, 4}, {4, 5}});  // implicit output
  check_einsum("ba", "ba->ab", {{3, 4}});                // implicit output is sorted
  check_einsum("Ab,bA", "Ab,bA->", {{3, 4}, {4, 3}});    // upper case; trace of a product
  check_einsum("ii->i", "ii->i", {{4, 4}});              // diagonal
  check_einsum("ii", "ii->", {{4, 4}});                  // trace
  check_einsum("iij->j", "iij->j", {{3, 3, 2}});
  check_einsum("ijk->", "ijk->", {{2, 3, 4}});
  check_einsum("i,j->ij", "i,j->ij", {{3}, {4}});  // outer product
  check_einsum("ij,jk,kl->il", "ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 5}});
  check_einsum("ij,ij->ij", "ij,ij->ij", {{3, 4}, {3, 4}});              // elementwise: all batch labels
  check_einsum("ab,cd->", "ab,cd->", {{2, 3}, {4, 5}});                  // private labels summed first
  check_einsum("bij,bkj->bik", "bij,bkj->bik", {{2, 3, 4}, {2, 5, 4}});  // transposed B in place
  check_einsum("bji,bjk->bki", "bji,bjk->bki", {{2, 4, 3}, {2, 4, 5}});  // transposed A in place
  check_einsum("ijk,kj->i", "ijk,kj->i", {{2, 3, 4}, {4, 3}});           // gathered operand
  // Ellipsis: right-aligned, broadcast batch (1 vs 3), implicit output puts it first.
  check_einsum("...ij,...jk->...ik", "xyij,yjk->xyik", {{2, 1, 3, 4}, {3, 4, 5}});
  check_einsum("...ii->...i", "xii->xi", {{3, 5, 5}});
  check_einsum("i...,i...", "ixy,ixy->xy", {{3, 2, 4}, {3, 2, 4}});
  check_einsum("ij...->", "ijx->", {{2, 3, 4}});
  // GEMM-sized (oneDNN path), with and without transposes, 1 and 2 threads.
  for (int threads : {1, 2}) {
    check_einsum("ij,jk->ik", "ij,jk->ik", {{40, 50}, {50, 60}}, threads);
    check_einsum("bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", {{2, 3, 33, 40}, {2, 3, 35, 40}}, threads);
    check_einsum("ki,kj->ij", "ki,kj->ij", {{50, 40}, {50, 60}}, threads);
  }
}

TEST(Einsum, TypesAndErrors) {
  Tensor a = make<int64_t>({2, 2}, {1, 2, 3, 4});
  Tensor b = make<int64_t>({2, 2}, {5, 6, 7, 8});
  EXPECT_EQ(values<int64_t>(einsum("ij,jk->ik", {a, b})), (std::vector<int64_t>{19, 22, 43, 50}));
  Tensor h = make<float16>({2}, {float16(1.5f), float16(2.0f)});
  EXPECT_EQ(static_cast<float>(einsum("i,i", {h, h}).data<float16>()[0]), 6.25f);
  Tensor s = make<double>({}, {2.5});
  EXPECT_EQ(einsum("->", {s}).data<double>()[0], 2.5);
  Tensor x = random_floats({2, 3}, 1, -2, 2), y = random_floats({4, 5}, 2, -2, 2);
  EXPECT_THROW(einsum("ij,jk->ik", {x, y}), Error);  // j is 3 and 4
  EXPECT_THROW(einsum("ij->ik", {x}), Error);        // k not in any input
  EXPECT_THROW(einsum("ij,jk->ik", {x}), Error);     // two terms, one input
  EXPECT_THROW(einsum("i$->i", {x}), Error);         // bad character
  EXPECT_THROW(einsum("ijk->i", {x}), Error);        // term longer than rank
  EXPECT_THROW(einsum("ii->i", {x}), Error);         // diagonal of a non-square pair
  EXPECT_THROW(einsum("i..j->i", {x}), Error);       // malformed ellipsis
  EXPECT_THROW(einsum("ij->ii", {x}), Error);        // repeated output label
  const OpDef* def = OpRegistry::global().find("", "Einsum", 12);
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(def->check(node("Einsum", 12, 2, {{}, {}, {{"equation", "ij,jk->ik"}}})), "");
  EXPECT_NE(def->check(node("Einsum", 12, 1, {{}, {}, {{"equation", "ij,jk->ik"}}})), "");
}

TEST(Einsum, RandomEquationsMatchNaive) {
  // Random explicit equations over labels a-e: 1-3 operands, repeated labels (diagonals),
  // size-1 broadcasting, any output subset and order.
  std::mt19937 rng(42);
  for (int iter = 0; iter < 300; ++iter) {
    std::map<char, int64_t> size;
    for (char c = 'a'; c <= 'e'; ++c) size[c] = 1 + static_cast<int64_t>(rng() % 4);
    const int n_ops = 1 + static_cast<int>(rng() % 3);
    std::string eq;
    std::vector<Shape> shapes;
    std::string used;
    for (int i = 0; i < n_ops; ++i) {
      const int rank = static_cast<int>(rng() % 4);
      Shape s;
      std::string term;
      for (int d = 0; d < rank; ++d) {
        const char c = static_cast<char>('a' + rng() % 5);
        term += c;
        // A size-1 dim broadcasts, unless the label is repeated in this term (a diagonal).
        const bool bcast = rng() % 6 == 0 && std::count(term.begin(), term.end(), c) == 1;
        s.push_back(bcast ? 1 : size[c]);
        if (used.find(c) == std::string::npos) used += c;
      }
      for (size_t d = 0; d < term.size(); ++d)  // repeated labels must agree within a term
        for (size_t e = 0; e < d; ++e)
          if (term[d] == term[e]) s[d] = s[e] = size[term[d]];
      eq += (i ? "," : "") + term;
      shapes.push_back(s);
    }
    std::shuffle(used.begin(), used.end(), rng);
    const std::string out = used.substr(0, rng() % (used.size() + 1));
    eq += "->" + out;
    check_einsum(eq, eq, shapes);
    if (::testing::Test::HasFatalFailure()) {
      ADD_FAILURE() << "equation " << eq;
      return;
    }
  }
}

TEST(Reduce, RandomShapesWithZerosMatchNaive) {
  std::mt19937 rng(5);
  for (int iter = 0; iter < 300; ++iter) {
    const int rank = static_cast<int>(rng() % 5);
    Shape s;
    for (int d = 0; d < rank; ++d) s.push_back(static_cast<int64_t>(rng() % 4));
    std::vector<int64_t> axes;
    for (int d = 0; d < rank; ++d)
      if (rng() % 2) axes.push_back(rng() % 2 ? d : d - rank);
    Tensor x = random_floats(s, iter, -2, 2);
    Tensor y = run(node("ReduceSum", 13, 2), {x, axes_tensor(axes)});
    std::vector<double> want = naive_reduce(x, axes, false);
    ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size())) << shape_str(s);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y.data<float>()[i], want[i], 1e-4);
  }
}

// ReduceMax/ReduceMin over the last axis (the row scan) and the first (the column scan), and
// ArgMax/ArgMin (first and last ties), float and double, at every vector instruction set the CPU
// has (backends/cpu/reduce.cc compiles the scans per variant, 16, 32 or 64 bytes wide), lengths straddling
// each width and its two-vector step, NaN anywhere: against a scalar reference.
TEST(Reduce, ExtremaAtEverySimdLevel) {
  const std::vector<SimdLevel> levels = test_support::simd_levels();
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (int64_t n : {1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100}) {
      const int64_t rows = 3;
      Tensor xf = random_floats({rows, n}, static_cast<unsigned>(n), -2, 2);
      Tensor x = Tensor::empty(dt, {rows, n});
      for (int64_t i = 0; i < x.numel(); ++i) {
        const float v = xf.data<float>()[i];
        if (dt == DType::Float32)
          x.mutable_data<float>()[i] = v;
        else
          x.mutable_data<double>()[i] = v;
      }
      auto set = [&](int64_t i, double v) {
        if (dt == DType::Float32)
          x.mutable_data<float>()[i] = static_cast<float>(v);
        else
          x.mutable_data<double>()[i] = v;
      };
      set(n + (n * 5) / 7, NAN);                 // row 1 holds a NaN, somewhere along it
      set(2 * n + n / 2, x.as_double(2 * n));    // row 2: a tie between the first element and the middle
      Tensor xt = Tensor::empty(dt, {n, rows});  // the transpose: columns of length n
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < n; ++k) {
          if (dt == DType::Float32)
            xt.mutable_data<float>()[k * rows + r] = x.data<float>()[r * n + k];
          else
            xt.mutable_data<double>()[k * rows + r] = x.data<double>()[r * n + k];
        }
      for (SimdLevel l : levels) {
        SimdOverride cap(l);
        for (bool is_max : {true, false}) {
          const std::string op = is_max ? "ReduceMax" : "ReduceMin";
          Tensor by_row = run(node(op, 13, 1, {{{"keepdims", 0}}, {{"axes", {1}}}}), {x});
          Tensor by_col = run(node(op, 13, 1, {{{"keepdims", 0}}, {{"axes", {0}}}}), {xt});
          for (int64_t r = 0; r < rows; ++r) {
            double want = x.as_double(r * n);
            bool nan = false;
            for (int64_t k = 0; k < n; ++k) {
              const double v = x.as_double(r * n + k);
              nan = nan || std::isnan(v);
              want = is_max ? std::max(want, v) : std::min(want, v);
            }
            for (const Tensor* got : {&by_row, &by_col}) {
              if (nan)
                EXPECT_TRUE(std::isnan(got->as_double(r))) << op << " n " << n << " row " << r;
              else
                EXPECT_EQ(got->as_double(r), want) << op << " n " << n << " row " << r << " level " << int(l);
            }
          }
          for (int64_t last : {0, 1}) {
            Tensor idx = run(node(is_max ? "ArgMax" : "ArgMin", 13, 1,
                                  {{{"axis", 1}, {"keepdims", 0}, {"select_last_index", last}}}),
                             {x});
            for (int64_t r = 0; r < rows; ++r) {
              int64_t want = 0;
              double best = x.as_double(r * n);
              for (int64_t k = 1; k < n; ++k) {
                const double v = x.as_double(r * n + k);
                if (std::isnan(best)) break;
                if (std::isnan(v) || (is_max ? v > best : v < best) || (last && v == best)) best = v, want = k;
              }
              EXPECT_EQ(idx.data<int64_t>()[r], want) << (is_max ? "ArgMax" : "ArgMin") << " last " << last << " n "
                                                      << n << " row " << r << " level " << int(l);
            }
          }
        }
      }
    }
  }
}
