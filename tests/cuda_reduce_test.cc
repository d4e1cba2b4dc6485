// The CUDA reduction kernels (Reduce*, ArgMax, ArgMin) against the CPU's on the same inputs: a
// one-node graph run on "cuda" and on "cpu", held to an NMSE of 1e-7 (float32/float64), 1e-4
// (16-bit floats) and equality for integer results. Cases cover last, first, middle and split
// axes, rows long enough for whole-block reduction, kept-innermost layouts, empty reductions and
// empty outputs, scalars, keepdims, noop_with_empty_axes, axes as attribute and as input, integer
// wrap-around, NaN propagation and ties (select_last_index). They skip where no GPU can run them.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "ops/numerics.h"
#include "support/cuda_compare.h"
#include "support/make_tensor.h"

using namespace reforge;

namespace {

using test_support::expect_same_on_cuda;
using test_support::random_of;

ir::Node node(const std::string& op, std::vector<std::string> ins, std::map<std::string, ir::Attribute> attrs,
              int opset) {
  ir::Node n;
  n.name = "Y";
  n.op_type = op;
  n.opset = opset;
  n.inputs = std::move(ins);
  n.outputs = {"Y"};
  n.attrs = std::move(attrs);
  return n;
}

// Random values of `dtype` with every seventh element NaN for float types.
Tensor values(DType dtype, const Shape& shape, uint32_t seed, bool nans) {
  if (!nans || dtype == DType::Bool || !is_float(dtype)) return random_of(dtype, shape, seed);
  Tensor f = random_of(DType::Float32, shape, seed);
  for (int64_t i = 3; i < f.numel(); i += 7) f.mutable_data<float>()[i] = std::nanf("");
  return dtype == DType::Float32 ? f : cast_tensor(f, dtype);
}

struct ReduceCase {
  Shape shape;
  std::vector<int64_t> axes;  // empty: all axes
};

const std::vector<ReduceCase> kCases = {
    {{7}, {}},
    {{3, 5}, {1}},
    {{3, 5}, {0}},
    {{3, 5}, {-1}},
    {{2, 3, 4, 5}, {1, 2}},
    {{2, 3, 4, 5}, {0, 3}},
    {{2, 3, 4, 5}, {0, 2}},
    {{2, 1, 5}, {1}},
    {{33, 3001}, {1}},   // whole-block rows
    {{3001, 5}, {0}},    // whole-block rows, kept innermost
    {{4, 700, 3}, {1}},  // warp rows, strided
    {{65, 2, 2050}, {0, 2}},
    {{0, 3}, {0}},  // empty reduction: the op's identity
    {{3, 0}, {0}},  // empty output
    {{4, 0, 2}, {1}},
    {{}, {}},  // scalar
};

const char* const kSumLike[] = {"ReduceSum", "ReduceMean",   "ReduceSumSquare", "ReduceL1",
                                "ReduceL2",  "ReduceLogSum", "ReduceLogSumExp"};

std::string describe(const std::string& op, DType t, const ReduceCase& c, int keepdims, int opset) {
  std::string axes;
  for (int64_t a : c.axes) axes += std::to_string(a) + ",";
  return op + " opset " + std::to_string(opset) + " " + dtype_name(t) + shape_str(c.shape) + " axes [" + axes +
         "] keepdims " + std::to_string(keepdims);
}

// Runs `op` on every case: with axes as an attribute at opset `attr_opset` (none when 0) and as a
// constant input at opset `input_opset`.
void check_reduce(const std::string& op, const std::vector<DType>& types, uint32_t seed,
                  const std::vector<ReduceCase>& cases, bool nans, int attr_opset = 11, int input_opset = 18) {
  for (DType t : types)
    for (const ReduceCase& c : cases)
      for (int keepdims : {1, 0}) {
        Tensor x = values(t, c.shape, ++seed, nans);
        if (attr_opset > 0) {
          std::map<std::string, ir::Attribute> attrs{{"keepdims", ir::int_attr("keepdims", keepdims)}};
          if (!c.axes.empty()) attrs["axes"] = ir::ints_attr("axes", c.axes);
          expect_same_on_cuda(node(op, {"X"}, attrs, attr_opset), {x}, describe(op, t, c, keepdims, attr_opset));
          if (::testing::Test::HasFatalFailure()) return;
        }
        std::map<std::string, ir::Attribute> in_attrs{{"keepdims", ir::int_attr("keepdims", keepdims)}};
        if (c.axes.empty()) {
          expect_same_on_cuda(node(op, {"X"}, in_attrs, input_opset), {x}, describe(op, t, c, keepdims, input_opset));
        } else {
          Tensor axes = test_support::make<int64_t>({static_cast<int64_t>(c.axes.size())}, c.axes);
          expect_same_on_cuda(node(op, {"X", "axes"}, in_attrs, input_opset), {x, axes},
                              describe(op, t, c, keepdims, input_opset), {"axes"});
        }
        if (::testing::Test::HasFatalFailure()) return;
      }
}

const std::vector<DType> kAllNumeric = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                                        DType::Int32,   DType::Int64,   DType::Int8,     DType::UInt8};

TEST(CudaReduce, SumsAndNormsMatchTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 100;
  for (const char* op : kSumLike) {
    check_reduce(op, kAllNumeric, seed, kCases, false);
    seed += 1000;
  }
}

TEST(CudaReduce, MaxAndMinMatchTheCpuWithNaNs) {
  REQUIRE_GPU();
  uint32_t seed = 20000;
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    check_reduce(op, kAllNumeric, seed, kCases, true);
    check_reduce(op, {DType::Bool}, seed + 500, {{{3, 5}, {1}}, {{3001, 5}, {0}}, {{0, 3}, {0}}, {{33, 3001}, {}}},
                 false, 0, 20);
    seed += 1000;
  }
  check_reduce("ReduceLogSumExp", {DType::Float32, DType::Float64}, seed, {{{3, 5}, {1}}, {{33, 3001}, {1}}}, true);
}

// Products of a few elements (long products overflow in every type, and the interesting part is
// integer wrap-around, which the int8 and int64 cases reach).
TEST(CudaReduce, ProdMatchesTheCpu) {
  REQUIRE_GPU();
  const std::vector<ReduceCase> cases = {
      {{7}, {}},     {{3, 5}, {1}}, {{3, 5}, {0}}, {{2, 3, 4, 5}, {1, 2}}, {{2, 3, 4, 5}, {0, 3}},
      {{0, 3}, {0}}, {{3, 0}, {0}}, {{}, {}},      {{40, 37}, {1}}};
  check_reduce("ReduceProd", kAllNumeric, 30000, cases, false);
}

TEST(CudaReduce, NoopWithEmptyAxesPassesTheInputThrough) {
  REQUIRE_GPU();
  Tensor x = random_of(DType::Float32, {3, 4}, 7);
  for (const char* op : {"ReduceSum", "ReduceMax", "ReduceL2"})
    expect_same_on_cuda(node(op, {"X"}, {{"noop_with_empty_axes", ir::int_attr("noop_with_empty_axes", 1)}}, 18), {x},
                        std::string(op) + " noop_with_empty_axes");
}

TEST(CudaReduce, ArgMaxAndArgMinMatchTheCpuWithTiesAndNaNs) {
  REQUIRE_GPU();
  struct ArgCase {
    Shape shape;
    int64_t axis;
  };
  const std::vector<ArgCase> cases = {{{7}, 0},       {{3, 5}, 1},     {{3, 5}, 0},      {{3, 5}, -1},
                                      {{2, 3, 4}, 1}, {{33, 3001}, 1}, {{3001, 5}, 0},   {{}, 0},
                                      {{0, 3}, 1},    {{2, 1, 9}, 2},  {{4, 700, 3}, -2}};
  uint32_t seed = 40000;
  for (const char* op : {"ArgMax", "ArgMin"})
    for (DType t :
         {DType::Float32, DType::Float16, DType::Float64, DType::Int32, DType::Int64, DType::UInt8, DType::Bool})
      for (const ArgCase& c : cases)
        for (int keepdims : {1, 0})
          for (int last : {0, 1}) {
            ++seed;
            Tensor x = values(t, c.shape, seed, seed % 2 == 0);
            expect_same_on_cuda(node(op, {"X"},
                                     {{"axis", ir::int_attr("axis", c.axis)},
                                      {"keepdims", ir::int_attr("keepdims", keepdims)},
                                      {"select_last_index", ir::int_attr("select_last_index", last)}},
                                     13),
                                {x},
                                std::string(op) + " " + dtype_name(t) + shape_str(c.shape) + " axis " +
                                    std::to_string(c.axis) + " keepdims " + std::to_string(keepdims) + " last " +
                                    std::to_string(last));
            if (::testing::Test::HasFatalFailure()) return;
          }
}

}  // namespace

namespace {

TEST(CudaSoftmax, SoftmaxAndLogSoftmaxMatchTheCpu) {
  REQUIRE_GPU();
  struct SoftmaxCase {
    Shape shape;
    int64_t axis;
    int opset;
  };
  const std::vector<SoftmaxCase> cases = {
      {{3, 5}, -1, 13},   {{3, 5}, 0, 13},     {{2, 3, 4}, 1, 13},    {{2, 3, 4}, 0, 13},
      {{4, 3001}, 1, 13}, {{3001, 3}, 0, 13},  {{2, 2100, 3}, 1, 13}, {{0, 3}, 1, 13},
      {{}, -1, 13},       {{7}, 0, 13},        {{2, 3, 4}, 1, 11},    {{2, 3, 4}, 0, 11},
      {{2, 3, 4}, 3, 11}, {{2, 3, 4}, -2, 11}, {{5, 2, 700}, 1, 11},  {{3, 0}, 1, 11}};
  uint32_t seed = 50000;
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64})
      for (const SoftmaxCase& c : cases)
        for (float scale : {2.0f, 60.0f}) {  // large inputs overflow exp without the max subtracted
          Tensor x = random_of(t, c.shape, ++seed, -scale, scale);
          expect_same_on_cuda(node(op, {"X"}, {{"axis", ir::int_attr("axis", c.axis)}}, c.opset), {x},
                              std::string(op) + " opset " + std::to_string(c.opset) + " " + dtype_name(t) +
                                  shape_str(c.shape) + " axis " + std::to_string(c.axis) + " scale " +
                                  std::to_string(scale));
          if (::testing::Test::HasFatalFailure()) return;
        }
}

}  // namespace

namespace {

// 16-bit sums on long rows, with the default float32 accumulation and with the ONNX reference's
// rounding after each addition (ops/numerics.h): the GPU rounds as the CPU does in both, and on a
// uniform bfloat16 row of 512 only the default gives 1/512.
TEST(CudaSoftmax, SixteenBitSumsInBothRoundingsMatchTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 51000;
  for (bool reference : {false, true})
    for (DType t : {DType::Float16, DType::BFloat16})
      for (const Shape& shape : {Shape{64, 512}, Shape{3, 4100}, Shape{2, 700, 3}}) {
        ir::Node n = node("Softmax", {"X"}, {{"axis", ir::int_attr("axis", 1)}}, 13);
        if (reference) ops::mark_reference_rounding_of(n);
        expect_same_on_cuda(n, {random_of(t, shape, ++seed, -3.0f, 3.0f)},
                            std::string(reference ? "reference " : "default ") + dtype_name(t) + shape_str(shape));
        if (::testing::Test::HasFatalFailure()) return;
      }
  ir::Node n = node("Softmax", {"X"}, {}, 13);
  ir::Graph g;
  g.name = "uniform";
  g.ir_version = 10;
  g.opsets[""] = 13;
  g.inputs = {test_support::value_info("X", DType::BFloat16, {4, 512})};
  g.nodes = {n};
  g.outputs = {test_support::value_info("Y", DType::BFloat16, {4, 512})};
  const Tensor x = cast_tensor(test_support::make<float>({4, 512}, std::vector<float>(2048, 0.5f)), DType::BFloat16);
  const Tensor y = test_support::engine_for(g, {}, "cuda").run({{"X", x}}).at(0);
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.as_double(i), 1.0 / 512) << i;
}

TEST(CudaNorm, LayerNormalizationMatchesTheCpu) {
  REQUIRE_GPU();
  struct LnCase {
    Shape x;
    int64_t axis;
    Shape scale;  // empty-shaped scale: a scalar
    Shape bias;
    bool has_bias;
  };
  const std::vector<LnCase> cases = {
      {{3, 5}, -1, {5}, {5}, true},          {{2, 3, 4}, 1, {3, 4}, {3, 4}, true},
      {{2, 3, 4}, 1, {4}, {3, 1}, true},                                             // broadcast parameters
      {{2, 3, 4}, 0, {3, 4}, {}, false},     {{2, 3, 4}, -1, {2, 3, 4}, {4}, true},  // parameters over all of X
      {{4, 3001}, -1, {3001}, {3001}, true},                                         // whole-block rows
      {{7, 1}, -1, {1}, {1}, true},                                                  // rows of one element: variance 0
      {{0, 5}, 1, {5}, {5}, true},
  };
  uint32_t seed = 60000;
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64})
    for (const LnCase& c : cases)
      for (int stash : {1, 11})
        for (DType pt : {t, DType::Float32}) {
          ir::Node n = node("LayerNormalization", {"X", "S", c.has_bias ? "B" : ""},
                            {{"axis", ir::int_attr("axis", c.axis)},
                             {"epsilon", ir::float_attr("epsilon", 1e-3f)},
                             {"stash_type", ir::int_attr("stash_type", stash)}},
                            17);
          n.outputs = {"Y", "Mean", "InvStdDev"};
          Tensor x = random_of(t, c.x, ++seed, -3.0f, 5.0f);
          Tensor s = random_of(pt, c.scale, ++seed), b = random_of(pt, c.bias, ++seed);
          const std::string what = "LayerNormalization " + std::string(dtype_name(t)) + shape_str(c.x) + " axis " +
                                   std::to_string(c.axis) + " scale " + dtype_name(pt) + shape_str(c.scale) +
                                   " stash " + std::to_string(stash);
          expect_same_on_cuda(n, {x, s, b}, what, {"S", "B"});
          if (::testing::Test::HasFatalFailure()) return;
          n.outputs = {"Y"};
          expect_same_on_cuda(n, {x, s, b}, what + " (Y only)", {"S", "B"});
          if (::testing::Test::HasFatalFailure()) return;
        }
}

}  // namespace

namespace {

TEST(CudaNorm, RMSNormalizationMatchesTheCpu) {
  REQUIRE_GPU();
  struct RmsCase {
    Shape x;
    int64_t axis;
    Shape scale;
  };
  const std::vector<RmsCase> cases = {{{3, 5}, -1, {5}},          {{2, 3, 4}, 1, {3, 4}},  {{2, 3, 4}, 1, {1, 4}},
                                      {{2, 3, 4}, -1, {2, 1, 4}}, {{4, 3001}, -1, {3001}}, {{2, 3, 4}, 0, {3, 1}},
                                      {{0, 4}, -1, {4}}};
  const std::vector<std::pair<DType, DType>> types = {{DType::Float32, DType::Float32},
                                                      {DType::Float16, DType::Float16},
                                                      {DType::BFloat16, DType::Float32},
                                                      {DType::Float16, DType::Float32},
                                                      {DType::Float64, DType::Float64}};
  uint32_t seed = 70000;
  for (const auto& [xt, st] : types)
    for (const RmsCase& c : cases)
      for (int stash : {1, 11}) {
        ir::Node n = node("RMSNormalization", {"X", "S"},
                          {{"axis", ir::int_attr("axis", c.axis)},
                           {"epsilon", ir::float_attr("epsilon", 1e-4f)},
                           {"stash_type", ir::int_attr("stash_type", stash)}},
                          23);
        Tensor x = random_of(xt, c.x, ++seed, -3.0f, 3.0f), s = random_of(st, c.scale, ++seed);
        expect_same_on_cuda(n, {x, s},
                            "RMSNormalization " + std::string(dtype_name(xt)) + shape_str(c.x) + " axis " +
                                std::to_string(c.axis) + " scale " + dtype_name(st) + shape_str(c.scale) + " stash " +
                                std::to_string(stash),
                            {"S"});
        if (::testing::Test::HasFatalFailure()) return;
      }
}

// The kernel for the rows of 16-bit models (a row a block, pieces of 8 kept in registers):
// decoding's one row of a model's width and a prompt's many, rows of 1, 2 and 4 pieces a thread,
// scales given with leading 1s, and the forms it leaves to the general kernel (a row longer than
// it holds, a length not a multiple of 8, a scale broadcast along the row).
TEST(CudaNorm, RMSNormalizationOfSixteenBitRowsMatchesTheCpu) {
  REQUIRE_GPU();
  struct RmsCase {
    Shape x;
    int64_t axis;
    Shape scale;
  };
  const std::vector<RmsCase> cases = {
      {{1, 2048}, -1, {2048}}, {{1, 1, 4096}, -1, {1, 4096}}, {{7, 2560}, -1, {2560}}, {{3, 8192}, -1, {8192}},
      {{2, 24}, -1, {24}},     {{5, 1, 8200}, -1, {8200}},    {{4, 1000}, -1, {1000}}, {{2, 3, 64}, 1, {3, 64}},
      {{2, 64}, -1, {1}},      {{513, 2048}, -1, {1, 2048}}};
  const std::vector<std::pair<DType, DType>> types = {{DType::BFloat16, DType::BFloat16},
                                                      {DType::Float16, DType::Float16},
                                                      {DType::BFloat16, DType::Float16}};
  uint32_t seed = 71000;
  for (const auto& [xt, st] : types)
    for (const RmsCase& c : cases) {
      ir::Node n = node("RMSNormalization", {"X", "S"},
                        {{"axis", ir::int_attr("axis", c.axis)}, {"epsilon", ir::float_attr("epsilon", 1e-6f)}}, 23);
      Tensor x = random_of(xt, c.x, ++seed, -3.0f, 3.0f), s = random_of(st, c.scale, ++seed);
      expect_same_on_cuda(n, {x, s},
                          "RMSNormalization " + std::string(dtype_name(xt)) + shape_str(c.x) + " scale " +
                              dtype_name(st) + shape_str(c.scale),
                          {"S"});
      if (::testing::Test::HasFatalFailure()) return;
    }
}

}  // namespace
