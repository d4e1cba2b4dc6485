// Which forms the CUDA kernels decline at build time, and which they take whatever the shapes.
// The ONNX Attention op's kernel declines head sizes beyond its shared memory and nonpad types it
// does not read (backends/backend.h: ShapeCheckFn): placement, from the shapes the build infers,
// fails naming the node and the reason, or, with --allow-cpu-fallback, runs it on the host.
// reforge::Attention and reforge::Rotary decline nothing: a form outside their fast paths runs the
// unfused ops on the device (ops/reforge/unfused.h), as the CPU's kernels run them on the host,
// so those nodes are placed on the GPU at any shape, symbolic or not, and compute there what the
// CPU computes. Placement needs no GPU; the runs skip without one.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
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

// `g` run on the GPU gives the CPU's outputs (NMSE <= 1e-7): the fused node's fast path or its
// unfused form on the device, against the CPU's kernel. Random inputs of the graph inputs' shapes,
// or `feeds` where given.
void expect_runs_as_on_cpu(const ir::Graph& g, std::map<std::string, Tensor> feeds = {}) {
  if (!test_support::no_gpu().empty()) return;  // placement was checked; the run needs a GPU
  uint32_t seed = 1;
  for (const auto& in : g.inputs) {
    if (feeds.count(in.name)) continue;
    Shape shape;
    for (const auto& d : in.shape) shape.push_back(d.value);
    feeds[in.name] = test_support::random_of(in.dtype, shape, seed++);
  }
  std::vector<Tensor> want, got;
  try {
    want = test_support::engine_for(g).run(feeds);
    got = test_support::engine_for(g, {}, "cuda").run(feeds);
  } catch (const Error& e) {
    FAIL() << g.name << ": " << e.what();
  }
  ASSERT_EQ(got.size(), want.size()) << g.name;
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(got[k].shape(), want[k].shape()) << g.name;
    EXPECT_LE(test_support::nmse(got[k], want[k]), 1e-7) << g.name;
  }
}

// `g` fails on the GPU with the CPU's error (the unfused ops' own, naming the node), given `feeds`.
void expect_fails_as_on_cpu(const ir::Graph& g, const std::map<std::string, Tensor>& feeds, const std::string& part) {
  const std::string cpu = error_of([&] { test_support::engine_for(g).run(feeds); });
  EXPECT_NE(cpu.find(part), std::string::npos) << cpu;
  if (!test_support::no_gpu().empty()) return;
  const std::string gpu = error_of([&] { test_support::engine_for(g, {}, "cuda").run(feeds); });
  EXPECT_EQ(gpu, cpu);
}

std::map<std::string, Tensor> random_feeds(const std::vector<std::pair<std::string, Shape>>& shapes) {
  std::map<std::string, Tensor> f;
  uint32_t seed = 11;
  for (const auto& [name, shape] : shapes) f[name] = test_support::random_of(DType::Float32, shape, seed++);
  return f;
}

std::map<std::string, ir::Attribute> attention_attrs(const std::string& scale_op, const std::string& mask_mode) {
  return {{"scale_op", ir::string_attr("scale_op", scale_op)}, {"mask_mode", ir::string_attr("mask_mode", mask_mode)}};
}

// ---- reforge::Attention ----

// Every form below is placed on the GPU and runs there as on the CPU: the fast path where the
// form is its own, the unfused ops on the device elsewhere.
TEST(CudaDecline, FusedAttentionOfRankFive) {
  REQUIRE_CUDA_BUILD();
  ir::Graph g =
      graph_of("rank5", {make("Y", "Attention", {"Q", "K", "V"}, attention_attrs("none", "none"), "reforge", 1)},
               {data("Q", {2, 1, 2, 3, 8}), data("K", {2, 1, 2, 5, 8}), data("V", {2, 1, 2, 5, 8})}, "Y");
  expect_on_gpu(g, "Attention");
  // The unfused form (K's transpose of four axes) refuses rank 5 on both.
  expect_fails_as_on_cpu(g, random_feeds({{"Q", {2, 1, 2, 3, 8}}, {"K", {2, 1, 2, 5, 8}}, {"V", {2, 1, 2, 5, 8}}}),
                         "perm [0,1,3,2] has 4 entries for an input of rank 5");
  ir::Graph g4 =
      graph_of("rank4", {make("Y", "Attention", {"Q", "K", "V"}, attention_attrs("none", "none"), "reforge", 1)},
               {data("Q", {2, 2, 3, 8}), data("K", {2, 2, 5, 8}), data("V", {2, 2, 5, 8})}, "Y");
  expect_on_gpu(g4, "Attention");
  expect_runs_as_on_cpu(g4);
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
  // A head repeat (2 KV heads to 4 query heads): the fast path.
  expect_on_gpu(repeat_graph("gqa", {1, 2, 2, 4, 8}, {1, 4, 4, 8}, 4), "Attention");
  expect_runs_as_on_cpu(repeat_graph("gqa", {1, 2, 2, 4, 8}, {1, 4, 4, 8}, 4));
  // The same Expand reshaped into twice the keys per head: the unfused ops.
  expect_on_gpu(repeat_graph("keys_repeated", {1, 2, 2, 4, 8}, {1, 2, 8, 8}, 2), "Attention");
  expect_runs_as_on_cpu(repeat_graph("keys_repeated", {1, 2, 2, 4, 8}, {1, 2, 8, 8}, 2));
}

TEST(CudaDecline, FusedAttentionWithRepeatShapesUnknownAtBuildTime) {
  REQUIRE_CUDA_BUILD();
  // The repeat's shapes are graph inputs, read on the host at run time.
  auto g_of = [](const std::string& name, int64_t q_heads) {
    std::vector<In> ins = {data("Q", {1, q_heads, 3, 8}), data("K", {1, 2, 4, 8}), data("V", {1, 2, 4, 8}),
                           data("e", {5}, DType::Int64), data("r", {4}, DType::Int64)};
    return graph_of(name,
                    {make("Y", "Attention", {"Q", "K", "V", "", "", "", "e", "r", "e", "r"},
                          attention_attrs("none", "none"), "reforge", 1)},
                    ins, "Y");
  };
  const ir::Graph g = g_of("runtime_shapes", 4);
  expect_on_gpu(g, "Attention");
  // A head repeat: the fast path.
  expect_runs_as_on_cpu(g, {{"e", i64s({1, 2, 2, 4, 8})}, {"r", i64s({1, 4, 4, 8})}});
  // Twice the keys per head, not a repeat of the heads: the unfused ops.
  expect_runs_as_on_cpu(g_of("runtime_shapes_keys", 2), {{"e", i64s({1, 2, 2, 4, 8})}, {"r", i64s({1, 2, 8, 8})}});
  // A Reshape the unfused ops refuse: its error, on both.
  std::map<std::string, Tensor> bad = random_feeds({{"Q", {1, 4, 3, 8}}, {"K", {1, 2, 4, 8}}, {"V", {1, 2, 4, 8}}});
  bad["e"] = i64s({1, 2, 2, 4, 8});
  bad["r"] = i64s({1, 4, 4, 7});
  expect_fails_as_on_cpu(g, bad, "Reshape");
}

TEST(CudaDecline, FusedAttentionWithAMaskLongerThanTheQueries) {
  REQUIRE_CUDA_BUILD();
  auto g_of = [](const std::string& name, std::vector<int64_t> mask) {
    return graph_of("mask_" + name,
                    {make("Y", "Attention", {"Q", "K", "V", "", "M"}, attention_attrs("none", "add"), "reforge", 1)},
                    {data("Q", {1, 2, 1, 8}), data("K", {1, 2, 6, 8}), data("V", {1, 2, 6, 8}), data("M", mask)}, "Y");
  };
  // One query row, a mask of three rows: the scores broadcast up to three rows, as the CPU's.
  for (const auto& [name, mask] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"longer", {1, 1, 3, 6}}, {"row", {1, 1, 1, 6}}, {"keys_only", {6}}, {"per_head", {1, 2, 3, 6}}}) {
    expect_on_gpu(g_of(name, mask), "Attention");
    expect_runs_as_on_cpu(g_of(name, mask));
  }
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
  expect_on_gpu(g_of("same_symbols", "seq"), "Attention");
  expect_on_gpu(g_of("other_symbol", "rows"), "Attention");
  if (test_support::no_gpu().empty()) {
    auto r = [](Shape s, uint32_t seed) { return test_support::random_of(DType::Float32, s, seed); };
    // rows = seq: the fast path; rows 1: the mask repeats; rows 3 against one query: broadcast.
    expect_runs_as_on_cpu(g_of("other_symbol", "rows"), {{"Q", r({2, 4, 5, 16}, 1)},
                                                         {"K", r({2, 4, 5, 16}, 2)},
                                                         {"V", r({2, 4, 5, 16}, 3)},
                                                         {"M", r({2, 1, 5, 5}, 4)}});
    expect_runs_as_on_cpu(g_of("other_symbol", "rows"), {{"Q", r({2, 4, 1, 16}, 1)},
                                                         {"K", r({2, 4, 1, 16}, 2)},
                                                         {"V", r({2, 4, 1, 16}, 3)},
                                                         {"M", r({2, 1, 3, 1}, 4)}});
  }
  // Rows that do not broadcast: the unfused Add's error, on both.
  expect_fails_as_on_cpu(
      g_of("other_symbol", "rows"),
      random_feeds({{"Q", {2, 4, 5, 16}}, {"K", {2, 4, 5, 16}}, {"V", {2, 4, 5, 16}}, {"M", {2, 1, 3, 5}}}),
      "broadcast");
}

TEST(CudaDecline, FusedAttentionHeadSizesBeyondSharedMemory) {
  REQUIRE_CUDA_BUILD();
  ir::Graph g =
      graph_of("wide_heads", {make("Y", "Attention", {"Q", "K", "V"}, attention_attrs("none", "none"), "reforge", 1)},
               {data("Q", {1, 1, 2, 1024}), data("K", {1, 1, 3, 1024}), data("V", {1, 1, 3, 1024})}, "Y");
  expect_on_gpu(g, "Attention");
  expect_runs_as_on_cpu(g);
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
  // cos/sin with a batch of 2 for X of batch 1: X broadcasts up to them, as on the CPU.
  for (const ir::Graph& g : {rotary_graph("tables_wider", dims_of({1, 2, 5, 8}), dims_of({2, 1, 5, 8})),
                             rotary_graph("tables_narrower", dims_of({2, 2, 5, 8}), dims_of({1, 1, 5, 8})),
                             rotary_graph("one_position", dims_of({1, 2, 1, 8}), dims_of({1, 1, 5, 8})),
                             rotary_graph("one_feature", dims_of({1, 2, 5, 8}), dims_of({5, 1}))}) {
    expect_on_gpu(g, "Rotary");
    expect_runs_as_on_cpu(g);
  }
  // Symbolic: the tables' sequence is X's by name, or another symbol.
  expect_on_gpu(rotary_graph("symbolic_same", {sym("batch"), fixed(2), sym("seq"), fixed(8)},
                             {fixed(1), fixed(1), sym("seq"), fixed(8)}),
                "Rotary");
  const ir::Graph other = rotary_graph("symbolic_other", {sym("batch"), fixed(2), sym("seq"), fixed(8)},
                                       {fixed(1), fixed(1), sym("len"), fixed(8)});
  expect_on_gpu(other, "Rotary");
  if (test_support::no_gpu().empty()) {
    auto r = [](Shape s, uint32_t seed) { return test_support::random_of(DType::Float32, s, seed); };
    expect_runs_as_on_cpu(other, {{"X", r({2, 2, 5, 8}, 1)}, {"cos", r({1, 1, 5, 8}, 2)}, {"sin", r({1, 1, 5, 8}, 3)}});
  }
  expect_fails_as_on_cpu(other, random_feeds({{"X", {2, 2, 5, 8}}, {"cos", {1, 1, 4, 8}}, {"sin", {1, 1, 4, 8}}}),
                         "broadcast");
}

TEST(CudaDecline, FusedRotaryHalvesThatDoNotSpanTheHeadSize) {
  REQUIRE_CUDA_BUILD();
  // hi = [7, 8), lo = [0, 0): one feature, broadcast over sin's 8: the unfused ops.
  const ir::Graph g = rotary_graph("short_halves", dims_of({1, 2, 5, 8}), dims_of({5, 8}), {7, 8, 0, 0});
  expect_on_gpu(g, "Rotary");
  expect_runs_as_on_cpu(g);
}

TEST(CudaDecline, FusedRotaryOfRankFive) {
  REQUIRE_CUDA_BUILD();
  const ir::Graph g = rotary_graph("rank5", dims_of({1, 1, 2, 5, 8}), dims_of({5, 8}));
  expect_on_gpu(g, "Rotary");
  expect_runs_as_on_cpu(g);
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

// A node the CUDA backend declines in the model itself: the build fails naming it, or runs it on
// the host.
TEST(CudaDecline, TheBuildFailsNamingTheNodeOrRunsItOnTheHost) {
  REQUIRE_CUDA_BUILD();
  const ir::Graph g =
      graph_of("onnx_wide", {make("Y", "Attention", {"Q", "K", "V"}, {}, "", 23)},
               {data("Q", {1, 1, 2, 2048}), data("K", {1, 1, 3, 2048}), data("V", {1, 1, 3, 2048})}, "Y");
  build::BuildOptions o;
  o.backend = "cuda";
  const std::string err = error_of([&] { build::build_plan(g, o); });
  EXPECT_NE(err.find("1 of 1 node(s) of model 'onnx_wide' cannot run on backend 'cuda'"), std::string::npos) << err;
  EXPECT_NE(err.find("node 'Y' (Attention)"), std::string::npos) << err;
  EXPECT_NE(err.find("head sizes 2048 (Q/K) and 2048 (V) exceed"), std::string::npos) << err;
  EXPECT_NE(err.find("--allow-cpu-fallback"), std::string::npos) << err;
  o.host_fallback = true;
  const plan::Plan p = build::build_plan(g, o);
  EXPECT_EQ(count_op(p, "Attention", "cpu"), 1u);
  EXPECT_EQ(count_op(p, "Attention", "cuda"), 0u);
}

// fuse-rotary makes a reforge::Rotary for CUDA wherever it makes one for the CPU: the CUDA kernel
// takes every form (X broadcast up to wider tables too), and no unfused op is left.
TEST(CudaDecline, FusionsAreMadeForTheGpuAsForTheCpu) {
  REQUIRE_CUDA_BUILD();
  build::BuildOptions o;
  o.backend = "cuda";
  for (const auto& table : std::vector<std::vector<int64_t>>{{1, 1, 5, 8}, {2, 1, 5, 8}}) {
    const ir::Graph g = rotary_pattern("rope", table);
    const plan::Plan fused = build::build_plan(g, o);
    EXPECT_EQ(count_op(fused, "Rotary", "cuda"), 1u) << shape_str(table);
    EXPECT_EQ(count_op(fused, "Concat", "cuda") + count_op(fused, "Neg", "cuda"), 0u) << shape_str(table);
    build::BuildOptions cpu;
    EXPECT_EQ(count_op(build::build_plan(g, cpu), "Rotary", "cpu"), 1u);
  }
}

// Every bundled Llama export, static or dynamic in shape, builds for the GPU with attention and
// rotary fused as for the CPU and every node there; the host runs only shape computation, none of
// it reading a value the device made (a ToHost read by a node would make the run's host steps
// depend on device values, which a recorded replay cannot serve from the shape memo).
TEST(CudaDecline, BundledLlamaExportsRunEveryNodeOnTheGpu) {
  REQUIRE_CUDA_BUILD();
  const std::filesystem::path models = std::filesystem::path(REFORGE_SOURCE_DIR) / "models";
  if (!std::filesystem::exists(models / "llama" / "dynamo" / "A" / "model.onnx"))
    GTEST_SKIP() << "models/llama not present";
  for (const char* m : {"llama/dynamo", "llama/torch113_fold_dynamic", "llama/torch113_fold_static",
                        "llama/torch113_nofold_dynamic", "llama/torch113_nofold_static", "hf/llama"}) {
    const std::string path = (models / m / "A" / "model.onnx").string();
    if (!std::filesystem::exists(path)) continue;
    build::BuildOptions o;
    o.backend = "cuda";
    const plan::Plan p = build::build_plan(onnx::import_model_file(path), o);
    const plan::Plan cpu = build::build_plan(onnx::import_model_file(path), {});
    EXPECT_EQ(count_op(p, "Attention", "cuda"), count_op(cpu, "Attention", "cpu")) << m;
    EXPECT_EQ(count_op(p, "Rotary", "cuda"), count_op(cpu, "Rotary", "cpu")) << m;
    EXPECT_EQ(count_op(p, "Attention", "cuda"), 2u) << m;
    EXPECT_EQ(count_op(p, "Rotary", "cuda"), 4u) << m;
    EXPECT_EQ(count_op(p, "Softmax", "cuda"), 0u) << m;
    std::set<std::string> from_device;
    for (const auto& n : p.graph.nodes)
      if (n.op_type == "ToHost") from_device.insert(n.outputs[0]);
    const auto where = plan::node_backends(p);
    for (size_t i = 0; i < p.graph.nodes.size(); ++i) {
      if (where[i] == "cuda") continue;
      for (const auto& in : p.graph.nodes[i].inputs)
        EXPECT_FALSE(from_device.count(in)) << m << ": " << p.graph.nodes[i].label() << " reads " << in;
    }
  }
}

}  // namespace
