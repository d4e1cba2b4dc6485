// Device-bound inputs and outputs of CUDA plans (runtime::RunOptions, Engine::run): inputs given
// in device memory pass through reforge::ToDevice without a copy (and are copied to the host once
// where a node reads them there), outputs asked for in device memory skip their copy to the host.
// Every result is compared with the same plan run with host inputs and outputs, bit for bit.
// Skipped where no GPU can run them.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "plan/plan.h"
#include "runtime/plan_engine.h"
#include "support/cuda_compare.h"
#include "support/make_tensor.h"
#include "support/plan_round_trip.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::value_info;
namespace fs = std::filesystem;

namespace {

plan::Plan cuda_plan(const ir::Graph& g) {
  build::BuildOptions o;
  o.backend = "cuda";
  return test_support::round_trip(build::build_plan(g, o));
}

// Y = Relu(X W + B), X and Y both float32[3, 8]: an output that can be fed back as the input.
ir::Graph square_layer() {
  ir::Graph g;
  g.name = "square_layer";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {value_info("X", DType::Float32, {3, 8})};
  g.initializers["W"] = test_support::random_floats({8, 8}, 11, -0.5f, 0.5f);
  g.initializers["B"] = test_support::random_floats({8}, 12);
  g.nodes.push_back(test_support::node("mm", "MatMul", {"X", "W"}));
  g.nodes.push_back(test_support::node("add", "Add", {"mm", "B"}));
  g.nodes.push_back(test_support::node("Y", "Relu", {"add"}));
  g.outputs = {value_info("Y", DType::Float32, {3, 8})};
  return g;
}

void expect_bit_equal_on_host(const Tensor& got, const Tensor& want, const std::string& what) {
  const Tensor h = to_memory(got, Memory::Host);
  EXPECT_EQ(h.dtype(), want.dtype()) << what;
  EXPECT_EQ(h.shape(), want.shape()) << what;
  EXPECT_TRUE(transforms::bit_equal(h, want)) << what;
}

class CudaIo : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = test_support::no_gpu(); !why.empty()) GTEST_SKIP() << why;
  }
};

}  // namespace

// Two runs, the first's device output fed to the second as its input, equal the same two runs
// with host inputs and outputs.
TEST_F(CudaIo, DeviceOutputFedToTheNextRun) {
  runtime::PlanEngine e(cuda_plan(square_layer()));
  const Tensor x = test_support::random_floats({3, 8}, 13);
  const Tensor y1_host = e.run({{"X", x}}).at(0);
  const Tensor y2_host = e.run({{"X", y1_host}}).at(0);
  ASSERT_TRUE(y1_host.on_host());

  runtime::RunOptions on_device;
  on_device.outputs = Memory::Device;
  const Tensor y1 = e.run({{"X", x}}, on_device).at(0);
  ASSERT_FALSE(y1.on_host());
  const Tensor y2 = e.run({{"X", y1}}, on_device).at(0);
  ASSERT_FALSE(y2.on_host());
  expect_bit_equal_on_host(y1, y1_host, "first run");
  expect_bit_equal_on_host(y2, y2_host, "second run, fed the first's device output");
  // The device input again, with host outputs.
  const Tensor y2_back = e.run({{"X", y1}}).at(0);
  ASSERT_TRUE(y2_back.on_host());
  EXPECT_TRUE(transforms::bit_equal(y2_back, y2_host));
  // A caller's own device buffer as the input.
  expect_bit_equal_on_host(e.run({{"X", to_memory(x, Memory::Device)}}, on_device).at(0), y1_host,
                           "a caller's device buffer");
}

// An input read on the host (Reshape's shape, a structure input) may be given in device memory:
// the run reads a host copy, and the same input's ToDevice (it is also Cast's data) the caller's
// tensor. An output made on the host (Shape of an input) comes back in device memory when asked.
TEST_F(CudaIo, HostReadInputsAndHostMadeOutputs) {
  ir::Graph g;
  g.name = "host_reads";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {value_info("X", DType::Float32, {4, 6}), value_info("S", DType::Int64, {2})};
  g.nodes.push_back(test_support::node("r", "Reshape", {"X", "S"}));
  g.nodes.push_back(test_support::node("Y", "Relu", {"r"}));
  g.nodes.push_back(test_support::node("shape", "Shape", {"X"}));
  // S is also data of a device node: its ToDevice reads the caller's device tensor.
  g.nodes.push_back(test_support::node("s_float", "Cast", {"S"}, {{"to", ir::int_attr("to", 1)}}));
  g.outputs = {value_info("Y", DType::Float32, {}), value_info("shape", DType::Int64, {2}),
               value_info("s_float", DType::Float32, {2})};
  g.outputs[0].has_shape = false;
  runtime::PlanEngine e(cuda_plan(g));
  const Tensor x = test_support::random_floats({4, 6}, 21);
  const Tensor s = test_support::make<int64_t>({2}, {3, 8});
  const auto want = e.run({{"X", x}, {"S", s}});
  ASSERT_EQ(want.size(), 3u);
  EXPECT_EQ(want[0].shape(), (Shape{3, 8}));
  EXPECT_EQ(want[2].data<float>()[1], 8.0f);

  runtime::RunOptions on_device;
  on_device.outputs = Memory::Device;
  const auto got = e.run({{"X", to_memory(x, Memory::Device)}, {"S", to_memory(s, Memory::Device)}}, on_device);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_FALSE(got[i].on_host()) << i;
    expect_bit_equal_on_host(got[i], want[i], "output " + std::to_string(i));
  }
  // Host outputs from device inputs.
  const auto back = e.run({{"X", to_memory(x, Memory::Device)}, {"S", to_memory(s, Memory::Device)}});
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_TRUE(back[i].on_host()) << i;
    EXPECT_TRUE(transforms::bit_equal(back[i], want[i])) << i;
  }
}

// The Llama-style model: token ids in device memory, logits left on the device, equal to the host
// run.
TEST_F(CudaIo, LlamaWithDeviceInputsAndOutputs) {
  const fs::path llama = fs::path(REFORGE_SOURCE_DIR) / "models" / "llama";
  if (!fs::exists(llama / "dynamo" / "A" / "model.onnx")) GTEST_SKIP() << "models/llama not present";
  runtime::PlanEngine e(cuda_plan(onnx::import_model_file((llama / "dynamo" / "A" / "model.onnx").string())));
  runtime::RunOptions on_device;
  on_device.outputs = Memory::Device;
  for (const char* set : {"b1_s7", "b2_s5"}) {
    SCOPED_TRACE(set);
    const Tensor ids = read_npy((llama / "inputs" / set / "input_ids.npy").string());
    const Tensor want = e.run({{"input_ids", ids}}).at(0);
    const Tensor got = e.run({{"input_ids", to_memory(ids, Memory::Device)}}, on_device).at(0);
    EXPECT_FALSE(got.on_host());
    expect_bit_equal_on_host(got, want, "logits");
  }
}

// The plans above build without a GPU (placement needs only the kernel registrations): Reshape's
// shape input stays on the host, the data input goes through ToDevice, and Y comes back through
// ToHost.
TEST(CudaIoPlans, BuildAndPlaceWithoutAGpu) {
  REQUIRE_CUDA_BUILD();
  ir::Graph g;
  g.name = "host_reads";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {value_info("X", DType::Float32, {4, 6}), value_info("S", DType::Int64, {2})};
  g.nodes.push_back(test_support::node("r", "Reshape", {"X", "S"}));
  g.nodes.push_back(test_support::node("Y", "Relu", {"r"}));
  g.nodes.push_back(test_support::node("s_float", "Cast", {"S"}, {{"to", ir::int_attr("to", 1)}}));
  g.outputs = {value_info("Y", DType::Float32, {}), value_info("s_float", DType::Float32, {2})};
  g.outputs[0].has_shape = false;
  const plan::Plan p = cuda_plan(g);
  size_t s_uploads = 0;
  for (const auto& n : p.graph.nodes) s_uploads += n.op_type == "ToDevice" && n.inputs.at(0) == "S";
  EXPECT_EQ(s_uploads, 1u);  // S is read on the host by Reshape and on the device by Cast
  const auto where = plan::node_backends(p);
  std::map<std::string, std::string> by_op;
  for (size_t i = 0; i < p.graph.nodes.size(); ++i) by_op[p.graph.nodes[i].op_type] = where[i];
  EXPECT_EQ(by_op["Reshape"], "cuda");
  EXPECT_EQ(by_op["ToDevice"], "cuda");
  EXPECT_EQ(by_op["ToHost"], "cuda");
  for (const auto& n : p.graph.nodes) {
    if (n.op_type == "Reshape") {
      EXPECT_EQ(n.inputs.at(1), "S");  // read on the host, no transfer
    }
  }
  EXPECT_NO_THROW(cuda_plan(square_layer()));
}
