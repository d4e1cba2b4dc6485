// Refit of plans whose nodes run on a device, in two parts.
//
// RefitPrepare (every machine): the engine's side of the transaction, on the tests' "counting"
// backend, whose MatMul has a prepare step standing for a device upload (a copy of the weight that
// the kernel reads instead of its input; tests/support/counting_backend.h). A refit re-runs the
// prepare step of exactly the nodes whose weights changed, before the new set is visible; a
// prepare step that fails half-way leaves the engine on its old weights and their prepared copies;
// a run that holds the old set keeps it after a commit.
//
// CudaRefit (skipped without a GPU): the refit matrix on CUDA plans of the committed Llama-style
// model (models/llama). A plan built for "cuda" with weights A is refit to B by every path (ONNX
// fast, slow, verify; a safetensors checkpoint; caller tensors, complete and incremental; full and
// stripped plans), and then must equal a fresh CUDA build of B: every derived engine weight, on
// the host and its device copy downloaded, bit for bit, and the outputs bit for bit (and PyTorch's
// outputs for B within 1e-4). A refit that fails (a bad source, a failure half-way through the
// replay, the device out of memory while uploading) leaves the outputs and the device weights
// equal to A's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#ifdef REFORGE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "builder/binding.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "plan/plan_io.h"
#include "refit/checkpoint_refit.h"
#include "refit/refit_from.h"
#include "refit/refitter.h"
#include "refit/safetensors.h"
#include "runtime/plan_engine.h"
#include "support/cli.h"
#include "support/counting_backend.h"
#include "support/cuda_compare.h"
#include "support/engine_checks.h"
#include "support/engine_for.h"
#include "support/make_tensor.h"
#include "support/plan_round_trip.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::error_of;
using test_support::round_trip;
namespace fs = std::filesystem;

namespace {

// ---- the host side: the counting backend's prepare step ----

ir::ValueInfo float_value(const std::string& name, std::vector<int64_t> dims) {
  ir::ValueInfo v;
  v.name = name;
  v.dtype = DType::Float32;
  v.has_shape = true;
  for (int64_t d : dims) v.shape.push_back(ir::Dim{d, ""});
  return v;
}

// Y = Relu(X W1) W2, with weights drawn from `seed`.
ir::Graph two_products(uint32_t seed) {
  ir::Graph g;
  g.name = "two_products";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {float_value("X", {2, 4})};
  g.initializers["W1"] = test_support::random_floats({4, 3}, seed);
  g.initializers["W2"] = test_support::random_floats({3, 5}, seed + 100);
  g.nodes.push_back(test_support::node("mm1", "MatMul", {"X", "W1"}));
  g.nodes.push_back(test_support::node("relu", "Relu", {"mm1"}));
  g.nodes.push_back(test_support::node("Y", "MatMul", {"relu", "W2"}));
  g.outputs = {float_value("Y", {2, 5})};
  return g;
}

plan::Plan counting_plan(const ir::Graph& g, bool strip = false) {
  build::BuildOptions o;
  o.backend = test_support::kCountingBackend;
  o.mode = plan::BuildMode::Refit;
  o.strip_weights = strip;
  return round_trip(build::build_plan(g, o));
}

const std::map<std::string, Tensor> kX = {{"X", test_support::random_floats({2, 4}, 7)}};

Tensor run_y(const runtime::PlanEngine& e) { return e.run(kX).at(0); }

void refit_to(runtime::PlanEngine& e, const ir::Graph& g, std::vector<std::string> names = {"W1", "W2"},
              bool incremental = false) {
  refit::Refitter r(e);
  for (const auto& n : names) r.set(n, g.initializers.at(n));
  refit::CommitOptions c;
  c.incremental = incremental;
  r.commit(c);
}

// ---- the device side: CUDA plans of the Llama-style model ----

const fs::path kLlama = fs::path(REFORGE_SOURCE_DIR) / "models" / "llama";

std::string onnx_of(const char* weights) { return (kLlama / "dynamo" / weights / "model.onnx").string(); }
std::string checkpoint_of(const char* weights) {
  return (kLlama / ("checkpoint_" + std::string(weights) + ".safetensors")).string();
}

std::vector<std::map<std::string, Tensor>> llama_inputs() {
  std::vector<std::map<std::string, Tensor>> sets;
  for (const char* set : {"b1_s7", "b2_s5"})
    sets.push_back({{"input_ids", read_npy((kLlama / "inputs" / set / "input_ids.npy").string())}});
  return sets;
}

build::BuildOptions cuda_options(bool strip) {
  build::BuildOptions o;
  o.backend = "cuda";
  o.mode = plan::BuildMode::Refit;
  o.strip_weights = strip;
  return o;
}

plan::Plan cuda_plan(const char* weights, bool strip) {
  return round_trip(build::build_plan(onnx::import_model_file(onnx_of(weights)), cuda_options(strip)));
}

plan::Plan cuda_plan_bound(const char* weights, bool strip) {
  return round_trip(build::build_plan_with_checkpoint(onnx::import_model_file(onnx_of(weights)), cuda_options(strip),
                                                      refit::Checkpoint::open(checkpoint_of(weights)), {}));
}

// Every derived engine weight of `e` and its device copy (downloaded), bit for bit against the same
// weight of `fresh`; the device copy also equals the host weight. Returns the number of device
// copies compared.
size_t expect_weights_equal(const runtime::PlanEngine& e, const runtime::PlanEngine& fresh) {
  size_t on_device = 0;
  for (const auto& w : fresh.plan().weights) {
    if (w.kind != plan::WeightKind::Derived) continue;
    const Tensor mine = e.weight(w.name), want = fresh.weight(w.name);
    EXPECT_TRUE(mine.defined() && want.defined() && transforms::bit_equal(mine, want))
        << "engine weight " << w.name << " differs from a fresh CUDA build";
    const Tensor dev = e.device_weight(w.name), dev_want = fresh.device_weight(w.name);
    EXPECT_EQ(dev.defined(), dev_want.defined()) << w.name;
    if (!dev.defined() || !dev_want.defined()) continue;
    EXPECT_FALSE(dev.on_host()) << w.name;
    const Tensor down = to_memory(dev, Memory::Host), down_want = to_memory(dev_want, Memory::Host);
    EXPECT_TRUE(transforms::bit_equal(down, down_want))
        << "the device copy of engine weight " << w.name << " differs from a fresh CUDA build's";
    EXPECT_TRUE(transforms::bit_equal(down, mine))
        << "the device copy of engine weight " << w.name << " is not the engine's host weight (a stale upload)";
    ++on_device;
  }
  return on_device;
}

std::vector<Tensor> outputs_of(const runtime::PlanEngine& e) {
  std::vector<Tensor> outs;
  for (const auto& in : llama_inputs()) outs.push_back(e.run(in).at(0));
  return outs;
}

void expect_outputs_equal(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].on_host());
    EXPECT_TRUE(transforms::bit_equal(got[i], want[i])) << what << ": output of input set " << i;
  }
}

// max |out - PyTorch's reference for B| over both input sets.
double max_diff_to_b(const runtime::PlanEngine& e) {
  double m = 0;
  const char* sets[] = {"b1_s7", "b2_s5"};
  const auto outs = outputs_of(e);
  for (size_t s = 0; s < outs.size(); ++s) {
    Tensor ref = read_npy((kLlama / "reference" / "B" / sets[s] / "logits.npy").string());
    EXPECT_EQ(outs[s].shape(), ref.shape());
    for (int64_t k = 0; k < ref.numel() && k < outs[s].numel(); ++k)
      m = std::max(m, std::fabs(ref.as_double(k) - outs[s].as_double(k)));
  }
  return m;
}

// The engine's device weights, downloaded, by weight name.
std::map<std::string, Tensor> device_weights(const runtime::PlanEngine& e) {
  std::map<std::string, Tensor> out;
  for (const auto& w : e.plan().weights)
    if (Tensor d = e.device_weight(w.name); d.defined()) out[w.name] = to_memory(d, Memory::Host);
  return out;
}

void expect_device_weights_equal(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_TRUE(transforms::bit_equal(got.at(name), t)) << "device weight " << name << " changed";
  }
}

}  // namespace

// A refit re-runs the prepare step of each node whose weight changed, and the runs that follow
// read the new prepared copies: the outputs equal a fresh build's with the new weights.
TEST(RefitPrepare, ReRunsForChangedWeightsOnly) {
  test_support::register_counting_backend();
  const ir::Graph a = two_products(1), b = two_products(2), c = two_products(3);
  test_support::reset_counting_calls();
  runtime::PlanEngine e(counting_plan(a));
  EXPECT_EQ(test_support::counting_prepares(), 2);  // both products, when the engine is made
  const Tensor y_a = run_y(e);
  EXPECT_TRUE(transforms::bit_equal(y_a, run_y(runtime::PlanEngine(counting_plan(a)))));

  test_support::reset_counting_calls();
  refit_to(e, b);
  EXPECT_EQ(test_support::counting_prepares(), 2);
  const Tensor y_b = run_y(runtime::PlanEngine(counting_plan(b)));
  EXPECT_FALSE(transforms::bit_equal(y_a, y_b));
  EXPECT_TRUE(transforms::bit_equal(run_y(e), y_b)) << "the run read a prepared copy of the old weights";

  // Incremental, one weight: only its node prepares again; the other keeps its prepared copy.
  test_support::reset_counting_calls();
  refit_to(e, c, {"W2"}, true);
  EXPECT_EQ(test_support::counting_prepares(), 1);
  ir::Graph mixed = b;
  mixed.initializers["W2"] = c.initializers.at("W2");
  EXPECT_TRUE(transforms::bit_equal(run_y(e), run_y(runtime::PlanEngine(counting_plan(mixed)))));
}

// A stripped engine prepares nothing until its weights arrive; the refit prepares them.
TEST(RefitPrepare, StrippedEnginePreparesAtItsFirstRefit) {
  test_support::register_counting_backend();
  const ir::Graph a = two_products(1), b = two_products(2);
  test_support::reset_counting_calls();
  runtime::PlanEngine e(counting_plan(a, true));
  EXPECT_EQ(test_support::counting_prepares(), 0);
  EXPECT_NE(error_of([&] { run_y(e); }).find("stripped"), std::string::npos);
  refit_to(e, b);
  EXPECT_EQ(test_support::counting_prepares(), 2);
  EXPECT_TRUE(transforms::bit_equal(run_y(e), run_y(runtime::PlanEngine(counting_plan(b)))));
}

// The second node's prepare step fails after the first's succeeded: the commit throws naming the
// node, and the engine keeps its old weights and the old prepared copies of both nodes. The
// same refit then succeeds.
TEST(RefitPrepare, FailureHalfWayKeepsTheOldPreparedState) {
  test_support::register_counting_backend();
  const ir::Graph a = two_products(1), b = two_products(2);
  runtime::PlanEngine e(counting_plan(a));
  const Tensor y_a = run_y(e);
  const auto hashes_a = test_support::derived_weight_hashes(e);

  test_support::reset_counting_calls();
  test_support::fail_counting_prepares_after(1);
  const std::string err = error_of([&] { refit_to(e, b); });
  test_support::fail_counting_prepares_after(-1);
  EXPECT_EQ(test_support::counting_prepares(), 2);  // the first succeeded, the second failed
  EXPECT_NE(err.find("while preparing the weights of"), std::string::npos) << err;
  EXPECT_NE(err.find("(MatMul)"), std::string::npos) << err;
  EXPECT_NE(err.find("failed (as told"), std::string::npos) << err;
  EXPECT_EQ(test_support::derived_weight_hashes(e), hashes_a);
  EXPECT_TRUE(transforms::bit_equal(run_y(e), y_a)) << "a failed refit changed what the kernels read";

  refit_to(e, b);
  EXPECT_TRUE(transforms::bit_equal(run_y(e), run_y(runtime::PlanEngine(counting_plan(b)))));
}

// A backend with weight memory gets one allocation per weight version, sized before its
// prepare steps run: both weights of the first version in one block, a refit's new weights in
// one more, and a version's block goes when no version holds a weight in it.
TEST(RefitPrepare, OneWeightAllocationPerVersion) {
  test_support::register_counting_backend();
  const ir::Graph a = two_products(1), b = two_products(2), c = two_products(3);
  const int64_t blocks_before = test_support::counting_weight_blocks();
  const size_t both = (4 * 3 + 3 * 5) * sizeof(float);
  {
    runtime::PlanEngine e(counting_plan(a));
    EXPECT_EQ(e.stats().weight_allocations, 1);
    EXPECT_EQ(e.stats().weight_bytes_uploaded, static_cast<int64_t>(both));
    EXPECT_EQ(test_support::counting_weight_blocks(), blocks_before + 1);

    refit_to(e, b);  // both weights: one new block, the first version's block goes with it
    EXPECT_EQ(e.stats().weight_allocations, 2);
    EXPECT_EQ(e.stats().weight_bytes_uploaded, static_cast<int64_t>(2 * both));
    EXPECT_EQ(test_support::counting_weight_blocks(), blocks_before + 1);
    EXPECT_TRUE(transforms::bit_equal(run_y(e), run_y(runtime::PlanEngine(counting_plan(b)))));

    refit_to(e, c, {"W2"}, true);  // one weight: its own block; W1 stays where it is
    EXPECT_EQ(e.stats().weight_allocations, 3);
    EXPECT_EQ(test_support::counting_weight_blocks(), blocks_before + 2);
    ir::Graph mixed = b;
    mixed.initializers["W2"] = c.initializers.at("W2");
    EXPECT_TRUE(transforms::bit_equal(run_y(e), run_y(runtime::PlanEngine(counting_plan(mixed)))));
  }
  EXPECT_EQ(test_support::counting_weight_blocks(), blocks_before);
}

// A prepare step that fails after another uploaded: the version's block is freed with the
// version, and nothing is counted as made.
TEST(RefitPrepare, FailedVersionFreesItsWeightMemory) {
  test_support::register_counting_backend();
  runtime::PlanEngine e(counting_plan(two_products(1)));
  const int64_t blocks = test_support::counting_weight_blocks(), made = test_support::counting_weight_blocks_made();
  test_support::fail_counting_prepares_after(1);
  EXPECT_NE(error_of([&] { refit_to(e, two_products(2)); }).find("while preparing the weights of"), std::string::npos);
  test_support::fail_counting_prepares_after(-1);
  EXPECT_EQ(test_support::counting_weight_blocks_made(), made + 1);  // the block was made, then freed
  EXPECT_EQ(test_support::counting_weight_blocks(), blocks);
  EXPECT_EQ(e.stats().weight_allocations, 1);
}

// A run holding the weight set it started with keeps it, prepared copies included, while a
// commit replaces the engine's set.
TEST(RefitPrepare, RunInFlightKeepsItsWeightSet) {
  test_support::register_counting_backend();
  const ir::Graph a = two_products(1), b = two_products(2);
  runtime::Engine e = test_support::engine_for(a, {}, test_support::kCountingBackend);
  const Tensor y_a = e.run(kX).at(0);
  const auto held = e.weights();  // what a run that started now holds
  e.replace_constants({{"W1", b.initializers.at("W1")}, {"W2", b.initializers.at("W2")}});
  EXPECT_TRUE(transforms::bit_equal(e.run(kX, *held).at(0), y_a));
  const Tensor y_b = test_support::engine_for(b, {}, test_support::kCountingBackend).run(kX).at(0);
  EXPECT_TRUE(transforms::bit_equal(e.run(kX).at(0), y_b));
}

// Device-bound I/O needs a device: a host engine refuses outputs in device memory, and has no
// device copies of its weights.
TEST(RefitPrepare, HostEngineHasNoDeviceIo) {
  test_support::register_counting_backend();
  runtime::PlanEngine e(counting_plan(two_products(1)));
  runtime::RunOptions ro;
  ro.outputs = Memory::Device;
  EXPECT_NE(error_of([&] { e.run(kX, ro); }).find("every node of this engine runs on the host"), std::string::npos);
  size_t derived = 0;
  for (const auto& w : e.plan().weights) {
    if (w.kind != plan::WeightKind::Derived) continue;
    ++derived;
    EXPECT_TRUE(e.weight(w.name).defined()) << w.name;
    EXPECT_FALSE(e.device_weight(w.name).defined()) << w.name;
  }
  EXPECT_EQ(derived, 2u);
}

class CudaRefit : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = test_support::no_gpu(); !why.empty()) GTEST_SKIP() << why;
    if (!fs::exists(onnx_of("A"))) GTEST_SKIP() << "models/llama not present";
  }
};

// ONNX: fast, slow and verify, each from a full and a stripped plan.
TEST_F(CudaRefit, FromOnnxEqualsAFreshCudaBuild) {
  runtime::PlanEngine fresh(cuda_plan("B", false));
  const auto want = outputs_of(fresh);
  EXPECT_LE(max_diff_to_b(fresh), 1e-4);
  for (refit::RefitMode mode : {refit::RefitMode::Fast, refit::RefitMode::Slow, refit::RefitMode::Verify})
    for (bool strip : {false, true}) {
      SCOPED_TRACE(std::string(refit::refit_mode_name(mode)) + (strip ? " stripped" : " full"));
      runtime::PlanEngine e(cuda_plan("A", strip));
      if (!strip) {
        EXPECT_FALSE(transforms::bit_equal(outputs_of(e).at(0), want.at(0)));
      }
      refit::RefitRequest req;
      req.files = {onnx_of("B")};
      req.mode = mode;
      build::refit_from(e, req);
      EXPECT_GT(expect_weights_equal(e, fresh), 0u);
      expect_outputs_equal(outputs_of(e), want, "refit from ONNX");
    }
}

// A safetensors checkpoint (the plan bound to checkpoint A at build time), full and stripped.
TEST_F(CudaRefit, FromCheckpointEqualsAFreshCudaBuild) {
  runtime::PlanEngine fresh(cuda_plan_bound("B", false));
  const auto want = outputs_of(fresh);
  EXPECT_LE(max_diff_to_b(fresh), 1e-4);
  for (bool strip : {false, true}) {
    SCOPED_TRACE(strip ? "stripped" : "full");
    runtime::PlanEngine e(cuda_plan_bound("A", strip));
    refit::RefitRequest req;
    req.files = {checkpoint_of("B")};
    EXPECT_EQ(refit::refit_from(e, req).from, "checkpoint");
    EXPECT_GT(expect_weights_equal(e, fresh), 0u);
    expect_outputs_equal(outputs_of(e), want, "refit from a checkpoint");
  }
}

// Caller tensors: a complete refit of a stripped plan, then (the engine keeping the values of its
// sources, as after any refit) an incremental one in two halves.
TEST_F(CudaRefit, FromTensorsCompleteAndIncrementalEqualAFreshCudaBuild) {
  runtime::PlanEngine fresh_a(cuda_plan("A", false)), fresh_b(cuda_plan("B", false));
  const auto want_a = outputs_of(fresh_a), want_b = outputs_of(fresh_b);
  runtime::PlanEngine e(cuda_plan("A", true));
  auto tensors_of = [&](const char* weights) {
    std::map<std::string, Tensor> out;
    for (const auto& [id, t] : build::read_sources_from_onnx(e.plan(), onnx_of(weights)))
      out[e.plan().sources[id].key] = t;
    return out;
  };
  refit::RefitRequest complete;
  complete.tensors = tensors_of("A");
  refit::refit_from(e, complete);
  EXPECT_GT(expect_weights_equal(e, fresh_a), 0u);
  expect_outputs_equal(outputs_of(e), want_a, "complete refit from tensors");

  const auto b = tensors_of("B");
  ASSERT_GE(b.size(), 2u);
  refit::RefitRequest first, second;
  first.commit.incremental = second.commit.incremental = true;
  size_t i = 0;
  for (const auto& [key, t] : b) (i++ < b.size() / 2 ? first : second).tensors[key] = t;
  refit::refit_from(e, first);
  // Half of the sources are B's: the outputs are neither A's nor B's.
  EXPECT_FALSE(transforms::bit_equal(outputs_of(e).at(0), want_a.at(0)));
  EXPECT_FALSE(transforms::bit_equal(outputs_of(e).at(0), want_b.at(0)));
  refit::refit_from(e, second);
  EXPECT_GT(expect_weights_equal(e, fresh_b), 0u);
  expect_outputs_equal(outputs_of(e), want_b, "incremental refit");
}

// Failed refits leave the outputs and the device weights as they were (A's): a checkpoint with a
// tensor of the wrong shape, a non-finite source, a failure half-way through the replay, and the
// device out of memory while the new weights are uploaded. Then a good refit still works.
TEST_F(CudaRefit, FailedRefitLeavesDeviceWeightsUnchanged) {
  runtime::PlanEngine e(cuda_plan("A", false));
  const auto outputs_a = outputs_of(e);
  const auto device_a = device_weights(e);
  ASSERT_FALSE(device_a.empty());
  auto expect_still_a = [&](const std::string& what) {
    SCOPED_TRACE(what);
    expect_device_weights_equal(device_weights(e), device_a);
    expect_outputs_equal(outputs_of(e), outputs_a, what);
  };
  const auto sources_b = build::read_sources_from_onnx(e.plan(), onnx_of("B"));

  {  // a bad source: one tensor of the checkpoint has the wrong shape (the others are B's)
    runtime::PlanEngine bound(cuda_plan_bound("A", false));
    const auto bound_outputs = outputs_of(bound);
    const auto bound_device = device_weights(bound);
    refit::Checkpoint ck = refit::Checkpoint::open(checkpoint_of("B"));
    std::map<std::string, Tensor> dict = ck.tensors();
    std::string bound_name;  // the last checkpoint tensor a binding reads
    for (const auto& s : bound.plan().sources)
      if (!s.binding.checkpoint.empty()) bound_name = s.binding.checkpoint[0].name;
    ASSERT_TRUE(dict.count(bound_name)) << bound_name;
    dict[bound_name] = test_support::random_floats({dict[bound_name].numel() + 1}, 5);
    refit::RefitRequest req;
    req.checkpoint_tensors = dict;
    EXPECT_NE(error_of([&] { refit::refit_from(bound, req); }), "");
    expect_device_weights_equal(device_weights(bound), bound_device);
    expect_outputs_equal(outputs_of(bound), bound_outputs, "checkpoint with a wrong shape");
  }
  {  // a NaN in one source
    refit::RefitRequest req;
    for (const auto& [id, t] : sources_b) req.tensors[e.plan().sources[id].key] = t.clone();
    Tensor& t = req.tensors.rbegin()->second;
    ASSERT_EQ(t.dtype(), DType::Float32);
    t.mutable_data<float>()[0] = std::nanf("");
    EXPECT_NE(error_of([&] { refit::refit_from(e, req); }), "");
    expect_still_a("a NaN source");
  }
  {  // half-way through the replay
    refit::RefitRequest req;
    for (const auto& [id, t] : sources_b) req.tensors[e.plan().sources[id].key] = t;
    size_t replayed = 0;
    req.commit.replayed = [&](const std::string& name, Tensor value) {
      if (++replayed > 3) fail("refit test: stop after three weights (at '", name, "')");
      return value;
    };
    EXPECT_NE(error_of([&] { refit::refit_from(e, req); }).find("stop after three weights"), std::string::npos);
    expect_still_a("a failure half-way through the replay");
  }
#ifdef REFORGE_HAVE_CUDA
  {  // the device runs out of memory while the new weights are uploaded
    std::vector<void*> ballast;
    size_t free_bytes = 0, total = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
    for (size_t chunk = free_bytes; chunk >= 256;) {
      void* p = nullptr;
      if (cudaMalloc(&p, chunk) == cudaSuccess) {
        ballast.push_back(p);
      } else {
        (void)cudaGetLastError();
        chunk /= 2;
      }
    }
    void* probe = nullptr;
    const bool exhausted = cudaMalloc(&probe, 256) != cudaSuccess;
    (void)cudaGetLastError();
    if (!exhausted) (void)cudaFree(probe);
    std::string err;
    if (exhausted) {
      refit::RefitRequest req;
      for (const auto& [id, t] : sources_b) req.tensors[e.plan().sources[id].key] = t;
      err = error_of([&] { refit::refit_from(e, req); });
    }
    for (void* p : ballast) (void)cudaFree(p);
    if (exhausted) {
      EXPECT_NE(err.find("out of device memory"), std::string::npos) << err;
      expect_still_a("the device out of memory during the upload");
    }
  }
#endif
  // The engine still refits.
  refit::RefitRequest req;
  for (const auto& [id, t] : sources_b) req.tensors[e.plan().sources[id].key] = t;
  refit::refit_from(e, req);
  runtime::PlanEngine fresh(cuda_plan("B", false));
  EXPECT_GT(expect_weights_equal(e, fresh), 0u);
  expect_outputs_equal(outputs_of(e), outputs_of(fresh), "refit after the failures");
}

// The command line on CUDA plans: `build --device cuda`, `inspect --nodes` shows the device and
// where each node runs, and `refit` follows the plan's device (it has no --device). Where no GPU
// can run the plan, `refit` and `run` fail before any work, naming the plan and the reason; with
// a GPU, the refit plan's weights equal a fresh CUDA build of B.
TEST(CudaPlanCli, BuildInspectRefit) {
  REQUIRE_CUDA_BUILD();
  if (!fs::exists(onnx_of("A"))) GTEST_SKIP() << "models/llama not present";
  const fs::path dir = fs::temp_directory_path() / ("reforge_cuda_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string plan_a = (dir / "a.plan").string(), plan_b = (dir / "b.plan").string();
  auto built = test_support::run_cli("build " + onnx_of("A") + " --device cuda --refit -o " + plan_a);
  ASSERT_EQ(built.status, 0) << built.output;

  auto shown = test_support::run_cli("inspect " + plan_a + " --nodes");
  ASSERT_EQ(shown.status, 0) << shown.output;
  EXPECT_NE(shown.output.find("target: cuda"), std::string::npos) << shown.output;
  EXPECT_NE(shown.output.find("on the device "), std::string::npos) << shown.output;
  EXPECT_NE(shown.output.find("reforge::ToDevice"), std::string::npos) << shown.output;
  size_t cuda_lines = 0;
  for (size_t at = shown.output.find("\n  cuda "); at != std::string::npos; at = shown.output.find("\n  cuda ", at + 1))
    ++cuda_lines;
  EXPECT_GT(cuda_lines, 10u) << shown.output;

  auto refit = test_support::run_cli("refit " + plan_a + " --weights " + onnx_of("B") + " -o " + plan_b);
  auto ran = test_support::run_cli("run " + plan_a + " --synthesize-missing --shape batch=1 --shape seq=4");
  if (const std::string why = test_support::no_gpu(); !why.empty()) {
    for (const auto* r : {&refit, &ran}) {
      EXPECT_NE(r->status, 0) << r->output;
      EXPECT_NE(r->output.find("the CUDA backend cannot run here: " + why), std::string::npos) << r->output;
      EXPECT_NE(r->output.find("plan '" + plan_a + "'"), std::string::npos) << r->output;
    }
    EXPECT_FALSE(fs::exists(plan_b));
  } else {
    ASSERT_EQ(refit.status, 0) << refit.output;
    EXPECT_NE(refit.output.find("for device cuda"), std::string::npos) << refit.output;
    EXPECT_EQ(ran.status, 0) << ran.output;
    runtime::PlanEngine e(plan::read_plan(plan_b));
    EXPECT_EQ(e.plan().build->backend, "cuda");
    runtime::PlanEngine fresh(cuda_plan("B", false));
    EXPECT_GT(expect_weights_equal(e, fresh), 0u);
    expect_outputs_equal(outputs_of(e), outputs_of(fresh), "refit from the command line");
  }
  fs::remove_all(dir);
}
