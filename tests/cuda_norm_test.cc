// The CUDA normalization and selection kernels (BatchNormalization, InstanceNormalization,
// GroupNormalization, CumSum, CumProd, TopK, Dropout, reforge::RmsNorm, reforge::AddRmsNorm, reforge::MatMulAdd)
// against the CPU's on the same inputs: a one-node graph run on "cuda" and on "cpu", held to an
// NMSE of 1e-7 (float32/float64), 1e-4 (16-bit floats) and equality for integer, index and mask
// results. Cases cover the node suite's shapes, odd shapes, rows long enough for whole-block
// kernels, empty tensors, every element type the CPU op takes, attribute variants (training mode,
// opset-dependent parameter layouts, exclusive/reverse, largest, seeded dropout), integer
// wrap-around, ties and NaN. They skip where no GPU can run them.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "support/cuda_compare.h"
#include "support/make_tensor.h"

using namespace reforge;

namespace {

using test_support::expect_same_on_cuda;
using test_support::make;
using test_support::random_of;

ir::Node node(const std::string& op, std::vector<std::string> ins, std::map<std::string, ir::Attribute> attrs,
              int opset, std::vector<std::string> outs = {"Y"}, const std::string& domain = "") {
  ir::Node n;
  n.name = "Y";
  n.op_type = op;
  n.domain = domain;
  n.opset = opset;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  n.attrs = std::move(attrs);
  return n;
}

std::string describe(const std::string& what, DType t, const Shape& s) {
  return what + " " + dtype_name(t) + shape_str(s);
}

const std::vector<DType> kFloats = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64};
const std::vector<DType> kNumeric = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int32,
                                     DType::Int64,   DType::Int8,    DType::UInt8,    DType::Int16,   DType::UInt32};

// Random floats of `dtype` with every seventh element NaN.
Tensor with_nans(DType dtype, const Shape& shape, uint32_t seed) {
  Tensor f = random_of(DType::Float32, shape, seed);
  for (int64_t i = 3; i < f.numel(); i += 7) f.mutable_data<float>()[i] = std::nanf("");
  return dtype == DType::Float32 ? f : cast_tensor(f, dtype);
}

// The error of building `n` (inputs of the given types and shapes, all graph inputs) for cuda, or
// "" when the build succeeds.
std::string cuda_build_error(const ir::Node& n, const std::vector<Tensor>& inputs) {
  ir::Graph g;
  g.name = "declined";
  g.ir_version = 10;
  g.opsets[n.domain] = n.opset;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    g.inputs.push_back(test_support::value_info(n.inputs[i], inputs[i].dtype(), inputs[i].shape()));
  g.nodes.push_back(n);
  for (const auto& o : n.outputs) {
    ir::ValueInfo v;
    v.name = o;
    g.outputs.push_back(v);
  }
  try {
    test_support::engine_for(g, {}, "cuda");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- BatchNormalization -----------------------------------------------------------------------

TEST(CudaNormSelect, BatchNormalizationInferenceMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 100;
  const std::vector<Shape> shapes = {{2, 3, 4, 5}, {1, 7}, {3, 5, 1, 11, 2}, {2, 3, 300, 9}, {0, 3, 4}, {2, 3, 0}};
  for (DType t : kFloats)
    for (const Shape& s : shapes)
      for (int opset : {9, 15}) {
        const int64_t C = s[1];
        // Opset 15 lets the parameters have their own float type: float32 for any X.
        const DType pt = opset >= 15 ? DType::Float32 : t;
        std::vector<Tensor> in = {random_of(t, s, ++seed), random_of(pt, {C}, ++seed), random_of(pt, {C}, ++seed),
                                  random_of(pt, {C}, ++seed), random_of(pt, {C}, ++seed, 0.25f, 2.0f)};
        expect_same_on_cuda(node("BatchNormalization", {"X", "scale", "B", "mean", "var"},
                                 {{"epsilon", ir::float_attr("epsilon", 1e-3f)}}, opset),
                            in, describe("BatchNormalization opset " + std::to_string(opset), t, s),
                            {"scale", "B", "mean", "var"});
        if (HasFatalFailure()) return;
      }
}

TEST(CudaNormSelect, BatchNormalizationPerActivationParametersMatchTheCpu) {
  REQUIRE_GPU();
  // Before opset 9 (spatial = 0) the parameters may cover every activation: [C, spatial...].
  uint32_t seed = 300;
  for (DType t : kFloats) {
    const Shape s = {2, 3, 4, 5};
    std::vector<Tensor> in = {random_of(t, s, ++seed), random_of(t, {3, 4, 5}, ++seed), random_of(t, {3, 4, 5}, ++seed),
                              random_of(t, {3, 4, 5}, ++seed), random_of(t, {3, 4, 5}, ++seed, 0.25f, 2.0f)};
    expect_same_on_cuda(node("BatchNormalization", {"X", "scale", "B", "mean", "var"}, {}, 7), in,
                        describe("BatchNormalization per activation", t, s), {"scale", "B", "mean", "var"});
    if (HasFatalFailure()) return;
  }
}

TEST(CudaNormSelect, BatchNormalizationTrainingModeMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 500;
  const std::vector<Shape> shapes = {{2, 3, 4, 5}, {1, 4}, {3, 2, 700}, {5, 3, 1, 1}};
  for (DType t : kFloats)
    for (const Shape& s : shapes)
      for (bool outputs : {true, false}) {
        const int64_t C = s[1];
        std::vector<Tensor> in = {random_of(t, s, ++seed, -3.0f, 5.0f), random_of(t, {C}, ++seed),
                                  random_of(t, {C}, ++seed), random_of(t, {C}, ++seed),
                                  random_of(t, {C}, ++seed, 0.25f, 2.0f)};
        std::vector<std::string> outs = {"Y"};
        if (outputs) outs = {"Y", "running_mean", "running_var"};
        expect_same_on_cuda(
            node("BatchNormalization", {"X", "scale", "B", "mean", "var"},
                 {{"training_mode", ir::int_attr("training_mode", 1)}, {"momentum", ir::float_attr("momentum", 0.75f)}},
                 15, outs),
            in, describe("BatchNormalization training", t, s), {"scale", "B", "mean", "var"});
        if (HasFatalFailure()) return;
      }
}

// ---- InstanceNormalization and GroupNormalization ------------------------------------------

TEST(CudaNormSelect, InstanceNormalizationMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 700;
  const std::vector<Shape> shapes = {{2, 3, 4, 5}, {1, 2, 1, 3}, {3, 4, 3000}, {2, 5, 7, 1, 3}, {2, 3, 0}, {0, 3, 4}};
  for (DType t : kFloats)
    for (const Shape& s : shapes) {
      const int64_t C = s[1];
      // A float32 scale and bias with 16-bit X: the CPU reads any float type.
      const DType pt = t == DType::Float16 ? DType::Float32 : t;
      std::vector<Tensor> in = {random_of(t, s, ++seed, -1.0f, 3.0f), random_of(pt, {C}, ++seed),
                                random_of(pt, {C}, ++seed)};
      expect_same_on_cuda(
          node("InstanceNormalization", {"X", "scale", "B"}, {{"epsilon", ir::float_attr("epsilon", 1e-2f)}}, 6), in,
          describe("InstanceNormalization", t, s), {"scale", "B"});
      if (HasFatalFailure()) return;
    }
}

TEST(CudaNormSelect, GroupNormalizationMatchesTheCpuAtOpsets18And21) {
  REQUIRE_GPU();
  uint32_t seed = 900;
  struct Case {
    Shape shape;
    int64_t groups;
  };
  const std::vector<Case> cases = {{{3, 4, 2, 2}, 2}, {{2, 6, 5}, 3}, {{2, 6, 5}, 6}, {{2, 6, 5}, 1},
                                   {{1, 8, 3000}, 2}, {{3, 4}, 2},    {{0, 4, 3}, 2}, {{2, 4, 0}, 4}};
  for (DType t : kFloats)
    for (const Case& c : cases)
      for (int opset : {18, 21}) {
        const int64_t params = opset >= 21 ? c.shape[1] : c.groups;
        std::vector<Tensor> in = {random_of(t, c.shape, ++seed, -2.0f, 4.0f), random_of(t, {params}, ++seed),
                                  random_of(t, {params}, ++seed)};
        expect_same_on_cuda(
            node("GroupNormalization", {"X", "scale", "bias"},
                 {{"num_groups", ir::int_attr("num_groups", c.groups)}, {"epsilon", ir::float_attr("epsilon", 1e-3f)}},
                 opset),
            in,
            describe("GroupNormalization opset " + std::to_string(opset) + " groups " + std::to_string(c.groups), t,
                     c.shape),
            {"scale", "bias"});
        if (HasFatalFailure()) return;
      }
}

// ---- CumSum / CumProd -----------------------------------------------------------------------

struct AxisCase {
  Shape shape;
  int64_t axis;
};

const std::vector<AxisCase> kCumCases = {
    {{5}, 0},       {{2, 3}, 0},      {{2, 3}, 1},  {{2, 3}, -1},  {{3, 1000}, 1},  // block-scanned rows
    {{7, 513}, -1}, {{4, 700, 3}, 1}, {{2, 33}, 1}, {{300, 4}, 0}, {{2, 300, 0}, 1}, {{0, 40}, 1}, {{}, 0},
};

void check_cumulate(const std::string& op, int opset, uint32_t seed, float lo, float hi) {
  for (DType t : kNumeric)
    for (const AxisCase& c : kCumCases)
      for (int exclusive : {0, 1})
        for (int reverse : {0, 1}) {
          Tensor x = is_float(t) ? random_of(t, c.shape, ++seed, lo, hi) : random_of(t, c.shape, ++seed);
          // The axis as int32 and as int64 (a host input).
          Tensor axis = (seed % 2) ? make<int32_t>({}, {static_cast<int32_t>(c.axis)}) : make<int64_t>({1}, {c.axis});
          expect_same_on_cuda(
              node(op, {"X", "axis"},
                   {{"exclusive", ir::int_attr("exclusive", exclusive)}, {"reverse", ir::int_attr("reverse", reverse)}},
                   opset),
              {x, axis},
              describe(op + " axis " + std::to_string(c.axis) + " exclusive " + std::to_string(exclusive) +
                           " reverse " + std::to_string(reverse),
                       t, c.shape),
              {"axis"});
          if (::testing::Test::HasFatalFailure()) return;
        }
}

TEST(CudaNormSelect, CumSumMatchesTheCpu) {
  REQUIRE_GPU();
  // Integer sums over 1000 elements of up to +-8 wrap int8 and uint8: they must wrap alike.
  check_cumulate("CumSum", 14, 1100, -2.0f, 2.0f);
}

TEST(CudaNormSelect, CumProdMatchesTheCpu) {
  REQUIRE_GPU();
  // Float factors near 1 keep long products finite; integer products wrap.
  check_cumulate("CumProd", 26, 5100, 0.97f, 1.03f);
}

TEST(CudaNormSelect, CumSumNodeSuiteValues) {
  REQUIRE_GPU();
  // onnx test_cumsum_1d_exclusive / test_cumsum_2d_axis_1 inputs.
  expect_same_on_cuda(node("CumSum", {"X", "axis"}, {{"exclusive", ir::int_attr("exclusive", 1)}}, 14),
                      {make<double>({5}, {1, 2, 3, 4, 5}), make<int32_t>({}, {0})}, "CumSum 1d exclusive", {"axis"});
  expect_same_on_cuda(node("CumSum", {"X", "axis"}, {}, 14),
                      {make<double>({2, 3}, {1, 2, 3, 4, 5, 6}), make<int32_t>({}, {1})}, "CumSum 2d axis 1", {"axis"});
}

// ---- TopK -------------------------------------------------------------------------------------

struct TopKCase {
  Shape shape;
  int64_t axis;
  int64_t k;
};

const std::vector<TopKCase> kTopKCases = {
    // The node suite's; slices sorted in one block; selected in rounds of chunks (one, two and more rounds,
    // k near the chunk limit); sorted in global memory (8-byte types with k over 1024).
    {{3, 4}, -1, 3},     {{3, 4}, 1, 0},       {{5, 7, 3}, 1, 4},  {{5, 7, 3}, 0, 5},    {{4, 1}, 1, 1},
    {{100}, 0, 100},     {{6, 129}, 1, 17},    {{2, 2048}, 1, 9},  {{2, 4096}, -1, 64},  {{3, 5000}, 1, 7},
    {{5001, 2}, 0, 300}, {{2, 3000}, 1, 3000}, {{1, 70000}, 1, 5}, {{2, 9000}, 1, 2048}, {{3, 0}, 1, 0},
    {{0, 5}, 1, 2},      {{2, 9, 33}, 2, 33},
};

TEST(CudaNormSelect, TopKMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 2000;
  for (DType t : kNumeric)
    for (const TopKCase& c : kTopKCases)
      for (int largest : {1, 0}) {
        // Integers (values -8..8) tie often: ties must keep the lower index first.
        Tensor x = is_float(t) && seed % 3 == 0 ? with_nans(t, c.shape, ++seed) : random_of(t, c.shape, ++seed);
        expect_same_on_cuda(
            node("TopK", {"X", "K"},
                 {{"axis", ir::int_attr("axis", c.axis)}, {"largest", ir::int_attr("largest", largest)}}, 11,
                 {"Values", "Indices"}),
            {x, make<int64_t>({1}, {c.k})},
            describe("TopK axis " + std::to_string(c.axis) + " k " + std::to_string(c.k) + " largest " +
                         std::to_string(largest),
                     t, c.shape),
            {"K"});
        if (HasFatalFailure()) return;
      }
}

TEST(CudaNormSelect, TopKTiesNaNsAndOlderOpsets) {
  REQUIRE_GPU();
  // Signed zeros tie; NaN is larger than any number; equal values keep the lower index first.
  const float nan = std::nanf("");
  Tensor x = make<float>({2, 6}, {0.0f, -0.0f, 1.0f, nan, 1.0f, -0.0f, 3.0f, 3.0f, nan, nan, -1.0f, 3.0f});
  for (int largest : {1, 0})
    for (int64_t k : {1, 3, 6}) {
      expect_same_on_cuda(
          node("TopK", {"X", "K"}, {{"largest", ir::int_attr("largest", largest)}}, 11, {"Values", "Indices"}),
          {x, make<int64_t>({1}, {k})}, "TopK ties k " + std::to_string(k), {"K"});
      if (HasFatalFailure()) return;
    }
  // k as an attribute (opset 1) and as an input without largest (opset 10); one output only.
  Tensor y = random_of(DType::Float32, {4, 50}, 77);
  expect_same_on_cuda(node("TopK", {"X"}, {{"k", ir::int_attr("k", 5)}}, 1, {"Values", "Indices"}), {y},
                      "TopK opset 1");
  expect_same_on_cuda(node("TopK", {"X", "K"}, {{"axis", ir::int_attr("axis", 0)}}, 10, {"Values", "Indices"}),
                      {y, make<int64_t>({1}, {3})}, "TopK opset 10", {"K"});
  expect_same_on_cuda(node("TopK", {"X", "K"}, {}, 11, {"Values"}), {y, make<int64_t>({1}, {7})}, "TopK values only",
                      {"K"});
}

// ---- Dropout ----------------------------------------------------------------------------------

TEST(CudaNormSelect, DropoutInferenceIsTheIdentityWithAnAllTrueMask) {
  REQUIRE_GPU();
  uint32_t seed = 4000;
  for (DType t : {DType::Float32, DType::Float16, DType::Float64, DType::Int32})
    for (const Shape& s : {Shape{3, 4, 5}, Shape{7}, Shape{0, 3}}) {
      Tensor x = random_of(t, s, ++seed);
      expect_same_on_cuda(node("Dropout", {"X"}, {}, 13, {"Y", "mask"}), {x}, describe("Dropout opset 13", t, s));
      expect_same_on_cuda(node("Dropout", {"X"}, {}, 10, {"Y", "mask"}), {x}, describe("Dropout opset 10", t, s));
      expect_same_on_cuda(node("Dropout", {"X"}, {}, 13), {x}, describe("Dropout opset 13 no mask", t, s));
      // training_mode false: the identity whatever the ratio.
      expect_same_on_cuda(
          node("Dropout", {"X", "ratio", "training_mode"}, {{"seed", ir::int_attr("seed", 1)}}, 13, {"Y", "mask"}),
          {x, make<float>({}, {0.3f}), make<bool>({}, {false})}, describe("Dropout not training", t, s));
      if (HasFatalFailure()) return;
    }
  // Opsets before 10: the mask has X's (float) type.
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16}) {
    Tensor x = random_of(t, {2, 5}, ++seed);
    expect_same_on_cuda(node("Dropout", {"X"}, {}, 7, {"Y", "mask"}), {x}, describe("Dropout opset 7", t, {2, 5}));
    if (HasFatalFailure()) return;
  }
}

TEST(CudaNormSelect, SeededTrainingDropoutMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 4500;
  // onnx test_training_dropout: ratio 0.75, seed 0, [3, 4, 5]; also zero ratio and other types.
  for (DType t : kFloats)
    for (float ratio : {0.75f, 0.5f, 0.0f, 0.1f})
      for (const Shape& s : {Shape{3, 4, 5}, Shape{1000}, Shape{0, 2}}) {
        Tensor x = random_of(t, s, ++seed);
        expect_same_on_cuda(
            node("Dropout", {"X", "ratio", "training_mode"}, {{"seed", ir::int_attr("seed", 0)}}, 13, {"Y", "mask"}),
            {x, make<float>({}, {ratio}), make<bool>({}, {true})},
            describe("Dropout training ratio " + std::to_string(ratio), t, s));
        if (HasFatalFailure()) return;
      }
}

TEST(CudaNormSelect, NodesTheKernelsCannotMatchAreDeclinedWithTheReason) {
  REQUIRE_GPU();
  // Dropout with a training_mode input and no seed draws a random mask on the CPU.
  const std::string dropout =
      cuda_build_error(node("Dropout", {"X", "ratio", "training_mode"}, {}, 13, {"Y", "mask"}),
                       {random_of(DType::Float32, {2, 3}, 1), make<float>({}, {0.5f}), make<bool>({}, {true})});
  EXPECT_NE(dropout.find("draws a random mask"), std::string::npos) << dropout;
  // BatchNormalization's saved statistics (outputs past running_var) exist in no mode here.
  std::vector<Tensor> bn = {random_of(DType::Float32, {2, 3, 4}, 2), random_of(DType::Float32, {3}, 3),
                            random_of(DType::Float32, {3}, 4), random_of(DType::Float32, {3}, 5),
                            random_of(DType::Float32, {3}, 6, 0.5f, 1.0f)};
  const std::string training = cuda_build_error(node("BatchNormalization", {"X", "scale", "B", "mean", "var"},
                                                     {{"training_mode", ir::int_attr("training_mode", 1)}}, 14,
                                                     {"Y", "running_mean", "running_var", "saved_mean"}),
                                                bn);
  EXPECT_NE(training.find("training-mode outputs beyond running_mean/running_var"), std::string::npos) << training;
  const std::string inference = cuda_build_error(
      node("BatchNormalization", {"X", "scale", "B", "mean", "var"}, {}, 9, {"Y", "running_mean"}), bn);
  EXPECT_NE(inference.find("only supported with training_mode=1"), std::string::npos) << inference;
}

// ---- reforge::RmsNorm -------------------------------------------------------------------------

// reforge::AddRmsNorm (fuse-add-rms-norm: a residual sum and its RMSNormalization): both outputs
// against the CPU, rows of 16-bit models in the one kernel (a decoding step's row, a prompt's
// rows, a scale with leading 1s) and the forms of the sum-then-normalize path (float32, a row not
// a multiple of 8, a scale broadcast along the row, stash_type double).
TEST(CudaNormSelect, AddRmsNormMatchesTheCpu) {
  REQUIRE_GPU();
  struct Case {
    DType t, st;
    Shape x, scale;
    int64_t stash;
  };
  const std::vector<Case> cases = {{DType::BFloat16, DType::BFloat16, {1, 1, 2048}, {2048}, 1},
                                   {DType::BFloat16, DType::BFloat16, {2, 9, 2048}, {1, 2048}, 1},
                                   {DType::Float16, DType::Float16, {3, 4096}, {4096}, 1},
                                   {DType::Float32, DType::Float32, {5, 300}, {300}, 1},
                                   {DType::BFloat16, DType::BFloat16, {4, 100}, {100}, 1},
                                   {DType::Float16, DType::Float16, {2, 64}, {1}, 1},
                                   {DType::BFloat16, DType::BFloat16, {2, 512}, {512}, 11}};
  uint32_t seed = 4100;
  for (const Case& c : cases) {
    ir::Node n = node("AddRmsNorm", {"X", "S", "R"},
                      {{"axis", ir::int_attr("axis", -1)},
                       {"epsilon", ir::float_attr("epsilon", 1e-6f)},
                       {"stash_type", ir::int_attr("stash_type", c.stash)}},
                      1, {"Y", "Sum"}, "reforge");
    expect_same_on_cuda(n,
                        {random_of(c.t, c.x, ++seed, -3.0f, 3.0f), random_of(c.st, c.scale, ++seed),
                         random_of(c.t, c.x, ++seed, -3.0f, 3.0f)},
                        describe("AddRmsNorm", c.t, c.x) + " stash " + std::to_string(c.stash), {"S"});
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(CudaNormSelect, FusedRmsNormMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 6000;
  const std::vector<Shape> shapes = {{3, 17}, {2, 3, 64}, {2, 4096}, {5, 1}, {7}, {0, 8}, {4, 0}};
  for (const Shape& s : shapes) {
    const int64_t n = s.back();
    Tensor x = random_of(DType::Float32, s, ++seed);
    Tensor w = random_of(DType::Float32, {n}, ++seed);
    Tensor w1 = random_of(DType::Float32, {1}, ++seed);
    const std::string d = shape_str(s);
    expect_same_on_cuda(node("RmsNorm", {"X", "W", "eps"}, {}, 1, {"Y"}, "reforge"), {x, w, make<float>({}, {1e-5f})},
                        "RmsNorm " + d);
    expect_same_on_cuda(node("RmsNorm", {"X", "W", "eps"}, {}, 1, {"Y"}, "reforge"), {x, w1, make<double>({}, {1e-3})},
                        "RmsNorm scalar weight " + d);
    expect_same_on_cuda(node("RmsNorm", {"X", "", "eps"}, {}, 1, {"Y"}, "reforge"),
                        {x, Tensor(), make<float>({}, {1e-6f})}, "RmsNorm no weight " + d);
    // Other exponents and numerators (integer-typed scalars too), as constants.
    expect_same_on_cuda(node("RmsNorm", {"X", "W", "eps", "p", "num"}, {}, 1, {"Y"}, "reforge"),
                        {x, w, make<float>({}, {1e-5f}), make<float>({}, {3.0f}), make<int64_t>({}, {2})},
                        "RmsNorm p 3 " + d, {"eps", "p", "num"});
    expect_same_on_cuda(node("RmsNorm", {"X", "W", "eps", "p", "num"}, {}, 1, {"Y"}, "reforge"),
                        {random_of(DType::Float32, s, ++seed, 0.1f, 2.0f), w, make<int32_t>({}, {0}),
                         make<double>({}, {1.5}), make<float>({}, {0.5f})},
                        "RmsNorm p 1.5 " + d);
    if (HasFatalFailure()) return;
  }
}

// ---- reforge::MatMulAdd -----------------------------------------------------------------------

TEST(CudaNormSelect, MatMulAddMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 7000;
  struct Case {
    Shape x;
    int64_t N;
  };
  // (up to 8 rows by a 16-bit weight of a multiple of 8 columns: the gemv kernel, gemv.h)
  const std::vector<Case> cases = {{{3, 5, 17}, 9}, {{1, 1}, 1}, {{64, 256}, 96}, {{7, 33}, 130},
                                   {{2, 0}, 4},     {{0, 6}, 5}, {{4, 6}, 0},     {{129}, 31},
                                   {{1, 2048}, 512}, {{2, 3, 72}, 16}, {{8, 1032}, 264}};
  for (const Case& c : cases)
    for (DType wt : {DType::Float32, DType::Float16, DType::BFloat16})
      for (int bias : {1, 0})
        for (int round : {0, 1}) {
          const int64_t K = c.x.back();
          Tensor x = random_of(DType::Float32, c.x, ++seed);
          Tensor w = random_of(wt, {K, c.N}, ++seed);
          Tensor b = random_of(DType::Float32, {c.N}, ++seed);
          std::map<std::string, ir::Attribute> attrs;
          if (round) attrs["bf16_activations"] = ir::int_attr("bf16_activations", 1);
          const std::string d = "MatMulAdd " + shape_str(c.x) + " W " + dtype_name(wt) + shape_str({K, c.N}) +
                                (bias ? " bias" : "") + (round ? " bf16 activations" : "");
          for (bool constant_w : {true, false}) {
            std::vector<std::string> consts;
            if (constant_w) consts = {"W", "b"};
            if (bias)
              expect_same_on_cuda(node("MatMulAdd", {"X", "W", "b"}, attrs, 1, {"Y"}, "reforge"), {x, w, b}, d, consts);
            else
              expect_same_on_cuda(node("MatMulAdd", {"X", "W"}, attrs, 1, {"Y"}, "reforge"), {x, w}, d, consts);
            if (HasFatalFailure()) return;
          }
        }
}

}  // namespace
