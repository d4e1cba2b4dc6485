// A tiny Llama as ONNX Runtime GenAI's model builder exports it (models/genai/llama_gqa, made by
// scripts/models/export_genai_builder.py: GroupQueryAttention with packed QKV and rotary,
// SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization, caches past_key_values.N ->
// present.N): reforge's logits equal ONNX Runtime's within 1e-4 of their scale, for the prompt
// and a decoding step on the cache it made; `generate` gives onnxruntime-genai's greedy tokens for
// each prompt alone, for both as one batch (right-padded) and on the command line; a decode window
// is refused; a CUDA build fails naming the nodes without a device kernel or, with host fallback,
// runs them on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "plan/plan.h"
#include "runtime/plan_engine.h"
#include "session/generate.h"
#include "support/cli.h"
#include "support/cuda_compare.h"
#include "support/engine_checks.h"
#include "support/make_tensor.h"
#include "support/plan_round_trip.h"

using namespace reforge;
namespace fs = std::filesystem;
using test_support::error_of;

namespace {

const fs::path kDir = fs::path(REFORGE_SOURCE_DIR) / "models/genai/llama_gqa";

Tensor ref(const std::string& name) { return read_npy((kDir / "reference" / (name + ".npy")).string()); }

std::vector<int64_t> ints(const Tensor& t) { return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel()); }

plan::Plan build_model(build::BuildOptions o = {}) {
  return build::build_plan(onnx::import_model_file((kDir / "model.onnx").string()), o);
}

runtime::PlanEngine engine(build::BuildOptions o = {}) {
  runtime::EngineOptions eo;
  eo.threads = 1;
  return runtime::PlanEngine(test_support::round_trip(build_model(o)), eo);
}

session::GenerateOptions greedy(int64_t n) {
  session::GenerateOptions o;
  o.max_new_tokens = n;
  return o;
}

Tensor ones(int64_t n) { return test_support::make<int64_t>({1, n}, std::vector<int64_t>(static_cast<size_t>(n), 1)); }

// max |a - b| / max |b|.
double relative_error(const Tensor& a, const Tensor& b) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, std::abs(a.as_double(i) - b.as_double(i)));
    scale = std::max(scale, std::abs(b.as_double(i)));
  }
  return diff / scale;
}

}  // namespace

TEST(GenaiModel, LogitsEqualOnnxRuntimeForThePromptAndADecodingStep) {
  runtime::PlanEngine e = engine();
  const Tensor prompt = ref("prompt_0");
  const int64_t n = prompt.numel();
  std::map<std::string, Tensor> feed{{"input_ids", prompt.reshaped({1, n})},
                                     {"attention_mask", ones(n)}};
  for (int l = 0; l < 2; ++l)
    for (const char* kv : {"key", "value"})
      feed["past_key_values." + std::to_string(l) + "." + kv] = Tensor::empty(DType::Float32, {1, 2, 0, 16});
  std::vector<Tensor> out = e.run(feed);
  const auto& names = e.outputs();
  std::map<std::string, Tensor> by_name;
  for (size_t i = 0; i < names.size(); ++i) by_name[names[i].name] = out[i].clone();
  const Tensor want = ref("prompt_logits");
  ASSERT_EQ(by_name["logits"].shape(), want.shape());
  const double prompt_err = relative_error(by_name["logits"], want);
  EXPECT_LT(prompt_err, 1e-4);
  EXPECT_EQ(by_name["present.0.key"].shape(), (Shape{1, 2, n, 16}));

  // The next step: its first greedy token on the cache the prompt made.
  std::map<std::string, Tensor> step{{"input_ids", test_support::make<int64_t>({1, 1}, {ints(ref("tokens_0"))[0]})},
                                     {"attention_mask", ones(n + 1)}};
  for (int l = 0; l < 2; ++l)
    for (const char* kv : {"key", "value"})
      step["past_key_values." + std::to_string(l) + "." + kv] =
          by_name["present." + std::to_string(l) + "." + kv];
  out = e.run(step);
  const Tensor decode = out[0].clone();
  ASSERT_EQ(decode.shape(), ref("decode_logits").shape());
  const double decode_err = relative_error(decode, ref("decode_logits"));
  EXPECT_LT(decode_err, 1e-4);
  std::printf("  logits vs ONNX Runtime: prompt %.3g, decoding step %.3g (of the largest logit)\n", prompt_err,
              decode_err);
}

TEST(GenaiModel, GenerateGivesOnnxRuntimeGenAIsTokens) {
  runtime::PlanEngine e = engine();
  const session::DecoderLayout l = session::decoder_layout(e.engine());
  EXPECT_TRUE(l.right_padded);
  EXPECT_EQ(l.attention_mask, "attention_mask");
  EXPECT_EQ(l.position_ids, "");
  EXPECT_EQ(l.cache.size(), 4u);
  EXPECT_EQ(l.vocab, 256);
  const std::vector<int64_t> a = ints(ref("prompt_0")), b = ints(ref("prompt_1"));
  ASSERT_NE(a.size(), b.size());
  const Tensor batch = ref("batch_tokens");
  EXPECT_EQ(session::generate(e, {a}, greedy(16)).tokens.at(0), ints(ref("tokens_0")));
  EXPECT_EQ(session::generate(e, {b}, greedy(16)).tokens.at(0), ints(ref("tokens_1")));
  const auto both = session::generate(e, {a, b}, greedy(16)).tokens;
  const std::vector<int64_t> rows = ints(batch);
  EXPECT_EQ(both.at(0), std::vector<int64_t>(rows.begin(), rows.begin() + 16));
  EXPECT_EQ(both.at(1), std::vector<int64_t>(rows.begin() + 16, rows.end()));
  // The shorter prompt first: its row is the one right-padded, then the other way round.
  const auto swapped = session::generate(e, {b, a}, greedy(16)).tokens;
  EXPECT_EQ(swapped.at(0), ints(ref("tokens_1")));
  EXPECT_EQ(swapped.at(1), ints(ref("tokens_0")));

  session::GenerateOptions windowed = greedy(4);
  windowed.window = 8;
  const std::string err = error_of([&] { session::generate(e, {a}, windowed); });
  EXPECT_NE(err.find("GroupQueryAttention"), std::string::npos) << err;
}

TEST(GenaiModel, GenerateOnTheCommandLine) {
  const std::string model = (kDir / "model.onnx").string();
  const std::string p0 = (kDir / "reference/prompt_0.npy").string(), p1 = (kDir / "reference/prompt_1.npy").string();
  const auto r = test_support::run_cli("generate " + model + " --input-ids " + p0 + " --input-ids " + p1 +
                                       " --max-new-tokens 16 --threads 1 -q");
  ASSERT_EQ(r.status, 0) << r.output;
  std::string want;
  for (const char* t : {"tokens_0", "tokens_1"}) {
    const std::vector<int64_t> v = ints(ref(t));
    for (size_t i = 0; i < v.size(); ++i) want += (i ? " " : "") + std::to_string(v[i]);
    want += "\n";
  }
  EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
}

// GroupQueryAttention and the RMS norms have no CUDA kernels: a CUDA build names them, or with
// host fallback places them on the host (the build needs no GPU; generating does).
TEST(GenaiModel, CudaBuildNamesTheNodesOrRunsThemOnTheHost) {
  REQUIRE_CUDA_BUILD();
  build::BuildOptions o;
  o.backend = "cuda";
  const std::string err = error_of([&] { build_model(o); });
  EXPECT_NE(err.find("cannot run on backend 'cuda'"), std::string::npos) << err;
  EXPECT_NE(err.find("(com.microsoft::GroupQueryAttention)"), std::string::npos) << err;
  EXPECT_NE(err.find("--allow-cpu-fallback"), std::string::npos) << err;
  o.host_fallback = true;
  const plan::Plan p = build_model(o);
  const auto where = plan::node_backends(p);
  size_t gqa = 0;
  for (size_t i = 0; i < p.graph.nodes.size(); ++i)
    if (p.graph.nodes[i].op_type == "GroupQueryAttention") {
      ++gqa;
      EXPECT_EQ(where[i], "cpu") << p.graph.nodes[i].name;
    }
  EXPECT_EQ(gqa, 2u);
  REQUIRE_GPU();
  runtime::PlanEngine e(test_support::round_trip(p));
  EXPECT_EQ(session::generate(e, {ints(ref("prompt_0"))}, greedy(16)).tokens.at(0), ints(ref("tokens_0")));
}
