// Cases of the smaller op groups that the ONNX node suite leaves out, each checked against values
// derived by hand: the losses (every position ignored, out-of-range targets, float16), BitShift
// on unsigned types past the width and with broadcasting, the bitwise ops on signed types,
// CumProd's integer wrap-around on a middle axis, Hardmax ties and its pre-13 coercion,
// LpNormalization's L1 form on a leading axis, LpPool's padding, Compress with a short
// condition, Unique's orders and NaN, CenterCropPad with odd differences, Col2Im with
// overlapping blocks, GridSample's modes at known points, AffineGrid's base grid, the recurrent
// ops' options (sequence_lens in both directions, activations with alpha, GRU's
// linear_before_reset, LSTM's clip and input_forget) and NonMaxSuppression's tie and threshold
// rules, Det of singular and pivoting matrices, EyeLike below the diagonal, ReverseSequence
// with zero-length entries, the symmetric Hann window, SwiGLU's alpha, TensorScatter's bounds
// MaxUnpool into a larger output_shape, DFT's one-sided forms and dft_length, CausalConvWithState's
// carried state, LinearAttention's linear and delta rules, GroupNormalization's per-group
// parameters before opset 21, Upsample's linear mode, RoiAlign's avg and max over clamped
// samples and DeformConv's fractional offsets past the image edge.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/half.h"
#include "ops/registry.h"
#include "support/make_tensor.h"
#include "support/run_op.h"

using namespace reforge;
using namespace reforge::ops;

namespace {

using test_support::make;

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

std::vector<Tensor> run_all(const ir::Node& n, const std::vector<Tensor>& ins) {
  std::vector<const Tensor*> ptrs;
  for (const auto& t : ins) ptrs.push_back(&t);
  return test_support::run_node(n, ptrs, 1);
}
Tensor run(const ir::Node& n, const std::vector<Tensor>& ins) { return run_all(n, ins)[0]; }

// Runs with optional inputs: a null entry is an absent input (empty name in the node).
std::vector<Tensor> run_opt(ir::Node n, const std::vector<const Tensor*>& ins) {
  for (size_t i = 0; i < ins.size() && i < n.inputs.size(); ++i)
    if (!ins[i]) n.inputs[i] = "";
  return test_support::run_node(n, ins, 1);
}

ir::Attribute strings_attr(const std::string& name, std::vector<std::string> v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::Strings;
  a.strings = std::move(v);
  return a;
}

ir::Attribute floats_attr(const std::string& name, std::vector<float> v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::Floats;
  a.floats = std::move(v);
  return a;
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

}  // namespace

TEST(Loss, NllMeanDividesByTheWeightsOfKeptPositions) {
  // x[n, c]: loss = -(w[t0] * x[0, t0] + w[t2] * x[2, t2]) / (w[t0] + w[t2]), position 1 ignored.
  const Tensor x = make<float>({3, 3}, {-1, -2, -3, -4, -5, -6, -7, -8, -9});
  const Tensor t = make<int64_t>({3}, {2, 7, 0});
  const Tensor w = make<float>({3}, {0.5f, 1.0f, 2.0f});
  const Tensor y = run(node("NegativeLogLikelihoodLoss", 22, 3, {{{"ignore_index", 7}}}), {x, t, w});
  EXPECT_EQ(y.rank(), 0);
  EXPECT_NEAR(y.data<float>()[0], (2.0f * 3 + 0.5f * 7) / 2.5f, 1e-6f);
  const Tensor s =
      run(node("NegativeLogLikelihoodLoss", 22, 3, {{{"ignore_index", 7}}, {}, {{"reduction", "sum"}}}), {x, t, w});
  EXPECT_NEAR(s.data<float>()[0], 2.0f * 3 + 0.5f * 7, 1e-6f);
}

TEST(Loss, EveryPositionIgnoredGivesNanMeanAndZeroSum) {
  const Tensor x = make<float>({2, 2}, {1, 2, 3, 4});
  const Tensor t = make<int64_t>({2}, {-1, -1});
  EXPECT_TRUE(
      std::isnan(run(node("NegativeLogLikelihoodLoss", 22, 2, {{{"ignore_index", -1}}}), {x, t}).data<float>()[0]));
  const Tensor s =
      run(node("NegativeLogLikelihoodLoss", 22, 2, {{{"ignore_index", -1}}, {}, {{"reduction", "sum"}}}), {x, t});
  EXPECT_EQ(s.data<float>()[0], 0.0f);
}

TEST(Loss, TargetOutsideTheClassesIsAnErrorNamingTheNode) {
  const Tensor x = make<float>({2, 2}, {1, 2, 3, 4});
  const Tensor t = make<int64_t>({2}, {0, 2});
  try {
    run(node("NegativeLogLikelihoodLoss", 22, 2), {x, t});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'t'"), std::string::npos) << e.what();
  }
}

TEST(Loss, SoftmaxCrossEntropyInFloat16MatchesHandValues) {
  // Two classes with scores (0, ln 3): log-probabilities (ln 1/4, ln 3/4).
  const float l3 = std::log(3.0f);
  const Tensor x = make<float16>({2, 2}, {float16(0.0f), float16(l3), float16(l3), float16(0.0f)});
  const Tensor t = make<int32_t>({2}, {1, 1});
  const auto out = run_all(node("SoftmaxCrossEntropyLoss", 13, 2, {{}, {}, {{"reduction", "none"}}}, 2), {x, t});
  ASSERT_EQ(out[0].shape(), (Shape{2}));
  EXPECT_NEAR(static_cast<float>(out[0].data<float16>()[0]), -std::log(0.75f), 2e-3f);
  EXPECT_NEAR(static_cast<float>(out[0].data<float16>()[1]), -std::log(0.25f), 2e-3f);
  EXPECT_NEAR(static_cast<float>(out[1].data<float16>()[0]), std::log(0.25f), 2e-3f);
}

TEST(Bitwise, ShiftUnsignedPastTheWidthGivesZeroAndBroadcasts) {
  const Tensor x = make<uint8_t>({2, 2}, {0x81, 0x0f, 0xff, 1});
  const Tensor s = make<uint8_t>({2}, {1, 8});
  EXPECT_EQ(values<uint8_t>(run(node("BitShift", 11, 2, {{}, {}, {{"direction", "LEFT"}}}), {x, s})),
            (std::vector<uint8_t>{0x02, 0, 0xfe, 0}));
  EXPECT_EQ(values<uint8_t>(run(node("BitShift", 11, 2, {{}, {}, {{"direction", "RIGHT"}}}), {x, s})),
            (std::vector<uint8_t>{0x40, 0, 0x7f, 0}));
  const Tensor big = make<uint64_t>({2}, {1, 1});
  const Tensor amt = make<uint64_t>({2}, {63, 64});
  EXPECT_EQ(values<uint64_t>(run(node("BitShift", 11, 2, {{}, {}, {{"direction", "LEFT"}}}), {big, amt})),
            (std::vector<uint64_t>{uint64_t{1} << 63, 0}));
}

TEST(Bitwise, SignedShiftBeforeOpset28IsRefused) {
  const Tensor x = make<int8_t>({1}, {4});
  EXPECT_THROW(run(node("BitShift", 11, 2, {{}, {}, {{"direction", "LEFT"}}}), {x, x}), Error);
}

TEST(Bitwise, AndOrXorNotOnSignedValues) {
  const Tensor a = make<int16_t>({3}, {-1, 0x0f0f, -32768});
  const Tensor b = make<int16_t>({1}, {0x00ff});
  EXPECT_EQ(values<int16_t>(run(node("BitwiseAnd", 18, 2), {a, b})), (std::vector<int16_t>{0xff, 0x0f, 0}));
  EXPECT_EQ(values<int16_t>(run(node("BitwiseOr", 18, 2), {a, b})), (std::vector<int16_t>{-1, 0x0fff, -32768 + 0xff}));
  EXPECT_EQ(values<int16_t>(run(node("BitwiseXor", 18, 2), {a, b})),
            (std::vector<int16_t>{-256, 0x0ff0, -32768 + 0xff}));
  EXPECT_EQ(values<int16_t>(run(node("BitwiseNot", 18, 1), {a})), (std::vector<int16_t>{0, -0x0f10, 32767}));
}

TEST(CumProd, IntegerProductsWrapAlongAMiddleAxis) {
  // [1, 3, 2] along axis 1: column 0 is 200, 200, 2 in int8 (200 * 200 wraps), exclusive.
  const Tensor x = make<int8_t>({1, 3, 2}, {100, 2, 2, 3, 2, 5});
  const Tensor axis = make<int64_t>({}, {1});
  // Inclusive: col0 = 100, 200 -> -56, -56 * 2 = -112; col1 = 2, 6, 30.
  EXPECT_EQ(values<int8_t>(run(node("CumProd", 26, 2), {x, axis})), (std::vector<int8_t>{100, 2, -56, 6, -112, 30}));
  // Exclusive and reverse: col0 = 4, 2, 1; col1 = 15, 5, 1.
  EXPECT_EQ(values<int8_t>(run(node("CumProd", 26, 2, {{{"exclusive", 1}, {"reverse", 1}}}), {x, axis})),
            (std::vector<int8_t>{4, 15, 2, 5, 1, 1}));
}

TEST(Hardmax, FirstMaximumWinsAndOpset11FlattensTheTail) {
  const Tensor x = make<float>({2, 2, 2}, {1, 3, 3, 0, 5, 5, 5, 5});
  // Opset 13, axis -1: rows [1,3] [3,0] [5,5] [5,5].
  EXPECT_EQ(values<float>(run(node("Hardmax", 13, 1), {x})), (std::vector<float>{0, 1, 1, 0, 1, 0, 1, 0}));
  // Opset 11, axis 1: each batch's 4 values are one row.
  EXPECT_EQ(values<float>(run(node("Hardmax", 11, 1), {x})), (std::vector<float>{0, 1, 0, 0, 1, 0, 0, 0}));
}

TEST(LpNormalization, L1AlongTheFirstAxisAndZeroLanesStayZero) {
  const Tensor x = make<float>({2, 3}, {1, -3, 0, 3, 1, 0});
  expect_near(values<float>(run(node("LpNormalization", 22, 1, {{{"axis", 0}, {"p", 1}}}), {x})),
              {0.25f, -0.75f, 0, 0.75f, 0.25f, 0});
}

TEST(LpPool, PaddingContributesNothing) {
  // 1-D, kernel 2, pad 1 each side, p = 2: windows [pad, 3], [3, -4], [-4, pad].
  const Tensor x = make<float>({1, 1, 2}, {3, -4});
  expect_near(values<float>(run(node("LpPool", 22, 1, {{{"p", 2}}, {{"kernel_shape", {2}}, {"pads", {1, 1}}}}), {x})),
              {3, 5, 4});
}

TEST(Compress, ShortConditionKeepsLeadingSlicesAndTrueEntryPastTheEndIsRefused) {
  const Tensor x = make<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor c = make<bool>({2}, {false, true});
  const Tensor y = run(node("Compress", 11, 2, {{{"axis", 1}}}), {x, c});
  EXPECT_EQ(y.shape(), (Shape{2, 1}));
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{2, 5}));
  const Tensor flat = run(node("Compress", 11, 2), {x, c});
  EXPECT_EQ(values<int32_t>(flat), (std::vector<int32_t>{2}));
  const Tensor c4 = make<bool>({4}, {false, false, false, true});
  EXPECT_THROW(run(node("Compress", 11, 2, {{{"axis", 1}}}), {x, c4}), Error);
}

TEST(Unique, SortedAndFirstOccurrenceOrders) {
  const Tensor x = make<float>({6}, {2, 1, 2, NAN, 0, NAN});
  const auto s = run_all(node("Unique", 11, 1, {}, 4), {x});
  const auto y = values<float>(s[0]);
  ASSERT_EQ(y.size(), 4u);
  EXPECT_EQ(y[0], 0);
  EXPECT_EQ(y[1], 1);
  EXPECT_EQ(y[2], 2);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_EQ(values<int64_t>(s[1]), (std::vector<int64_t>{4, 1, 0, 3}));
  EXPECT_EQ(values<int64_t>(s[2]), (std::vector<int64_t>{2, 1, 2, 3, 0, 3}));
  EXPECT_EQ(values<int64_t>(s[3]), (std::vector<int64_t>{1, 1, 2, 2}));
  const auto u = run_all(node("Unique", 11, 1, {{{"sorted", 0}}}, 4), {x});
  EXPECT_EQ(values<int64_t>(u[1]), (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_EQ(values<int64_t>(u[2]), (std::vector<int64_t>{0, 1, 0, 2, 3, 2}));
  EXPECT_EQ(values<int64_t>(u[3]), (std::vector<int64_t>{2, 1, 2, 1}));
}

TEST(CenterCropPad, OddDifferencesPutTheExtraRowAtTheEnd) {
  // Axis 0: 4 -> 1 crops from floor(3/2) = 1; axis 1: 1 -> 4 pads floor(3/2) = 1 before.
  const Tensor x = make<int64_t>({4, 1}, {10, 11, 12, 13});
  const Tensor shape = make<int64_t>({2}, {1, 4});
  const Tensor y = run(node("CenterCropPad", 18, 2), {x, shape});
  EXPECT_EQ(y.shape(), (Shape{1, 4}));
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{0, 11, 0, 0}));
}

TEST(Col2Im, OverlappingBlocksSum) {
  // Image 1x3, block 1x2, stride 1: two blocks [a0 a1] at columns 0-1 and [b0 b1] at 1-2.
  // Input [1, 2, 2]: row k is tap k, column p is block p.
  const Tensor x = make<float>({1, 2, 2}, {1, 10, 2, 20});
  const Tensor image = make<int64_t>({2}, {1, 3});
  const Tensor block = make<int64_t>({2}, {1, 2});
  const Tensor y = run(node("Col2Im", 18, 3), {x, image, block});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 3}));
  expect_near(values<float>(y), {1, 12, 20});
}

TEST(GridSample, ModesAtKnownPoints) {
  // 2x2 image; with align_corners the grid corners are the pixel centers.
  const Tensor x = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  // Points (x, y): center, top-right corner, and one outside on the right.
  const Tensor g = make<float>({1, 1, 3, 2}, {0, 0, 1, -1, 3, 0});
  Attrs lin{{{"align_corners", 1}}, {}, {{"mode", "linear"}}};
  expect_near(values<float>(run(node("GridSample", 22, 2, lin), {x, g})), {2.5f, 2.0f, 0.0f});
  Attrs border{{{"align_corners", 1}}, {}, {{"mode", "linear"}, {"padding_mode", "border"}}};
  expect_near(values<float>(run(node("GridSample", 22, 2, border), {x, g})), {2.5f, 2.0f, 3.0f});
  // Nearest, 2-D: position 0.5 rounds half to even (0), so the center reads pixel (0, 0).
  Attrs near{{{"align_corners", 1}}, {}, {{"mode", "nearest"}}};
  expect_near(values<float>(run(node("GridSample", 22, 2, near), {x, g})), {1.0f, 2.0f, 0.0f});
}

TEST(AffineGrid, IdentityThetaGivesTheBaseGrid) {
  const Tensor theta = make<float>({1, 2, 3}, {1, 0, 0, 0, 1, 0});
  const Tensor size = make<int64_t>({4}, {1, 1, 1, 2});
  // H = 1, W = 2 without align_corners: x at -0.5 and 0.5, y at 0.
  const Tensor y = run(node("AffineGrid", 20, 2), {theta, size});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  expect_near(values<float>(y), {-0.5f, 0, 0.5f, 0});
  const Tensor ya = run(node("AffineGrid", 20, 2, {{{"align_corners", 1}}}), {theta, size});
  expect_near(values<float>(ya), {-1, -1, 1, -1});
}

TEST(Recurrent, RnnBidirectionalWithSequenceLengths) {
  // hidden 1, input 1, W = 1, R = 0.5 in both directions, Relu: h = relu(x + 0.5 h).
  // Batch 0 (x 1 2 3, length 3) forward: 1, 2.5, 4.25; reverse from t 2: 3, 3.5, 2.75.
  // Batch 1 (x 4 5 6, length 2) forward: 4, 7, (zero); reverse from t 1: 5, 6.5, (zero).
  const Tensor x = make<float>({3, 2, 1}, {1, 4, 2, 5, 3, 6});
  const Tensor w = make<float>({2, 1, 1}, {1, 1});
  const Tensor r = make<float>({2, 1, 1}, {0.5f, 0.5f});
  const Tensor lens = make<int32_t>({2}, {3, 2});
  ir::Node n = node("RNN", 14, 5, {{{"hidden_size", 1}}, {}, {{"direction", "bidirectional"}}}, 2);
  n.attrs["activations"] = strings_attr("activations", {"Relu", "Relu"});
  const auto out = run_opt(n, {&x, &w, &r, nullptr, &lens});
  ASSERT_EQ(out[0].shape(), (Shape{3, 2, 2, 1}));
  // Y[t, dir, batch]
  expect_near(values<float>(out[0]), {1, 4, 2.75f, 6.5f, 2.5f, 7, 3.5f, 5, 4.25f, 0, 3, 0});
  ASSERT_EQ(out[1].shape(), (Shape{2, 2, 1}));
  expect_near(values<float>(out[1]), {4.25f, 7, 2.75f, 6.5f});
}

TEST(Recurrent, ActivationAlphaIsConsumedInOrder) {
  const Tensor x = make<float>({1, 1, 1}, {-1});
  const Tensor w = make<float>({1, 1, 1}, {1});
  const Tensor r = make<float>({1, 1, 1}, {0});
  ir::Node n = node("RNN", 14, 3, {{{"hidden_size", 1}}}, 2);
  n.attrs["activations"] = strings_attr("activations", {"LeakyRelu"});
  n.attrs["activation_alpha"] = floats_attr("activation_alpha", {0.25f});
  expect_near(values<float>(run_opt(n, {&x, &w, &r})[1]), {-0.25f});
}

TEST(Recurrent, GruLinearBeforeReset) {
  // z and r gates see 0 (both 0.5); the candidate gate has W 1, R 2, Rb 1; h0 = 1, x = 1.
  // lbr 0: n = tanh(1 + (0.5 * 1) * 2 + 1) = tanh(3); lbr 1: n = tanh(1 + 0.5 * (1 * 2 + 1)).
  const Tensor x = make<float>({1, 1, 1}, {1});
  const Tensor w = make<float>({1, 3, 1}, {0, 0, 1});
  const Tensor r = make<float>({1, 3, 1}, {0, 0, 2});
  const Tensor b = make<float>({1, 6}, {0, 0, 0, 0, 0, 1});
  const Tensor h0 = make<float>({1, 1, 1}, {1});
  for (int lbr : {0, 1}) {
    const ir::Node n = node("GRU", 14, 6, {{{"hidden_size", 1}, {"linear_before_reset", lbr}}}, 2);
    const double cand = std::tanh(lbr ? 2.5 : 3.0);
    expect_near(values<float>(run_opt(n, {&x, &w, &r, &b, nullptr, &h0})[1]), {static_cast<float>(0.5 * cand + 0.5)});
  }
}

TEST(Recurrent, LstmClipAndInputForget) {
  // Gates i o f c: W = (1, 0, 0, 1), R = 0, x = 10 clipped to 1: i = sigmoid(1), o = 0.5,
  // c~ = tanh(1), f = 1 - i (input_forget); c0 = 2.
  const Tensor x = make<float>({1, 1, 1}, {10});
  const Tensor w = make<float>({1, 4, 1}, {1, 0, 0, 1});
  const Tensor r = make<float>({1, 4, 1}, {0, 0, 0, 0});
  const Tensor c0 = make<float>({1, 1, 1}, {2});
  ir::Node n = node("LSTM", 14, 7, {{{"hidden_size", 1}, {"input_forget", 1}}}, 3);
  n.attrs["clip"] = ir::float_attr("clip", 1.0f);
  const auto out = run_opt(n, {&x, &w, &r, nullptr, nullptr, nullptr, &c0});
  const double i = 1.0 / (1.0 + std::exp(-1.0));
  const double c = (1.0 - i) * 2.0 + i * std::tanh(1.0);
  expect_near(values<float>(out[2]), {static_cast<float>(c)});
  expect_near(values<float>(out[1]), {static_cast<float>(0.5 * std::tanh(c))});
}

TEST(NonMaxSuppression, TiesTakeTheLowerIndexAndThresholdsAreStrict) {
  // Boxes 0 and 1 coincide (IoU 1), box 2 overlaps box 0 by IoU 1/3, box 3 is apart.
  const Tensor boxes = make<float>({1, 4, 4}, {0, 0, 2, 2, 0, 0, 2, 2, 0, 1, 2, 3, 5, 5, 6, 6});
  const Tensor scores = make<float>({1, 1, 4}, {0.9f, 0.9f, 0.8f, 0.5f});
  const Tensor max_out = make<int64_t>({1}, {10});
  const Tensor iou_third = make<float>({1}, {1.0f / 3.0f});
  const Tensor score_half = make<float>({1}, {0.5f});
  const ir::Node n = node("NonMaxSuppression", 11, 5);
  // IoU 1/3 is not above 1/3: box 2 stays; score 0.5 is not above 0.5: box 3 is no candidate.
  const Tensor y = run_opt(n, {&boxes, &scores, &max_out, &iou_third, &score_half})[0];
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{0, 0, 0, 0, 0, 2}));
  // Without max_output_boxes_per_class nothing is selected.
  EXPECT_EQ(run_opt(n, {&boxes, &scores, nullptr, &iou_third, nullptr})[0].shape(), (Shape{0, 3}));
}

TEST(Det, PivotingSingularAndBatched) {
  // [[0, 1], [1, 0]] needs a row swap: -1; [[1, 2], [2, 4]] is singular; [[2, 0], [0, 3]]: 6.
  const Tensor x = make<float>({3, 2, 2}, {0, 1, 1, 0, 1, 2, 2, 4, 2, 0, 0, 3});
  const Tensor y = run(node("Det", 22, 1), {x});
  EXPECT_EQ(y.shape(), (Shape{3}));
  expect_near(values<float>(y), {-1, 0, 6});
}

TEST(EyeLike, NegativeKAndIntegerType) {
  const Tensor x = make<float>({3, 2}, {0, 0, 0, 0, 0, 0});
  ir::Node n = node("EyeLike", 22, 1, {{{"k", -1}, {"dtype", 7}}});
  const Tensor y = run(n, {x});
  EXPECT_EQ(y.dtype(), DType::Int64);
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{0, 0, 1, 0, 0, 1}));
}

TEST(ReverseSequence, ZeroAndFullLengths) {
  // batch_axis 0, time_axis 1: row 0 keeps its order (length 0), row 1 reverses all 3.
  const Tensor x = make<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor lens = make<int64_t>({2}, {0, 3});
  const Tensor y = run(node("ReverseSequence", 10, 2, {{{"batch_axis", 0}, {"time_axis", 1}}}), {x, lens});
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{1, 2, 3, 6, 5, 4}));
}

TEST(Window, SymmetricHannEndsAtZero) {
  // Symmetric, size 5: N = 4, values 0, 0.5, 1, 0.5, 0.
  const Tensor size = make<int64_t>({}, {5});
  expect_near(values<float>(run(node("HannWindow", 17, 1, {{{"periodic", 0}}}), {size})), {0, 0.5f, 1, 0.5f, 0});
}

TEST(SwiGLU, AlphaScalesTheGate) {
  // a = 2, alpha = 0.5: swish = 2 * sigmoid(1); times b = 3.
  const Tensor a = make<float>({2}, {2, 0});
  const Tensor b = make<float>({2}, {3, 7});
  ir::Node n = node("SwiGLU", 28, 2);
  n.attrs["alpha"] = ir::float_attr("alpha", 0.5f);
  expect_near(values<float>(run(n, {a, b})), {static_cast<float>(3.0 * 2.0 / (1.0 + std::exp(-1.0))), 0});
}

TEST(TensorScatter, LinearWritePastTheCacheIsRefusedAndCircularWraps) {
  const Tensor cache = make<float>({1, 3, 1}, {1, 2, 3});
  const Tensor update = make<float>({1, 2, 1}, {8, 9});
  const Tensor at2 = make<int64_t>({1}, {2});
  EXPECT_THROW(run(node("TensorScatter", 24, 3), {cache, update, at2}), Error);
  const Tensor y = run(node("TensorScatter", 24, 3, {{}, {}, {{"mode", "circular"}}}), {cache, update, at2});
  EXPECT_EQ(values<float>(y), (std::vector<float>{9, 2, 8}));
}

TEST(MaxUnpool, IndicesAddressTheUnpooledShapeInsideALargerOutput) {
  // 1-D, kernel 2, stride 2: unpooled length 4; output_shape asks for 6.
  const Tensor x = make<float>({1, 1, 2}, {5, 6});
  const Tensor i = make<int64_t>({1, 1, 2}, {1, 2});
  const Tensor shape = make<int64_t>({3}, {1, 1, 6});
  const Tensor y = run(node("MaxUnpool", 22, 3, {{}, {{"kernel_shape", {2}}, {"strides", {2}}}}), {x, i, shape});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 6}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{0, 5, 6, 0, 0, 0}));
}

TEST(DFT, OneSidedForwardAndInverseWithALength) {
  // x = [1, 2, 3, 4] along axis 1 (real): X = [10, -2+2i, -2, -2-2i]; one-sided keeps 3 bins.
  const Tensor x = make<float>({1, 4, 1}, {1, 2, 3, 4});
  const Tensor axis = make<int64_t>({}, {1});
  ir::Node fwd = node("DFT", 20, 3, {{{"onesided", 1}}});
  fwd.inputs[1] = "";
  const Tensor y = run_opt(fwd, {&x, nullptr, &axis})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 3, 2}));
  expect_near(values<float>(y), {10, 0, -2, 2, -2, 0});
  // The one-sided inverse of those 3 bins is the real signal of length 2 * (3 - 1) = 4.
  ir::Node inv = node("DFT", 20, 3, {{{"onesided", 1}, {"inverse", 1}}});
  const Tensor back = run_opt(inv, {&y, nullptr, &axis})[0];
  EXPECT_EQ(back.shape(), (Shape{1, 4, 1}));
  expect_near(values<float>(back), {1, 2, 3, 4});
  // dft_length 2 truncates the signal to [1, 2]: X = [3, -1].
  const Tensor len = make<int64_t>({}, {2});
  const Tensor t = run_opt(node("DFT", 20, 3), {&x, &len, &axis})[0];
  expect_near(values<float>(t), {3, 0, -1, 0});
}

TEST(CausalConvWithState, PastStateIsPrependedAndTheTailCarried) {
  // One channel, k = 2, weight (1, 10), past 5: padded 5 1 2 3 -> 15, 21, 32; state 3.
  const Tensor x = make<float>({1, 1, 3}, {1, 2, 3});
  const Tensor w = make<float>({1, 1, 2}, {1, 10});
  const Tensor past = make<float>({1, 1, 1}, {5});
  const auto out = run_opt(node("CausalConvWithState", 27, 4, {}, 2), {&x, &w, nullptr, &past});
  expect_near(values<float>(out[0]), {15, 21, 32});
  expect_near(values<float>(out[1]), {3});
}

TEST(LinearAttention, LinearAndDeltaRulesOnOneDimension) {
  // dk = dv = 1, one head, scale 1: q = (1, 1), k = (2, 3), v = (4, 5).
  const Tensor q = make<float>({1, 2, 1}, {1, 1});
  const Tensor k = make<float>({1, 2, 1}, {2, 3});
  const Tensor v = make<float>({1, 2, 1}, {4, 5});
  ir::Node lin =
      node("LinearAttention", 27, 3, {{{"q_num_heads", 1}, {"kv_num_heads", 1}}, {}, {{"update_rule", "linear"}}}, 2);
  lin.attrs["scale"] = ir::float_attr("scale", 1.0f);
  // S = 8, then 8 + 15 = 23.
  const auto a = run_opt(lin, {&q, &k, &v});
  expect_near(values<float>(a[0]), {8, 23});
  expect_near(values<float>(a[1]), {23});
  // Delta, beta 0.5: S = 2 * 0.5 * (4 - 0) = 4, then 4 + 3 * 0.5 * (5 - 4 * 3) = -6.5.
  const Tensor beta = make<float>({1, 2, 1}, {0.5f, 0.5f});
  ir::Node del =
      node("LinearAttention", 27, 6, {{{"q_num_heads", 1}, {"kv_num_heads", 1}}, {}, {{"update_rule", "delta"}}}, 2);
  del.attrs["scale"] = ir::float_attr("scale", 1.0f);
  expect_near(values<float>(run_opt(del, {&q, &k, &v, nullptr, nullptr, &beta})[0]), {4, -6.5f});
}

TEST(GroupNormalization, Opset18ScalesPerGroup) {
  // One group over 1 3 5 7: mean 4, variance 5; scale 2, bias 1 for the group.
  const Tensor x = make<float>({1, 2, 2}, {1, 3, 5, 7});
  const Tensor scale = make<float>({1}, {2});
  const Tensor bias = make<float>({1}, {1});
  ir::Node n = node("GroupNormalization", 18, 3, {{{"num_groups", 1}}});
  n.attrs["epsilon"] = ir::float_attr("epsilon", 0.0f);
  const float r = 2.0f / std::sqrt(5.0f);
  expect_near(values<float>(run(n, {x, scale, bias})), {-3 * r + 1, -r + 1, r + 1, 3 * r + 1});
}

TEST(Upsample, LinearModeClampsAtTheLastIndex) {
  // Scale 2 on [0, 10]: source coordinates 0, 0.5, 1, 1.5 -> 0, 5, 10, 10.
  const Tensor x = make<float>({1, 2}, {0, 10});
  const Tensor scales = make<float>({2}, {1, 2});
  const Tensor y = run(node("Upsample", 9, 2, {{}, {}, {{"mode", "linear"}}}), {x, scales});
  EXPECT_EQ(y.shape(), (Shape{1, 4}));
  expect_near(values<float>(y), {0, 5, 10, 10});
}

TEST(RoiAlign, AverageAndMaxOverClampedSamples) {
  // Image [[1, 2], [3, 4]], region (0, 0)-(2, 2), no half-pixel shift, one bin of 2 x 2 samples
  // at 0.5 and 1.5 per axis; samples at 1.5 clamp to the last row/column. Interpolated values
  // 2.5, 3, 3.5, 4 average to 3.25; the largest weighted neighbour value over the samples is 4.
  const Tensor x = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor rois = make<float>({1, 4}, {0, 0, 2, 2});
  const Tensor idx = make<int64_t>({1}, {0});
  Attrs at{{{"sampling_ratio", 2}}, {}, {{"coordinate_transformation_mode", "output_half_pixel"}}};
  expect_near(values<float>(run(node("RoiAlign", 16, 3, at), {x, rois, idx})), {3.25f});
  at.strings["mode"] = "max";
  expect_near(values<float>(run(node("RoiAlign", 16, 3, at), {x, rois, idx})), {4.0f});
}

TEST(DeformConv, FractionalOffsetsInterpolateAndReadZerosOutside) {
  // 1 x 1 kernel of weight 1 on [2, 4], every tap moved 0.5 along W: 0.5 reads (2 + 4) / 2 = 3,
  // 1.5 reads 4 / 2 + 0 (outside) = 2.
  const Tensor x = make<float>({1, 1, 1, 2}, {2, 4});
  const Tensor w = make<float>({1, 1, 1, 1}, {1});
  const Tensor off = make<float>({1, 2, 1, 2}, {0, 0, 0.5f, 0.5f});
  expect_near(values<float>(run(node("DeformConv", 19, 3), {x, w, off})), {3, 2});
}
