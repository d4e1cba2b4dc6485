// The device weight path (skipped without a GPU), on CUDA plans of the committed Llama-style
// model: a weight version's device weights are one allocation, filled by asynchronous copies and
// waited for once; a weight only the device reads is held there only (the host reads it through
// a copy); a refit makes one allocation for what it replaces, and partial refits never leave a
// version spread over more than two allocations; pinned host memory is a memory kind of its own.
// Every output is compared bit for bit with an engine that keeps its host weights (the same
// kernels on the same bytes) or with a fresh build of the new weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <span>

#include "backends/backend.h"
#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "runtime/plan_engine.h"
#include "support/cuda_compare.h"
#include "support/make_tensor.h"
#include "transforms/recipe.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

const fs::path kLlama = fs::path(REFORGE_SOURCE_DIR) / "models" / "llama";

plan::Plan cuda_plan() {
  build::BuildOptions o;
  o.backend = "cuda";
  o.mode = plan::BuildMode::Refit;
  return build::build_plan(onnx::import_model_file((kLlama / "dynamo" / "A" / "model.onnx").string()), o);
}

std::map<std::string, Tensor> input() {
  return {{"input_ids", read_npy((kLlama / "inputs" / "b2_s5" / "input_ids.npy").string())}};
}

size_t device_weight_bytes() { return backends::find_backend("cuda")->streams->memory_stats().weights_bytes; }

// The plan's weights that the device reads (a ToDevice uploads them), with their bytes.
std::map<std::string, size_t> device_read(const runtime::PlanEngine& e) {
  std::map<std::string, size_t> out;
  for (const auto& w : e.plan().weights)
    if (e.device_weight(w.name).defined()) out[w.name] = e.weight(w.name).nbytes();
  return out;
}

// Float32 derived weights among `names`, each scaled by `factor`.
runtime::WeightUpdate scaled(const runtime::PlanEngine& e, const std::vector<std::string>& names, float factor) {
  runtime::WeightUpdate u;
  for (const auto& name : names) {
    Tensor v = e.weight(name).clone();
    if (v.dtype() != DType::Float32) continue;
    for (float& x : std::span<float>(v.mutable_data<float>(), static_cast<size_t>(v.numel()))) x *= factor;
    u.set_weight(name, v);
  }
  return u;
}

// A fresh engine whose plan holds `e`'s current weights (host copies, so also a check that the
// weights read back from the device are the ones the engine runs on).
Tensor fresh_output(const runtime::PlanEngine& e) {
  runtime::EngineOptions o;
  o.keep_host_weights = true;
  runtime::PlanEngine fresh(e.current_plan(false), o);
  return fresh.run(input()).at(0);
}

class CudaWeightMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = test_support::no_gpu(); !why.empty()) GTEST_SKIP() << why;
    if (!fs::exists(kLlama / "dynamo" / "A" / "model.onnx")) GTEST_SKIP() << "models/llama not present";
  }
};

}  // namespace

TEST_F(CudaWeightMemory, OneAllocationPerVersionAndNoHostCopy) {
  const plan::Plan p = cuda_plan();
  const size_t before = device_weight_bytes();
  runtime::PlanEngine e(p);
  const auto read = device_read(e);
  ASSERT_GT(read.size(), 3u);
  size_t bytes = 0, slots = 0;
  for (const auto& [name, n] : read) {
    bytes += n;
    slots += (std::max<size_t>(n, 1) + 255) / 256 * 256;
    EXPECT_EQ(e.weight_location(name), Memory::Device) << name << " is kept on the host too";
    EXPECT_TRUE(e.weight(name).on_host());
  }
  EXPECT_EQ(e.stats().weight_allocations, 1);
  EXPECT_EQ(e.stats().weight_bytes_uploaded, static_cast<int64_t>(bytes));
  EXPECT_EQ(device_weight_bytes() - before, slots);

  // The same kernels on the same bytes as an engine that keeps its host weights.
  runtime::EngineOptions keep;
  keep.keep_host_weights = true;
  runtime::PlanEngine kept(p, keep);
  for (const auto& [name, n] : read) EXPECT_EQ(kept.weight_location(name), Memory::Host) << name;
  const Tensor y = e.run(input()).at(0);
  EXPECT_TRUE(transforms::bit_equal(y, kept.run(input()).at(0)));
  // Read back from the device, the weights are the plan's.
  for (const auto& w : p.weights)
    if (read.count(w.name)) EXPECT_TRUE(transforms::bit_equal(e.weight(w.name), w.data)) << w.name;
}

TEST_F(CudaWeightMemory, RefitUploadsIntoOneAllocationAndEqualsAFreshEngine) {
  runtime::PlanEngine e(cuda_plan());
  const auto read = device_read(e);
  std::vector<std::string> names;
  for (const auto& [name, n] : read) names.push_back(name);
  const size_t one_version = device_weight_bytes();
  const Tensor y_a = e.run(input()).at(0);
  e.commit(scaled(e, names, 0.5f));
  EXPECT_EQ(e.stats().weight_allocations, 2);
  // The first version went with its allocation: one version's bytes again.
  EXPECT_EQ(device_weight_bytes(), one_version);
  const Tensor y_b = e.run(input()).at(0);
  EXPECT_FALSE(transforms::bit_equal(y_a, y_b));
  EXPECT_TRUE(transforms::bit_equal(y_b, fresh_output(e)));
}

// Half the weights, then the other half: each refit uploads one allocation, and the first
// version's allocation goes once neither half is in it. Then one weight: the unchanged ones are
// spread over two allocations, so they are copied on the device into the new version's, and both
// older ones go. Then the same weight again: everything else stays shared, one small allocation.
TEST_F(CudaWeightMemory, PartialRefitsKeepAVersionInAtMostTwoAllocations) {
  runtime::PlanEngine e(cuda_plan());
  std::vector<std::string> first, second;
  for (const auto& [name, n] : device_read(e))
    if (e.weight(name).dtype() == DType::Float32) (first.size() <= second.size() ? first : second).push_back(name);
  ASSERT_GE(second.size(), 2u);
  const size_t base = device_weight_bytes();
  e.commit(scaled(e, first, 0.5f));
  EXPECT_EQ(e.stats().weight_allocations, 2);
  EXPECT_GT(device_weight_bytes(), base);  // the first allocation still holds the second half
  const Tensor y_half = e.run(input()).at(0);
  EXPECT_TRUE(transforms::bit_equal(y_half, fresh_output(e)));

  e.commit(scaled(e, second, 2.0f));
  EXPECT_EQ(e.stats().weight_allocations, 3);
  EXPECT_EQ(device_weight_bytes(), base) << "the first allocation is still held";
  const Tensor y = e.run(input()).at(0);
  EXPECT_FALSE(transforms::bit_equal(y, y_half));
  EXPECT_TRUE(transforms::bit_equal(y, fresh_output(e)));

  const std::string one = first.front();
  e.commit(scaled(e, {one}, 0.25f));  // repacked: every device weight in one new allocation
  EXPECT_EQ(e.stats().weight_allocations, 4);
  EXPECT_EQ(device_weight_bytes(), base) << "older allocations are still held";
  EXPECT_TRUE(transforms::bit_equal(e.run(input()).at(0), fresh_output(e)));

  e.commit(scaled(e, {one}, 0.5f));  // shared: one allocation of that weight's size
  EXPECT_EQ(e.stats().weight_allocations, 5);
  EXPECT_EQ(device_weight_bytes() - base, (e.weight(one).nbytes() + 255) / 256 * 256);
  EXPECT_TRUE(transforms::bit_equal(e.run(input()).at(0), fresh_output(e)));
}

// Pinned host memory: host code reads it as host memory, a copy to and from the device keeps its
// bytes, and weights given in it are uploaded directly (no staging) with the same result.
TEST_F(CudaWeightMemory, PinnedMemoryIsAMemoryKind) {
  const Tensor h = test_support::random_floats({1000, 37}, 3);
  const Tensor pinned = to_memory(h, Memory::Pinned);
  EXPECT_EQ(pinned.memory(), Memory::Pinned);
  EXPECT_TRUE(pinned.on_host());
  EXPECT_STREQ(memory_name(pinned.memory()), "pinned");
  EXPECT_TRUE(transforms::bit_equal(pinned, h));
  EXPECT_EQ(pinned.as_double(5), h.as_double(5));
  EXPECT_TRUE(transforms::bit_equal(to_host(to_memory(pinned, Memory::Device)), h));

  runtime::PlanEngine a(cuda_plan()), b(cuda_plan());
  std::vector<std::string> names;
  for (const auto& [name, n] : device_read(a)) names.push_back(name);
  const runtime::WeightUpdate u = scaled(a, names, 0.5f);
  runtime::WeightUpdate in_pinned;
  for (const auto& [name, t] : u.weights()) in_pinned.set_weight(name, to_memory(t, Memory::Pinned));
  a.commit(u);
  b.commit(in_pinned);
  EXPECT_TRUE(transforms::bit_equal(a.run(input()).at(0), b.run(input()).at(0)));
  for (const auto& name : names) EXPECT_TRUE(transforms::bit_equal(a.weight(name), b.weight(name))) << name;
}
