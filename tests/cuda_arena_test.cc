// The device activation arena (runtime/arena.h) of eager runs on the CUDA backend: device steps'
// outputs come from one device buffer per run, planned from inferred shapes. Every result is
// compared bit for bit with the same graph run with the arena off; the stats are checked against
// sizes derived by hand (a chain of unary nodes: two 256-byte aligned slots suffice), the device
// value of a graph output stays off the arena and, returned in device memory, survives later
// runs, a device trace keeps every slot for the whole run, runs on three threads at once agree,
// and an engine that records its runs (device_replay) still replays them. Skipped where no GPU can
// run them.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "runtime/engine.h"
#include "runtime/lowered_graph.h"
#include "runtime/plan_engine.h"
#include "support/cuda_compare.h"
#include "support/make_tensor.h"
#include "support/plan_round_trip.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::node;
using test_support::value_info;
namespace fs = std::filesystem;

namespace {

runtime::Engine cuda_engine(const ir::Graph& g, bool arena, bool replay = false, bool trace = false) {
  runtime::EngineOptions o;
  o.arena = arena;
  o.device_replay = replay;
  o.device_trace = trace;
  return runtime::Engine(runtime::lower_without_passes(g, "cuda"), o);
}

// y = Neg(Relu(Neg(Relu(x)))), x float32[N, 8] (N symbolic): on the device x -> a -> b -> c -> y,
// each value read only by the next node; y is the graph output (copied to the host by a ToHost,
// or returned in device memory), so a, b and c are the arena's.
ir::Graph chain() {
  ir::Graph g;
  g.name = "chain";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {value_info("x", DType::Float32, {-1, 8})};
  g.inputs[0].shape[0].symbol = "N";
  g.nodes.push_back(node("a", "Relu", {"x"}));
  g.nodes.push_back(node("b", "Neg", {"a"}));
  g.nodes.push_back(node("c", "Relu", {"b"}));
  g.nodes.push_back(node("y", "Neg", {"c"}));
  g.outputs = {value_info("y", DType::Float32, {-1, 8})};
  g.outputs[0].shape[0].symbol = "N";
  return g;
}

size_t slot_bytes(int64_t n) { return (static_cast<size_t>(n) * 8 * 4 + 255) / 256 * 256; }

bool bit_equal_on_host(const Tensor& got, const Tensor& want) {
  return transforms::bit_equal(to_memory(got, Memory::Host), to_memory(want, Memory::Host));
}

TEST(CudaArena, ChainIsServedFromTwoSlots) {
  REQUIRE_GPU();
  const ir::Graph g = chain();
  runtime::Engine off = cuda_engine(g, false), on = cuda_engine(g, true);
  bool first = true;
  for (int64_t n : {4, 40, 4}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    const Tensor x = test_support::random_floats({n, 8}, static_cast<uint32_t>(n));
    const Tensor want = off.run({{"x", x}})[0];
    for (int run = 0; run < 2; ++run) {
      EXPECT_TRUE(bit_equal_on_host(on.run({{"x", x}})[0], want)) << "run " << run;
      const runtime::DeviceArenaStats st = on.arena_stats().device;
      EXPECT_EQ(st.arena_allocations, 3u);    // a, b, c
      EXPECT_EQ(st.backend_allocations, 1u);  // y, which leaves the run
      EXPECT_EQ(st.leaving_allocations, 1u);
      EXPECT_EQ(st.copies, 0u);
      EXPECT_EQ(st.planned_bytes, 2 * slot_bytes(static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(n)))))
          << "planned for the shape bucket of N (a power of two)";
      EXPECT_EQ(st.arena_bytes, st.planned_bytes);
      // The engine's first run also planned the ToDevice's output, which its kernel makes itself
      // (a copy of the host input); every later plan holds a, b and c alone.
      EXPECT_EQ(st.planned_values, first ? 4u : 3u);
      first = false;
    }
  }
  // Without the arena, no device arena either.
  EXPECT_EQ(off.arena_stats().device.arena_bytes, 0u);
  EXPECT_EQ(off.arena_stats().device.arena_allocations, 0u);
}

// Outputs returned in device memory leave the run: y is made by the backend's allocator, and an
// output held across later runs keeps its values.
TEST(CudaArena, DeviceOutputsStayOffTheArena) {
  REQUIRE_GPU();
  const ir::Graph g = chain();
  runtime::Engine off = cuda_engine(g, false), on = cuda_engine(g, true);
  runtime::RunOptions device_out;
  device_out.outputs = Memory::Device;
  std::vector<Tensor> held, want;
  for (int run = 0; run < 4; ++run) {
    const Tensor x = test_support::random_floats({6, 8}, static_cast<uint32_t>(100 + run));
    want.push_back(off.run({{"x", x}})[0]);
    held.push_back(on.run({{"x", x}}, device_out)[0]);
    EXPECT_FALSE(held.back().on_host());
    EXPECT_TRUE(bit_equal_on_host(held.back(), want.back())) << "run " << run;
    if (run == 0) continue;
    const runtime::DeviceArenaStats st = on.arena_stats().device;
    EXPECT_EQ(st.planned_values, 3u);  // a, b, c
    EXPECT_EQ(st.arena_allocations, 3u);
    EXPECT_EQ(st.backend_allocations, 1u);
    EXPECT_EQ(st.leaving_allocations, 1u);
    EXPECT_EQ(st.copies, 0u);
  }
  for (size_t i = 0; i < held.size(); ++i) EXPECT_TRUE(bit_equal_on_host(held[i], want[i])) << "held output " << i;
}

// A device trace keeps every device step's inputs for rerun_step past the run, which a reused
// slot would overwrite: a tracing engine takes no device arena, and its results are the same.
TEST(CudaArena, TracingEnginesTakeNoDeviceArena) {
  REQUIRE_GPU();
  const ir::Graph g = chain();
  runtime::Engine off = cuda_engine(g, false), traced = cuda_engine(g, true, false, true);
  const Tensor x = test_support::random_floats({5, 8}, 7);
  const Tensor want = off.run({{"x", x}})[0];
  for (int run = 0; run < 2; ++run) EXPECT_TRUE(bit_equal_on_host(traced.run({{"x", x}})[0], want));
  const runtime::DeviceArenaStats st = traced.arena_stats().device;
  EXPECT_EQ(st.planned_values, 0u);
  EXPECT_EQ(st.arena_allocations, 0u);
}

// An engine that records its runs: the eager runs before the recording use the device arena, the
// recording does not, and every result equals the arena-less engine's.
TEST(CudaArena, RecordingEnginesReplayAsBefore) {
  REQUIRE_GPU();
  const ir::Graph g = chain();
  runtime::Engine off = cuda_engine(g, false), replaying = cuda_engine(g, true, true);
  if (!replaying.replay_stats().declined.empty()) GTEST_SKIP() << replaying.replay_stats().declined;
  for (int run = 0; run < 5; ++run) {
    const Tensor x = test_support::random_floats({3, 8}, static_cast<uint32_t>(200 + run));
    EXPECT_TRUE(bit_equal_on_host(replaying.run({{"x", x}})[0], off.run({{"x", x}})[0])) << "run " << run;
    if (run == 0) {
      EXPECT_EQ(replaying.arena_stats().device.arena_allocations, 3u);
    }
  }
  const runtime::ReplayStats r = replaying.replay_stats();
  EXPECT_EQ(r.failed, 0) << r.last_failure;
  EXPECT_GE(r.replays, 3);
}

// The dynamic BERT export built for CUDA with every pass, run on three threads at once (both input
// sets, alternating): every result equals the arena-less engine's; from the second run of a
// signature on, nothing is copied out of the device arena and the backend's allocator serves only
// the values the plan leaves to it.
TEST(CudaArena, ConcurrentRunsOfAModelAgree) {
  REQUIRE_GPU();
  const fs::path models = fs::path(REFORGE_SOURCE_DIR) / "models";
  build::BuildOptions bo;
  bo.backend = "cuda";
  const plan::Plan p = test_support::round_trip(build::build_plan(
      reforge::onnx::import_model_file((models / "bert/torch113_fold_dynamic/A/model.onnx").string()), bo));
  runtime::EngineOptions off_options, on_options;
  off_options.arena = false;
  runtime::PlanEngine off(p, off_options), on(p, on_options);
  std::vector<std::map<std::string, Tensor>> sets;
  for (const char* s : {"b1_s7", "b2_s5"}) {
    std::map<std::string, Tensor> in;
    for (const auto& e : fs::directory_iterator(models / "bert/inputs" / s))
      in[e.path().stem().string()] = read_npy(e.path().string());
    sets.push_back(in);
  }
  std::vector<std::vector<Tensor>> want;
  for (const auto& in : sets) want.push_back(off.run(in));
  for (size_t k = 0; k < sets.size(); ++k)
    for (int run = 0; run < 2; ++run) {
      const std::vector<Tensor> got = on.run(sets[k]);
      ASSERT_EQ(got.size(), want[k].size());
      for (size_t o = 0; o < got.size(); ++o) EXPECT_TRUE(transforms::bit_equal(got[o], want[k][o]));
    }
  const runtime::DeviceArenaStats st = on.arena_stats().device;
  EXPECT_GT(st.arena_allocations, 0u);
  EXPECT_EQ(st.copies, 0u);
  EXPECT_EQ(st.backend_allocations, st.leaving_allocations + st.unplanned_allocations);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 8; ++i) {
        const size_t k = static_cast<size_t>(t + i) % sets.size();
        const std::vector<Tensor> got = on.run(sets[k]);
        for (size_t o = 0; o < got.size(); ++o)
          if (!transforms::bit_equal(got[o], want[k][o])) ++mismatches;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
