// Activation arena (runtime/arena.h): the offset planner; plans made from inferred shapes (the
// first run of a signature already uses its arena, sized as derived by hand; data-dependent sizes
// go to the heap; steady runs allocate no activation memory); and engines with the arena against
// the same engines without it — bit for bit, across input shapes, with outputs held across runs,
// with aliasing views that outlive their source, and with concurrent runs.
#include "runtime/arena.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "core/npy.h"
#include "onnx/importer.h"
#include "runtime/engine.h"
#include "support/engine_for.h"
#include "support/make_tensor.h"
#include "support/same_bits.h"

using namespace reforge;
using test_support::same_bits;
namespace fs = std::filesystem;

namespace {

const fs::path kModels = fs::path(REFORGE_SOURCE_DIR) / "models";

TEST(ArenaPlanner, OverlappingLifetimesNeverShareBytes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<runtime::arena::Block> blocks;
    size_t sum = 0;
    for (int i = 0; i < 40; ++i) {
      size_t first = rng() % 30, len = rng() % 8;
      size_t bytes = rng() % 5000;
      blocks.push_back({bytes, first, first + len});
      sum += (bytes + 63) / 64 * 64 + 64;
    }
    std::vector<size_t> off;
    size_t total = runtime::arena::assign_offsets(blocks, off);
    EXPECT_LE(total, sum);
    for (size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_EQ(off[i] % 64, 0u);
      EXPECT_LE(off[i] + blocks[i].bytes, total);
      for (size_t j = i + 1; j < blocks.size(); ++j) {
        bool live_together = blocks[i].first <= blocks[j].last && blocks[j].first <= blocks[i].last;
        bool overlap = off[i] < off[j] + std::max<size_t>(blocks[j].bytes, 1) &&
                       off[j] < off[i] + std::max<size_t>(blocks[i].bytes, 1);
        EXPECT_FALSE(live_together && overlap) << "blocks " << i << " and " << j;
      }
    }
  }
}

TEST(ArenaPlanner, ReusesMemoryOfDeadValues) {
  // A chain: each value dies when the next is made, so two slots suffice.
  std::vector<runtime::arena::Block> chain;
  for (size_t s = 0; s < 10; ++s) chain.push_back({1024, s, s + 1});
  std::vector<size_t> off;
  EXPECT_EQ(runtime::arena::assign_offsets(chain, off), 2048u);
}

// The device arena's slots: 256-byte aligned offsets and reserved sizes, and never shared by
// values alive together.
TEST(ArenaPlanner, DeviceSlotsAre256ByteAligned) {
  std::mt19937 rng(11);
  std::vector<runtime::arena::Block> blocks;
  for (int i = 0; i < 30; ++i) {
    size_t first = rng() % 20;
    blocks.push_back({rng() % 3000, first, first + rng() % 6});
  }
  std::vector<size_t> off;
  const size_t total = runtime::arena::assign_offsets(blocks, off, runtime::arena::kDeviceAlign);
  EXPECT_EQ(total % 256, 0u);
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(off[i] % 256, 0u);
    const size_t end_i = off[i] + (std::max<size_t>(blocks[i].bytes, 1) + 255) / 256 * 256;
    EXPECT_LE(end_i, total);
    for (size_t j = i + 1; j < blocks.size(); ++j) {
      const size_t end_j = off[j] + (std::max<size_t>(blocks[j].bytes, 1) + 255) / 256 * 256;
      bool live_together = blocks[i].first <= blocks[j].last && blocks[j].first <= blocks[i].last;
      EXPECT_FALSE(live_together && off[i] < end_j && off[j] < end_i) << "blocks " << i << " and " << j;
    }
  }
  // A chain of 100-byte values: two slots of 256 bytes (of 64 on the host).
  std::vector<runtime::arena::Block> chain;
  for (size_t s = 0; s < 6; ++s) chain.push_back({100, s, s + 1});
  EXPECT_EQ(runtime::arena::assign_offsets(chain, off, runtime::arena::kDeviceAlign), 512u);
  EXPECT_EQ(runtime::arena::assign_offsets(chain, off), 256u);
}

// The device arena's plan of a chain of steps x -> ToDevice -> a -> b -> c -> ToHost (step
// outputs 0..4 of steps 0..4, each read by the next step): the values returned in device memory
// leave the run; the host arena's lifetimes are those given.
TEST(ArenaPlanner, DeviceLifetimes) {
  using runtime::arena::kEscapes;
  const runtime::arena::LastUse last_use = {{1}, {2}, {3}, {4}, {kEscapes}};
  runtime::arena::Sizes sizes = {{1000}, {1000}, {1000}, {1000}, {std::nullopt}};  // the ToHost's: host memory
  const std::vector<std::vector<bool>> leaving = {{false}, {false}, {false}, {true}, {false}};
  const runtime::arena::Observed::Known none{};

  const runtime::arena::LastUse plain = runtime::arena::device_last_use(last_use, {});
  EXPECT_EQ(plain, last_use);
  auto p = runtime::arena::make_plan(sizes, plain, none, runtime::arena::kDeviceAlign);
  EXPECT_EQ(p->align, 256u);
  EXPECT_EQ(p->value.size(), 4u);
  EXPECT_EQ(p->total_bytes, 2 * 1024u);                     // two alive at a time, each 1000 bytes in 1024
  EXPECT_EQ(p->slot[4][0], runtime::arena::Plan::kLeaves);  // the graph output

  // c is returned in device memory (the ToHost is skipped): it leaves the run, off the arena.
  const runtime::arena::LastUse out = runtime::arena::device_last_use(last_use, leaving);
  EXPECT_EQ(out[3][0], kEscapes);
  EXPECT_EQ(out[2][0], 3u);
  p = runtime::arena::make_plan(sizes, out, none, runtime::arena::kDeviceAlign);
  EXPECT_EQ(p->slot[3][0], runtime::arena::Plan::kLeaves);
  EXPECT_EQ(p->value.size(), 3u);
  EXPECT_EQ(p->total_bytes, 2 * 1024u);
}

// An engine with every node on the host has no device arena: its stats' device part is zero.
TEST(ArenaEngine, HostEnginesHaveNoDeviceArena) {
  ir::Graph g;
  g.opsets[""] = 17;
  g.inputs.push_back({"x", DType::Float32, true, {ir::Dim{4}, ir::Dim{8}}});
  ir::Node relu;
  relu.name = relu.op_type = "Relu";
  relu.opset = 17;
  relu.inputs = {"x"};
  relu.outputs = {"r"};
  ir::Node neg = relu;
  neg.name = neg.op_type = "Neg";
  neg.inputs = {"r"};
  neg.outputs = {"y"};
  g.nodes = {relu, neg};
  g.outputs.push_back({"y", DType::Float32, false, {}});
  runtime::Engine e = test_support::engine_for(g);
  e.run({{"x", test_support::random_floats({4, 8}, 3)}});
  const runtime::ArenaStats st = e.arena_stats();
  EXPECT_EQ(st.arena_allocations, 1u);  // r
  EXPECT_EQ(st.device.arena_bytes, 0u);
  EXPECT_EQ(st.device.planned_values, 0u);
  EXPECT_EQ(st.device.arena_allocations, 0u);
  EXPECT_EQ(st.device.backend_allocations, 0u);
}

// The dynamic Llama export at both of its input sizes, alternating, with and without the arena.
TEST(ArenaEngine, MatchesHeapEngineAcrossShapesAndHeldOutputs) {
  fs::path model = kModels / "llama/torch113_nofold_dynamic/A/model.onnx";
  ir::Graph g = onnx::import_model_file(model.string());
  runtime::EngineOptions heap_opts;
  heap_opts.arena = false;
  runtime::Engine heap = test_support::engine_for(g, heap_opts), arena_engine = test_support::engine_for(g);
  std::vector<std::map<std::string, Tensor>> sets;
  for (const char* s : {"b1_s7", "b2_s5"}) {
    std::map<std::string, Tensor> in;
    for (const auto& e : fs::directory_iterator(kModels / "llama/inputs" / s))
      in[e.path().stem().string()] = read_npy(e.path().string());
    sets.push_back(in);
  }
  std::vector<std::vector<Tensor>> expected, first;
  for (auto& in : sets) expected.push_back(heap.run(in));
  for (int round = 0; round < 3; ++round)
    for (size_t k = 0; k < sets.size(); ++k) {
      auto out = arena_engine.run(sets[k]);
      ASSERT_EQ(out.size(), expected[k].size());
      for (size_t o = 0; o < out.size(); ++o)
        EXPECT_TRUE(same_bits(out[o], expected[k][o])) << "round " << round << " set " << k;
      if (round == 0) first.push_back(out);
    }
  // Outputs held from the first runs were not overwritten by the later runs.
  for (size_t k = 0; k < sets.size(); ++k)
    for (size_t o = 0; o < first[k].size(); ++o) EXPECT_TRUE(same_bits(first[k][o], expected[k][o]));
}

ir::Node node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs) {
  ir::Node n;
  n.name = outs[0];
  n.op_type = op;
  n.opset = 17;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  return n;
}

// A Reshape (a view of its input's storage) that is read long after the value it views is last
// used, and a graph output that is a view of an intermediate: the arena must keep the viewed
// bytes alive and must not hand graph outputs arena memory.
TEST(ArenaEngine, ViewsOutliveTheirSource) {
  ir::Graph g;
  g.opsets[""] = 17;
  g.inputs.push_back({"x", DType::Float32, true, {ir::Dim{4}, ir::Dim{6}}});
  g.initializers["shape"] = test_support::make<int64_t>({2}, {6, 4});
  g.nodes.push_back(node("Relu", {"x"}, {"a"}));
  g.nodes.push_back(node("Reshape", {"a", "shape"}, {"view"}));  // aliases a
  g.nodes.push_back(node("Neg", {"x"}, {"b"}));
  g.nodes.push_back(node("Sigmoid", {"b"}, {"c"}));
  g.nodes.push_back(node("Exp", {"c"}, {"d"}));
  g.nodes.push_back(node("Reshape", {"d", "shape"}, {"d2"}));
  g.nodes.push_back(node("Add", {"view", "d2"}, {"y"}));
  g.nodes.push_back(node("Reshape", {"c", "shape"}, {"out_view"}));  // graph output aliasing c
  g.outputs.push_back({"y", DType::Float32, false, {}});
  g.outputs.push_back({"out_view", DType::Float32, false, {}});
  runtime::EngineOptions heap_opts;
  heap_opts.arena = false;
  runtime::Engine heap = test_support::engine_for(g, heap_opts), arena_engine = test_support::engine_for(g);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<std::vector<Tensor>> held;
  for (int run = 0; run < 4; ++run) {
    Tensor x = Tensor::empty(DType::Float32, {4, 6});
    for (int i = 0; i < 24; ++i) x.mutable_data<float>()[i] = u(rng);
    auto want = heap.run({{"x", x}});
    auto got = arena_engine.run({{"x", x}});
    for (size_t o = 0; o < want.size(); ++o)
      EXPECT_TRUE(same_bits(got[o], want[o])) << "run " << run << " output " << o;
    held.push_back(want);
    held.push_back(got);
  }
  for (size_t r = 0; r < held.size(); r += 2)
    for (size_t o = 0; o < held[r].size(); ++o) EXPECT_TRUE(same_bits(held[r][o], held[r + 1][o]));
  // The first run copied the views out of the arena (aliases inference does not know of); later
  // plans keep the viewed bytes alive instead: nothing is copied.
  const runtime::ArenaStats st = arena_engine.arena_stats();
  EXPECT_EQ(st.copies, 0u);
  EXPECT_GT(st.arena_allocations, 0u);
}

// A view of a view: v2 = Reshape(v1), v1 = Reshape(a), read after a's own last use. Reshape
// declares its output a view of its input (ops::Sharing::kView), so the first plan already knows
// both are aliases of a: a's slot lives until v2's last use and no run copies anything.
TEST(ArenaEngine, DeclaredChainsOfViewsArePlannedBeforeTheFirstRun) {
  ir::Graph g;
  g.opsets[""] = 17;
  g.inputs.push_back({"x", DType::Float32, true, {ir::Dim{4}, ir::Dim{6}}});
  g.initializers["s1"] = test_support::make<int64_t>({2}, {6, 4});
  g.initializers["s2"] = test_support::make<int64_t>({2}, {4, 6});
  g.nodes.push_back(node("Relu", {"x"}, {"a"}));
  g.nodes.push_back(node("Reshape", {"a", "s1"}, {"v1"}));
  g.nodes.push_back(node("Reshape", {"v1", "s2"}, {"v2"}));
  g.nodes.push_back(node("Neg", {"x"}, {"b"}));
  g.nodes.push_back(node("Exp", {"b"}, {"c"}));
  g.nodes.push_back(node("Add", {"v2", "c"}, {"y"}));
  g.outputs.push_back({"y", DType::Float32, false, {}});
  runtime::EngineOptions heap_opts;
  heap_opts.arena = false;
  runtime::Engine heap = test_support::engine_for(g, heap_opts), e = test_support::engine_for(g);
  for (int run = 0; run < 3; ++run) {
    Tensor x = test_support::random_floats({4, 6}, static_cast<uint32_t>(run + 10));
    EXPECT_TRUE(same_bits(e.run({{"x", x}})[0], heap.run({{"x", x}})[0])) << "run " << run;
    const runtime::ArenaStats st = e.arena_stats();
    EXPECT_EQ(st.copies, 0u) << "run " << run;
    EXPECT_EQ(st.arena_allocations, 3u) << "run " << run;  // a, b, c
    // a lives over steps 0-5, b over 3-4, c over 4-5: three slots of 128.
    EXPECT_EQ(st.planned_bytes, 3u * 128u) << "run " << run;
  }
  EXPECT_EQ(e.stats().arena_plans, 1);  // nothing observed after the first plan
}

// A chain x -> Relu -> Neg -> Exp -> Sigmoid (the graph output) over x of shape [n, 8]: a, b and
// c are n * 8 * 4 bytes each; a lives over steps 0-1, b over 1-2, c over 2-3, so a and c share
// one slot: the arena is two slots of that size (rounded up to 64 bytes).
ir::Graph chain_graph() {
  ir::Graph g;
  g.opsets[""] = 17;
  g.inputs.push_back({"x", DType::Float32, true, {ir::Dim{-1, "n"}, ir::Dim{8}}});
  g.nodes.push_back(node("Relu", {"x"}, {"a"}));
  g.nodes.push_back(node("Neg", {"a"}, {"b"}));
  g.nodes.push_back(node("Exp", {"b"}, {"c"}));
  g.nodes.push_back(node("Sigmoid", {"c"}, {"y"}));
  g.outputs.push_back({"y", DType::Float32, false, {}});
  return g;
}

TEST(ArenaEngine, FirstRunUsesTheArenaPlannedFromInferredShapes) {
  ir::Graph g = chain_graph();
  runtime::EngineOptions heap_opts;
  heap_opts.arena = false;
  runtime::Engine heap = test_support::engine_for(g, heap_opts), e = test_support::engine_for(g);
  for (int64_t n : {4, 16, 4, 3}) {
    Tensor x = test_support::random_floats({n, 8}, static_cast<uint32_t>(n));
    auto got = e.run({{"x", x}});
    EXPECT_TRUE(same_bits(got[0], heap.run({{"x", x}})[0])) << "n = " << n;
    const runtime::ArenaStats st = e.arena_stats();
    const size_t slot = (static_cast<size_t>(n) * 8 * 4 + 63) / 64 * 64;
    EXPECT_EQ(st.planned_bytes, 2 * slot) << "n = " << n;
    EXPECT_EQ(st.arena_bytes, st.planned_bytes) << "n = " << n;
    EXPECT_EQ(st.planned_values, 3u);
    EXPECT_EQ(st.arena_allocations, 3u) << "n = " << n;  // a, b, c: already in the first run
    EXPECT_EQ(st.heap_allocations, 1u);                  // y, which leaves the run
    EXPECT_EQ(st.leaving_allocations, 1u);
    EXPECT_EQ(st.copies, 0u);
    EXPECT_EQ(st.inference_error, "");
  }
}

// NonZero's output size depends on the data: it, and what is computed from it, go to the heap;
// the rest of the graph is served from the arena. Results equal the heap engine's.
TEST(ArenaEngine, DataDependentSizesGoToTheHeap) {
  ir::Graph g;
  g.opsets[""] = 17;
  g.inputs.push_back({"x", DType::Float32, true, {ir::Dim{4}, ir::Dim{6}}});
  g.nodes.push_back(node("NonZero", {"x"}, {"nz"}));
  g.nodes.push_back(node("Neg", {"nz"}, {"nzf"}));
  g.nodes.push_back(node("Relu", {"x"}, {"r"}));
  g.nodes.push_back(node("Neg", {"r"}, {"r2"}));
  g.nodes.push_back(node("Add", {"r2", "r"}, {"y"}));
  g.nodes.push_back(node("ReduceSum", {"nzf"}, {"s"}));
  g.outputs.push_back({"y", DType::Float32, false, {}});
  g.outputs.push_back({"s", DType::Float32, false, {}});
  runtime::EngineOptions heap_opts;
  heap_opts.arena = false;
  runtime::Engine heap = test_support::engine_for(g, heap_opts), e = test_support::engine_for(g);
  for (int run = 0; run < 3; ++run) {
    Tensor x = test_support::random_floats({4, 6}, static_cast<uint32_t>(run));
    for (int i = 0; i < 24; i += 3) x.mutable_data<float>()[i] = 0.f;
    auto want = heap.run({{"x", x}});
    auto got = e.run({{"x", x}});
    for (size_t o = 0; o < want.size(); ++o) EXPECT_TRUE(same_bits(got[o], want[o])) << "run " << run;
    const runtime::ArenaStats st = e.arena_stats();
    EXPECT_EQ(st.arena_allocations, 2u);      // r and r2
    EXPECT_EQ(st.unplanned_allocations, 2u);  // nz and nzf = -nz
    EXPECT_EQ(st.leaving_allocations, 2u);    // y and s
    EXPECT_EQ(st.heap_allocations, 4u);
    EXPECT_EQ(st.planned_bytes, 2u * 128u);  // [4, 6] float32 = 96 bytes, two live together
  }
}

// A block of the nn, reduce and elementwise families (MatMul, Add, Softmax, LayerNormalization,
// Gelu, Conv, pools) with symbolic batch: from the first run of each signature every
// intermediate comes from the arena; no run allocates activation memory on the heap.
TEST(ArenaEngine, SteadyRunsAllocateNoActivationMemory) {
  ir::Graph g;
  g.opsets[""] = 20;
  g.inputs.push_back({"x", DType::Float32, true, {ir::Dim{-1, "b"}, ir::Dim{3}, ir::Dim{9}, ir::Dim{9}}});
  g.initializers["w"] = test_support::random_floats({4, 3, 3, 3}, 1);
  g.initializers["m"] = test_support::random_floats({3, 7}, 2);
  g.initializers["scale"] = test_support::random_floats({7}, 3);
  auto add = [&](ir::Node n, std::vector<ir::Attribute> attrs = {}) {
    n.opset = 20;
    for (auto& a : attrs) n.attrs[a.name] = a;
    g.nodes.push_back(std::move(n));
  };
  // c: [b, 4, 5, 5] ((9 + 2 - 3) / 2 + 1 = 5); p: [b, 4, 3, 3] (ceil_mode); then [b, 4, 3, 7].
  add(node("Conv", {"x", "w"}, {"c"}), {ir::ints_attr("strides", {2, 2}), ir::ints_attr("pads", {1, 1, 1, 1})});
  add(node("Relu", {"c"}, {"r"}));
  add(node("MaxPool", {"r"}, {"p"}),
      {ir::ints_attr("kernel_shape", {2, 2}), ir::ints_attr("strides", {2, 2}), ir::int_attr("ceil_mode", 1)});
  add(node("MatMul", {"p", "m"}, {"mm"}));
  add(node("Add", {"mm", "scale"}, {"a"}));
  add(node("Softmax", {"a"}, {"sm"}));
  add(node("LayerNormalization", {"sm", "scale"}, {"ln"}));
  add(node("Gelu", {"ln"}, {"y"}));
  g.outputs.push_back({"y", DType::Float32, false, {}});
  runtime::EngineOptions heap_opts;
  heap_opts.arena = false;
  runtime::Engine heap = test_support::engine_for(g, heap_opts), e = test_support::engine_for(g);
  for (int64_t b : {1, 2, 1, 2}) {
    Tensor x = test_support::random_floats({b, 3, 9, 9}, static_cast<uint32_t>(b));
    auto got = e.run({{"x", x}});
    EXPECT_TRUE(same_bits(got[0], heap.run({{"x", x}})[0])) << "b = " << b;
    EXPECT_EQ(got[0].shape(), (Shape{b, 4, 3, 7}));
    const runtime::ArenaStats st = e.arena_stats();
    EXPECT_EQ(st.inference_error, "");
    EXPECT_EQ(st.planned_values, 7u);
    EXPECT_EQ(st.arena_allocations, 7u) << "b = " << b;
    EXPECT_EQ(st.heap_allocations, st.leaving_allocations) << "b = " << b;  // only y
    EXPECT_EQ(st.unplanned_allocations, 0u);
    EXPECT_EQ(st.copies, 0u);
    EXPECT_EQ(st.arena_bytes, st.planned_bytes);
  }
}

TEST(ArenaEngine, ConcurrentRunsAgree) {
  fs::path model = kModels / "bert/torch113_fold_dynamic/A/model.onnx";
  ir::Graph g = onnx::import_model_file(model.string());
  runtime::EngineOptions heap_opts;
  heap_opts.arena = false;
  runtime::Engine heap = test_support::engine_for(g, heap_opts), arena_engine = test_support::engine_for(g);
  std::map<std::string, Tensor> in;
  auto dir = kModels / "bert/inputs";
  fs::path first_set = *fs::directory_iterator(dir);
  for (const auto& e : fs::directory_iterator(first_set)) in[e.path().stem().string()] = read_npy(e.path().string());
  auto expected = heap.run(in);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        auto out = arena_engine.run(in);
        for (size_t o = 0; o < out.size(); ++o)
          if (!same_bits(out[o], expected[o])) ++mismatches;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace

namespace {

// Shape subgraphs are memoized per input signature and constant set: a refit of a constant they
// read, or another input shape, must give fresh values; a caller writing into an output must not
// change what the next run returns.
TEST(ArenaEngine, ShapeMemoFollowsShapesAndRefits) {
  ir::Graph g;
  g.opsets[""] = 17;
  g.inputs.push_back({"x", DType::Float32, true, {ir::Dim{-1, "n"}, ir::Dim{3}}});
  g.initializers["w"] = test_support::make<float>({2}, {10.f, 100.f});
  g.nodes.push_back(node("Shape", {"x"}, {"s"}));
  ir::Node cast = node("Cast", {"s"}, {"sf"});
  cast.attrs["to"] = ir::int_attr("to", 1);
  g.nodes.push_back(cast);
  g.nodes.push_back(node("Mul", {"sf", "w"}, {"scaled"}));  // shape-derived and a constant
  g.nodes.push_back(node("Relu", {"x"}, {"r"}));
  g.outputs.push_back({"scaled", DType::Float32, false, {}});
  g.outputs.push_back({"r", DType::Float32, false, {}});
  runtime::Engine e = test_support::engine_for(g);
  auto run_n = [&](int64_t n) {
    Tensor x = Tensor::empty(DType::Float32, {n, 3});
    return e.run({{"x", x}})[0];
  };
  for (int round = 0; round < 3; ++round) {
    Tensor a = run_n(4), b = run_n(7);
    EXPECT_EQ(a.data<float>()[0], 40.f);
    EXPECT_EQ(a.data<float>()[1], 300.f);
    EXPECT_EQ(b.data<float>()[0], 70.f);
    a.mutable_data<float>()[0] = -1.f;  // the caller owns its copy
  }
  e.replace_constants({{"w", test_support::make<float>({2}, {2.f, 5.f})}});
  Tensor c = run_n(4);
  EXPECT_EQ(c.data<float>()[0], 8.f);
  EXPECT_EQ(c.data<float>()[1], 15.f);
}

}  // namespace
