// Edge cases of the tensor op family that the ONNX node suite does not cover: Slice clamping at
// int64 extremes, Pad modes with pads larger than the axis and negative (cropping) pads, index
// validation in gathers/scatters, Reshape/Split/Squeeze rules, seeded Dropout matching numpy.
// Expected values are written out by hand or taken from numpy (noted where so).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>
#include <numeric>

#include "core/dispatch.h"
#include "ops/registry.h"
#include "ops/tensor/transpose2d.h"
#include "support/make_tensor.h"
#include "support/run_op.h"

using namespace reforge;
using namespace reforge::ops;

namespace {

using test_support::make;

Tensor ints(std::vector<int64_t> v) { return make<int64_t>({static_cast<int64_t>(v.size())}, v); }

Tensor iota_f(Shape shape) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.0f);
  return make<float>(shape, v);
}

struct NodeSpec {
  std::string op;
  int opset;
  size_t ninputs;
  size_t noutputs = 1;
  std::map<std::string, int64_t> int_attrs = {};
  std::map<std::string, std::vector<int64_t>> ints_attrs = {};
  std::map<std::string, std::string> str_attrs = {};
};

ir::Node node(const NodeSpec& s) {
  ir::Node n;
  n.name = "t";
  n.op_type = s.op;
  n.opset = s.opset;
  for (size_t i = 0; i < s.ninputs; ++i) n.inputs.push_back("in" + std::to_string(i));
  for (size_t i = 0; i < s.noutputs; ++i) n.outputs.push_back("out" + std::to_string(i));
  for (auto& [k, v] : s.int_attrs) {
    ir::Attribute a;
    a.name = k;
    a.type = ir::AttrType::Int;
    a.i = v;
    n.attrs[k] = a;
  }
  for (auto& [k, v] : s.ints_attrs) {
    ir::Attribute a;
    a.name = k;
    a.type = ir::AttrType::Ints;
    a.ints = v;
    n.attrs[k] = a;
  }
  for (auto& [k, v] : s.str_attrs) {
    ir::Attribute a;
    a.name = k;
    a.type = ir::AttrType::String;
    a.s = v;
    n.attrs[k] = a;
  }
  return n;
}

// Runs a node; absent optional inputs are given as undefined tensors.
std::vector<Tensor> run_all(const ir::Node& n, const std::vector<Tensor>& ins) {
  std::vector<const Tensor*> ptrs;
  for (auto& t : ins) ptrs.push_back(t.defined() ? &t : nullptr);
  return test_support::run_node(n, ptrs);
}

Tensor run(const NodeSpec& s, const std::vector<Tensor>& ins) { return run_all(node(s), ins)[0]; }

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// Expects an Error whose message names the node ("node 't'") and contains `part`.
template <typename F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected an Error containing '" << part << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("node 't'"), std::string::npos) << what;
    EXPECT_NE(what.find(part), std::string::npos) << what;
  }
}

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

}  // namespace

TEST(TensorOps, SliceClampsAtInt64Extremes) {
  Tensor x = iota_f({10});
  NodeSpec s{"Slice", 13, 5};
  // Full reverse: start -1, end INT64_MIN, step -1 (numpy x[-1::-1]).
  EXPECT_EQ(values<float>(run(s, {x, ints({-1}), ints({kMin}), ints({0}), ints({-1})})),
            (std::vector<float>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  // Start past the end clamps to the last element for negative steps (numpy x[9::-3]).
  EXPECT_EQ(values<float>(run(s, {x, ints({20}), ints({-20}), ints({0}), ints({-3})})),
            (std::vector<float>{9, 6, 3, 0}));
  // A huge step selects just the start element.
  EXPECT_EQ(values<float>(run(s, {x, ints({5}), ints({kMin}), ints({0}), ints({kMin})})), (std::vector<float>{5}));
  EXPECT_EQ(values<float>(run(s, {x, ints({2}), ints({kMax}), ints({0}), ints({kMax})})), (std::vector<float>{2}));
  // Empty result when start >= end.
  EXPECT_EQ(run(s, {x, ints({7}), ints({3}), Tensor(), Tensor()}).shape(), (Shape{0}));
  // A zero-sized axis gives an empty slice for either step sign.
  EXPECT_EQ(run(s, {iota_f({0, 2}), ints({-1}), ints({kMin}), ints({0}), ints({-1})}).shape(), (Shape{0, 2}));
  expect_error([&] { run(s, {x, ints({0}), ints({3}), ints({0}), ints({0})}); }, "step");
  expect_error([&] { run(s, {x, ints({0, 0}), ints({3, 3}), ints({0, -1}), Tensor()}); }, "more than once");
}

TEST(TensorOps, SliceTwoAxesWithStep) {
  Tensor x = iota_f({3, 4});  // [[0..3],[4..7],[8..11]]
  Tensor y = run({"Slice", 13, 5}, {x, ints({1, 0}), ints({kMax, 4}), ints({-1, 0}), ints({2, 2})});
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 3, 9, 11}));
  // Opset 1 attribute form.
  Tensor z = run({"Slice", 9, 1, 1, {}, {{"starts", {1}}, {"ends", {3}}, {"axes", {0}}}}, {x});
  EXPECT_EQ(values<float>(z), (std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST(TensorOps, TransposeMatchesNumpy) {
  Tensor y = run({"Transpose", 13, 1, 1, {}, {{"perm", {1, 2, 0}}}}, {iota_f({2, 3, 4})});
  EXPECT_EQ(y.shape(), (Shape{3, 4, 2}));
  // numpy: np.arange(24).reshape(2,3,4).transpose(1,2,0).ravel()
  std::vector<float> expect;
  for (int i = 0; i < 12; ++i) {
    expect.push_back(static_cast<float>(i));
    expect.push_back(static_cast<float>(i + 12));
  }
  EXPECT_EQ(values<float>(y), expect);
  expect_error([&] { run({"Transpose", 13, 1, 1, {}, {{"perm", {0, 0, 1}}}}, {iota_f({2, 3, 4})}); }, "permutation");
}

TEST(TensorOps, PadModesBeyondAxisSize) {
  Tensor x = make<int32_t>({3}, {1, 2, 3});
  auto pad = [&](const std::string& mode, std::vector<int64_t> pads) {
    return values<int32_t>(run({"Pad", 19, 2, 1, {}, {}, {{"mode", mode}}}, {x, ints(pads)}));
  };
  // numpy.pad oracles.
  EXPECT_EQ(pad("reflect", {4, 4}), (std::vector<int32_t>{1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3}));
  EXPECT_EQ(pad("wrap", {4, 5}), (std::vector<int32_t>{3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2}));
  EXPECT_EQ(pad("edge", {2, 1}), (std::vector<int32_t>{1, 1, 1, 2, 3, 3}));
  EXPECT_EQ(pad("constant", {1, 2}), (std::vector<int32_t>{0, 1, 2, 3, 0, 0}));
  // Negative pads crop; the remaining padding applies to the cropped region.
  EXPECT_EQ(pad("constant", {-1, 1}), (std::vector<int32_t>{2, 3, 0}));
  EXPECT_EQ(pad("edge", {2, -1}), (std::vector<int32_t>{1, 1, 1, 2}));
  expect_error([&] { pad("constant", {-2, -2}); }, "crop");
  // 2-D reflect (numpy.pad(arange(6).reshape(2,3), ((1,0),(0,2)), 'reflect')).
  Tensor y = run({"Pad", 18, 2, 1, {}, {}, {{"mode", "reflect"}}}, {iota_f({2, 3}), ints({1, 0, 0, 2})});
  EXPECT_EQ(y.shape(), (Shape{3, 5}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{3, 4, 5, 4, 3, 0, 1, 2, 1, 0, 3, 4, 5, 4, 3}));
  // Constant value input and axes input (opset 18).
  Tensor c = make<float>({}, {7.5f});
  Tensor z = run({"Pad", 18, 4}, {iota_f({2, 2}), ints({1, 0}), c, ints({-1})});
  EXPECT_EQ(values<float>(z), (std::vector<float>{7.5f, 0, 1, 7.5f, 2, 3}));
  // Opset 2 attributes.
  Tensor w = run({"Pad", 2, 1, 1, {}, {{"pads", {0, 1, 0, 0}}}}, {iota_f({1, 2})});
  EXPECT_EQ(values<float>(w), (std::vector<float>{0, 0, 1}));
  // wrap is an opset 19 mode.
  EXPECT_NE(OpRegistry::global().why_unsupported(node({"Pad", 18, 2, 1, {}, {}, {{"mode", "wrap"}}})), "");
}

TEST(TensorOps, GatherValidatesIndices) {
  Tensor x = iota_f({3, 2});
  Tensor y = run({"Gather", 13, 2}, {x, make<int32_t>({2}, {-1, 0})});
  EXPECT_EQ(values<float>(y), (std::vector<float>{4, 5, 0, 1}));
  Tensor z = run({"Gather", 13, 2, 1, {{"axis", 1}}}, {x, make<int64_t>({}, {1})});
  EXPECT_EQ(z.shape(), (Shape{3}));
  EXPECT_EQ(values<float>(z), (std::vector<float>{1, 3, 5}));
  expect_error([&] { run({"Gather", 13, 2}, {x, ints({3})}); }, "out of range");
  expect_error([&] { run({"Gather", 13, 2}, {x, ints({-4})}); }, "out of range");
  expect_error([&] { run({"GatherElements", 13, 2}, {x, make<int64_t>({1, 1}, {5})}); }, "out of range");
  expect_error([&] { run({"Gather", 13, 2, 1, {{"axis", 2}}}, {x, ints({0})}); }, "axis");
}

TEST(TensorOps, GatherNDBatchDims) {
  // data [2,2,2], indices [2,1,1] with batch_dims=1: out[b, 0, :] = data[b, idx[b,0,0], :].
  Tensor x = iota_f({2, 2, 2});
  Tensor y = run({"GatherND", 13, 2, 1, {{"batch_dims", 1}}}, {x, make<int64_t>({2, 1, 1}, {1, 0})});
  EXPECT_EQ(y.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{2, 3, 4, 5}));
  expect_error([&] { run({"GatherND", 13, 2}, {x, make<int64_t>({1, 3}, {0, 2, 0})}); }, "out of range");
}

TEST(TensorOps, ScatterReductions) {
  Tensor data = make<int32_t>({4}, {1, 2, 3, 4});
  Tensor idx = make<int64_t>({3, 1}, {0, 0, -1});
  Tensor upd = make<int32_t>({3}, {5, 6, 7});
  auto nd = [&](const std::string& red) {
    return values<int32_t>(run({"ScatterND", 18, 3, 1, {}, {}, {{"reduction", red}}}, {data, idx, upd}));
  };
  EXPECT_EQ(nd("add"), (std::vector<int32_t>{12, 2, 3, 11}));
  EXPECT_EQ(nd("mul"), (std::vector<int32_t>{30, 2, 3, 28}));
  EXPECT_EQ(nd("max"), (std::vector<int32_t>{6, 2, 3, 7}));
  EXPECT_EQ(nd("min"), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_NE(OpRegistry::global().why_unsupported(node({"ScatterND", 16, 3, 1, {}, {}, {{"reduction", "max"}}})), "");
  Tensor y = run({"ScatterElements", 18, 3, 1, {{"axis", 1}}, {}, {{"reduction", "add"}}},
                 {iota_f({2, 3}), make<int64_t>({2, 1}, {-1, 0}), make<float>({2, 1}, {10, 20})});
  EXPECT_EQ(values<float>(y), (std::vector<float>{0, 1, 12, 23, 4, 5}));
  expect_error(
      [&] {
        run({"ScatterND", 18, 3}, {data, make<int64_t>({1, 1}, {4}), make<int32_t>({1}, {0})});
      },
      "out of range");
  expect_error([&] { run({"ScatterND", 18, 3}, {data, idx, make<int32_t>({2}, {0, 0})}); }, "updates");
}

TEST(TensorOps, ReshapeRules) {
  Tensor x = iota_f({2, 3, 4});
  EXPECT_EQ(run({"Reshape", 14, 2}, {x, ints({0, -1})}).shape(), (Shape{2, 12}));
  EXPECT_EQ(run({"Reshape", 14, 2}, {x, ints({-1})}).shape(), (Shape{24}));
  // allowzero: 0 is a real zero; a zero-sized input reshapes to it.
  Tensor e = iota_f({0, 3});
  EXPECT_EQ(run({"Reshape", 14, 2, 1, {{"allowzero", 1}}}, {e, ints({3, 0})}).shape(), (Shape{3, 0}));
  expect_error([&] { run({"Reshape", 14, 2}, {x, ints({-1, -1})}); }, "more than one -1");
  expect_error([&] { run({"Reshape", 14, 2}, {x, ints({5, -1})}); }, "cannot reshape");
  expect_error([&] { run({"Reshape", 14, 2}, {x, ints({0, 0, 0, 0})}); }, "rank");
  // Zero-copy: the output aliases the input's storage.
  EXPECT_EQ(run({"Reshape", 14, 2}, {x, ints({24})}).raw(), x.raw());
}

TEST(TensorOps, SplitAndSqueeze) {
  Tensor x = iota_f({7});
  std::vector<Tensor> outs = run_all(node({"Split", 18, 1, 3, {{"num_outputs", 3}}}), {x});
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(values<float>(outs[0]), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(values<float>(outs[1]), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(values<float>(outs[2]), (std::vector<float>{6}));
  expect_error([&] { run_all(node({"Split", 13, 1, 2}), {x}); }, "equal parts");
  expect_error([&] { run_all(node({"Split", 13, 2, 2}), {x, ints({3, 3})}); }, "sums to");
  std::vector<Tensor> two = run_all(node({"Split", 13, 2, 2, {{"axis", -1}}}), {iota_f({2, 3}), ints({1, 2})});
  EXPECT_EQ(values<float>(two[0]), (std::vector<float>{0, 3}));
  EXPECT_EQ(values<float>(two[1]), (std::vector<float>{1, 2, 4, 5}));

  Tensor s = iota_f({1, 3, 1});
  EXPECT_EQ(run({"Squeeze", 13, 1}, {s}).shape(), (Shape{3}));
  EXPECT_EQ(run({"Squeeze", 11, 1, 1, {}, {{"axes", {-1}}}}, {s}).shape(), (Shape{1, 3}));
  expect_error([&] { run({"Squeeze", 13, 2}, {s, ints({1})}); }, "not 1");
  EXPECT_EQ(run({"Unsqueeze", 13, 2}, {s, ints({-1, 0})}).shape(), (Shape{1, 1, 3, 1, 1}));
  expect_error([&] { run({"Unsqueeze", 13, 2}, {s, ints({0, 0})}); }, "more than once");
}

TEST(TensorOps, ExpandTileConcat) {
  Tensor x = make<float>({3, 1}, {1, 2, 3});
  Tensor y = run({"Expand", 13, 2}, {x, ints({2, 1, 2})});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  expect_error([&] { run({"Expand", 13, 2}, {x, ints({2, 2})}); }, "broadcast");
  Tensor t = run({"Tile", 13, 2}, {make<int16_t>({2}, {4, 5}), ints({3})});
  EXPECT_EQ(values<int16_t>(t), (std::vector<int16_t>{4, 5, 4, 5, 4, 5}));
  Tensor t2 = run({"Tile", 13, 2}, {iota_f({2, 2}), ints({2, 1})});
  EXPECT_EQ(values<float>(t2), (std::vector<float>{0, 1, 2, 3, 0, 1, 2, 3}));
  Tensor c = run({"Concat", 13, 3, 1, {{"axis", 1}}}, {iota_f({2, 1}), iota_f({2, 0}), iota_f({2, 2})});
  EXPECT_EQ(values<float>(c), (std::vector<float>{0, 0, 1, 1, 2, 3}));
  expect_error([&] { run({"Concat", 13, 2, 1, {{"axis", 0}}}, {iota_f({2, 1}), iota_f({2, 2})}); }, "differ");
}

TEST(TensorOps, DepthSpaceRoundTrip) {
  Tensor x = iota_f({1, 8, 2, 3});
  for (const char* mode : {"DCR", "CRD"}) {
    Tensor d = run({"DepthToSpace", 13, 1, 1, {{"blocksize", 2}}, {}, {{"mode", mode}}}, {x});
    EXPECT_EQ(d.shape(), (Shape{1, 2, 4, 6}));
    Tensor s = run({"SpaceToDepth", 28, 1, 1, {{"blocksize", 2}}, {}, {{"mode", mode}}}, {d});
    EXPECT_EQ(values<float>(s), values<float>(x)) << mode;
  }
  // DCR by hand: y[0,0,0,1] takes channel (i=0,j=1) -> c = 1*C' + 0 = 2, at h=0,w=0 -> 2*6 = 12.
  Tensor d = run({"DepthToSpace", 13, 1, 1, {{"blocksize", 2}}}, {x});
  EXPECT_EQ(d.data<float>()[1], 12.0f);
  expect_error([&] { run({"SpaceToDepth", 13, 1, 1, {{"blocksize", 2}}}, {iota_f({1, 1, 3, 2})}); }, "divisible");
}

TEST(TensorOps, TriluRangeOneHotNonZero) {
  Tensor x = iota_f({2, 3});
  EXPECT_EQ(values<float>(run({"Trilu", 14, 2}, {x, make<int64_t>({}, {kMax})})), (std::vector<float>(6, 0)));
  EXPECT_EQ(values<float>(run({"Trilu", 14, 2, 1, {{"upper", 0}}}, {x, make<int64_t>({}, {kMin})})),
            (std::vector<float>(6, 0)));
  EXPECT_EQ(values<float>(run({"Trilu", 14, 2, 1, {{"upper", 0}}}, {x, make<int64_t>({}, {-1})})),
            (std::vector<float>{0, 0, 0, 3, 0, 0}));

  EXPECT_EQ(values<int32_t>(
                run({"Range", 11, 3}, {make<int32_t>({}, {10}), make<int32_t>({}, {3}), make<int32_t>({}, {-3})})),
            (std::vector<int32_t>{10, 7, 4}));
  EXPECT_EQ(run({"Range", 11, 3}, {make<int64_t>({}, {0}), make<int64_t>({}, {5}), make<int64_t>({}, {-1})}).numel(),
            0);
  EXPECT_EQ(
      values<double>(run({"Range", 11, 3}, {make<double>({}, {1}), make<double>({}, {2}), make<double>({}, {0.25})})),
      (std::vector<double>{1, 1.25, 1.5, 1.75}));
  expect_error(
      [&] {
        run({"Range", 11, 3}, {make<int64_t>({}, {0}), make<int64_t>({}, {5}), make<int64_t>({}, {0})});
      },
      "delta");

  Tensor oh = run({"OneHot", 11, 3, 1, {{"axis", 0}}},
                  {make<float>({3}, {1.7f, -1.0f, 7.0f}), make<int64_t>({}, {3}), make<int32_t>({2}, {0, 9})});
  EXPECT_EQ(oh.shape(), (Shape{3, 3}));
  // Column j is index j: 1.7 -> 1, -1 -> 2, 7 -> out of range (all off).
  EXPECT_EQ(values<int32_t>(oh), (std::vector<int32_t>{0, 0, 0, 9, 0, 0, 0, 9, 0}));

  Tensor nz = run({"NonZero", 13, 1}, {make<float>({2, 2}, {0, 3, 4, 0})});
  EXPECT_EQ(nz.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<int64_t>(nz), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(run({"NonZero", 13, 1}, {make<float>({}, {5})}).shape(), (Shape{0, 1}));
}

TEST(TensorOps, SeededDropoutMatchesNumpy) {
  Tensor x = make<float>({12}, std::vector<float>(12, 2.0f));
  std::vector<Tensor> outs =
      run_all(node({"Dropout", 13, 3, 2, {{"seed", 42}}}), {x, make<float>({}, {0.5f}), make<bool>({}, {true})});
  // numpy: np.random.seed(42); np.random.uniform(0, 1, 12) >= 0.5
  const std::vector<int> keep{0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 1};
  for (size_t i = 0; i < keep.size(); ++i) {
    EXPECT_EQ(outs[1].data<bool>()[i], keep[i] != 0) << i;
    EXPECT_EQ(outs[0].data<float>()[i], keep[i] ? 4.0f : 0.0f) << i;
  }
  // Inference (no training_mode): identity, mask all true.
  std::vector<Tensor> inf = run_all(node({"Dropout", 13, 1, 2}), {x});
  EXPECT_EQ(inf[0].raw(), x.raw());
  EXPECT_EQ(values<bool>(inf[1]), std::vector<bool>(12, true));
}

TEST(TensorOps, ConstantForms) {
  ir::Node n = node({"Constant", 13, 0, 1, {{"value_int", 7}}});
  Tensor c = run_all(n, {})[0];
  EXPECT_EQ(c.dtype(), DType::Int64);
  EXPECT_EQ(c.shape(), Shape{});
  EXPECT_EQ(c.data<int64_t>()[0], 7);
  ir::Node m = node({"Constant", 13, 0, 1, {}, {{"value_ints", {1, 2}}}});
  EXPECT_EQ(values<int64_t>(run_all(m, {})[0]), (std::vector<int64_t>{1, 2}));
  ir::Node s = node({"Constant", 13, 0, 1, {}, {}, {{"value_string", "x"}}});
  EXPECT_NE(OpRegistry::global().why_unsupported(s), "");
}

// Large enough to take the tiled transpose path; checked against direct index arithmetic.
TEST(TensorOps, TransposeTiledMatchesNaive) {
  const Shape s{3, 40, 50, 2};
  Tensor x = iota_f(s);
  const std::vector<std::vector<int64_t>> perms{{0, 2, 1, 3}, {0, 1, 3, 2}, {3, 2, 1, 0}, {1, 0, 3, 2}, {2, 0, 3, 1}};
  for (const auto& perm : perms) {
    Tensor y = run({"Transpose", 13, 1, 1, {}, {{"perm", perm}}}, {x});
    Shape os;
    for (int64_t p : perm) os.push_back(s[static_cast<size_t>(p)]);
    ASSERT_EQ(y.shape(), os);
    const std::vector<int64_t> xs{s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
    bool ok = true;
    for (int64_t i = 0; i < y.numel() && ok; ++i) {
      int64_t rem = i, src = 0;
      for (int64_t d = 3; d >= 0; --d) {
        src += (rem % os[static_cast<size_t>(d)]) * xs[static_cast<size_t>(perm[static_cast<size_t>(d)])];
        rem /= os[static_cast<size_t>(d)];
      }
      ok = y.data<float>()[i] == static_cast<float>(src);
      EXPECT_TRUE(ok) << "perm " << shape_str(perm) << " element " << i;
    }
  }
}

// The cache-blocked, parallel batched 2-D transpose: every byte size, odd edges, size-1 axes,
// merged inner blocks, empty inputs, 1 and 4 threads; bit-exact against index arithmetic on raw bytes. And
// transpose_equals() finds a single differing byte anywhere.
TEST(TensorOps, TransposeBlockedBitExactEveryDtype) {
  const std::vector<DType> dtypes{DType::UInt8, DType::Float16, DType::Float32, DType::Float64};
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases{
      {{130, 67}, {1, 0}},           {{1, 257, 1, 3}, {3, 2, 1, 0}},
      {{5, 70, 33}, {0, 2, 1}},      {{70, 33, 3}, {1, 0, 2}},
      {{2, 65, 9, 5}, {0, 2, 1, 3}}, {{600, 520}, {1, 0}},
      {{3, 4, 5, 6}, {2, 0, 3, 1}},  {{64, 64}, {0, 1}},
      {{4, 0, 3}, {2, 0, 1}},        {{0, 9}, {1, 0}}};  // empty: nothing moves (ASan sees a stray write)
  for (DType dt : dtypes)
    for (const auto& [s, perm] : cases)
      for (int threads : {1, 4}) {
        const size_t e = dtype_size(dt);
        Tensor x = Tensor::empty(dt, s);
        auto* xb = static_cast<unsigned char*>(x.mutable_raw());
        for (size_t i = 0; i < x.nbytes(); ++i) xb[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
        ir::Node n = node({"Transpose", 13, 1, 1, {}, {{"perm", perm}}});
        const Tensor* in = &x;
        KernelContext ctx(n, {in}, threads);
        OpRegistry::global().find("", "Transpose", 13)->kernel(ctx);
        const Tensor& y = ctx.outputs()[0];
        Shape os;
        for (int64_t p : perm) os.push_back(s[static_cast<size_t>(p)]);
        ASSERT_EQ(y.shape(), os);
        std::vector<int64_t> xs(s.size(), 1);
        for (size_t d = s.size() - 1; d-- > 0;) xs[d] = xs[d + 1] * s[d + 1];
        const auto* yb = static_cast<const unsigned char*>(y.raw());
        bool ok = true;
        for (int64_t i = 0; i < y.numel() && ok; ++i) {
          int64_t rem = i, src = 0;
          for (size_t d = os.size(); d-- > 0;) {
            src += (rem % os[d]) * xs[static_cast<size_t>(perm[d])];
            rem /= os[d];
          }
          ok = std::memcmp(yb + i * e, xb + src * e, e) == 0;
          EXPECT_TRUE(ok) << dtype_name(dt) << shape_str(s) << " perm " << shape_str(perm) << " element " << i;
        }
        Transpose2D t;
        if (!as_transpose_2d(s, perm, e, &t)) continue;
        EXPECT_TRUE(transpose_equals(y.raw(), x.raw(), t, threads));
        Tensor z = y.clone();
        auto* zb = static_cast<unsigned char*>(z.mutable_raw());
        for (size_t at : {size_t{0}, z.nbytes() / 2 + 1, z.nbytes() - 1}) {
          zb[at] ^= 0x10;
          EXPECT_FALSE(transpose_equals(z.raw(), x.raw(), t, threads))
              << dtype_name(dt) << shape_str(s) << " byte " << at;
          zb[at] ^= 0x10;
        }
      }
  // A size-0 axis is not dropped like a size-1 one: an empty input has no 2-D form.
  Transpose2D t;
  EXPECT_FALSE(as_transpose_2d({4, 0, 3}, {2, 0, 1}, 8, &t));
}
