// Activation arena (runtime/arena.h): the offset planner, and engines with the arena against the
// same engines without it — bit for bit, across input shapes, with outputs held across runs,
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

using namespace reforge;
namespace fs = std::filesystem;

namespace {

const fs::path kModels = fs::path(REFORGE_SOURCE_DIR) / "models";

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

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
  // Outputs held from the first (recording) runs were not overwritten by the later arena runs.
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
