// The CUDA backend's device tracer (backends/device_trace.h, CUPTI) and memory account, with the
// engine's tagging of device steps (EngineOptions::device_trace) and rerun_step: every kernel
// and copy of a run is attributed to the step that launched it, a step run alone launches the
// same kernels as in the run, and the weights the plan uploads are counted. Skipped where no GPU
// can run them, or where the CUDA toolkit's profiling library (libcupti) cannot be loaded.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "builder/builder.h"
#include "runtime/plan_engine.h"
#include "support/cuda_compare.h"
#include "support/make_tensor.h"
#include "support/plan_round_trip.h"

using namespace reforge;
using test_support::value_info;

namespace {

// Y = Tanh(X W) + X: a product, an elementwise op and an addition, [4, 64] throughout.
ir::Graph layer() {
  ir::Graph g;
  g.name = "trace_layer";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {value_info("X", DType::Float32, {4, 64})};
  g.initializers["W"] = test_support::random_floats({64, 64}, 21, -0.5f, 0.5f);
  g.nodes.push_back(test_support::node("mm", "MatMul", {"X", "W"}));
  g.nodes.push_back(test_support::node("t", "Tanh", {"mm"}));
  g.nodes.push_back(test_support::node("Y", "Add", {"t", "X"}));
  g.outputs = {value_info("Y", DType::Float32, {4, 64})};
  return g;
}

class CudaTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = test_support::no_gpu(); !why.empty()) GTEST_SKIP() << why;
    backend = backends::find_backend("cuda");
    ASSERT_NE(backend, nullptr);
    ASSERT_NE(backend->tracer, nullptr);
    try {
      backend->tracer->start();
    } catch (const Error& e) {
      if (std::string(e.what()).find("CUPTI") != std::string::npos) GTEST_SKIP() << e.what();
      throw;
    }
    size_t dropped = 0;
    backend->tracer->stop(dropped);
  }
  const backends::Backend* backend = nullptr;
};

std::unique_ptr<runtime::PlanEngine> traced_engine() {
  build::BuildOptions o;
  o.backend = "cuda";
  runtime::EngineOptions eo;
  eo.device_trace = true;
  return std::make_unique<runtime::PlanEngine>(test_support::round_trip(build::build_plan(layer(), o)), eo);
}

}  // namespace

TEST_F(CudaTrace, EveryKernelOfARunBelongsToTheStepThatLaunchedIt) {
  auto engine = traced_engine();
  const std::map<std::string, Tensor> in = {{"X", test_support::random_floats({4, 64}, 22)}};
  engine->run(in);  // loads the kernels, uploads the weights
  const std::vector<runtime::NodeProfile> steps = engine->steps();
  constexpr int kRuns = 3;
  backend->tracer->start();
  EXPECT_TRUE(backend->tracer->recording());
  for (int i = 0; i < kRuns; ++i) engine->run(in);
  size_t dropped = 0;
  const std::vector<backends::DeviceActivity> acts = backend->tracer->stop(dropped);
  EXPECT_FALSE(backend->tracer->recording());
  EXPECT_EQ(dropped, 0u);
  std::map<int64_t, int> kernels, copies;
  for (const auto& a : acts) {
    ASSERT_GE(a.tag, 0) << a.name << " was not launched by a step";
    ASSERT_LT(static_cast<size_t>(a.tag), steps.size()) << a.name;
    EXPECT_LE(a.start_ns, a.end_ns) << a.name;
    (a.kind == backends::DeviceActivity::Kind::Kernel ? kernels : copies)[a.tag] += 1;
  }
  // Per run: the input's copy to the device and the output's copy back, in their transfer steps;
  // every op of the model launches at least one kernel, the same number each run.
  int product = -1, transfers = 0;
  for (const auto& [tag, count] : copies) {
    EXPECT_NE(steps[static_cast<size_t>(tag)].op_type.find("reforge::To"), std::string::npos)
        << steps[static_cast<size_t>(tag)].op_type << " made a copy";
    transfers += count;
  }
  EXPECT_EQ(transfers, 2 * kRuns);
  ASSERT_FALSE(kernels.empty());
  for (const auto& [tag, count] : kernels) {
    EXPECT_EQ(count % kRuns, 0) << steps[static_cast<size_t>(tag)].node;
    const std::string& type = steps[static_cast<size_t>(tag)].op_type;
    if (type == "MatMul" || type == "reforge::MatMulAdd") product = static_cast<int>(tag);
  }
  ASSERT_GE(product, 0) << "no product step launched a kernel";

  // The product alone: the same kernels, as many per call as per run, all tagged with its step.
  const int per_run = kernels[product] / kRuns;
  backend->tracer->start();
  engine->rerun_step(static_cast<size_t>(product), 5);
  const std::vector<backends::DeviceActivity> alone = backend->tracer->stop(dropped);
  int alone_kernels = 0;
  for (const auto& a : alone) {
    EXPECT_EQ(a.tag, product) << a.name;
    alone_kernels += a.kind == backends::DeviceActivity::Kind::Kernel;
  }
  EXPECT_EQ(alone_kernels, 5 * per_run);
}

TEST_F(CudaTrace, RerunNeedsATracedRunAndADeviceStep) {
  auto engine = traced_engine();
  engine->run({{"X", test_support::random_floats({4, 64}, 23)}});  // not recorded: keeps nothing
  const std::vector<runtime::NodeProfile> steps = engine->steps();
  size_t product = steps.size();
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].op_type == "MatMul" || steps[i].op_type == "reforge::MatMulAdd") product = i;
  ASSERT_LT(product, steps.size());
  EXPECT_THROW(engine->rerun_step(product, 1), Error);
  EXPECT_THROW(engine->rerun_step(steps.size(), 1), Error);
}

TEST_F(CudaTrace, UploadedWeightsAreCounted) {
  ASSERT_NE(backend->streams, nullptr);
  const size_t before = backend->streams->memory_stats().weights_bytes;
  {
    auto engine = traced_engine();
    engine->run({{"X", test_support::random_floats({4, 64}, 24)}});
    const backends::DeviceMemoryStats during = backend->streams->memory_stats();
    EXPECT_GE(during.weights_bytes, before + 64 * 64 * sizeof(float));
    EXPECT_GE(during.weights_peak_bytes, during.weights_bytes);
    EXPECT_GT(during.activations_peak_bytes, 0u);
  }
  EXPECT_EQ(backend->streams->memory_stats().weights_bytes, before);  // released with the engine
}
