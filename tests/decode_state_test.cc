// A real Hugging Face Llama decode step (models/hf/llama_decode, made by
// scripts/models/export_hf_decode.py: LlamaForCausalLM, 2 layers, past/present key-values, seq and
// past symbolic) decoded greedily through a runtime::State: the tokens equal PyTorch's
// (model.generate after load_state_dict of the checkpoint) and each chosen-from logits row is
// within 1e-4 of PyTorch's; the four caches are written in place (Concat declares it) and after
// the first decode step no run allocates a tensor. Then the plan is refit to checkpoint B and the
// same State, reset, decodes B's tokens. On CUDA (skipped without a GPU) the same, with the caches
// in device memory for the whole sequence (no step copies them to or from the host).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "builder/builder.h"
#include "builder/binding.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "refit/checkpoint_refit.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "runtime/state.h"
#include "support/cuda_compare.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

const fs::path kDir = fs::path(REFORGE_SOURCE_DIR) / "models/hf/llama_decode";

Tensor ids_tensor(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty(DType::Int64, {1, static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.mutable_data<int64_t>());
  return t;
}

// Greedy decoding of `weights`' reference prompt; checks tokens, logits and (on the host) the
// runs' allocations.
void decode_and_compare(const runtime::PlanEngine& e, runtime::State& state, const std::string& weights,
                        bool host = true) {
  const fs::path ref = kDir / "reference" / weights;
  const Tensor prompt = read_npy((ref / "prompt_ids.npy").string());
  const Tensor want_tokens = read_npy((ref / "tokens.npy").string());
  const Tensor want_logits = read_npy((ref / "step_logits.npy").string());
  const int64_t steps = want_tokens.numel(), vocab = want_logits.dim(1);
  std::vector<int64_t> ids(prompt.data<int64_t>(), prompt.data<int64_t>() + prompt.numel());
  int64_t position = 0;
  runtime::RunOptions ro;
  ro.state = &state;
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<int64_t> pos(ids.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = position + static_cast<int64_t>(i);
    const std::vector<Tensor> out = e.run({{"input_ids", ids_tensor(ids)}, {"position_ids", ids_tensor(pos)}}, ro);
    const int64_t allocations = e.stats().last_run_allocations;
    position += static_cast<int64_t>(ids.size());
    EXPECT_EQ(state.length(), position);
    const Tensor& logits = out[0];  // [1, seq, vocab]
    ASSERT_EQ(logits.dim(2), vocab);
    const float* last = logits.data<float>() + (logits.dim(1) - 1) * vocab;
    double worst = 0;
    int64_t best = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      worst = std::max(worst, std::fabs(double(last[v]) - double(want_logits.data<float>()[step * vocab + v])));
      if (last[v] > last[best]) best = v;
    }
    EXPECT_LE(worst, 1e-4) << weights << " step " << step;
    EXPECT_EQ(best, want_tokens.as_int64(step)) << weights << " step " << step;
    // Warm-up: the prompt (its arena and output buffers) and the first decode step (its arena).
    if (host && step >= 2) EXPECT_EQ(allocations, 0) << weights << " step " << step;
    ids = {best};
  }
}

runtime::PlanEngine refittable_engine(const char* backend) {
  build::BuildOptions bo;
  bo.mode = plan::BuildMode::Refit;
  bo.backend = backend;
  plan::Plan p = build::build_plan_with_checkpoint(onnx::import_model_file((kDir / "A/model.onnx").string()), bo,
                                                   refit::Checkpoint::open((kDir / "checkpoint_A.safetensors").string()),
                                                   {});
  runtime::EngineOptions eo;
  eo.threads = 1;
  return runtime::PlanEngine(std::move(p), eo);
}

void refit_to_b(runtime::PlanEngine& e) {
  refit::Refitter r(e);
  refit::set_sources(r, refit::sources_from_checkpoint(
                            e.plan(), refit::Checkpoint::open((kDir / "checkpoint_B.safetensors").string())));
  r.commit();
}

TEST(DecodeState, GreedyTokensEqualPyTorchAndStepsAllocateNothing) {
  runtime::PlanEngine e = refittable_engine("cpu");
  runtime::StateOptions so;
  so.max_length = 32;
  runtime::State state(e.engine(), so);
  ASSERT_EQ(state.pairs().size(), 4u);  // past.i.key/value -> present.i.key/value, by structure
  decode_and_compare(e, state, "A");
  // In place: one buffer per cache; plus the logits' buffer.
  EXPECT_EQ(state.allocations(), 5);

  // New weights into the same engine; a new sequence on the same State.
  refit_to_b(e);
  state.reset();
  decode_and_compare(e, state, "B");
  EXPECT_EQ(state.allocations(), 5);
}

// On CUDA the caches live in device memory: the past goes to the kernels as it is and the present
// is written into the State's second buffer (the two swap each step), so no step moves a cache
// between host and device; a run returns the present as device views.
TEST(DecodeState, CudaCachesStayOnTheDevice) {
  if (std::string why = test_support::no_gpu(); !why.empty()) GTEST_SKIP() << why;
  runtime::PlanEngine e = refittable_engine("cuda");
  runtime::StateOptions so;
  so.max_length = 32;
  runtime::State state(e.engine(), so);
  ASSERT_EQ(state.pairs().size(), 4u);
  for (const auto& pair : state.pairs())
    EXPECT_EQ(state.value(pair.input).memory(), Memory::Device) << pair.input;
  decode_and_compare(e, state, "A", false);
  // Two device buffers per cache, made by the first two runs; nothing after.
  EXPECT_EQ(state.allocations(), 8);
  const Tensor past = to_host(state.value("past.0.key"));
  EXPECT_EQ(past.dim(2), state.length());
  refit_to_b(e);
  state.reset();
  decode_and_compare(e, state, "B", false);
  EXPECT_EQ(state.allocations(), 8);
}

}  // namespace
