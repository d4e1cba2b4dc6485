// Build-time declines of the CUDA kernels' shape checks (backends/backend.h: ShapeCheckFn): a form
// of reforge::Attention, reforge::Rotary or the ONNX Attention op that the CUDA kernel refuses at
// run time is declined at placement, from the shapes the build infers, so that the build fails
// naming the node and the reason, or, with --allow-cpu-fallback, runs that node on the host. A
// symbolic size the check cannot prove supported is declined too. Supported forms, static and
// symbolic, stay on the GPU. Placement needs no GPU: these tests run wherever reforge is built
// with CUDA.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "backends/placement.h"
#include "builder/builder.h"
#include "onnx/importer.h"
#include "plan/plan.h"
#include "support/cuda_compare.h"
#include "support/engine_checks.h"
#include "support/make_tensor.h"

using namespace reforge;

namespace {

using test_support::error_of;

// An input of the test graph: a graph input of `dims` ("" symbols: fixed sizes; a symbol name:
// that symbolic dimension), or a constant when `value` is defined.
struct In {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<ir::Dim> dims;
  Tensor value;
};

ir::Dim fixed(int64_t v) { return ir::Dim{v, ""}; }
ir::Dim sym(const std::string& s) { return ir::Dim{-1, s}; }
std::vector<ir::Dim> dims_of(std::vector<int64_t> v) {
  std::vector<ir::Dim> d;
  for (int64_t x : v) d.push_back(fixed(x));
  return d;
}
In data(const std::string& name, std::vector<int64_t> dims, DType t = DType::Float32) {
  return {name, t, dims_of(std::move(dims)), Tensor()};
}
In constant(const std::string& name, Tensor v) { return {name, v.dtype(), {}, v}; }
Tensor i64s(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return test_support::make<int64_t>({n}, std::move(v));
}

ir::Node make(const std::string& out, const std::string& op, std::vector<std::string> ins,
              std::map<std::string, ir::Attribute> attrs = {}, const std::string& domain = "", int opset = 18) {
  ir::Node n;
  n.name = out;
  n.op_type = op;
  n.domain = domain;
  n.opset = opset;
  n.inputs = std::move(ins);
  n.outputs = {out};
  n.attrs = std::move(attrs);
  return n;
}

ir::Graph graph_of(const std::string& name, std::vector<ir::Node> nodes, const std::vector<In>& ins,
                   const std::string& out) {
  ir::Graph g;
  g.name = name;
  g.ir_version = 10;
  g.opsets[""] = 23;
  g.opsets["reforge"] = 1;
  for (const auto& i : ins) {
    if (i.value.defined()) {
      g.initializers[i.name] = i.value;
      continue;
    }
    ir::ValueInfo v;
    v.name = i.name;
    v.dtype = i.dtype;
    v.has_shape = true;
    v.shape = i.dims;
    g.inputs.push_back(v);
  }
  g.nodes = std::move(nodes);
  ir::ValueInfo o;
  o.name = out;
  g.outputs = {o};
  return g;
}

// The error placing `g` for cuda without fallback ("" when it places).
std::string cuda_placement_error(const ir::Graph& g) {
  return error_of([&] {
    ir::Graph copy = g;
    backends::place_graph(copy, {"cuda", false, "model '" + g.name + "'"});
  });
}

// Where the node of type `op` runs when `g` is placed for cuda, with or without fallback.
std::string placed_on(const ir::Graph& g, const std::string& op, bool fallback) {
  ir::Graph copy = g;
  const backends::PlaceResult r = backends::place_graph(copy, {"cuda", fallback, ""});
  for (size_t i = 0; i < copy.nodes.size(); ++i)
    if (copy.nodes[i].op_type == op) return r.node_backend[i];
  return "(no " + op + " node)";
}

// The node is declined with `reason`: placement without fallback fails naming it and the reason;
// with fallback it runs on the host.
void expect_declined(const ir::Graph& g, const std::string& op, const std::string& reason) {
  const std::string err = cuda_placement_error(g);
  EXPECT_NE(err.find("model '" + g.name + "' cannot run on backend 'cuda'"), std::string::npos) << err;
  const std::string domain = g.nodes.back().domain;
  EXPECT_NE(err.find("node '" + g.nodes.back().name + "' (" + (domain.empty() ? "" : domain + "::") + op + ")"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find(reason), std::string::npos) << err;
  EXPECT_EQ(placed_on(g, op, true), "cpu") << g.name;
}

void expect_on_gpu(const ir::Graph& g, const std::string& op) {
  EXPECT_EQ(cuda_placement_error(g), "") << g.name;
  EXPECT_EQ(placed_on(g, op, false), "cuda") << g.name;
}

std::map<std::string, ir::Attribute> attention_attrs(const std::string& scale_op, const std::string& mask_mode) {
  return {{"scale_op", ir::string_attr("scale_op", scale_op)}, {"mask_mode", ir::string_attr("mask_mode", mask_mode)}};
}

// ---- reforge::Attention ----

TEST(CudaDecline, FusedAttentionOfRankFive) {
  REQUIRE_CUDA_BUILD();
  ir::Graph g =
      graph_of("rank5", {make("Y", "Attention", {"Q", "K", "V"}, attention_attrs("none", "none"), "reforge", 1)},
               {data("Q", {2, 1, 2, 3, 8}), data("K", {2, 1, 2, 5, 8}), data("V", {2, 1, 2, 5, 8})}, "Y");
  expect_declined(g, "Attention", "Q float32[2,1,2,3,8] must be 4-D (2-D or 3-D only in layout bhsd/bhds)");
  // The same node of rank 4 runs on the GPU.
  expect_on_gpu(
      graph_of("rank4", {make("Y", "Attention", {"Q", "K", "V"}, attention_attrs("none", "none"), "reforge", 1)},
               {data("Q", {2, 2, 3, 8}), data("K", {2, 2, 5, 8}), data("V", {2, 2, 5, 8})}, "Y"),
      "Attention");
}

// K [1, 2, 4, 8] repeated through Unsqueeze(2) -> Expand(e) -> Reshape(r).
ir::Graph repeat_graph(const std::string& name, std::vector<int64_t> expand, std::vector<int64_t> reshape,
                       int64_t q_heads) {
  std::vector<In> ins = {data("Q", {1, q_heads, 3, 8}), data("K", {1, 2, 4, 8}), data("V", {1, 2, 4, 8}),
                         constant("e", i64s(expand)), constant("r", i64s(reshape))};
  return graph_of(name,
                  {make("Y", "Attention", {"Q", "K", "V", "", "", "", "e", "r", "e", "r"},
                        attention_attrs("none", "none"), "reforge", 1)},
                  ins, "Y");
}

TEST(CudaDecline, FusedAttentionWithAnExpandThatIsNotAHeadRepeat) {
  REQUIRE_CUDA_BUILD();
  // A head repeat (2 KV heads to 4 query heads) runs on the GPU.
  expect_on_gpu(repeat_graph("gqa", {1, 2, 2, 4, 8}, {1, 4, 4, 8}, 4), "Attention");
  // The same Expand reshaped into twice the keys per head: the CPU computes it, the kernel cannot.
  expect_declined(repeat_graph("keys_repeated", {1, 2, 2, 4, 8}, {1, 2, 8, 8}, 2), "Attention",
                  "is not provably a repeat of their heads to Q's 2");
}

TEST(CudaDecline, FusedAttentionWithRepeatShapesUnknownAtBuildTime) {
  REQUIRE_CUDA_BUILD();
  // The repeat's shapes are graph inputs: their values are unknown, so the repeat is unproven.
  std::vector<In> ins = {data("Q", {1, 4, 3, 8}), data("K", {1, 2, 4, 8}), data("V", {1, 2, 4, 8}),
                         data("e", {5}, DType::Int64), data("r", {4}, DType::Int64)};
  ir::Graph g = graph_of("runtime_shapes",
                         {make("Y", "Attention", {"Q", "K", "V", "", "", "", "e", "r", "e", "r"},
                               attention_attrs("none", "none"), "reforge", 1)},
                         ins, "Y");
  expect_declined(g, "Attention", "(the Expand/Reshape of K or V) is not known at build time");
}

TEST(CudaDecline, FusedAttentionWithAMaskLongerThanTheQueries) {
  REQUIRE_CUDA_BUILD();
  auto g_of = [](const std::string& name, std::vector<int64_t> mask) {
    return graph_of("mask_" + name,
                    {make("Y", "Attention", {"Q", "K", "V", "", "M"}, attention_attrs("none", "add"), "reforge", 1)},
                    {data("Q", {1, 2, 1, 8}), data("K", {1, 2, 6, 8}), data("V", {1, 2, 6, 8}), data("M", mask)}, "Y");
  };
  // One query row, a mask of three rows: the CPU broadcasts the scores up to three rows.
  expect_declined(g_of("longer", {1, 1, 3, 6}), "Attention", "does not provably broadcast to the scores' rows 1");
  expect_on_gpu(g_of("row", {1, 1, 1, 6}), "Attention");
  expect_on_gpu(g_of("keys_only", {6}), "Attention");
}

TEST(CudaDecline, FusedAttentionWithSymbolicSizes) {
  REQUIRE_CUDA_BUILD();
  auto g_of = [](const std::string& name, const std::string& mask_rows) {
    In q{"Q", DType::Float32, {sym("batch"), fixed(4), sym("seq"), fixed(16)}, Tensor()};
    In k{"K", DType::Float32, {sym("batch"), fixed(4), sym("seq"), fixed(16)}, Tensor()};
    In v{"V", DType::Float32, {sym("batch"), fixed(4), sym("seq"), fixed(16)}, Tensor()};
    In m{"M", DType::Float32, {sym("batch"), fixed(1), sym(mask_rows), sym("seq")}, Tensor()};
    return graph_of(name,
                    {make("Y", "Attention", {"Q", "K", "V", "", "M"}, attention_attrs("none", "add"), "reforge", 1)},
                    {q, k, v, m}, "Y");
  };
  // The mask's rows are Q's by name: supported whatever the sizes.
  expect_on_gpu(g_of("same_symbols", "seq"), "Attention");
  // Another symbol may be longer than Q at run time: declined (never guessed).
  expect_declined(g_of("other_symbol", "rows"), "Attention", "does not provably broadcast to the scores' rows seq");
}

TEST(CudaDecline, FusedAttentionHeadSizesBeyondSharedMemory) {
  REQUIRE_CUDA_BUILD();
  ir::Graph g =
      graph_of("wide_heads", {make("Y", "Attention", {"Q", "K", "V"}, attention_attrs("none", "none"), "reforge", 1)},
               {data("Q", {1, 1, 2, 1024}), data("K", {1, 1, 3, 1024}), data("V", {1, 1, 3, 1024})}, "Y");
  expect_declined(g, "Attention",
                  "head sizes 1024 (Q/K) and 1024 (V) exceed the CUDA attention kernel's shared memory");
}

// ---- ONNX Attention ----

TEST(CudaDecline, OnnxAttentionHeadSizesAndNonpadType) {
  REQUIRE_CUDA_BUILD();
  ir::Graph wide = graph_of("onnx_wide", {make("Y", "Attention", {"Q", "K", "V"}, {}, "", 23)},
                            {data("Q", {1, 1, 2, 2048}), data("K", {1, 1, 3, 2048}), data("V", {1, 1, 3, 2048})}, "Y");
  expect_declined(wide, "Attention", "head sizes 2048 (Q/K) and 2048 (V) exceed the CUDA attention kernel's shared");
  // 3-D: the head sizes are hidden / heads.
  ir::Graph wide3 = graph_of(
      "onnx_wide3d",
      {make("Y", "Attention", {"Q", "K", "V"},
            {{"q_num_heads", ir::int_attr("q_num_heads", 2)}, {"kv_num_heads", ir::int_attr("kv_num_heads", 2)}}, "",
            23)},
      {data("Q", {1, 2, 4096}), data("K", {1, 3, 4096}), data("V", {1, 3, 4096})}, "Y");
  expect_declined(wide3, "Attention", "head sizes 2048 (Q/K) and 2048 (V) exceed");
  auto nonpad = [](const std::string& name, DType t) {
    return graph_of(name, {make("Y", "Attention", {"Q", "K", "V", "", "", "", "n"}, {}, "", 24)},
                    {data("Q", {2, 2, 3, 8}), data("K", {2, 2, 5, 8}), data("V", {2, 2, 5, 8}), data("n", {2}, t)},
                    "Y");
  };
  expect_declined(nonpad("nonpad_u8", DType::UInt8), "Attention",
                  "nonpad_kv_seqlen of type uint8 is not supported on the CUDA backend (int32, int64)");
  expect_on_gpu(nonpad("nonpad_i32", DType::Int32), "Attention");
  expect_on_gpu(nonpad("nonpad_i64", DType::Int64), "Attention");
}

// ---- reforge::Rotary ----

ir::Graph rotary_graph(const std::string& name, std::vector<ir::Dim> x, std::vector<ir::Dim> table,
                       std::vector<int64_t> bounds = {4, int64_t{1} << 62, 0, 4}) {
  std::vector<In> ins = {{"X", DType::Float32, std::move(x), Tensor()},
                         {"cos", DType::Float32, table, Tensor()},
                         {"sin", DType::Float32, table, Tensor()},
                         constant("hs", i64s({bounds[0]})),
                         constant("he", i64s({bounds[1]})),
                         constant("ls", i64s({bounds[2]})),
                         constant("le", i64s({bounds[3]}))};
  return graph_of(name,
                  {make("Y", "Rotary", {"X", "cos", "sin", "hs", "he", "ls", "le"},
                        {{"layout", ir::string_attr("layout", "bhsd")}}, "reforge", 1)},
                  ins, "Y");
}

TEST(CudaDecline, FusedRotaryTablesThatBroadcastX) {
  REQUIRE_CUDA_BUILD();
  // cos/sin with a batch of 2 for X of batch 1: the CPU broadcasts X up to them.
  expect_declined(rotary_graph("tables_wider", dims_of({1, 2, 5, 8}), dims_of({2, 1, 5, 8})), "Rotary",
                  "cos float32[2,1,5,8] does not provably broadcast to [1,2,5,8] with last dimension 8");
  expect_on_gpu(rotary_graph("tables_narrower", dims_of({2, 2, 5, 8}), dims_of({1, 1, 5, 8})), "Rotary");
  // Symbolic: the tables' sequence is X's by name, or another symbol.
  expect_on_gpu(rotary_graph("symbolic_same", {sym("batch"), fixed(2), sym("seq"), fixed(8)},
                             {fixed(1), fixed(1), sym("seq"), fixed(8)}),
                "Rotary");
  expect_declined(rotary_graph("symbolic_other", {sym("batch"), fixed(2), sym("seq"), fixed(8)},
                               {fixed(1), fixed(1), sym("len"), fixed(8)}),
                  "Rotary", "does not provably broadcast to [batch,2,seq,8]");
}

TEST(CudaDecline, FusedRotaryHalvesThatDoNotSpanTheHeadSize) {
  REQUIRE_CUDA_BUILD();
  // hi = [7, 8), lo = [0, 0): one feature, which the CPU broadcasts over sin's 8; the kernel
  // rotates whole heads only.
  expect_declined(rotary_graph("short_halves", dims_of({1, 2, 5, 8}), dims_of({5, 8}), {7, 8, 0, 0}), "Rotary",
                  "the rotated halves have 1 and 0 features, not together the head size 8");
}

TEST(CudaDecline, FusedRotaryOfRankFive) {
  REQUIRE_CUDA_BUILD();
  expect_declined(rotary_graph("rank5", dims_of({1, 1, 2, 5, 8}), dims_of({5, 8})), "Rotary",
                  "the CUDA kernel takes a float X, 4-D (1-D to 3-D in layout bhsd)");
}

// Bounds computed from X's shape (as dynamic-shape exports do) are shape computation: they run on
// the host and reach the kernel without a transfer; with X's head size static, inference knows
// their values and the kernel is proven to take them.
TEST(CudaDecline, FusedRotaryBoundsComputedFromTheShapeStayOnTheHost) {
  REQUIRE_CUDA_BUILD();
  std::vector<In> ins = {{"X", DType::Float32, {sym("batch"), fixed(2), sym("seq"), fixed(8)}, Tensor()},
                         {"cos", DType::Float32, {sym("seq"), fixed(8)}, Tensor()},
                         {"sin", DType::Float32, {sym("seq"), fixed(8)}, Tensor()},
                         constant("three", i64s({3})),
                         constant("two", i64s({2})),
                         constant("zero", i64s({0})),
                         constant("big", i64s({int64_t{1} << 62}))};
  ir::Graph g = graph_of(
      "computed_bounds",
      {make("shape", "Shape", {"X"}), make("d", "Gather", {"shape", "three"}), make("half", "Div", {"d", "two"}),
       make("Y", "Rotary", {"X", "cos", "sin", "half", "big", "zero", "half"},
            {{"layout", ir::string_attr("layout", "bhsd")}}, "reforge", 1)},
      ins, "Y");
  ir::Graph placed = g;
  const backends::PlaceResult r = backends::place_graph(placed, {"cuda", false, ""});
  std::map<std::string, std::string> where;
  for (size_t i = 0; i < placed.nodes.size(); ++i) where[placed.nodes[i].outputs[0]] = r.node_backend[i];
  EXPECT_EQ(where.at("shape"), "cpu");
  EXPECT_EQ(where.at("d"), "cpu");
  EXPECT_EQ(where.at("half"), "cpu");
  EXPECT_EQ(r.shape_nodes_on_host, 3u);
  EXPECT_EQ(r.fallback_nodes, 0u);
  // X, cos and sin go to the device and Y comes back; the bounds do not move.
  EXPECT_EQ(r.transfers, 4u);
  for (const auto& n : placed.nodes) {
    if (n.op_type == "Rotary") {
      EXPECT_EQ(where.at(n.outputs[0]), "cuda");
    }
  }
}

// ---- through the builder ----

// x * cos + concat(-x[..., 4:], x[..., :4]) * sin, which fuse-rotary turns into reforge::Rotary.
ir::Graph rotary_pattern(const std::string& name, std::vector<int64_t> table) {
  std::vector<In> ins = {data("X", {1, 2, 5, 8}),
                         data("cos", table),
                         data("sin", table),
                         constant("h", i64s({4})),
                         constant("end", i64s({1 << 30})),
                         constant("zero", i64s({0})),
                         constant("axis", i64s({-1}))};
  return graph_of(
      name,
      {make("hi", "Slice", {"X", "h", "end", "axis"}), make("lo", "Slice", {"X", "zero", "h", "axis"}),
       make("neg", "Neg", {"hi"}), make("cat", "Concat", {"neg", "lo"}, {{"axis", ir::int_attr("axis", -1)}}),
       make("ms", "Mul", {"cat", "sin"}), make("mc", "Mul", {"X", "cos"}), make("Y", "Add", {"mc", "ms"})},
      ins, "Y");
}

size_t count_op(const plan::Plan& p, const std::string& op, const std::string& backend) {
  const auto where = plan::node_backends(p);
  size_t n = 0;
  for (size_t i = 0; i < p.graph.nodes.size(); ++i)
    if (p.graph.nodes[i].op_type == op && where[i] == backend) ++n;
  return n;
}

// A reforge::Rotary node in the model itself: the build fails naming it, or runs it on the host.
TEST(CudaDecline, TheBuildFailsNamingTheNodeOrRunsItOnTheHost) {
  REQUIRE_CUDA_BUILD();
  const ir::Graph g = rotary_graph("rope_node", dims_of({1, 2, 5, 8}), dims_of({2, 1, 5, 8}));
  build::BuildOptions o;
  o.backend = "cuda";
  const std::string err = error_of([&] { build::build_plan(g, o); });
  EXPECT_NE(err.find("1 of 1 node(s) of model 'rope_node' cannot run on backend 'cuda'"), std::string::npos) << err;
  EXPECT_NE(err.find("node 'Y' (reforge::Rotary)"), std::string::npos) << err;
  EXPECT_NE(err.find("cos float32[2,1,5,8] does not provably broadcast"), std::string::npos) << err;
  EXPECT_NE(err.find("--allow-cpu-fallback"), std::string::npos) << err;
  o.host_fallback = true;
  const plan::Plan p = build::build_plan(g, o);
  EXPECT_EQ(count_op(p, "Rotary", "cpu"), 1u);
  EXPECT_EQ(count_op(p, "Rotary", "cuda"), 0u);
}

// fuse-rotary makes a reforge::Rotary only where the CUDA kernel takes it; elsewhere the unfused
// ops stay, every one of them on the GPU.
TEST(CudaDecline, AFusionTheKernelWouldDeclineIsNotMade) {
  REQUIRE_CUDA_BUILD();
  build::BuildOptions o;
  o.backend = "cuda";
  const plan::Plan fused = build::build_plan(rotary_pattern("rope", {1, 1, 5, 8}), o);
  EXPECT_EQ(count_op(fused, "Rotary", "cuda"), 1u);
  EXPECT_EQ(count_op(fused, "Concat", "cuda"), 0u);
  const plan::Plan wide = build::build_plan(rotary_pattern("rope_wide", {2, 1, 5, 8}), o);
  EXPECT_EQ(count_op(wide, "Rotary", "cuda") + count_op(wide, "Rotary", "cpu"), 0u);
  EXPECT_EQ(count_op(wide, "Concat", "cuda"), 1u);
  EXPECT_EQ(count_op(wide, "Neg", "cuda"), 1u);
  for (const auto& b : plan::node_backends(wide)) EXPECT_EQ(b, "cuda");
  // The CPU's kernel takes every form: the CPU build fuses both.
  build::BuildOptions cpu;
  EXPECT_EQ(count_op(build::build_plan(rotary_pattern("rope_wide_cpu", {2, 1, 5, 8}), cpu), "Rotary", "cpu"), 1u);
}

// The bundled Llama exports build for the GPU with every node there: the static-shape export
// with attention and rotary fused (their forms proven), the dynamic-shape one with them unfused
// (inference gives the sliced cos/sin tables a size of their own, which the checks cannot relate
// to the sequence length).
TEST(CudaDecline, BundledLlamaExportsRunEveryNodeOnTheGpu) {
  REQUIRE_CUDA_BUILD();
  const std::filesystem::path llama = std::filesystem::path(REFORGE_SOURCE_DIR) / "models" / "llama";
  if (!std::filesystem::exists(llama / "dynamo" / "A" / "model.onnx")) GTEST_SKIP() << "models/llama not present";
  build::BuildOptions o;
  o.backend = "cuda";
  const plan::Plan fixed =
      build::build_plan(onnx::import_model_file((llama / "torch113_fold_static" / "A" / "model.onnx").string()), o);
  EXPECT_EQ(count_op(fixed, "Attention", "cuda"), 2u);
  EXPECT_EQ(count_op(fixed, "Rotary", "cuda"), 4u);
  EXPECT_EQ(count_op(fixed, "Attention", "cpu") + count_op(fixed, "Rotary", "cpu"), 0u);
  // Without fallback, a node placement declined would fail the build.
  const plan::Plan dynamic =
      build::build_plan(onnx::import_model_file((llama / "dynamo" / "A" / "model.onnx").string()), o);
  EXPECT_EQ(count_op(dynamic, "Attention", "cpu") + count_op(dynamic, "Rotary", "cpu"), 0u);
  EXPECT_EQ(count_op(dynamic, "Attention", "cuda") + count_op(dynamic, "Softmax", "cuda"), 2u);
}

}  // namespace
