// CUDA kernels of the tensor and layout ops against the CPU's: a one-node graph on "cuda" and on
// "cpu" with the same inputs (tests/support/cuda_compare.h). Layout ops move elements without
// arithmetic, so every result must be bit-equal; the cases cover every element size, odd shapes,
// empty tensors, negative steps and each op's attribute variants. Skipped where no GPU can run them.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "support/cuda_compare.h"
#include "support/make_tensor.h"

using namespace reforge;

namespace {

using test_support::expect_same_on_cuda;
using test_support::random_of;

ir::Node node(const std::string& op, std::vector<std::string> ins, std::map<std::string, ir::Attribute> attrs = {},
              int opset = 17, std::vector<std::string> outs = {"Y"}) {
  ir::Node n;
  n.name = op;
  n.op_type = op;
  n.opset = opset;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  n.attrs = std::move(attrs);
  return n;
}

Tensor ints(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return test_support::make<int64_t>({n}, std::move(v));
}

// One of each element size, plus bool.
const DType kTypes[] = {DType::Float32, DType::Float16, DType::Int64, DType::Int8, DType::Bool, DType::Float64};

TEST(CudaTensorKernels, TransposeMatchesTheCpu) {
  REQUIRE_GPU();
  struct Case {
    Shape shape;
    std::vector<int64_t> perm;  // empty: no attribute (reverse)
  };
  const Case cases[] = {{{33, 47}, {1, 0}},           {{3, 65, 31}, {0, 2, 1}}, {{2, 3, 4, 5}, {0, 1, 3, 2}},
                        {{2, 3, 4, 5}, {3, 1, 0, 2}}, {{2, 3, 5}, {}},          {{7, 1, 9}, {2, 1, 0}},
                        {{4, 0, 3}, {2, 0, 1}},       {{1, 40, 1}, {0, 2, 1}},  {{5}, {0}}};
  uint32_t seed = 1;
  for (DType t : kTypes)
    for (const Case& c : cases) {
      std::map<std::string, ir::Attribute> attrs;
      if (!c.perm.empty()) attrs["perm"] = ir::ints_attr("perm", c.perm);
      expect_same_on_cuda(
          node("Transpose", {"X"}, attrs), {random_of(t, c.shape, seed++)},
          "Transpose " + std::string(dtype_name(t)) + " " + shape_str(c.shape) + " perm " + shape_str(c.perm));
    }
}

TEST(CudaTensorKernels, ConcatMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 100;
  for (DType t : kTypes) {
    for (int64_t axis : {0, 1, 2, -1}) {
      Shape a{3, 4, 5}, b{3, 4, 5}, c{3, 4, 5};
      const size_t ax = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
      b[ax] = 2;
      c[ax] = 0;  // an empty input contributes nothing
      expect_same_on_cuda(node("Concat", {"A", "B", "C"}, {{"axis", ir::int_attr("axis", axis)}}),
                          {random_of(t, a, seed++), random_of(t, b, seed++), random_of(t, c, seed++)},
                          "Concat " + std::string(dtype_name(t)) + " axis " + std::to_string(axis));
    }
  }
  // The one-launch concat's unit sizes: a decoding step's key-value cache ([1, 8, L, 64] ++
  // [1, 8, 1, 64] in bfloat16: 16-byte units), 4-byte rows, odd bytes; and nine inputs (more than
  // one launch takes: the strided copies).
  for (const auto& [t, a, b] : std::vector<std::tuple<DType, Shape, Shape>>{
           {DType::BFloat16, {1, 8, 37, 64}, {1, 8, 1, 64}},
           {DType::Float32, {2, 3, 5, 1}, {2, 3, 2, 1}},
           {DType::Int8, {2, 3, 5, 3}, {2, 3, 1, 3}}}) {
    expect_same_on_cuda(node("Concat", {"A", "B"}, {{"axis", ir::int_attr("axis", 2)}}),
                        {random_of(t, a, seed++), random_of(t, b, seed++)},
                        "Concat rows " + std::string(dtype_name(t)) + " " + shape_str(a) + " ++ " + shape_str(b));
  }
  std::vector<std::string> names;
  std::vector<Tensor> nine;
  for (int k = 0; k < 9; ++k) {
    names.push_back("X" + std::to_string(k));
    nine.push_back(random_of(DType::Float16, {2, 1 + k % 3, 8}, seed++));
  }
  expect_same_on_cuda(node("Concat", names, {{"axis", ir::int_attr("axis", 1)}}), nine, "Concat of nine inputs");
}

TEST(CudaTensorKernels, SplitMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 200;
  for (DType t : {DType::Float32, DType::Float16, DType::Int8, DType::Int64}) {
    const Tensor x = random_of(t, {4, 7, 3}, seed++);
    const std::string ty = dtype_name(t);
    // Opset 11: split attribute.
    expect_same_on_cuda(
        node("Split", {"X"}, {{"axis", ir::int_attr("axis", 1)}, {"split", ir::ints_attr("split", {2, 0, 5})}}, 11,
             {"Y0", "Y1", "Y2"}),
        {x}, "Split attribute " + ty);
    // Opset 13: split input on the host.
    expect_same_on_cuda(node("Split", {"X", "S"}, {{"axis", ir::int_attr("axis", -2)}}, 13, {"Y0", "Y1"}),
                        {x, ints({3, 4})}, "Split input " + ty, {"S"});
    // Equal parts.
    expect_same_on_cuda(node("Split", {"X"}, {{"axis", ir::int_attr("axis", 0)}}, 13, {"Y0", "Y1"}), {x},
                        "Split equal " + ty);
    // Opset 18: num_outputs, last chunk smaller.
    expect_same_on_cuda(
        node("Split", {"X"}, {{"axis", ir::int_attr("axis", 1)}, {"num_outputs", ir::int_attr("num_outputs", 3)}}, 18,
             {"Y0", "Y1", "Y2"}),
        {x}, "Split num_outputs " + ty);
  }
}

TEST(CudaTensorKernels, SliceMatchesTheCpu) {
  REQUIRE_GPU();
  struct Case {
    std::vector<int64_t> starts, ends, axes, steps;
  };
  const Case cases[] = {{{1, 0}, {3, 100}, {0, 2}, {1, 2}},
                        {{-1}, {-100}, {1}, {-1}},
                        {{4, 5}, {0, 1}, {1, 2}, {-2, -3}},
                        {{2}, {2}, {0}, {1}},
                        {{0, 0, 0}, {1, 9, 13}, {0, 1, 2}, {1, 1, 1}},
                        {{-3}, {1000}, {-1}, {1000}},
                        {{10}, {-1000}, {2}, {-1000}}};
  uint32_t seed = 300;
  for (DType t : kTypes)
    for (const Case& c : cases) {
      const Tensor x = random_of(t, {4, 9, 13}, seed++);
      expect_same_on_cuda(
          node("Slice", {"X", "S", "E", "A", "P"}), {x, ints(c.starts), ints(c.ends), ints(c.axes), ints(c.steps)},
          "Slice " + std::string(dtype_name(t)) + " starts " + shape_str(c.starts) + " steps " + shape_str(c.steps),
          {"S", "E", "A", "P"});
    }
  // No axes or steps; opset 9 attributes.
  const Tensor x = random_of(DType::Float32, {6, 5}, 399);
  expect_same_on_cuda(node("Slice", {"X", "S", "E"}), {x, ints({1, -4}), ints({5, 4})}, "Slice without axes",
                      {"S", "E"});
  expect_same_on_cuda(node("Slice", {"X"},
                           {{"starts", ir::ints_attr("starts", {1})},
                            {"ends", ir::ints_attr("ends", {4})},
                            {"axes", ir::ints_attr("axes", {1})}},
                           9),
                      {x}, "Slice opset 9");
}

TEST(CudaTensorKernels, TileMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 400;
  for (DType t : kTypes) {
    expect_same_on_cuda(node("Tile", {"X", "R"}), {random_of(t, {3, 5, 2}, seed++), ints({2, 1, 3})},
                        "Tile " + std::string(dtype_name(t)), {"R"});
    expect_same_on_cuda(node("Tile", {"X", "R"}), {random_of(t, {3, 5}, seed++), ints({0, 2})},
                        "Tile zero repeat " + std::string(dtype_name(t)), {"R"});
  }
}

TEST(CudaTensorKernels, DepthToSpaceAndSpaceToDepthMatchTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 500;
  for (DType t : {DType::Float32, DType::Float16, DType::Int8, DType::Int64})
    for (const char* mode : {"DCR", "CRD"}) {
      const std::string what = std::string(dtype_name(t)) + " " + mode;
      expect_same_on_cuda(node("DepthToSpace", {"X"},
                               {{"blocksize", ir::int_attr("blocksize", 2)}, {"mode", ir::string_attr("mode", mode)}}),
                          {random_of(t, {2, 12, 3, 5}, seed++)}, "DepthToSpace " + what);
      expect_same_on_cuda(node("SpaceToDepth", {"X"},
                               {{"blocksize", ir::int_attr("blocksize", 3)}, {"mode", ir::string_attr("mode", mode)}}),
                          {random_of(t, {2, 5, 6, 9}, seed++)}, "SpaceToDepth " + what);
    }
}

TEST(CudaTensorKernels, TriluMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 600;
  for (DType t : {DType::Float32, DType::Float16, DType::Int64, DType::Bool})
    for (int64_t upper : {0, 1})
      for (int64_t k : {-100, -2, 0, 1, 3, 100}) {
        expect_same_on_cuda(
            node("Trilu", {"X", "K"}, {{"upper", ir::int_attr("upper", upper)}}),
            {random_of(t, {2, 5, 7}, seed++), test_support::make<int64_t>({}, {k})},
            "Trilu " + std::string(dtype_name(t)) + " upper " + std::to_string(upper) + " k " + std::to_string(k),
            {"K"});
      }
  expect_same_on_cuda(node("Trilu", {"X"}), {random_of(DType::Float32, {9, 4}, 699)}, "Trilu without k");
  expect_same_on_cuda(node("Trilu", {"X"}), {random_of(DType::Float32, {3, 0, 4}, 698)}, "Trilu empty");
}

// Indices in [-dim, dim) of `dtype` (int32 or int64), both signs.
Tensor indices(DType dtype, const Shape& shape, int64_t dim, uint32_t seed) {
  Tensor t = Tensor::empty(DType::Int64, shape);
  uint32_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x = x * 1664525u + 1013904223u;
    t.mutable_data<int64_t>()[i] = static_cast<int64_t>((x >> 8) % static_cast<uint32_t>(2 * dim)) - dim;
  }
  return cast_tensor(t, dtype);
}

TEST(CudaTensorKernels, GatherMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 700;
  for (DType t : kTypes)
    for (DType it : {DType::Int64, DType::Int32})
      for (int64_t axis : {0, 1, -1}) {
        const Shape xs{5, 7, 3};
        const int64_t dim = xs[static_cast<size_t>(axis < 0 ? axis + 3 : axis)];
        const std::string what =
            "Gather " + std::string(dtype_name(t)) + " indices " + dtype_name(it) + " axis " + std::to_string(axis);
        expect_same_on_cuda(node("Gather", {"X", "I"}, {{"axis", ir::int_attr("axis", axis)}}),
                            {random_of(t, xs, seed++), indices(it, {2, 4}, dim, seed++)}, what);
        expect_same_on_cuda(node("Gather", {"X", "I"}, {{"axis", ir::int_attr("axis", axis)}}),
                            {random_of(t, xs, seed++), indices(it, {}, dim, seed++)}, what + " scalar index");
        expect_same_on_cuda(node("Gather", {"X", "I"}, {{"axis", ir::int_attr("axis", axis)}}),
                            {random_of(t, xs, seed++), indices(it, {0}, dim, seed++)}, what + " no index");
      }
}

TEST(CudaTensorKernels, GatherElementsAndGatherNDMatchTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 800;
  for (DType t : {DType::Float32, DType::Float16, DType::Int64, DType::Int8})
    for (DType it : {DType::Int64, DType::Int32}) {
      const std::string ty = std::string(dtype_name(t)) + " indices " + dtype_name(it);
      for (int64_t axis : {0, 1, 2})
        expect_same_on_cuda(node("GatherElements", {"X", "I"}, {{"axis", ir::int_attr("axis", axis)}}),
                            {random_of(t, {4, 5, 6}, seed++), indices(it, {3, 5, 4}, Shape{4, 5, 6}[axis], seed++)},
                            "GatherElements " + ty + " axis " + std::to_string(axis));
      // GatherND: tuples of length 2 into [4, 5, 6], then batch_dims 1 with tuples of length 1.
      Tensor i2 = test_support::make<int64_t>({3, 2}, {0, 4, -1, -5, 2, 3});
      expect_same_on_cuda(node("GatherND", {"X", "I"}), {random_of(t, {4, 5, 6}, seed++), cast_tensor(i2, it)},
                          "GatherND " + ty);
      Tensor i1 = test_support::make<int64_t>({4, 2, 1}, {0, 4, -1, 2, 3, 3, -5, 1});
      expect_same_on_cuda(node("GatherND", {"X", "I"}, {{"batch_dims", ir::int_attr("batch_dims", 1)}}),
                          {random_of(t, {4, 5, 6}, seed++), cast_tensor(i1, it)}, "GatherND batch_dims 1 " + ty);
      Tensor i3 = test_support::make<int64_t>({2, 3}, {3, 4, 5, -4, -5, -6});
      expect_same_on_cuda(node("GatherND", {"X", "I"}), {random_of(t, {4, 5, 6}, seed++), cast_tensor(i3, it)},
                          "GatherND full tuples " + ty);
    }
}

TEST(CudaTensorKernels, ScattersMatchTheCpuIncludingRepeatedIndices) {
  REQUIRE_GPU();
  uint32_t seed = 900;
  for (DType t : {DType::Float32, DType::Float16, DType::Int64, DType::Int8, DType::Bool}) {
    for (const char* red : {"none", "add", "mul", "max", "min"}) {
      const std::string what = std::string(dtype_name(t)) + " reduction " + red;
      std::map<std::string, ir::Attribute> attrs{{"reduction", ir::string_attr("reduction", red)}};
      // Repeated indices along the axis: the CPU applies them in order.
      for (int64_t axis : {0, 1}) {
        attrs["axis"] = ir::int_attr("axis", axis);
        const Shape is{axis == 0 ? 6 : 3, axis == 0 ? 3 : 6};
        expect_same_on_cuda(node("ScatterElements", {"X", "I", "U"}, attrs, 18),
                            {random_of(t, {3, 4}, seed++), indices(DType::Int64, is, axis == 0 ? 3 : 4, seed++),
                             random_of(t, is, seed++)},
                            "ScatterElements " + what + " axis " + std::to_string(axis));
      }
      attrs.erase("axis");
      Tensor idx = test_support::make<int64_t>({4, 1}, {1, -3, 2, 1});  // row 1 written three times
      expect_same_on_cuda(node("ScatterND", {"X", "I", "U"}, attrs, 18),
                          {random_of(t, {3, 5}, seed++), idx, random_of(t, {4, 5}, seed++)}, "ScatterND " + what);
      Tensor full = test_support::make<int64_t>({3, 2}, {0, 1, 2, 4, 0, 1});
      expect_same_on_cuda(node("ScatterND", {"X", "I", "U"}, attrs, 18),
                          {random_of(t, {3, 5}, seed++), full, random_of(t, {3}, seed++)},
                          "ScatterND element tuples " + what);
    }
  }
  expect_same_on_cuda(node("Scatter", {"X", "I", "U"}, {{"axis", ir::int_attr("axis", 1)}}, 10),
                      {random_of(DType::Float32, {3, 4}, 990), indices(DType::Int32, {3, 2}, 4, 991),
                       random_of(DType::Float32, {3, 2}, 992)},
                      "Scatter opset 10");
}

// An index out of range is the CPU's Error, naming the node, and reads nothing out of bounds.
TEST(CudaTensorKernels, OutOfRangeIndicesFailNamingTheNode) {
  REQUIRE_GPU();
  ir::Graph g;
  g.name = "bad_gather";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {test_support::value_info("X", DType::Float32, {4, 3}), test_support::value_info("I", DType::Int64, {3})};
  g.nodes.push_back(node("Gather", {"X", "I"}));
  g.outputs = {test_support::value_info("Y", DType::Float32, {3, 3})};
  const std::map<std::string, Tensor> feed{{"X", random_of(DType::Float32, {4, 3}, 1)},
                                           {"I", test_support::make<int64_t>({3}, {0, 7, -1})}};
  for (const char* backend : {"cpu", "cuda"}) {
    std::string err;
    try {
      test_support::engine_for(g, {}, backend).run(feed);
    } catch (const Error& e) {
      err = e.what();
    }
    EXPECT_NE(err.find("index 7 is out of range for a dimension of size 4"), std::string::npos)
        << backend << ": " << err;
    EXPECT_NE(err.find("Gather"), std::string::npos) << backend << ": " << err;
  }
}

TEST(CudaTensorKernels, ExpandConstantOfShapeAndRangeMatchTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 1000;
  for (DType t : kTypes) {
    expect_same_on_cuda(node("Expand", {"X", "S"}), {random_of(t, {3, 1, 5}, seed++), ints({2, 1, 4, 1})},
                        "Expand " + std::string(dtype_name(t)), {"S"});
    expect_same_on_cuda(node("Expand", {"X", "S"}), {random_of(t, {1, 4}, seed++), ints({3, 0, 4})},
                        "Expand to empty " + std::string(dtype_name(t)), {"S"});
  }
  for (DType t : {DType::Float32, DType::Float16, DType::Int64, DType::Int8, DType::Bool}) {
    Tensor v = cast_tensor(test_support::make<float>({1}, {-3.0f}), t);
    expect_same_on_cuda(node("ConstantOfShape", {"S"}, {{"value", ir::tensor_attr("value", v)}}), {ints({2, 7, 3})},
                        "ConstantOfShape " + std::string(dtype_name(t)), {"S"});
  }
  expect_same_on_cuda(node("ConstantOfShape", {"S"}), {ints({4, 0})}, "ConstantOfShape default empty", {"S"});
  struct R {
    DType t;
    double s, l, d;
  };
  for (const R& r :
       {R{DType::Int64, -7, 20, 3}, R{DType::Int32, 10, -3, -4}, R{DType::Int16, 0, 0, 1},
        R{DType::Float32, 0.5, 7.25, 0.3}, R{DType::Float64, 3, -2, -0.7}, R{DType::Float16, -1, 4, 0.5}}) {
    auto scalar = [&](double v) { return cast_tensor(test_support::make<double>({}, {v}), r.t); };
    expect_same_on_cuda(node("Range", {"A", "B", "C"}), {scalar(r.s), scalar(r.l), scalar(r.d)},
                        "Range " + std::string(dtype_name(r.t)) + " from " + std::to_string(r.s), {"A", "B", "C"});
  }
}

TEST(CudaTensorKernels, PadMatchesTheCpu) {
  REQUIRE_GPU();
  struct Case {
    const char* mode;
    std::vector<int64_t> pads;
  };
  const Case cases[] = {{"constant", {1, 0, 2, 3, 2, 1}}, {"constant", {-1, 2, 0, 0, -2, 3}},
                        {"reflect", {2, 3, 1, 1, 4, 2}},  {"edge", {3, 0, 2, 2, 1, 5}},
                        {"wrap", {4, 1, 0, 3, 2, 7}},     {"reflect", {0, -1, 1, 0, -1, 2}}};
  uint32_t seed = 1100;
  for (DType t : kTypes)
    for (const Case& c : cases) {
      const Tensor x = random_of(t, {3, 4, 5}, seed++);
      const Tensor value = cast_tensor(test_support::make<float>({}, {1.5f}), t);
      expect_same_on_cuda(node("Pad", {"X", "P", "V"}, {{"mode", ir::string_attr("mode", c.mode)}}, 19),
                          {x, ints(c.pads), value},
                          "Pad " + std::string(dtype_name(t)) + " " + c.mode + " " + shape_str(c.pads), {"P"});
    }
  // Axes (opset 18), no constant value, and opset 2 attributes.
  const Tensor x = random_of(DType::Float32, {3, 4, 5}, 1199);
  expect_same_on_cuda(node("Pad", {"X", "P", "", "A"}, {}, 18), {x, ints({1, 2, 3, 0}), x, ints({-1, 0})}, "Pad axes",
                      {"P", "A"});
  expect_same_on_cuda(
      node("Pad", {"X"},
           {{"pads", ir::ints_attr("pads", {0, 1, 1, 1, 0, 2})}, {"value", ir::float_attr("value", -2.5f)}}, 2),
      {x}, "Pad opset 2");
}

TEST(CudaTensorKernels, NonZeroMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 1200;
  for (DType t : kTypes)
    for (const Shape& s : {Shape{7, 3, 5}, Shape{1000}, Shape{2, 0, 3}, Shape{}, Shape{33, 65}}) {
      Tensor x = random_of(t, s, seed++, -1.0f, 1.0f);  // integers: about half are 0
      expect_same_on_cuda(node("NonZero", {"X"}, {}, 13), {x},
                          "NonZero " + std::string(dtype_name(t)) + " " + shape_str(s));
    }
  expect_same_on_cuda(node("NonZero", {"X"}, {}, 13), {Tensor::empty(DType::Float32, {4, 4})}, "NonZero all zero");
}

TEST(CudaTensorKernels, OneHotMatchesTheCpu) {
  REQUIRE_GPU();
  // Indices in range, negative, out of range both ways; float indices truncate.
  const Tensor idx = test_support::make<int64_t>({2, 4}, {0, 4, -1, -5, 5, -6, 2, 3});
  const Tensor fidx = test_support::make<float>({5}, {0.5f, -0.5f, 4.9f, -4.9f, 7.0f});
  for (DType vt : {DType::Float32, DType::Float16, DType::Int64, DType::Int8}) {
    const Tensor values = cast_tensor(test_support::make<float>({2}, {-1.0f, 3.0f}), vt);
    for (int64_t axis : {-1, 0, 1}) {
      const std::string what = std::string(dtype_name(vt)) + " axis " + std::to_string(axis);
      for (DType it : {DType::Int64, DType::Int32})
        expect_same_on_cuda(node("OneHot", {"I", "D", "V"}, {{"axis", ir::int_attr("axis", axis)}}, 11),
                            {cast_tensor(idx, it), ints({5}), values}, "OneHot " + what + " " + dtype_name(it), {"D"});
      expect_same_on_cuda(node("OneHot", {"I", "D", "V"}, {{"axis", ir::int_attr("axis", axis < 1 ? axis : 1)}}, 11),
                          {fidx, test_support::make<float>({}, {5.0f}), values}, "OneHot float indices " + what, {"D"});
    }
  }
}

}  // namespace
