// Placement: the builder puts every node on the backend BuildOptions::backend names, the plan
// records it per node, and the engine runs each node with that backend's kernel.
//
// The backend here, "counting" (tests/support/counting_backend.cc), is registered by the test
// binary alone: nothing in src/ops or src/runtime knows it, which is the point. It has kernels for
// eight ops that call the ops' reference kernels and count the calls, and runs no reference
// kernels of other ops, so a graph it cannot run fails the build naming the node.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "backends/backend.h"
#include "builder/builder.h"
#include "plan/plan_io.h"
#include "runtime/plan_engine.h"
#include "support/counting_backend.h"
#include "support/engine_checks.h"
#include "support/make_tensor.h"
#include "support/plan_round_trip.h"

using namespace reforge;
using test_support::error_of;

namespace {

ir::ValueInfo float_input(const std::string& name, std::vector<int64_t> dims) {
  ir::ValueInfo v;
  v.name = name;
  v.dtype = DType::Float32;
  v.has_shape = true;
  for (int64_t d : dims) v.shape.push_back(ir::Dim{d, ""});
  return v;
}

ir::Node node(const std::string& name, const std::string& op, std::vector<std::string> ins,
              std::map<std::string, ir::Attribute> attrs = {}) {
  ir::Node n;
  n.name = name;
  n.op_type = op;
  n.opset = 17;
  n.inputs = std::move(ins);
  n.outputs = {name};
  n.attrs = std::move(attrs);
  return n;
}

// Y = Softmax(Reshape(Transpose(Relu(X x W + B)), [3, 2]) * S) and Z = Gemm(X, G): every op the
// counting backend has, a weight product the CPU build fuses (MatMul + Add), and a Gemm.
ir::Graph small_model() {
  ir::Graph g;
  g.name = "placement";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {float_input("X", {2, 4})};
  g.initializers["W"] = test_support::random_floats({4, 3}, 1);
  g.initializers["B"] = test_support::random_floats({3}, 2);
  g.initializers["S"] = test_support::random_floats({1, 2}, 3);
  g.initializers["G"] = test_support::random_floats({4, 5}, 4);
  g.initializers["shape"] = test_support::make<int64_t>({2}, {3, 2});
  g.nodes.push_back(node("mm", "MatMul", {"X", "W"}));
  g.nodes.push_back(node("add", "Add", {"mm", "B"}));
  g.nodes.push_back(node("relu", "Relu", {"add"}));
  g.nodes.push_back(node("tr", "Transpose", {"relu"}, {{"perm", ir::ints_attr("perm", {1, 0})}}));
  g.nodes.push_back(node("rs", "Reshape", {"tr", "shape"}));
  g.nodes.push_back(node("mul", "Mul", {"rs", "S"}));
  g.nodes.push_back(node("sm", "Softmax", {"mul"}, {{"axis", ir::int_attr("axis", -1)}}));
  g.nodes.push_back(node("gemm", "Gemm", {"X", "G"}, {{"alpha", ir::float_attr("alpha", 0.5f)}}));
  g.outputs = {float_input("sm", {3, 2}), float_input("gemm", {2, 5})};
  return g;
}

plan::Plan build_for(const ir::Graph& g, const std::string& backend) {
  build::BuildOptions o;
  o.backend = backend;
  return build::build_plan(g, o);
}

std::map<std::string, int64_t> op_counts(const ir::Graph& g) {
  std::map<std::string, int64_t> c;
  for (const auto& n : g.nodes) ++c[n.op_type];
  return c;
}

void expect_close(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5 * (1 + std::fabs(want.data<float>()[i]))) << i;
}

TEST(Placement, CountingBackendRunsTheModelLikeTheCpu) {
  test_support::register_counting_backend();
  const ir::Graph g = small_model();
  const std::map<std::string, Tensor> in = {{"X", test_support::random_floats({2, 4}, 5)}};

  plan::Plan cpu_plan = build_for(g, "cpu");
  plan::Plan counting_plan = build_for(g, test_support::kCountingBackend);
  // The CPU build fused MatMul + Add into an op of its own (MatMulAdd, or MatMulAddPacked where
  // it packs weights); the counting backend has no kernel for those, so its build kept the ONNX
  // ops.
  const std::map<std::string, int64_t> cpu_nodes = op_counts(cpu_plan.graph);
  EXPECT_EQ(cpu_nodes.count("MatMul") + cpu_nodes.count("Add"), 0u);
  EXPECT_EQ(cpu_nodes.count("MatMulAdd") + cpu_nodes.count("MatMulAddPacked"), 1u);
  const std::map<std::string, int64_t> nodes = op_counts(counting_plan.graph);
  EXPECT_EQ(nodes, (std::map<std::string, int64_t>{{"Add", 1},
                                                   {"Gemm", 1},
                                                   {"MatMul", 1},
                                                   {"Mul", 1},
                                                   {"Relu", 1},
                                                   {"Reshape", 1},
                                                   {"Softmax", 1},
                                                   {"Transpose", 1}}));
  ASSERT_EQ(counting_plan.placement.size(), counting_plan.graph.nodes.size());
  for (const auto& b : counting_plan.placement) EXPECT_EQ(b, test_support::kCountingBackend);
  for (const auto& b : cpu_plan.placement) EXPECT_EQ(b, "cpu");
  ASSERT_TRUE(counting_plan.build.has_value());
  EXPECT_EQ(counting_plan.build->backend, test_support::kCountingBackend);

  const std::vector<Tensor> want = runtime::PlanEngine(std::move(cpu_plan)).run(in);
  test_support::reset_counting_calls();
  const std::vector<Tensor> got = runtime::PlanEngine(std::move(counting_plan)).run(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], want[i]);
  // One call per node: every node ran the counting backend's kernel.
  EXPECT_EQ(test_support::counting_calls(), nodes);
}

TEST(Placement, NodeWithoutKernelFailsTheBuildNamingIt) {
  test_support::register_counting_backend();
  ir::Graph g = small_model();
  g.nodes.push_back(node("squash", "Sigmoid", {"sm"}));
  g.outputs[0] = float_input("squash", {3, 2});
  const std::string err = error_of([&] { build_for(g, test_support::kCountingBackend); });
  EXPECT_NE(err.find("node 'squash' (Sigmoid)"), std::string::npos) << err;
  EXPECT_NE(err.find("no kernel on backend 'counting'"), std::string::npos) << err;
  EXPECT_NE(err.find("1 of 9 node(s)"), std::string::npos) << err;
  // The CPU runs it (its own kernel, backends/cpu/unary.cc).
  EXPECT_EQ(error_of([&] { build_for(g, "cpu"); }), "");
}

TEST(Placement, UnknownBackendIsRefused) {
  const std::string err = error_of([&] { build_for(small_model(), "tpu"); });
  EXPECT_NE(err.find("backend 'tpu' is not registered"), std::string::npos) << err;
  EXPECT_NE(err.find("cpu"), std::string::npos) << err;
}

TEST(Placement, PlanRecordsTheBackendPerNodeAndSurvivesSaveAndLoad) {
  test_support::register_counting_backend();
  const ir::Graph g = small_model();
  const std::map<std::string, Tensor> in = {{"X", test_support::random_floats({2, 4}, 6)}};
  const plan::Plan built = build_for(g, test_support::kCountingBackend);
  const std::vector<Tensor> want = runtime::PlanEngine(plan::Plan(built)).run(in);

  plan::Plan loaded = test_support::round_trip(built);
  EXPECT_EQ(loaded.placement, built.placement);
  EXPECT_EQ(loaded.placement, std::vector<std::string>(loaded.graph.nodes.size(), test_support::kCountingBackend));
  test_support::reset_counting_calls();
  const std::vector<Tensor> got = runtime::PlanEngine(std::move(loaded)).run(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], want[i]);
  EXPECT_EQ(test_support::counting_calls(), op_counts(built.graph));

  // A plan placed on a backend this process does not have loads as data but makes no engine.
  plan::Plan elsewhere = built;
  for (auto& b : elsewhere.placement) b = "gpu0";
  plan::Plan read = test_support::round_trip(elsewhere);
  EXPECT_EQ(read.placement[0], "gpu0");
  const std::string err = error_of([&] { runtime::PlanEngine e(std::move(read)); });
  EXPECT_NE(err.find("8 node(s) are placed on backend 'gpu0', which is not registered"), std::string::npos) << err;
}

TEST(Placement, PlansWithoutAPlacementRunOnTheirBuildBackend) {
  plan::Plan p = build_for(small_model(), "cpu");
  p.placement.clear();  // as plans written before placement was recorded
  const plan::Plan read = test_support::round_trip(p);
  EXPECT_EQ(read.placement, std::vector<std::string>(read.graph.nodes.size(), "cpu"));
}

TEST(Placement, ResolutionPrefersTheBackendKernelAndFallsBackToReference) {
  test_support::register_counting_backend();
  ir::Node mm = node("mm", "MatMul", {"a", "b"});
  ir::Node sig = node("s", "Sin", {"a"});  // libm's sin: no vectorized CPU kernel
  backends::Resolved r;
  ASSERT_EQ(backends::resolve(mm, "cpu", &r), "");
  EXPECT_FALSE(r.reference);  // the CPU's own MatMul (oneDNN)
  ASSERT_EQ(backends::resolve(sig, "cpu", &r), "");
  EXPECT_TRUE(r.reference);  // no CPU kernel: the reference kernel
  ASSERT_EQ(backends::resolve(mm, "counting", &r), "");
  EXPECT_FALSE(r.reference);
  EXPECT_EQ(backends::resolve(sig, "counting", &r), "no kernel on backend 'counting'");
  const auto names = backends::backend_names();
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[0], "cpu");
}

}  // namespace
