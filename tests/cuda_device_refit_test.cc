// Refit of CUDA plans with recipes replayed on the device (refit/refitter.h,
// CommitOptions::device_replay; skipped without a GPU).
//
// The plans are built from real `transformers` exports (models/hf/llama_decode, a grouped-query
// Llama decode step; models/hf/qwen2_generate), bound to their checkpoint A, stripped, in float32
// and in bfloat16 (where every Linear weight's recipe casts on the device). Each is refit to
// checkpoint B twice: with the device path (the sources streamed through the staging ring, the
// steps run on the device, checkpoint matrices transposed there) and with every recipe replayed on
// the host. Every derived engine weight, its device copy and the outputs must agree bit for bit;
// the same from a state dict in pinned host memory. A refit that fails half-way through the device
// work (a failure injected after some weights, the device out of memory) leaves the old version
// serving and gives back the device memory it took. The staging ring's size is an option.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#ifdef REFORGE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "backends/backend.h"
#include "builder/binding.h"
#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "refit/refit_from.h"
#include "refit/safetensors.h"
#include "runtime/plan_engine.h"
#include "support/cuda_compare.h"
#include "support/engine_checks.h"
#include "support/plan_round_trip.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::error_of;
namespace fs = std::filesystem;

namespace {

const fs::path kHf = fs::path(REFORGE_SOURCE_DIR) / "models" / "hf";

struct Model {
  const char* dir;
  plan::Precision precision;
};

std::string precision_label(plan::Precision p) { return p == plan::Precision::Bf16 ? "bf16" : "fp32"; }

// The stripped CUDA plan of `m`'s export A, bound to checkpoint A.
plan::Plan stripped_plan(const Model& m) {
  build::BuildOptions o;
  o.backend = "cuda";
  o.mode = plan::BuildMode::Refit;
  o.strip_weights = true;
  o.precision = m.precision;
  const fs::path dir = kHf / m.dir;
  return test_support::round_trip(build::build_plan_with_checkpoint(
      onnx::import_model_file((dir / "A" / "model.onnx").string()), o,
      refit::Checkpoint::open((dir / "checkpoint_A.safetensors").string()), {}));
}

std::string checkpoint(const Model& m, const char* weights) {
  return (kHf / m.dir / ("checkpoint_" + std::string(weights) + ".safetensors")).string();
}

// The export's input set (inputs/<name>.npy), by input name.
std::map<std::string, Tensor> inputs_of(const Model& m) {
  std::map<std::string, Tensor> in;
  for (const auto& f : fs::directory_iterator(kHf / m.dir / "inputs"))
    if (f.path().extension() == ".npy") in[f.path().stem().string()] = read_npy(f.path().string());
  return in;
}

refit::RefitReport refit_file(runtime::PlanEngine& e, const std::string& file, bool device) {
  refit::RefitRequest req;
  req.files = {file};
  req.commit.device_replay = device;
  return refit::refit_from(e, req);
}

// Every derived engine weight of `a` and `b`, read back to the host, and their device copies, bit
// for bit. Returns the number of device copies compared.
size_t expect_same_weights(const runtime::PlanEngine& a, const runtime::PlanEngine& b) {
  size_t on_device = 0;
  for (const auto& w : a.plan().weights) {
    if (w.kind != plan::WeightKind::Derived) continue;
    const Tensor x = a.weight(w.name), y = b.weight(w.name);
    EXPECT_TRUE(x.defined() && y.defined() && transforms::bit_equal(x, y)) << "engine weight " << w.name;
    const Tensor dx = a.device_weight(w.name), dy = b.device_weight(w.name);
    EXPECT_EQ(dx.defined(), dy.defined()) << w.name;
    if (!dx.defined() || !dy.defined()) continue;
    EXPECT_TRUE(transforms::bit_equal(to_host(dx), to_host(dy))) << "device copy of engine weight " << w.name;
    ++on_device;
  }
  return on_device;
}

void expect_same_outputs(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(transforms::bit_equal(got[i], want[i])) << what << ": output " << i;
}

std::map<std::string, Tensor> device_weights(const runtime::PlanEngine& e) {
  std::map<std::string, Tensor> out;
  for (const auto& w : e.plan().weights)
    if (Tensor d = e.device_weight(w.name); d.defined()) out[w.name] = to_host(d);
  return out;
}

#ifdef REFORGE_HAVE_CUDA
// Bytes in use now in the device's stream-ordered pool (where the device allocator's tensors,
// and so a refit's streamed sources and device-made weights, live), after the device is idle.
size_t pool_bytes_in_use() {
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaMemPool_t pool;
  EXPECT_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  uint64_t used = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used), cudaSuccess);
  return static_cast<size_t>(used);
}

// A copy of `t` in pinned host memory (as a torch tensor after pin_memory()).
Tensor pinned_copy(const Tensor& t) {
  void* p = nullptr;
  const size_t bytes = std::max<size_t>(t.nbytes(), 1);
  EXPECT_EQ(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), cudaSuccess);
  std::memcpy(p, t.raw(), t.nbytes());
  std::shared_ptr<const void> owner(p, [](const void* q) { (void)cudaFreeHost(const_cast<void*>(q)); });
  return Tensor::wrap(t.dtype(), t.shape(), std::move(owner), p, Memory::Pinned);
}
#endif

class CudaDeviceRefit : public ::testing::TestWithParam<Model> {
 protected:
  void SetUp() override {
    if (std::string why = test_support::no_gpu(); !why.empty()) GTEST_SKIP() << why;
    if (!fs::exists(kHf / GetParam().dir / "A" / "model.onnx")) GTEST_SKIP() << "models/hf not present";
  }
};

}  // namespace

// From the safetensors checkpoint B: the device path and the host path give the same engine
// weights, device copies and outputs; in bf16 plans the casts (and the transposes of checkpoint
// matrices) ran on the device.
TEST_P(CudaDeviceRefit, DevicePathEqualsHostPath) {
  const Model m = GetParam();
  const plan::Plan p = stripped_plan(m);
  runtime::PlanEngine dev(p), host(p);
  const refit::RefitReport rd = refit_file(dev, checkpoint(m, "B"), true);
  const refit::RefitReport rh = refit_file(host, checkpoint(m, "B"), false);
  EXPECT_EQ(rh.commit.weights_on_device, 0u);
  EXPECT_EQ(rh.commit.bytes_streamed, 0u);
  if (m.precision == plan::Precision::Bf16) {
    EXPECT_GT(rd.commit.weights_on_device, 0u) << "no recipe of the bf16 plan replayed on the device";
    EXPECT_GT(rd.commit.bytes_streamed, 0u);
  }
  EXPECT_EQ(rd.commit.weights_replayed, rh.commit.weights_replayed);
  EXPECT_GT(expect_same_weights(dev, host), 0u);
  const auto in = inputs_of(m);
  expect_same_outputs(dev.run(in), host.run(in), "device path against host path");

  // Refit back to A and again to B: the device path gives the same weights each time (the sources
  // the device copies are dropped after their last reader, nothing of B's first refit is left).
  refit_file(dev, checkpoint(m, "A"), true);
  refit_file(host, checkpoint(m, "A"), false);
  expect_same_weights(dev, host);
  refit_file(dev, checkpoint(m, "B"), true);
  refit_file(host, checkpoint(m, "B"), false);
  expect_same_weights(dev, host);
}

#ifdef REFORGE_HAVE_CUDA
// From a state dict in pinned host memory: the sources are copied to the device straight from it.
TEST_P(CudaDeviceRefit, FromPinnedStateDictEqualsHostPath) {
  const Model m = GetParam();
  const plan::Plan p = stripped_plan(m);
  runtime::PlanEngine dev(p), host(p);
  refit::Checkpoint ck = refit::Checkpoint::open(checkpoint(m, "B"));
  refit::RefitRequest req;
  for (const auto& [name, t] : ck.tensors()) req.checkpoint_tensors[name] = pinned_copy(t);
  const refit::RefitReport rd = refit::refit_from(dev, req);
  EXPECT_EQ(rd.from, "checkpoint");
  refit_file(host, checkpoint(m, "B"), false);
  EXPECT_GT(expect_same_weights(dev, host), 0u);
  const auto in = inputs_of(m);
  expect_same_outputs(dev.run(in), host.run(in), "pinned state dict against host path");
}

// A refit that fails half-way through the device work leaves the old version serving, bit for bit,
// and the device memory it took is given back: a failure injected after half of the weights are
// made on the device, and the device out of memory while the sources stream (for a plan whose
// refit makes weights on the device). Then a good refit still works.
TEST_P(CudaDeviceRefit, FailureHalfWayKeepsTheOldVersionAndFreesTheNewOne) {
  const Model m = GetParam();
  const plan::Plan p = stripped_plan(m);
  runtime::PlanEngine e(p), host(p);
  const size_t on_device = refit_file(e, checkpoint(m, "A"), true).commit.weights_on_device;
  const auto in = inputs_of(m);
  const auto outputs_a = e.run(in);
  const auto device_a = device_weights(e);
  // B's device weights (a host-path refit of another engine, gone before the memory is counted),
  // to say what a changed weight became: B's bytes (the failed refit reached the serving
  // version), or neither.
  std::map<std::string, Tensor> device_b;
  {
    runtime::PlanEngine b(p);
    refit_file(b, checkpoint(m, "B"), false);
    device_b = device_weights(b);
  }
  std::map<std::string, const void*> where_a;
  for (const auto& [name, t] : device_a) where_a[name] = e.device_weight(name).raw();
  const size_t in_use = pool_bytes_in_use();
  const backends::Backend& cuda = *backends::find_backend("cuda");
  const size_t weights_bytes = cuda.streams->memory_stats().weights_bytes;
  auto expect_still_a = [&](const std::string& what) {
    SCOPED_TRACE(what);
    const auto now = device_weights(e);
    ASSERT_EQ(now.size(), device_a.size());
    for (const auto& [name, t] : device_a) {
      const void* at = e.device_weight(name).raw();
      EXPECT_TRUE(transforms::bit_equal(now.at(name), t))
          << name << ": at " << (at == where_a.at(name) ? "the same address" : "another address")
          << (device_b.count(name) && transforms::bit_equal(now.at(name), device_b.at(name)) ? ", holds B's bytes"
                                                                                              : ", holds neither A's nor B's bytes");
    }
    expect_same_outputs(e.run(in), outputs_a, what);
    EXPECT_EQ(pool_bytes_in_use(), in_use) << "device memory of the failed refit is still held";
    EXPECT_EQ(cuda.streams->memory_stats().weights_bytes, weights_bytes);
  };
  if (on_device) {  // a failure after half of the device-made weights (a plan with some)
    refit::RefitRequest req;
    req.files = {checkpoint(m, "B")};
    req.commit.device_replay = true;
    size_t made = 0;
    const size_t stop_after = std::max<size_t>(on_device / 2, 1);
    req.commit.replayed = [&](const std::string& name, Tensor value) {
      if (!value.on_host() && ++made > stop_after) fail("refit test: stop at device-made weight '", name, "'");
      return value;
    };
    const std::string err = error_of([&] { refit::refit_from(e, req); });
    EXPECT_NE(err.find("refit test: stop at device-made weight"), std::string::npos) << err;
    expect_still_a("a failure half-way through the device work");
  }
  {  // the device out of memory while the sources stream
    // The pool gives back what it keeps, so that the refit's allocations must come from the device.
    cudaMemPool_t pool;
    ASSERT_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
    std::vector<void*> ballast;
    size_t free_bytes = 0, total = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
    for (size_t chunk = free_bytes; chunk >= 256;) {
      void* q = nullptr;
      if (cudaMalloc(&q, chunk) == cudaSuccess) {
        ballast.push_back(q);
      } else {
        (void)cudaGetLastError();
        chunk /= 2;
      }
    }
    std::string err;
    if (on_device) {
      err = error_of([&] { refit_file(e, checkpoint(m, "B"), true); });
    }
    for (void* q : ballast) (void)cudaFree(q);
    if (on_device) {
      EXPECT_NE(err.find("out of device memory"), std::string::npos) << err;
      expect_still_a("the device out of memory during the refit");
    }
  }
  refit_file(e, checkpoint(m, "B"), true);
  refit_file(host, checkpoint(m, "B"), false);
  EXPECT_GT(expect_same_weights(e, host), 0u);
}
#endif

// The staging ring's size is an option (CommitOptions::staging_bytes): a small ring gives the same
// weights; a size below the minimum is refused, naming it, before anything changes.
TEST_P(CudaDeviceRefit, StagingRingSizeIsAnOption) {
  const Model m = GetParam();
  const plan::Plan p = stripped_plan(m);
  runtime::PlanEngine e(p), host(p);
  backends::WeightMemory& memory = *backends::find_backend("cuda")->weight_memory;
  const size_t before = memory.staging_bytes();
  refit::RefitRequest req;
  req.files = {checkpoint(m, "B")};
  req.commit.staging_bytes = size_t{4} << 20;
  refit::refit_from(e, req);
  EXPECT_EQ(memory.staging_bytes(), size_t{4} << 20);
  refit_file(host, checkpoint(m, "B"), false);
  EXPECT_GT(expect_same_weights(e, host), 0u);
  req.commit.staging_bytes = 1000;
  const std::string err = error_of([&] { refit::refit_from(e, req); });
  EXPECT_NE(err.find("staging ring"), std::string::npos) << err;
  EXPECT_EQ(memory.staging_bytes(), size_t{4} << 20);
  memory.set_staging_bytes(before);
}

INSTANTIATE_TEST_SUITE_P(Exports, CudaDeviceRefit,
                         ::testing::Values(Model{"llama_decode", plan::Precision::Fp32},
                                           Model{"llama_decode", plan::Precision::Bf16},
                                           Model{"qwen2_generate", plan::Precision::Bf16}),
                         [](const ::testing::TestParamInfo<Model>& i) {
                           return std::string(i.param.dir) + "_" + precision_label(i.param.precision);
                         });
