// Generation while refits alternate two checkpoints (runtime/plan_engine.h's concurrency contract,
// session/generate.h's GenerateResult::weights). A real `transformers` export (models/hf/
// llama_decode: a grouped-query Llama decode step, checkpoints A and B, PyTorch's greedy tokens
// for each) generates in a loop on one thread while another refits it from A's and B's tensors in
// memory, alternately, over a thousand times, every fifth refit failing half-way on purpose. Each
// token's step ran on one whole weight version: the version the generation logs for it is one a
// refit committed (never a failed refit's), and the tokens equal those of a reference engine
// holding A and B as two versions, generating with the same version at each step. The
// reference's tokens with A alone and B alone equal PyTorch's, so the check is independent of
// reforge where it matters. On the CPU and, where a GPU is usable, on CUDA. Built for
// ThreadSanitizer too (REFORGE_TSAN).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "builder/binding.h"
#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "refit/checkpoint_refit.h"
#include "refit/refit_from.h"
#include "refit/refitter.h"
#include "refit/safetensors.h"
#include "runtime/plan_engine.h"
#include "session/generate.h"
#include "support/cuda_compare.h"
#include "support/engine_checks.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

const fs::path kDir = fs::path(REFORGE_SOURCE_DIR) / "models" / "hf" / "llama_decode";

std::vector<int64_t> ints_of(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = static_cast<int64_t>(t.as_double(i));
  return v;
}

std::vector<int64_t> reference(const std::string& weights, const char* what) {
  return ints_of(read_npy((kDir / "reference" / weights / what).string()));
}

std::string checkpoint(const std::string& weights) {
  return (kDir / ("checkpoint_" + weights + ".safetensors")).string();
}

// The checkpoint's tensors, copied into memory of their own (a trainer's state dict).
std::map<std::string, Tensor> tensors_of(const std::string& weights) {
  const refit::Checkpoint ck = refit::Checkpoint::open(checkpoint(weights));
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : ck.tensors()) out[name] = t.clone();
  return out;
}

plan::Plan refit_plan(const char* backend) {
  build::BuildOptions o;
  o.backend = backend;
  o.mode = plan::BuildMode::Refit;
  return build::build_plan_with_checkpoint(onnx::import_model_file((kDir / "A" / "model.onnx").string()), o,
                                           refit::Checkpoint::open(checkpoint("A")), {});
}

session::GenerateOptions greedy(int64_t n) {
  session::GenerateOptions o;
  o.max_new_tokens = n;
  o.window = 0;
  return o;
}

class GenerateDuringRefits : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "cuda")
      if (std::string why = test_support::no_gpu(); !why.empty()) GTEST_SKIP() << why;
    if (!fs::exists(kDir / "reference" / "B" / "tokens.npy")) GTEST_SKIP() << "models/hf/llama_decode not present";
  }
};

}  // namespace

TEST_P(GenerateDuringRefits, EveryTokenComesFromOneWholeVersion) {
  const char* backend = GetParam();
  const plan::Plan p = refit_plan(backend);
  runtime::EngineOptions eo;
  eo.threads = 1;
  const std::map<std::string, Tensor> a = tensors_of("A"), b = tensors_of("B");

  // The reference: one engine holding A (current) and B (a second version).
  runtime::PlanEngine ref(p, eo);
  const runtime::PlanEngine::Version ref_a = ref.current_version();
  runtime::PlanEngine::Version ref_b;
  {
    refit::Refitter r(ref);
    refit::set_sources(r, refit::sources_from_checkpoint(p, refit::Checkpoint::from_tensors(b, "B")));
    ref_b = ref.derive_version(ref_a, r.stage({}).update);
  }
  const std::vector<int64_t> prompt = reference("A", "prompt_ids.npy");
  const int64_t n = 8;
  // Tokens of the prompt with version `weights[k]` ('A' or 'B') at step k.
  std::map<std::pair<std::vector<int64_t>, std::string>, std::vector<int64_t>> memo;
  auto reference_tokens = [&](const std::vector<int64_t>& at_prompt, const std::string& weights) {
    std::vector<int64_t>& t = memo[{at_prompt, weights}];
    if (t.empty()) {
      session::GenerateOptions o = greedy(static_cast<int64_t>(weights.size()));
      o.version_at = [&](int64_t step) { return weights.at(static_cast<size_t>(step)) == 'A' ? ref_a : ref_b; };
      t = session::generate(ref, {at_prompt}, o).tokens.at(0);
    }
    return t;
  };
  // Independent of reforge: each version alone gives PyTorch's tokens.
  for (const std::string w : {"A", "B"}) {
    const std::vector<int64_t> want = reference(w, "tokens.npy");
    EXPECT_EQ(reference_tokens(reference(w, "prompt_ids.npy"), std::string(want.size(), w[0])), want)
        << "the reference engine's version " << w << " against PyTorch";
  }
  const std::vector<int64_t> only_a = reference_tokens(prompt, std::string(n, 'A')),
                             only_b = reference_tokens(prompt, std::string(n, 'B'));
  ASSERT_NE(only_a, only_b) << "the two checkpoints give the same tokens: the test could not see a mix";

  // The engine under test, A's weights current; its versions by generation, as refits commit them.
  runtime::PlanEngine e(p, eo);
  std::mutex label_mutex;
  std::map<uint64_t, char> label{{e.current_version().generation(), 'A'}};
  std::atomic<bool> stop{false};
  std::atomic<int> committed{0}, failed{0};
  std::string refit_error;  // read after the join; refit_failed says so before
  std::atomic<bool> refit_failed{false};
  std::thread refits([&] {
    try {
      for (int i = 0; !stop.load(); ++i) {
        const bool to_b = i % 2 == 0;
        refit::RefitRequest req;
        req.checkpoint_tensors = to_b ? b : a;
        const uint64_t before = e.current_version().generation();
        if (i % 5 == 4) {  // fails after its third replayed weight: nothing may change
          int seen = 0;
          req.commit.replayed = [&](const std::string& name, Tensor v) {
            if (++seen > 3) fail("stress test: refit stopped at engine weight '", name, "'");
            return v;
          };
          const std::string err = test_support::error_of([&] { refit::refit_from(e, req); });
          if (err.find("stress test: refit stopped") == std::string::npos)
            fail("the injected failure did not fail the refit: ", err.empty() ? "(no error)" : err);
          if (e.current_version().generation() != before) fail("a failed refit changed the engine's version");
          ++failed;
          continue;
        }
        refit::refit_from(e, req);
        {
          std::lock_guard<std::mutex> lock(label_mutex);
          label[e.current_version().generation()] = to_b ? 'B' : 'A';
        }
        ++committed;
      }
    } catch (const std::exception& ex) {
      refit_error = ex.what();
      refit_failed = true;
    }
  });
  struct Generated {
    std::vector<int64_t> tokens;
    std::vector<uint64_t> weights;
  };
  std::vector<Generated> runs;
  const auto t0 = std::chrono::steady_clock::now();
  // At least 1,000 refits and 100 generations, at most 60 s.
  while ((committed.load() + failed.load() < 1000 || runs.size() < 100) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60) && !refit_failed.load()) {
    const session::GenerateResult r = session::generate(e, {prompt}, greedy(n));
    runs.push_back({r.tokens.at(0), r.weights.at(0)});
  }
  stop = true;
  refits.join();
  ASSERT_TRUE(refit_error.empty()) << refit_error;
  EXPECT_GE(runs.size(), 100u);
  EXPECT_GT(failed.load(), 0);

  size_t mixed = 0;
  for (size_t g = 0; g < runs.size(); ++g) {
    const Generated& run = runs[g];
    ASSERT_EQ(run.tokens.size(), static_cast<size_t>(n)) << "generation " << g;
    ASSERT_EQ(run.weights.size(), run.tokens.size()) << "generation " << g;
    std::string schedule;
    for (uint64_t w : run.weights) {
      auto it = label.find(w);
      ASSERT_NE(it, label.end()) << "generation " << g << " ran a step on version " << w
                                 << ", which no refit committed";
      schedule += it->second;
    }
    mixed += schedule.find('A') != std::string::npos && schedule.find('B') != std::string::npos;
    EXPECT_EQ(run.tokens, reference_tokens(prompt, schedule))
        << "generation " << g << " (versions by step " << schedule << ") made tokens no version made";
  }
  std::cout << "[          ] " << backend << ": " << runs.size() << " generations (" << mixed
            << " across a refit), " << committed.load() << " refits committed, " << failed.load()
            << " failed on purpose\n";
}

INSTANTIATE_TEST_SUITE_P(Backends, GenerateDuringRefits, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });
