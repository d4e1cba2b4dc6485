// Control flow (If, Loop, Scan; src/ops/control, ir/subgraph.h): hand-built graphs whose results
// are derived by hand, run raw (runtime::lower_without_passes) and through build_plan, serialize,
// parse and PlanEngine; captured outer values kept alive by dead-code elimination; subgraph
// initializers carried as refittable sources; malformed subgraphs refused with errors that name
// them.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "builder/builder.h"
#include "ir/subgraph.h"
#include "ops/infer_graph.h"
#include "plan/plan_io.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/counting_backend.h"
#include "support/engine_checks.h"
#include "support/engine_for.h"

using namespace reforge;
using test_support::error_of;

namespace {

ir::Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out, int opset = 17) {
  ir::Node n;
  n.name = out.empty() ? op : out[0] + "_node";
  n.op_type = op;
  n.opset = opset;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

ir::ValueInfo vi(const std::string& name, DType dt, std::vector<int64_t> shape) {
  ir::ValueInfo v;
  v.name = name;
  v.dtype = dt;
  v.has_shape = true;
  for (int64_t d : shape) {
    ir::Dim dim;
    dim.value = d;
    v.shape.push_back(dim);
  }
  return v;
}

ir::Attribute graph_attr(const std::string& name, ir::Graph g) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::Graph;
  a.g = std::make_shared<ir::Graph>(std::move(g));
  return a;
}

Tensor floats(Shape shape, std::vector<float> v) {
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.mutable_data<float>()[i] = v[i];
  return t;
}

std::vector<float> values(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::Float32);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Through the whole pipeline: build_plan (every default pass), serialize, parse, PlanEngine.
runtime::PlanEngine reloaded(const ir::Graph& g, const build::BuildOptions& o = {}) {
  plan::Plan p = build::build_plan(g, o);
  std::string bytes = plan::serialize_plan(p);
  auto owner = std::make_shared<std::string>(std::move(bytes));
  return runtime::PlanEngine(plan::parse_plan(owner, owner->data(), owner->size()));
}

// acc = x0; for i in [0, M): acc += step; its[i] = float(i). `step` is computed in the outer graph
// (Mul(s, two)) and read only inside the body.
ir::Graph loop_graph() {
  ir::Graph body;
  body.name = "loop_body";
  body.inputs = {vi("i", DType::Int64, {}), vi("c", DType::Bool, {}), vi("acc", DType::Float32, {2})};
  body.nodes = {node("Add", {"acc", "step"}, {"acc_next"}), node("Identity", {"c"}, {"c_next"}),
                node("Cast", {"i"}, {"i_f"})};
  body.nodes[2].attrs["to"] = ir::int_attr("to", static_cast<int64_t>(DType::Float32));
  body.outputs = {vi("c_next", DType::Bool, {}), vi("acc_next", DType::Float32, {2}), vi("i_f", DType::Float32, {})};

  ir::Graph g;
  g.name = "loop";
  g.opsets[""] = 17;
  g.inputs = {vi("M", DType::Int64, {}), vi("x0", DType::Float32, {2}), vi("s", DType::Float32, {2})};
  g.initializers["two"] = floats({}, {2.0f});
  ir::Node loop = node("Loop", {"M", "", "x0"}, {"acc_final", "its"});
  loop.attrs["body"] = graph_attr("body", body);
  g.nodes = {node("Mul", {"s", "two"}, {"step"}), loop};
  g.outputs = {vi("acc_final", DType::Float32, {2}), vi("its", DType::Float32, {3})};
  ir::bind_captures(g);
  return g;
}

std::map<std::string, Tensor> loop_inputs() {
  return {{"M", Tensor::scalar<int64_t>(DType::Int64, 3)},
          {"x0", floats({2}, {1.0f, 2.0f})},
          {"s", floats({2}, {0.25f, -0.5f})}};
}

TEST(ControlFlow, BindCapturesMakesOuterReadsInputs) {
  ir::Graph g = loop_graph();
  const ir::Node& loop = g.nodes[1];
  // Declared (M, cond, x0), then the one value the body reads from outside: step.
  EXPECT_EQ(loop.inputs, (std::vector<std::string>{"M", "", "x0", "step"}));
  EXPECT_EQ(loop.attrs.at("body").g->captures, std::vector<std::string>{"step"});
  EXPECT_EQ(ir::num_captured_inputs(loop), 1u);
  // Idempotent.
  ir::Graph again = g;
  ir::bind_captures(again);
  EXPECT_EQ(again.nodes[1].inputs, loop.inputs);
  EXPECT_EQ(again.nodes[1].attrs.at("body").g->captures, std::vector<std::string>{"step"});
}

TEST(ControlFlow, LoopSumsWithCapturedValue) {
  // step = [0.5, -1]; acc = [1, 2] + 3 * step = [2.5, -1]; its = [0, 1, 2].
  for (bool raw : {true, false}) {
    SCOPED_TRACE(raw ? "raw" : "plan");
    std::vector<Tensor> out =
        raw ? test_support::engine_for(loop_graph()).run(loop_inputs()) : reloaded(loop_graph()).run(loop_inputs());
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(values(out[0]), (std::vector<float>{2.5f, -1.0f}));
    EXPECT_EQ(out[1].shape(), Shape{3});
    EXPECT_EQ(values(out[1]), (std::vector<float>{0.0f, 1.0f, 2.0f}));
  }
}

TEST(ControlFlow, DeadCodeEliminationKeepsValueReadOnlyInBody) {
  plan::Plan p = build::build_plan(loop_graph(), {});
  bool has_mul = false;
  for (const auto& n : p.graph.nodes) has_mul |= n.op_type == "Mul";
  EXPECT_TRUE(has_mul) << "the Mul feeding only the body was removed";
}

// Constant folding folds a Loop only when every input, captured ones included, is constant: with
// `s` (read only through the captured `step`) an initializer and M, x0 constant too, the whole
// graph folds; with `s` a graph input, the Loop stays.
TEST(ControlFlow, FoldsOnlyWhenCapturedValuesAreConstant) {
  auto count = [](const plan::Plan& p, const std::string& op) {
    size_t k = 0;
    for (const auto& n : p.graph.nodes) k += n.op_type == op;
    return k;
  };
  ir::Graph g = loop_graph();
  EXPECT_EQ(count(build::build_plan(g, {}), "Loop"), 1u);
  std::map<std::string, Tensor> in = loop_inputs();
  // A condition that stays true (the body passes it on): the same result. (An absent optional
  // input in the middle keeps any node from folding.)
  g.nodes[1].inputs[1] = "go";
  g.initializers["go"] = Tensor::scalar<bool>(DType::Bool, true);
  g.inputs = {vi("s", DType::Float32, {2})};
  g.initializers["M"] = in["M"];
  g.initializers["x0"] = in["x0"];
  EXPECT_EQ(count(build::build_plan(g, {}), "Loop"), 1u);  // s is still an input
  g.inputs.clear();
  g.initializers["s"] = in["s"];
  plan::Plan folded = build::build_plan(g, {});
  EXPECT_EQ(count(folded, "Loop"), 0u);
  runtime::PlanEngine e(std::move(folded));
  auto out = e.run({});
  EXPECT_EQ(values(out[0]), (std::vector<float>{2.5f, -1.0f}));
  EXPECT_EQ(values(out[1]), (std::vector<float>{0.0f, 1.0f, 2.0f}));
}

TEST(ControlFlow, PlanRoundTripKeepsSubgraph) {
  plan::Plan p = build::build_plan(loop_graph(), {});
  std::string bytes = plan::serialize_plan(p);
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]), 2u);  // format version 2: the plan holds a subgraph
  auto owner = std::make_shared<std::string>(bytes);
  plan::Plan q = plan::parse_plan(owner, owner->data(), owner->size());
  EXPECT_EQ(q.format_version, 2u);
  const ir::Node* loop = nullptr;
  for (const auto& n : q.graph.nodes)
    if (n.op_type == "Loop") loop = &n;
  ASSERT_NE(loop, nullptr);
  const ir::Graph& body = *loop->attrs.at("body").g;
  EXPECT_EQ(body.name, "loop_body");
  EXPECT_EQ(body.captures, std::vector<std::string>{"step"});
  EXPECT_EQ(body.nodes.size(), 3u);
  EXPECT_EQ(body.nodes[2].attr_int("to", 0), static_cast<int64_t>(DType::Float32));
  // Writing the parsed plan again gives the same bytes.
  EXPECT_EQ(plan::serialize_plan(q), bytes);
}

TEST(ControlFlow, LoopInference) {
  ir::Graph g = loop_graph();
  ops::GraphTypes t = ops::infer_graph(g);
  EXPECT_EQ(t.find("acc_final")->str(), "float32[2]");
  ASSERT_TRUE(t.find("its")->rank_known);
  EXPECT_EQ(t.find("its")->shape.size(), 1u);  // the trip count is an input: a symbol
  std::map<std::string, Tensor> m = {{"M", Tensor::scalar<int64_t>(DType::Int64, 3)}};
  ops::InferOptions o;
  o.input_values = &m;
  EXPECT_EQ(ops::infer_graph(g, o).find("its")->str(), "float32[3]");
}

// y = cond ? a + one (a then_branch initializer) : -a.
ir::Graph if_graph() {
  ir::Graph then_g;
  then_g.name = "then";
  then_g.initializers["one"] = floats({}, {1.0f});
  then_g.nodes = {node("Add", {"a", "one"}, {"t"})};
  then_g.outputs = {vi("t", DType::Float32, {3})};
  ir::Graph else_g;
  else_g.name = "else";
  else_g.nodes = {node("Neg", {"a"}, {"e"})};
  else_g.outputs = {vi("e", DType::Float32, {3})};
  ir::Graph g;
  g.name = "if";
  g.opsets[""] = 17;
  g.inputs = {vi("cond", DType::Bool, {}), vi("a", DType::Float32, {3})};
  ir::Node n = node("If", {"cond"}, {"y"});
  n.attrs["then_branch"] = graph_attr("then_branch", then_g);
  n.attrs["else_branch"] = graph_attr("else_branch", else_g);
  g.nodes = {n};
  g.outputs = {vi("y", DType::Float32, {3})};
  ir::bind_captures(g);
  return g;
}

TEST(ControlFlow, IfBranchesAndHoistedInitializer) {
  ir::Graph g = if_graph();
  // The branch's initializer moved to the top-level graph under a unique name.
  EXPECT_EQ(g.initializers.count("then.one"), 1u);
  EXPECT_EQ(g.nodes[0].attrs.at("then_branch").g->initializers.size(), 0u);
  // Captured inputs in attribute-name order: else_branch's (a), then then_branch's (its moved
  // initializer first, then a).
  EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"cond", "a", "then.one", "a"}));
  EXPECT_EQ(g.nodes[0].attrs.at("then_branch").g->captures, (std::vector<std::string>{"one", "a"}));
  Tensor a = floats({3}, {1.0f, -2.0f, 3.5f});
  for (bool raw : {true, false}) {
    SCOPED_TRACE(raw ? "raw" : "plan");
    for (bool c : {true, false}) {
      std::map<std::string, Tensor> in = {{"cond", Tensor::scalar<bool>(DType::Bool, c)}, {"a", a}};
      auto out = raw ? test_support::engine_for(g).run(in) : reloaded(g).run(in);
      const std::vector<float> want =
          c ? std::vector<float>{2.0f, -1.0f, 4.5f} : std::vector<float>{-1.0f, 2.0f, -3.5f};
      EXPECT_EQ(values(out[0]), want);
    }
  }
}

TEST(ControlFlow, SubgraphInitializerIsARefittableSource) {
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  o.strip_weights = true;
  runtime::PlanEngine e = reloaded(if_graph(), o);
  refit::Refitter r(e);
  EXPECT_EQ(r.missing(), std::vector<std::string>{"then.one@0:2"});  // the If, its captured input 2
  r.set("then.one", floats({}, {10.0f}));
  r.commit();
  auto out = e.run({{"cond", Tensor::scalar<bool>(DType::Bool, true)}, {"a", floats({3}, {1.0f, -2.0f, 3.5f})}});
  EXPECT_EQ(values(out[0]), (std::vector<float>{11.0f, 8.0f, 13.5f}));
}

// Scan (opset 9+) over axis 1 of X = [[1,2,3],[4,5,6]] in reverse: the slices are the columns
// [3,6], [2,5], [1,4]; s accumulates them: [3,6], [5,11], [6,15]. The scan output stacks each
// step's s along axis 1 in reverse: [[6,5,3],[15,11,6]].
ir::Graph scan_graph() {
  ir::Graph body;
  body.name = "scan_body";
  body.inputs = {vi("s", DType::Float32, {2}), vi("x", DType::Float32, {2})};
  body.nodes = {node("Add", {"s", "x"}, {"s_next"}), node("Identity", {"s_next"}, {"y"})};
  body.outputs = {vi("s_next", DType::Float32, {2}), vi("y", DType::Float32, {2})};
  ir::Graph g;
  g.name = "scan";
  g.opsets[""] = 17;
  g.inputs = {vi("s0", DType::Float32, {2}), vi("X", DType::Float32, {2, 3})};
  ir::Node n = node("Scan", {"s0", "X"}, {"s_final", "Y"});
  n.attrs["body"] = graph_attr("body", body);
  n.attrs["num_scan_inputs"] = ir::int_attr("num_scan_inputs", 1);
  n.attrs["scan_input_axes"] = ir::ints_attr("scan_input_axes", {1});
  n.attrs["scan_input_directions"] = ir::ints_attr("scan_input_directions", {1});
  n.attrs["scan_output_axes"] = ir::ints_attr("scan_output_axes", {-1});
  n.attrs["scan_output_directions"] = ir::ints_attr("scan_output_directions", {1});
  g.nodes = {n};
  g.outputs = {vi("s_final", DType::Float32, {2}), vi("Y", DType::Float32, {2, 3})};
  ir::bind_captures(g);
  return g;
}

TEST(ControlFlow, ScanReverseAlongAxes) {
  std::map<std::string, Tensor> in = {{"s0", floats({2}, {0.0f, 0.0f})}, {"X", floats({2, 3}, {1, 2, 3, 4, 5, 6})}};
  for (bool raw : {true, false}) {
    SCOPED_TRACE(raw ? "raw" : "plan");
    auto out = raw ? test_support::engine_for(scan_graph()).run(in) : reloaded(scan_graph()).run(in);
    EXPECT_EQ(values(out[0]), (std::vector<float>{6, 15}));
    EXPECT_EQ(out[1].shape(), (Shape{2, 3}));
    EXPECT_EQ(values(out[1]), (std::vector<float>{6, 5, 3, 15, 11, 6}));
  }
  EXPECT_EQ(ops::infer_graph(scan_graph()).find("Y")->str(), "float32[2,3]");
}

// Scan opset 8: batch axis 0, sequence axis 1, per-entry lengths. X = [[1,2,3],[4,5,6]] (as
// [2,3,1]), sequence_lens [3, 2], the scan input reversed: entry 0 scans 3, 2, 1 (s: 3, 5, 6),
// entry 1 scans 5, 4 (s: 5, 9) and its third output step is zero padding.
TEST(ControlFlow, Scan8SequenceLengthsAndReverse) {
  ir::Graph body;
  body.name = "scan8_body";
  body.inputs = {vi("s", DType::Float32, {1}), vi("x", DType::Float32, {1})};
  body.nodes = {node("Add", {"s", "x"}, {"s_next"}, 8), node("Identity", {"s_next"}, {"y"}, 8)};
  body.outputs = {vi("s_next", DType::Float32, {1}), vi("y", DType::Float32, {1})};
  ir::Graph g;
  g.name = "scan8";
  g.opsets[""] = 8;
  g.inputs = {vi("lens", DType::Int64, {2}), vi("s0", DType::Float32, {2, 1}), vi("X", DType::Float32, {2, 3, 1})};
  ir::Node n = node("Scan", {"lens", "s0", "X"}, {"s_final", "Y"}, 8);
  n.attrs["body"] = graph_attr("body", body);
  n.attrs["num_scan_inputs"] = ir::int_attr("num_scan_inputs", 1);
  n.attrs["directions"] = ir::ints_attr("directions", {1});
  g.nodes = {n};
  g.outputs = {vi("s_final", DType::Float32, {2, 1}), vi("Y", DType::Float32, {2, 3, 1})};
  ir::bind_captures(g);
  Tensor lens = Tensor::empty(DType::Int64, {2});
  lens.mutable_data<int64_t>()[0] = 3;
  lens.mutable_data<int64_t>()[1] = 2;
  std::map<std::string, Tensor> in = {
      {"lens", lens}, {"s0", floats({2, 1}, {0, 0})}, {"X", floats({2, 3, 1}, {1, 2, 3, 4, 5, 6})}};
  for (bool raw : {true, false}) {
    SCOPED_TRACE(raw ? "raw" : "plan");
    auto out = raw ? test_support::engine_for(g).run(in) : reloaded(g).run(in);
    EXPECT_EQ(values(out[0]), (std::vector<float>{6, 9}));
    EXPECT_EQ(out[1].shape(), (Shape{2, 3, 1}));
    EXPECT_EQ(values(out[1]), (std::vector<float>{3, 5, 6, 5, 9, 0}));
  }
  EXPECT_EQ(ops::infer_graph(g).find("Y")->str(), "float32[2,3,1]");
}

TEST(ControlFlow, NestedSubgraphCapturesThroughEveryLevel) {
  // An If inside the Loop body reads `s`, a top-level input: the Loop body captures it too.
  ir::Graph g = loop_graph();
  ir::Graph then_g;
  then_g.name = "inner_then";
  then_g.nodes = {node("Add", {"acc", "s"}, {"t"})};
  then_g.outputs = {vi("t", DType::Float32, {2})};
  ir::Graph else_g;
  else_g.name = "inner_else";
  else_g.nodes = {node("Identity", {"acc"}, {"e"})};
  else_g.outputs = {vi("e", DType::Float32, {2})};
  ir::Node inner = node("If", {"c"}, {"acc_if"});
  inner.attrs["then_branch"] = graph_attr("then_branch", then_g);
  inner.attrs["else_branch"] = graph_attr("else_branch", else_g);
  ir::Graph body = *g.nodes[1].attrs.at("body").g;
  body.nodes.insert(body.nodes.begin(), inner);
  body.nodes[1].inputs[0] = "acc_if";  // acc_next = acc_if + step
  g.nodes[1].attrs["body"] = graph_attr("body", body);
  ir::bind_captures(g);
  EXPECT_EQ(g.nodes[1].attrs.at("body").g->captures, (std::vector<std::string>{"step", "s"}));
  EXPECT_EQ(g.nodes[1].inputs, (std::vector<std::string>{"M", "", "x0", "step", "s"}));
  // acc += s + 2s per step: [1, 2] + 3 * [0.75, -1.5] = [3.25, -2.5].
  auto out = reloaded(g).run(loop_inputs());
  EXPECT_EQ(values(out[0]), (std::vector<float>{3.25f, -2.5f}));
}

TEST(ControlFlow, MalformedBodyIsRefusedNamingIt) {
  ir::Graph g = loop_graph();
  auto body = std::make_shared<ir::Graph>(*g.nodes[1].attrs.at("body").g);
  body->outputs.pop_back();  // 2 outputs; the node's 2 outputs need 3
  g.nodes[1].attrs["body"].g = body;
  std::string e = error_of([&] { test_support::engine_for(g); });
  EXPECT_NE(e.find("acc_final_node"), std::string::npos) << e;
  EXPECT_NE(e.find("body has 2 outputs; the node's 2 outputs need 3"), std::string::npos) << e;
  e = error_of([&] { build::build_plan(g, {}); });
  EXPECT_NE(e.find("body has 2 outputs"), std::string::npos) << e;
}

TEST(ControlFlow, UnsupportedNodeInsideBodyIsNamed) {
  ir::Graph g = loop_graph();
  auto body = std::make_shared<ir::Graph>(*g.nodes[1].attrs.at("body").g);
  body->nodes[0].op_type = "NoSuchOp";
  g.nodes[1].attrs["body"].g = body;
  std::string e = error_of([&] { test_support::engine_for(g); });
  EXPECT_NE(e.find("in subgraph 'loop_body'"), std::string::npos) << e;
  EXPECT_NE(e.find("NoSuchOp"), std::string::npos) << e;
}

// A backend without kernels for control flow (the tests' counting backend, like CUDA) lists the
// node as unsupported, the way it lists any other, and the build fails naming it.
TEST(ControlFlow, BackendWithoutControlFlowKernelsListsTheNode) {
  test_support::register_counting_backend();
  build::BuildOptions o;
  o.backend = test_support::kCountingBackend;
  const std::string e = error_of([&] { build::build_plan(loop_graph(), o); });
  EXPECT_NE(e.find("node 'acc_final_node' (Loop)"), std::string::npos) << e;
  EXPECT_NE(e.find("no kernel on backend 'counting'"), std::string::npos) << e;
}

}  // namespace
