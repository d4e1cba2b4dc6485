// The CUDA backend: placement (which nodes run on the GPU, which on the host, and the transfers
// between them) and every CUDA kernel against the CPU's on the same inputs.
//
// Placement needs no GPU: those tests run wherever reforge is built with CUDA. The kernel tests
// need one and skip with the reason otherwise; scripts/device_test.sh runs them on the GPU
// machine. Each kernel test builds a one-node graph, runs it on "cuda" and on "cpu", and holds
// the two to a normalized mean squared error (sum (a-b)^2 / sum b^2) of 1e-7 in float32 and 1e-4
// in 16-bit types, and to equality for integer and bool results. Shapes include odd sizes,
// broadcasting and empty tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "backends/backend.h"
#include "backends/placement.h"
#include "builder/builder.h"
#include "runtime/plan_engine.h"
#include "support/cuda_compare.h"
#include "support/engine_checks.h"
#include "support/engine_for.h"
#include "support/make_tensor.h"

using namespace reforge;

namespace {

using test_support::kBuiltWithCuda;
using test_support::no_gpu;

ir::ValueInfo input(const std::string& name, DType dtype, std::vector<int64_t> dims) {
  ir::ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.has_shape = true;
  for (int64_t d : dims) v.shape.push_back(ir::Dim{d, ""});
  return v;
}

ir::Node node(const std::string& out, const std::string& op, std::vector<std::string> ins,
              std::map<std::string, ir::Attribute> attrs = {}, int opset = 17) {
  ir::Node n;
  n.name = out;
  n.op_type = op;
  n.opset = opset;
  n.inputs = std::move(ins);
  n.outputs = {out};
  n.attrs = std::move(attrs);
  return n;
}

// Y = Mul(Reshape(Add(X, B), Concat([-1], Gather(Shape(X), [1]))), S): the shape subgraph
// (Shape, Gather, Concat) feeds only Reshape's shape input.
ir::Graph shape_model() {
  ir::Graph g;
  g.name = "shapes";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {input("X", DType::Float32, {3, 5})};
  g.initializers["B"] = test_support::random_floats({5}, 1);
  g.initializers["S"] = test_support::random_floats({1, 5}, 2);
  g.initializers["idx"] = test_support::make<int64_t>({1}, {1});
  g.initializers["minus_one"] = test_support::make<int64_t>({1}, {-1});
  g.nodes.push_back(node("shape", "Shape", {"X"}));
  g.nodes.push_back(node("dim1", "Gather", {"shape", "idx"}, {{"axis", ir::int_attr("axis", 0)}}));
  g.nodes.push_back(node("new_shape", "Concat", {"minus_one", "dim1"}, {{"axis", ir::int_attr("axis", 0)}}));
  g.nodes.push_back(node("sum", "Add", {"X", "B"}));
  g.nodes.push_back(node("flat", "Reshape", {"sum", "new_shape"}));
  g.nodes.push_back(node("Y", "Mul", {"flat", "S"}));
  g.outputs = {input("Y", DType::Float32, {3, 5})};
  return g;
}

std::map<std::string, std::string> placement_by_output(const ir::Graph& g, const std::vector<std::string>& where) {
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < g.nodes.size(); ++i) out[g.nodes[i].op_type + ":" + g.nodes[i].outputs[0]] = where[i];
  return out;
}

TEST(CudaPlacement, ShapeComputationRunsOnTheHostAndTransfersAreExplicit) {
  REQUIRE_CUDA_BUILD();
  ir::Graph g = shape_model();
  const backends::PlaceResult r = backends::place_graph(g, {"cuda", false, ""});
  const auto where = placement_by_output(g, r.node_backend);
  EXPECT_EQ(where.at("Shape:shape"), "cpu");
  EXPECT_EQ(where.at("Gather:dim1"), "cpu");
  EXPECT_EQ(where.at("Concat:new_shape"), "cpu");
  EXPECT_EQ(where.at("Add:sum"), "cuda");
  EXPECT_EQ(where.at("Reshape:flat"), "cuda");
  EXPECT_EQ(r.shape_nodes_on_host, 3u);
  EXPECT_EQ(r.fallback_nodes, 0u);
  // X, B and S go to the device; Y comes back under its own name. Shape reads X's dimensions
  // only, and Reshape's shape stays on the host: no other transfer.
  EXPECT_EQ(r.transfers, 4u);
  EXPECT_EQ(where.at("ToDevice:X::device"), "cuda");
  EXPECT_EQ(where.at("ToDevice:B::device"), "cuda");
  EXPECT_EQ(where.at("ToDevice:S::device"), "cuda");
  EXPECT_EQ(where.at("ToHost:Y"), "cuda");
  EXPECT_EQ(where.at("Mul:Y::device"), "cuda");
  // Still a graph every node of which follows its producers.
  EXPECT_NO_THROW(g.topological_order());
}

TEST(CudaPlacement, NodesWithoutADeviceKernelFailTheBuildUnlessFallbackIsAllowed) {
  REQUIRE_CUDA_BUILD();
  ir::Graph g;
  g.name = "det";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {input("X", DType::Float32, {2, 3, 3})};
  g.nodes.push_back(node("T", "Det", {"X"}));
  g.nodes.push_back(node("Y", "Add", {"T", "T"}));
  g.outputs = {input("Y", DType::Float32, {2})};
  ASSERT_EQ(backends::kernels().find("cuda", "", "Det", 17), nullptr) << "pick another op without a CUDA kernel";

  build::BuildOptions o;
  o.backend = "cuda";
  const std::string err = test_support::error_of([&] { build::build_plan(g, o); });
  EXPECT_NE(err.find("1 of 2 node(s) of model 'det' cannot run on backend 'cuda'"), std::string::npos) << err;
  EXPECT_NE(err.find("node 'T' (Det)"), std::string::npos) << err;
  EXPECT_NE(err.find("--allow-cpu-fallback"), std::string::npos) << err;

  o.host_fallback = true;
  const plan::Plan p = build::build_plan(g, o);
  const auto where = placement_by_output(p.graph, plan::node_backends(p));
  EXPECT_EQ(where.at("Det:T"), "cpu");
  EXPECT_EQ(where.at("Add:Y::device"), "cuda");
  EXPECT_EQ(where.at("ToDevice:T::device"), "cuda");  // the fallback's result goes to the device
  EXPECT_EQ(where.at("ToHost:Y"), "cuda");
}

TEST(CudaPlacement, APlanForTheGpuBuildsAnywhereAndRunsOnlyWhereThereIsOne) {
  REQUIRE_CUDA_BUILD();
  build::BuildOptions o;
  o.backend = "cuda";
  plan::Plan p = build::build_plan(shape_model(), o);
  EXPECT_EQ(p.build->backend, "cuda");
  if (no_gpu().empty()) {
    runtime::PlanEngine e(std::move(p));
    EXPECT_EQ(e.run({{"X", test_support::random_floats({3, 5}, 3)}}).size(), 1u);
  } else {
    const std::string err = test_support::error_of([&] { runtime::PlanEngine e(std::move(p)); });
    EXPECT_NE(err.find("placed on backend 'cuda', which cannot run here"), std::string::npos) << err;
  }
}

// ---- kernels ------------------------------------------------------------------------------------

using test_support::expect_same_on_cuda;
using test_support::nmse;
using test_support::random_of;

std::string describe_case(const std::string& op, DType t, const Shape& a, const Shape& b) {
  return op + " " + dtype_name(t) + shape_str(a) + " " + shape_str(b);
}

const std::vector<std::pair<Shape, Shape>> kBroadcastShapes = {{{7}, {7}},
                                                               {{3, 5}, {5}},
                                                               {{3, 1}, {1, 4}},
                                                               {{2, 3, 5}, {}},
                                                               {{}, {4}},
                                                               {{1027}, {1027}},
                                                               {{2, 1, 5, 1}, {3, 1, 7}},
                                                               {{0, 3}, {3}},
                                                               {{4, 0}, {1, 0}},
                                                               {{33, 65}, {33, 1}},
                                                               {{2, 3, 4, 5, 6}, {3, 1, 5, 1}}};

TEST(CudaKernels, BinaryArithmeticMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 10;
  for (const char* op : {"Add", "Sub", "Mul", "Div"})
    for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int32, DType::Int64,
                    DType::Int8, DType::UInt8})
      for (const auto& [a, b] : kBroadcastShapes) {
        Tensor x = random_of(t, a, ++seed), y = random_of(t, b, ++seed);
        expect_same_on_cuda(node("Y", op, {"A", "B"}, {}, 14), {x, y}, describe_case(op, t, a, b));
      }
}

TEST(CudaKernels, ComparisonAndLogicMatchTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 500;
  for (const char* op : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
    for (DType t : {DType::Float32, DType::Float16, DType::Int64, DType::Int32})
      for (const auto& [a, b] : kBroadcastShapes) {
        Tensor x = random_of(t, a, ++seed), y = random_of(t, b, ++seed);
        expect_same_on_cuda(node("Y", op, {"A", "B"}, {}, 16), {x, y}, describe_case(op, t, a, b));
      }
  for (const char* op : {"And", "Or", "Xor"})
    for (const auto& [a, b] : kBroadcastShapes) {
      Tensor x = random_of(DType::Bool, a, ++seed), y = random_of(DType::Bool, b, ++seed);
      expect_same_on_cuda(node("Y", op, {"A", "B"}, {}, 7), {x, y}, describe_case(op, DType::Bool, a, b));
    }
}

TEST(CudaKernels, PowMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 900;
  for (const auto& [a, b] : kBroadcastShapes) {
    Tensor x = random_of(DType::Float32, a, ++seed, 0.1f, 3.0f), y = random_of(DType::Float32, b, ++seed);
    expect_same_on_cuda(node("Y", "Pow", {"A", "B"}, {}, 15), {x, y}, describe_case("Pow", DType::Float32, a, b));
    Tensor xi = random_of(DType::Int64, a, ++seed), yi = random_of(DType::Int64, b, ++seed, 0.0f, 2.0f);
    expect_same_on_cuda(node("Y", "Pow", {"A", "B"}, {}, 15), {xi, yi}, describe_case("Pow", DType::Int64, a, b));
    Tensor ye = random_of(DType::Int32, b, ++seed, 0.0f, 2.0f);
    expect_same_on_cuda(node("Y", "Pow", {"A", "B"}, {}, 15), {x, ye},
                        describe_case("Pow f32^i32", DType::Float32, a, b));
  }
}

TEST(CudaKernels, MatMulMatchesTheCpu) {
  REQUIRE_GPU();
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{5, 7}, {7, 3}},          {{1, 64}, {64, 1}},         {{7}, {7, 3}},           {{5, 7}, {7}},
      {{2, 3, 17, 33}, {33, 9}}, {{4, 17, 33}, {4, 33, 19}}, {{17, 33}, {3, 33, 19}}, {{3, 1, 8, 16}, {2, 16, 5}},
      {{0, 8}, {8, 4}},          {{128, 256}, {256, 96}},    {{5, 0}, {0, 3}}};
  uint32_t seed = 2000;
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int32, DType::Int64})
    for (const auto& [a, b] : shapes) {
      Tensor x = random_of(t, a, ++seed), y = random_of(t, b, ++seed);
      expect_same_on_cuda(node("Y", "MatMul", {"A", "B"}, {}, 13), {x, y}, describe_case("MatMul", t, a, b));
    }
}

TEST(CudaKernels, GemmMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 3000;
  for (DType t : {DType::Float32, DType::Float16})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (const Shape& c : std::vector<Shape>{{}, {1}, {9}, {13, 1}, {13, 9}}) {
          const int64_t M = 13, K = 21, N = 9;
          Tensor a = random_of(t, ta ? Shape{K, M} : Shape{M, K}, ++seed);
          Tensor b = random_of(t, tb ? Shape{N, K} : Shape{K, N}, ++seed);
          Tensor cc = random_of(t, c, ++seed);
          std::map<std::string, ir::Attribute> attrs = {{"transA", ir::int_attr("transA", ta)},
                                                        {"transB", ir::int_attr("transB", tb)},
                                                        {"alpha", ir::float_attr("alpha", 0.75f)},
                                                        {"beta", ir::float_attr("beta", 1.5f)}};
          expect_same_on_cuda(node("Y", "Gemm", {"A", "B", "C"}, attrs, 13), {a, b, cc},
                              describe_case("Gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb), t, c, c));
        }
}

TEST(CudaKernels, ConvMatchesTheCpu) {
  REQUIRE_GPU();
  struct Case {
    Shape x, w;
    std::map<std::string, ir::Attribute> attrs;
    bool bias;
  };
  using ir::ints_attr;
  const std::vector<Case> cases = {
      {{1, 3, 9, 11}, {4, 3, 3, 3}, {}, true},
      {{2, 4, 8, 8}, {6, 2, 3, 3}, {{"group", ir::int_attr("group", 2)}}, true},
      {{1, 8, 7, 7},
       {8, 1, 3, 3},
       {{"group", ir::int_attr("group", 8)}, {"pads", ints_attr("pads", {1, 1, 1, 1})}},
       false},
      {{1, 3, 10, 10},
       {5, 3, 3, 3},
       {{"strides", ints_attr("strides", {2, 2})}, {"dilations", ints_attr("dilations", {2, 1})}},
       true},
      {{1, 2, 8, 8}, {3, 2, 2, 2}, {{"auto_pad", ir::string_attr("auto_pad", "SAME_UPPER")}}, true},
      {{1, 2, 7, 6}, {3, 2, 3, 2}, {{"pads", ints_attr("pads", {0, 1, 2, 0})}}, false},
      {{2, 3, 17}, {4, 3, 5}, {{"pads", ints_attr("pads", {2, 1})}}, true},
      {{1, 2, 5, 6, 7}, {3, 2, 3, 3, 3}, {{"pads", ints_attr("pads", {1, 1, 1, 1, 1, 1})}}, true},
      {{1, 64, 14, 14}, {32, 64, 1, 1}, {}, true}};
  uint32_t seed = 4000;
  for (DType t : {DType::Float32, DType::Float16})
    for (const auto& c : cases) {
      Tensor x = random_of(t, c.x, ++seed), w = random_of(t, c.w, ++seed), b = random_of(t, {c.w[0]}, ++seed);
      std::vector<std::string> ins = {"X", "W"};
      if (c.bias) ins.push_back("B");
      expect_same_on_cuda(node("Y", "Conv", ins, c.attrs, 11), {x, w, b},
                          describe_case("Conv", t, c.x, c.w) + (c.bias ? " bias" : ""), {"W", "B"});
    }
}

// reforge::FusedConv = relu?(Conv(X, W, B?) + Z?), as the fuse-conv-activation pass makes it:
// float32 with a ReLU runs as one cuDNN call (with and without Z, with and without a bias), the
// other forms (no ReLU, a broadcast Z, 16-bit types) as the convolution and an epilogue kernel.
TEST(CudaKernels, FusedConvMatchesTheCpu) {
  REQUIRE_GPU();
  struct Case {
    Shape x, w, z;  // z empty: no residual
    bool bias, relu;
    std::map<std::string, ir::Attribute> attrs;
  };
  using ir::ints_attr;
  const std::map<std::string, ir::Attribute> same = {{"pads", ints_attr("pads", {1, 1, 1, 1})}};
  const std::vector<Case> cases = {
      {{1, 16, 14, 14}, {32, 16, 3, 3}, {}, true, true, same},
      {{2, 16, 14, 14}, {16, 16, 3, 3}, {2, 16, 14, 14}, true, true, same},
      {{1, 8, 9, 9}, {8, 8, 1, 1}, {1, 8, 9, 9}, false, true, {}},
      {{1, 8, 9, 9}, {12, 8, 3, 3}, {}, false, true, {{"strides", ints_attr("strides", {2, 2})}}},
      {{2, 8, 7, 7}, {8, 8, 3, 3}, {2, 8, 7, 7}, true, false, same},
      {{2, 8, 7, 7}, {8, 8, 3, 3}, {1, 8, 1, 1}, true, true, same},
      {{1, 4, 6, 6}, {6, 2, 3, 3}, {6, 1, 1}, true, false, {{"group", ir::int_attr("group", 2)}}},
      {{1, 3, 11}, {5, 3, 3}, {1, 5, 9}, true, true, {}}};
  uint32_t seed = 4500;
  for (DType t : {DType::Float32, DType::Float16})
    for (const auto& c : cases) {
      Tensor x = random_of(t, c.x, ++seed), w = random_of(t, c.w, ++seed, -0.5f, 0.5f),
             b = random_of(t, {c.w[0]}, ++seed), z = random_of(t, c.z.empty() ? Shape{1} : c.z, ++seed);
      std::vector<std::string> ins = {"X", "W", c.bias ? "B" : ""};
      if (!c.z.empty()) ins.push_back("Z");
      auto attrs = c.attrs;
      if (c.relu) attrs["activation"] = ir::string_attr("activation", "Relu");
      ir::Node n = node("Y", "FusedConv", ins, attrs, 1);
      n.domain = "reforge";
      expect_same_on_cuda(n, {x, w, b, z},
                          describe_case("FusedConv", t, c.x, c.w) + (c.bias ? " bias" : "") +
                              (c.z.empty() ? "" : " z " + shape_str(c.z)) + (c.relu ? " relu" : ""),
                          {"W", "B"});
    }
}

TEST(CudaKernels, PoolsMatchTheCpu) {
  REQUIRE_GPU();
  using ir::ints_attr;
  const std::vector<std::pair<Shape, std::map<std::string, ir::Attribute>>> cases = {
      {{1, 3, 9, 11}, {{"kernel_shape", ints_attr("kernel_shape", {3, 3})}}},
      {{2, 4, 12, 12},
       {{"kernel_shape", ints_attr("kernel_shape", {3, 3})},
        {"strides", ints_attr("strides", {2, 2})},
        {"pads", ints_attr("pads", {1, 1, 1, 1})}}},
      {{1, 2, 10, 9},
       {{"kernel_shape", ints_attr("kernel_shape", {2, 3})},
        {"strides", ints_attr("strides", {2, 2})},
        {"ceil_mode", ir::int_attr("ceil_mode", 1)},
        {"pads", ints_attr("pads", {0, 1, 1, 0})}}},
      {{1, 2, 11, 11},
       {{"kernel_shape", ints_attr("kernel_shape", {3, 3})},
        {"dilations", ints_attr("dilations", {2, 2})},
        {"auto_pad", ir::string_attr("auto_pad", "SAME_UPPER")}}},
      {{2, 3, 17}, {{"kernel_shape", ints_attr("kernel_shape", {4})}, {"strides", ints_attr("strides", {3})}}},
      {{1, 2, 5, 6, 7}, {{"kernel_shape", ints_attr("kernel_shape", {2, 2, 2})}}}};
  uint32_t seed = 5000;
  for (DType t : {DType::Float32, DType::Float16})
    for (const auto& [shape, attrs] : cases) {
      Tensor x = random_of(t, shape, ++seed);
      expect_same_on_cuda(node("Y", "MaxPool", {"X"}, attrs, 12), {x}, describe_case("MaxPool", t, shape, {}));
      ir::Node with_indices = node("Y", "MaxPool", {"X"}, attrs, 12);
      with_indices.outputs.push_back("I");
      expect_same_on_cuda(with_indices, {x}, describe_case("MaxPool+Indices", t, shape, {}));
      for (int include = 0; include < 2; ++include) {
        auto a = attrs;
        a["count_include_pad"] = ir::int_attr("count_include_pad", include);
        expect_same_on_cuda(node("Y", "AveragePool", {"X"}, a, 19), {x},
                            describe_case("AveragePool include_pad=" + std::to_string(include), t, shape, {}));
      }
      expect_same_on_cuda(node("Y", "GlobalAveragePool", {"X"}), {x}, describe_case("GlobalAveragePool", t, shape, {}));
      expect_same_on_cuda(node("Y", "GlobalMaxPool", {"X"}), {x}, describe_case("GlobalMaxPool", t, shape, {}));
    }
}

TEST(CudaKernels, ViewsAndTransfersKeepValues) {
  REQUIRE_GPU();
  ir::Graph g = shape_model();
  const Tensor x = test_support::random_floats({3, 5}, 77);
  const Tensor want = test_support::engine_for(g).run({{"X", x}})[0];
  runtime::Engine e = test_support::engine_for(shape_model(), {}, "cuda");
  for (int i = 0; i < 3; ++i) {  // the weights are uploaded once; every run gives the same result
    const Tensor got = e.run({{"X", x}})[0];
    ASSERT_TRUE(got.on_host());
    EXPECT_EQ(nmse(got, want), 0.0);
  }
}

}  // namespace
