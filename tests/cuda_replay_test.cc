// Recorded replay of device work (EngineOptions::device_replay, backends/device_replay.h: CUDA
// graphs). Every run of an engine that records is compared bit for bit with the same engine built
// with replay off, run on the same inputs: the first run of a signature (eager), the run that
// records, and the replays after it, with new inputs each time (the inputs are re-staged), new
// signatures, new weights (recorded again), device inputs and outputs, and runs on several threads
// at once. A graph whose work cannot be recorded (a kernel that waits for the device) stays eager
// and correct. Skipped where no GPU can run them.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "runtime/lowered_graph.h"
#include "support/cuda_compare.h"
#include "support/make_tensor.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::node;
using test_support::value_info;

namespace {

runtime::Engine cuda_engine(const ir::Graph& g, bool replay) {
  runtime::EngineOptions o;
  o.device_replay = replay;
  return runtime::Engine(runtime::lower_without_passes(g, "cuda"), o);
}

// Y = Softmax(Relu(X W + B) + positions) with X float32[N, 8] (N symbolic): the positions are
// Range(0, 8) cast to float, computed from X's shape (a shape subgraph the memo serves, whose
// device copy the recording reads).
ir::Graph dense_with_positions() {
  ir::Graph g;
  g.name = "dense_with_positions";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {value_info("X", DType::Float32, {-1, 8})};
  g.inputs[0].shape[0].symbol = "N";
  g.initializers["W"] = test_support::random_floats({8, 8}, 11, -0.5f, 0.5f);
  g.initializers["B"] = test_support::random_floats({8}, 12);
  g.initializers["zero"] = test_support::make<int64_t>({}, {0});
  g.initializers["one"] = test_support::make<int64_t>({}, {1});
  g.initializers["axis1"] = test_support::make<int64_t>({}, {1});
  g.nodes.push_back(node("mm", "MatMul", {"X", "W"}));
  g.nodes.push_back(node("add", "Add", {"mm", "B"}));
  g.nodes.push_back(node("relu", "Relu", {"add"}));
  g.nodes.push_back(node("shape", "Shape", {"X"}));
  g.nodes.push_back(node("width", "Gather", {"shape", "axis1"}));
  g.nodes.push_back(node("range", "Range", {"zero", "width", "one"}));
  g.nodes.push_back(node("positions", "Cast", {"range"}, {{"to", ir::int_attr("to", 1)}}));
  g.nodes.push_back(node("shifted", "Add", {"relu", "positions"}));
  g.nodes.push_back(node("Y", "Softmax", {"shifted"}, {{"axis", ir::int_attr("axis", 1)}}));
  g.outputs = {value_info("Y", DType::Float32, {-1, 8})};
  g.outputs[0].shape[0].symbol = "N";
  return g;
}

// Y = Gemm(GlobalAveragePool(Relu(Conv(X, K, C))), F): cuDNN and cuBLASLt work in one recording.
ir::Graph small_cnn() {
  ir::Graph g;
  g.name = "small_cnn";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {value_info("X", DType::Float32, {2, 3, 12, 12})};
  g.initializers["K"] = test_support::random_floats({16, 3, 3, 3}, 31, -0.3f, 0.3f);
  g.initializers["C"] = test_support::random_floats({16}, 32);
  g.initializers["F"] = test_support::random_floats({16, 10}, 33, -0.3f, 0.3f);
  g.initializers["shape"] = test_support::make<int64_t>({2}, {2, 16});
  g.nodes.push_back(node("conv", "Conv", {"X", "K", "C"}, {{"pads", ir::ints_attr("pads", {1, 1, 1, 1})}}));
  g.nodes.push_back(node("relu", "Relu", {"conv"}));
  g.nodes.push_back(node("pool", "GlobalAveragePool", {"relu"}));
  g.nodes.push_back(node("flat", "Reshape", {"pool", "shape"}));
  g.nodes.push_back(node("Y", "MatMul", {"flat", "F"}));
  g.outputs = {value_info("Y", DType::Float32, {2, 10})};
  return g;
}

void expect_bit_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  const Tensor h = to_memory(got, Memory::Host);
  ASSERT_EQ(h.dtype(), want.dtype()) << what;
  ASSERT_EQ(h.shape(), want.shape()) << what;
  EXPECT_TRUE(transforms::bit_equal(h, want)) << what;
}

class CudaReplay : public ::testing::Test {
 protected:
  void SetUp() override { REQUIRE_GPU(); }
};

}  // namespace

TEST_F(CudaReplay, EveryRunEqualsTheEagerEngineAndLaterRunsReplay) {
  struct Case {
    ir::Graph graph;
    std::vector<Shape> signatures;
  };
  std::vector<Case> cases;
  cases.push_back({dense_with_positions(), {{3, 8}, {5, 8}}});
  cases.push_back({small_cnn(), {{2, 3, 12, 12}}});
  for (const Case& c : cases) {
    runtime::Engine eager = cuda_engine(c.graph, false);
    runtime::Engine replaying = cuda_engine(c.graph, true);
    ASSERT_EQ(replaying.replay_stats().declined, "") << c.graph.name;
    EXPECT_NE(eager.replay_stats().declined, "") << c.graph.name;
    uint32_t seed = 100;
    for (size_t s = 0; s < c.signatures.size(); ++s) {
      for (int run = 0; run < 4; ++run) {
        const Tensor x = test_support::random_floats(c.signatures[s], seed++);
        const Tensor want = eager.run({{"X", x}}).at(0);
        expect_bit_equal(replaying.run({{"X", x}}).at(0), want,
                         c.graph.name + ", signature " + shape_str(c.signatures[s]) + ", run " + std::to_string(run));
      }
      // Per signature: one eager run, then the recording run and two replays.
      const runtime::ReplayStats st = replaying.replay_stats();
      EXPECT_EQ(st.failed, 0) << c.graph.name << ": " << st.last_failure;
      EXPECT_EQ(st.recorded, static_cast<int64_t>(s + 1)) << c.graph.name;
      EXPECT_EQ(st.recordings, s + 1) << c.graph.name;
      EXPECT_EQ(st.eager_runs, static_cast<int64_t>(s + 1)) << c.graph.name;
      EXPECT_EQ(st.replays, static_cast<int64_t>(3 * (s + 1))) << c.graph.name;
    }
  }
}

// New weights make a new weight set: its first run is eager, the next records again, and no run
// replays work recorded with the old weights.
TEST_F(CudaReplay, NewWeightsAreRecordedAgain) {
  const ir::Graph g = small_cnn();
  runtime::Engine eager = cuda_engine(g, false);
  runtime::Engine replaying = cuda_engine(g, true);
  const Tensor x = test_support::random_floats({2, 3, 12, 12}, 7);
  for (int run = 0; run < 3; ++run) expect_bit_equal(replaying.run({{"X", x}}).at(0), eager.run({{"X", x}}).at(0), "A");
  const std::map<std::string, Tensor> b = {{"K", test_support::random_floats({16, 3, 3, 3}, 41, -0.3f, 0.3f)},
                                           {"F", test_support::random_floats({16, 10}, 42, -0.3f, 0.3f)}};
  eager.replace_constants(b);
  replaying.replace_constants(b);
  const Tensor want_b = eager.run({{"X", x}}).at(0);
  for (int run = 0; run < 3; ++run)
    expect_bit_equal(replaying.run({{"X", x}}).at(0), want_b, "B, run " + std::to_string(run));
  const runtime::ReplayStats st = replaying.replay_stats();
  EXPECT_EQ(st.recorded, 2);
  EXPECT_EQ(st.eager_runs, 2);
  EXPECT_EQ(st.replays, 4);
  // B's result is not A's: a replay of A's recording would have been seen.
  EXPECT_FALSE(transforms::bit_equal(want_b, cuda_engine(g, false).run({{"X", x}}).at(0)));
}

// Inputs in device memory and outputs left there go through the recording's buffers too; an output
// handed to the caller is the caller's, untouched by later replays.
TEST_F(CudaReplay, DeviceInputsAndOutputs) {
  const ir::Graph g = dense_with_positions();
  runtime::Engine eager = cuda_engine(g, false);
  runtime::Engine replaying = cuda_engine(g, true);
  runtime::RunOptions on_device;
  on_device.outputs = Memory::Device;
  std::vector<Tensor> kept, want;
  for (int run = 0; run < 4; ++run) {
    const Tensor x = test_support::random_floats({3, 8}, 200 + static_cast<uint32_t>(run));
    want.push_back(eager.run({{"X", x}}).at(0));
    kept.push_back(replaying.run({{"X", to_memory(x, Memory::Device)}}, on_device).at(0));
    ASSERT_FALSE(kept.back().on_host());
  }
  for (size_t i = 0; i < kept.size(); ++i) expect_bit_equal(kept[i], want[i], "run " + std::to_string(i));
  EXPECT_EQ(replaying.replay_stats().replays, 3);
}

// Runs on several threads at once: one of them replays at a time, the others run eagerly; every
// result is the eager engine's for that thread's input.
TEST_F(CudaReplay, ConcurrentRunsEachGetTheirOwnResult) {
  const ir::Graph g = small_cnn();
  runtime::Engine eager = cuda_engine(g, false);
  runtime::Engine replaying = cuda_engine(g, true);
  constexpr int kThreads = 4, kRuns = 12;
  std::vector<Tensor> x, want;
  for (int t = 0; t < kThreads; ++t) {
    x.push_back(test_support::random_floats({2, 3, 12, 12}, 300 + static_cast<uint32_t>(t)));
    want.push_back(eager.run({{"X", x.back()}}).at(0));
  }
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int r = 0; r < kRuns; ++r)
          if (!transforms::bit_equal(replaying.run({{"X", x[static_cast<size_t>(t)]}}).at(0),
                                     want[static_cast<size_t>(t)]))
            ++wrong[static_cast<size_t>(t)];
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[static_cast<size_t>(t)], "") << "thread " << t;
    EXPECT_EQ(wrong[static_cast<size_t>(t)], 0) << "thread " << t;
  }
  const runtime::ReplayStats st = replaying.replay_stats();
  EXPECT_EQ(st.failed, 0) << st.last_failure;
  EXPECT_GT(st.replays, 0);
  EXPECT_EQ(st.replays + st.eager_runs, kThreads * kRuns);
}

// An embedding lookup: Gather's index check waits for the device in an eager run; a recording
// reads its flag back after every replay instead, so a bad index fails the replay with the eager
// run's message, and the next good run replays again.
TEST_F(CudaReplay, IndexErrorsOfAReplayAreRaisedAsInAnEagerRun) {
  ir::Graph g;
  g.name = "embedding";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {value_info("ids", DType::Int64, {5})};
  g.initializers["table"] = test_support::random_floats({6, 4}, 51);
  g.nodes.push_back(node("rows", "Gather", {"table", "ids"}));
  g.nodes.push_back(node("Y", "Relu", {"rows"}));
  g.outputs = {value_info("Y", DType::Float32, {5, 4})};
  runtime::Engine eager = cuda_engine(g, false);
  runtime::Engine replaying = cuda_engine(g, true);
  for (int run = 0; run < 3; ++run) {
    const Tensor ids = test_support::make<int64_t>({5}, {run, 5, 0, -1, 2});
    expect_bit_equal(replaying.run({{"ids", ids}}).at(0), eager.run({{"ids", ids}}).at(0),
                     "run " + std::to_string(run));
  }
  EXPECT_EQ(replaying.replay_stats().replays, 2) << replaying.replay_stats().last_failure;
  const Tensor bad = test_support::make<int64_t>({5}, {1, 9, 0, 0, 0});
  std::string eager_error, replay_error;
  try {
    eager.run({{"ids", bad}});
  } catch (const Error& e) {
    eager_error = e.what();
  }
  try {
    replaying.run({{"ids", bad}});
  } catch (const Error& e) {
    replay_error = e.what();
  }
  EXPECT_NE(eager_error.find("index 9 is out of range for a dimension of size 6"), std::string::npos) << eager_error;
  EXPECT_NE(replay_error.find("index 9 is out of range for a dimension of size 6"), std::string::npos) << replay_error;
  EXPECT_EQ(replaying.replay_stats().replays, 3);
  const Tensor good = test_support::make<int64_t>({5}, {4, 3, 2, 1, 0});
  expect_bit_equal(replaying.run({{"ids", good}}).at(0), eager.run({{"ids", good}}).at(0), "after the error");
  EXPECT_EQ(replaying.replay_stats().replays, 4);
}

// NonZero's output size depends on the data: its kernel waits for the device, so the recording
// fails, twice at most, and every run is eager and right.
TEST_F(CudaReplay, WorkThatWaitsForTheDeviceStaysEager) {
  ir::Graph g;
  g.name = "nonzero";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {value_info("X", DType::Float32, {4, 5})};
  g.nodes.push_back(node("relu", "Relu", {"X"}));
  g.nodes.push_back(node("Y", "NonZero", {"relu"}));
  g.outputs = {value_info("Y", DType::Int64, {2, -1})};
  runtime::Engine eager = cuda_engine(g, false);
  runtime::Engine replaying = cuda_engine(g, true);
  if (!replaying.replay_stats().declined.empty()) GTEST_SKIP() << replaying.replay_stats().declined;
  for (int run = 0; run < 5; ++run) {
    const Tensor x = test_support::random_floats({4, 5}, 400 + static_cast<uint32_t>(run));
    expect_bit_equal(replaying.run({{"X", x}}).at(0), eager.run({{"X", x}}).at(0), "run " + std::to_string(run));
  }
  const runtime::ReplayStats st = replaying.replay_stats();
  EXPECT_EQ(st.replays, 0);
  EXPECT_EQ(st.failed, 2);
  EXPECT_NE(st.last_failure, "");
  EXPECT_EQ(st.eager_runs, 5);
}

// A CPU engine never records.
TEST(Replay, DeclinedWhereItCannotApply) {
  const ir::Graph g = dense_with_positions();
  runtime::EngineOptions replay;
  replay.device_replay = true;
  runtime::Engine cpu(runtime::lower_without_passes(g, "cpu"), replay);
  EXPECT_EQ(cpu.replay_stats().declined, "every node runs on the host");
  EXPECT_EQ(runtime::Engine(runtime::lower_without_passes(g, "cpu")).replay_stats().declined,
            "turned off (EngineOptions::device_replay)");
  const Tensor x = test_support::random_floats({3, 8}, 1);
  cpu.run({{"X", x}});
  cpu.run({{"X", x}});
  EXPECT_EQ(cpu.replay_stats().eager_runs, 2);
  EXPECT_EQ(cpu.replay_stats().replays, 0);
}

TEST_F(CudaReplay, DeclinedForEnginesThatProfileOrTrace) {
  const ir::Graph g = dense_with_positions();
  runtime::EngineOptions profiled;
  profiled.device_replay = true;
  profiled.profile = true;
  EXPECT_EQ(runtime::Engine(runtime::lower_without_passes(g, "cuda"), profiled).replay_stats().declined,
            "the engine profiles every node");
  runtime::EngineOptions traced;
  traced.device_replay = true;
  traced.device_trace = true;
  EXPECT_EQ(runtime::Engine(runtime::lower_without_passes(g, "cuda"), traced).replay_stats().declined,
            "the engine traces device work");
}
