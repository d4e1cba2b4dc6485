// session::generate on the real Hugging Face Llama decode export (models/hf/llama_decode, made by
// scripts/models/export_hf_decode.py with `transformers`): greedy tokens equal PyTorch's
// model.generate for checkpoints A and B (B through a refit of the same engine); sampling is
// reproducible from its seed and draws in proportion to the softmax; stop tokens end a sequence;
// several prompts give what each gives alone; bad input is refused naming it.
#include "session/generate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "builder/binding.h"
#include "builder/builder.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "refit/checkpoint_refit.h"
#include "refit/refitter.h"
#include "session/generate_bench.h"
#include "support/cli.h"
#include "support/cuda_compare.h"
#include "support/make_tensor.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

const fs::path kDir = fs::path(REFORGE_SOURCE_DIR) / "models/hf/llama_decode";

std::vector<int64_t> ints_of(const Tensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

std::vector<int64_t> reference(const char* weights, const char* what) {
  return ints_of(read_npy((kDir / "reference" / weights / what).string()));
}

runtime::PlanEngine engine() {
  build::BuildOptions bo;
  bo.mode = plan::BuildMode::Refit;
  runtime::EngineOptions eo;
  eo.threads = 1;
  return runtime::PlanEngine(
      build::build_plan_with_checkpoint(onnx::import_model_file((kDir / "A/model.onnx").string()), bo,
                                        refit::Checkpoint::open((kDir / "checkpoint_A.safetensors").string()), {}),
      eo);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A reference folder's batch (batch_prompt_ids.npy left-padded under batch_attention_mask.npy):
// each prompt's own tokens, and PyTorch's generated tokens of the batch, one row per prompt.
struct BatchReference {
  std::vector<std::vector<int64_t>> prompts;
  Tensor tokens;
  std::vector<int64_t> row(size_t r) const {
    const int64_t n = tokens.dim(1);
    return std::vector<int64_t>(tokens.data<int64_t>() + static_cast<int64_t>(r) * n,
                                tokens.data<int64_t>() + static_cast<int64_t>(r + 1) * n);
  }
};

BatchReference batch_reference(const fs::path& dir) {
  const Tensor padded = read_npy((dir / "batch_prompt_ids.npy").string());
  const Tensor mask = read_npy((dir / "batch_attention_mask.npy").string());
  BatchReference b;
  b.tokens = read_npy((dir / "batch_tokens.npy").string());
  b.prompts.resize(static_cast<size_t>(padded.dim(0)));
  for (int64_t r = 0; r < padded.dim(0); ++r)
    for (int64_t i = 0; i < padded.dim(1); ++i)
      if (mask.as_int64(r * padded.dim(1) + i))
        b.prompts[static_cast<size_t>(r)].push_back(padded.as_int64(r * padded.dim(1) + i));
  return b;
}

session::GenerateOptions greedy(int64_t n) {
  session::GenerateOptions o;
  o.max_new_tokens = n;
  return o;
}

}  // namespace

TEST(Generate, GreedyTokensEqualPyTorchBeforeAndAfterARefit) {
  runtime::PlanEngine e = engine();
  const session::DecoderLayout l = session::decoder_layout(e.engine());
  EXPECT_EQ(l.position_ids, "position_ids");
  EXPECT_EQ(l.attention_mask, "");
  EXPECT_EQ(l.cache.size(), 4u);
  EXPECT_EQ(l.vocab, 128);
  const auto want_a = reference("A", "tokens.npy"), want_b = reference("B", "tokens.npy");
  const auto prompt = reference("A", "prompt_ids.npy");
  ASSERT_EQ(prompt, reference("B", "prompt_ids.npy"));
  const auto a = session::generate(e, {prompt}, greedy(static_cast<int64_t>(want_a.size())));
  EXPECT_EQ(a.tokens.at(0), want_a);
  EXPECT_EQ(a.first_token_ms.size(), 1u);
  EXPECT_EQ(a.step_ms.size(), want_a.size() - 1);

  refit::Refitter r(e);
  refit::set_sources(r, refit::sources_from_checkpoint(
                            e.plan(), refit::Checkpoint::open((kDir / "checkpoint_B.safetensors").string())));
  r.commit();
  EXPECT_EQ(session::generate(e, {prompt}, greedy(static_cast<int64_t>(want_b.size()))).tokens.at(0), want_b);
  EXPECT_NE(want_a, want_b);
}

// --bench's account (session/generate_bench.h) on the Llama export (2 layers, 2 key-value heads
// of 16 values, float32): the cache's bytes per token from its config, the weights' from the
// plan, the tokens those of a plain generation, timings and the bandwidth share positive.
TEST(Generate, BenchCountsTheCacheAndWeightBytesOfTheExport) {
  runtime::PlanEngine e = engine();
  const auto prompt = reference("A", "prompt_ids.npy"), want = reference("A", "tokens.npy");
  const session::GenerateBenchResult b = session::bench_generate(e, {prompt}, greedy(6), 2);
  EXPECT_EQ(b.rounds, 2);
  EXPECT_EQ(b.batch, 1);
  EXPECT_EQ(b.prompt_tokens, static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(b.new_tokens, 6);
  ASSERT_EQ(b.tokens.size(), 1u);
  EXPECT_EQ(b.tokens[0], std::vector<int64_t>(want.begin(), want.begin() + 6));
  EXPECT_EQ(b.cache_bytes_per_token, 2.0 * 2 * 2 * 16 * 4);  // layers x (key, value) x heads x head size x float32
  double weights = 0;
  for (const plan::WeightEntry& w : e.plan().weights)
    weights += static_cast<double>(shape_numel(w.shape)) * static_cast<double>(dtype_size(w.dtype));
  EXPECT_EQ(b.weight_bytes, weights);
  EXPECT_DOUBLE_EQ(b.step_bytes, weights + b.cache_bytes_per_token * (static_cast<double>(prompt.size()) + 3.0));
  EXPECT_EQ(b.memory, "host");
  EXPECT_GT(b.first_token_ms, 0);
  EXPECT_GT(b.step_ms_p50, 0);
  EXPECT_GE(b.step_ms_p90, b.step_ms_p50);
  EXPECT_GT(b.copy_gb_s, 0);
  EXPECT_GT(b.bandwidth_fraction, 0);
  EXPECT_NE(error_of([&] { session::bench_generate(e, {prompt}, greedy(6), 0); }).find("rounds is 0"),
            std::string::npos);
}

TEST(Generate, PromptsRunAsTheyWouldAloneAndStopTokensEndThem) {
  runtime::PlanEngine e = engine();
  const auto prompt = reference("A", "prompt_ids.npy"), want = reference("A", "tokens.npy");
  const std::vector<int64_t> shorter(prompt.begin(), prompt.begin() + 3);
  const auto alone = session::generate(e, {shorter}, greedy(8)).tokens.at(0);
  const auto both = session::generate(e, {prompt, shorter}, greedy(8)).tokens;
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0], std::vector<int64_t>(want.begin(), want.begin() + 8));
  EXPECT_EQ(both[1], alone);

  // The first token that did not occur before it, as a stop token: the sequence ends with it.
  size_t at = 1;
  while (at < want.size() && std::find(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(at), want[at]) !=
                                 want.begin() + static_cast<std::ptrdiff_t>(at))
    ++at;
  ASSERT_LT(at, want.size());
  session::GenerateOptions o = greedy(static_cast<int64_t>(want.size()));
  o.stop_tokens = {want[at]};
  std::vector<int64_t> streamed;
  o.on_token = [&](size_t p, int64_t t) {
    EXPECT_EQ(p, 0u);
    streamed.push_back(t);
    return true;
  };
  const auto stopped = session::generate(e, {prompt}, o).tokens.at(0);
  EXPECT_EQ(stopped, std::vector<int64_t>(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(at) + 1));
  EXPECT_EQ(streamed, stopped);
}

TEST(Generate, SamplingIsReproducibleFromItsSeed) {
  runtime::PlanEngine e = engine();
  const auto prompt = reference("A", "prompt_ids.npy"), want = reference("A", "tokens.npy");
  session::GenerateOptions o = greedy(16);
  o.sampling.temperature = 1.5;
  o.sampling.top_p = 0.95;
  o.sampling.seed = 7;
  const auto first = session::generate(e, {prompt}, o).tokens.at(0);
  EXPECT_EQ(session::generate(e, {prompt}, o).tokens.at(0), first);
  bool differs = false;
  for (uint64_t seed = 8; seed < 12; ++seed) {
    o.sampling.seed = seed;
    differs |= session::generate(e, {prompt}, o).tokens.at(0) != first;
  }
  EXPECT_TRUE(differs) << "five seeds drew the same 16 tokens at temperature 1.5";
  // top_k = 1 is greedy whatever the temperature.
  o.sampling.top_k = 1;
  const auto k1 = session::generate(e, {prompt}, o).tokens.at(0);
  ASSERT_EQ(k1.size(), 16u);
  EXPECT_EQ(std::vector<int64_t>(k1.begin(), k1.begin() + static_cast<std::ptrdiff_t>(want.size())), want);
}

// The draws follow the softmax of the logits over the temperature, cut to top_k and top_p.
TEST(Generate, SampleTokenDrawsFromTheSoftmax) {
  Tensor logits = Tensor::empty(DType::Float32, {1, 4});
  const float v[] = {0.0f, std::log(3.0f), -50.0f, std::log(2.0f)};  // p = 1/6, 3/6, ~0, 2/6
  std::copy(v, v + 4, logits.mutable_data<float>());
  auto frequencies = [&](session::Sampling s) {
    std::mt19937_64 rng(s.seed);
    std::vector<double> f(4, 0);
    const int n = 20000;
    for (int i = 0; i < n; ++i) f[static_cast<size_t>(session::sample_token(logits, 0, s, rng))] += 1;
    for (double& x : f) x /= n;
    return f;
  };
  session::Sampling s;
  s.temperature = 1;
  auto f = frequencies(s);
  EXPECT_NEAR(f[0], 1.0 / 6, 0.01);
  EXPECT_NEAR(f[1], 3.0 / 6, 0.01);
  EXPECT_NEAR(f[3], 2.0 / 6, 0.01);
  s.top_k = 2;  // 1 and 3 only: 3/5, 2/5
  f = frequencies(s);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_NEAR(f[1], 0.6, 0.01);
  s.top_k = 0;
  s.top_p = 0.5;  // token 1 alone reaches 0.5
  f = frequencies(s);
  EXPECT_EQ(f[1], 1.0);
  s.top_p = 1;
  s.temperature = 0;  // greedy
  f = frequencies(s);
  EXPECT_EQ(f[1], 1.0);
}

TEST(Generate, BadInputIsRefusedNamingIt) {
  runtime::PlanEngine e = engine();
  EXPECT_NE(error_of([&] { session::generate(e, {{}}, greedy(4)); }).find("prompt 0 is empty"), std::string::npos);
  EXPECT_NE(error_of([&] {
              session::generate(e, {{1, 500}}, greedy(4));
            }).find("token id 500, outside the vocabulary"),
            std::string::npos);
  session::GenerateOptions o = greedy(4);
  o.sampling.top_p = 0;
  EXPECT_NE(error_of([&] { session::generate(e, {{1}}, o); }).find("top_p"), std::string::npos);
  EXPECT_NE(error_of([&] { session::generate(e, {{1}}, greedy(0)); }).find("max_new_tokens"), std::string::npos);
  // A model without a cache: the whole-sequence Llama export.
  const fs::path whole = fs::path(REFORGE_SOURCE_DIR) / "models/llama/dynamo/A/model.onnx";
  runtime::PlanEngine w(build::build_plan(onnx::import_model_file(whole.string()), {}));
  const std::string err = error_of([&] { session::generate(w, {{1, 2}}, greedy(2)); });
  EXPECT_NE(err.find("carries no cache"), std::string::npos) << err;
}

// The command line: `reforge generate` streams the tokens, --json prints them with timings, and a
// file of anything but token ids is refused naming the flag.
TEST(GenerateCli, TokensEqualPyTorch) {
  const fs::path dir = fs::temp_directory_path() / ("reforge_generate_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string model = (kDir / "A/model.onnx").string(), ids = (kDir / "reference/A/prompt_ids.npy").string();
  const auto want = reference("A", "tokens.npy");
  std::string line;
  for (int64_t t : want) line += (line.empty() ? "" : " ") + std::to_string(t);
  auto r = test_support::run_cli("generate " + model + " --input-ids " + ids + " --max-new-tokens 12 --threads 1 -q");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, line + "\n");
  r = test_support::run_cli("generate " + model + " --input-ids " + ids + " --max-new-tokens 12 --json -q");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["tokens"][0].get<std::vector<int64_t>>(), want);
  EXPECT_GT(j["step_ms_p50"].get<double>(), 0.0);
  // Prompts of different lengths, a file each: one batch, equal to PyTorch's left-padded batch.
  const fs::path g = fs::path(REFORGE_SOURCE_DIR) / "models/hf/gpt2_generate";
  const Tensor padded = read_npy((g / "reference/A/batch_prompt_ids.npy").string());
  const Tensor mask = read_npy((g / "reference/A/batch_attention_mask.npy").string());
  const Tensor batch = read_npy((g / "reference/A/batch_tokens.npy").string());
  std::string files, lines;
  for (int64_t r = 0; r < padded.dim(0); ++r) {
    std::vector<int64_t> p;
    for (int64_t i = 0; i < padded.dim(1); ++i)
      if (mask.as_int64(r * padded.dim(1) + i)) p.push_back(padded.as_int64(r * padded.dim(1) + i));
    Tensor t = Tensor::empty(DType::Int64, {static_cast<int64_t>(p.size())});
    std::copy(p.begin(), p.end(), t.mutable_data<int64_t>());
    const std::string f = (dir / ("p" + std::to_string(r) + ".npy")).string();
    write_npy(f, t);
    files += " --input-ids " + f;
    for (int64_t i = 0; i < batch.dim(1); ++i)
      lines += (i ? " " : "") + std::to_string(batch.as_int64(r * batch.dim(1) + i));
    lines += "\n";
  }
  r = test_support::run_cli("generate " + (g / "A/model.onnx").string() + files + " --max-new-tokens " +
                            std::to_string(batch.dim(1)) + " -q");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, lines);
  const std::string floats = (dir / "floats.npy").string();
  write_npy(floats, test_support::random_floats({3}, 1));
  r = test_support::run_cli("generate " + model + " --input-ids " + floats + " -q");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--input-ids '" + floats + "' holds float32[3]"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// Every real decode export (models/hf: Llama with grouped-query heads, dynamo layout; GPT-2 with
// learned positions and Qwen2 with grouped-query heads, optimum's layout with an attention mask
// and a symbolic batch), on the CPU and on CUDA (skipped without a GPU): the greedy tokens equal
// PyTorch's model.generate (12 tokens for the Llama, 64 for the others).
struct Export {
  const char* dir;        // under models/hf
  const char* model;      // the ONNX file under it
  const char* reference;  // the folder of prompt_ids.npy and tokens.npy
};

class GenerateExports : public ::testing::TestWithParam<std::tuple<Export, const char*>> {};

// A baked plan of export `x` (in folder `d`) for `backend`, one thread; `replay` records device work.
runtime::PlanEngine export_engine(const fs::path& d, const Export& x, const char* backend, bool replay = false) {
  build::BuildOptions bo;
  bo.backend = backend;
  runtime::EngineOptions eo;
  eo.threads = 1;
  eo.device_replay = replay;
  return runtime::PlanEngine(build::build_plan(onnx::import_model_file((d / x.model).string()), bo), eo);
}

TEST_P(GenerateExports, GreedyTokensEqualPyTorch) {
  const auto& [x, backend] = GetParam();
  if (std::string(backend) == "cuda")
    if (std::string why = test_support::no_gpu(); !why.empty()) GTEST_SKIP() << why;
  const fs::path d = fs::path(REFORGE_SOURCE_DIR) / "models/hf" / x.dir;
  runtime::PlanEngine e = export_engine(d, x, backend);
  const auto want = ints_of(read_npy((d / x.reference / "tokens.npy").string()));
  const auto prompt = ints_of(read_npy((d / x.reference / "prompt_ids.npy").string()));
  EXPECT_EQ(session::generate(e, {prompt}, greedy(static_cast<int64_t>(want.size()))).tokens.at(0), want);
}

// A batch of three prompts of different lengths (9, 5, 7 tokens) through the exports that take
// batches under an attention mask: the tokens equal PyTorch's generate of the same left-padded
// batch, and each row what its prompt gives alone.
TEST_P(GenerateExports, BatchOfPromptsEqualsPyTorchsBatch) {
  const auto& [x, backend] = GetParam();
  const fs::path d = fs::path(REFORGE_SOURCE_DIR) / "models/hf" / x.dir;
  if (!fs::exists(d / x.reference / "batch_tokens.npy")) GTEST_SKIP() << x.dir << " has no batch reference";
  if (std::string(backend) == "cuda")
    if (std::string why = test_support::no_gpu(); !why.empty()) GTEST_SKIP() << why;
  runtime::PlanEngine e = export_engine(d, x, backend);
  const BatchReference b = batch_reference(d / x.reference);
  const int64_t n = b.tokens.dim(1);
  ASSERT_NE(b.prompts[0].size(), b.prompts[1].size());
  const auto got = session::generate(e, b.prompts, greedy(n));
  EXPECT_EQ(got.step_ms.size(), static_cast<size_t>(n - 1)) << "the prompts did not run as one batch";
  for (size_t r = 0; r < b.prompts.size(); ++r) {
    EXPECT_EQ(got.tokens[r], b.row(r)) << "row " << r;
    EXPECT_EQ(session::generate(e, {b.prompts[r]}, greedy(n)).tokens[0], b.row(r)) << "row " << r << " alone";
  }
}

// A refittable plan of each export, built with its own checkpoint and refit from the other one,
// generates PyTorch's tokens of the other weights (as a baked build of them does).
TEST_P(GenerateExports, RefitToTheOtherCheckpointGeneratesItsTokens) {
  const auto& [x, backend] = GetParam();
  if (std::string(backend) == "cuda")
    if (std::string why = test_support::no_gpu(); !why.empty()) GTEST_SKIP() << why;
  const fs::path d = fs::path(REFORGE_SOURCE_DIR) / "models/hf" / x.dir;
  const std::string own = std::string(x.model).substr(0, 1), other = own == "A" ? "B" : "A";
  if (!fs::exists(d / ("checkpoint_" + other + ".safetensors")) || !fs::exists(d / "reference" / other / "tokens.npy"))
    GTEST_SKIP() << x.dir << " has no second checkpoint with a reference";
  build::BuildOptions bo;
  bo.backend = backend;
  bo.mode = plan::BuildMode::Refit;
  runtime::EngineOptions eo;
  eo.threads = 1;
  runtime::PlanEngine e(
      build::build_plan_with_checkpoint(onnx::import_model_file((d / x.model).string()), bo,
                                        refit::Checkpoint::open((d / ("checkpoint_" + own + ".safetensors")).string()),
                                        {}),
      eo);
  refit::Refitter r(e);
  refit::set_sources(r, refit::sources_from_checkpoint(
                            e.plan(), refit::Checkpoint::open((d / ("checkpoint_" + other + ".safetensors")).string())));
  r.commit();
  const auto want = ints_of(read_npy((d / "reference" / other / "tokens.npy").string()));
  const auto prompt = ints_of(read_npy((d / "reference" / other / "prompt_ids.npy").string()));
  EXPECT_EQ(session::generate(e, {prompt}, greedy(static_cast<int64_t>(want.size()))).tokens.at(0), want);
}

// Decoding in windows of 8 positions (GenerateOptions::window: the caches at one length, the
// sequence at their end, the positions before it masked out) gives PyTorch's tokens, alone and,
// where the export takes batches, for the left-padded batch; on CUDA the engine replays, and each
// window's steps after its first two are replays of one recording.
TEST_P(GenerateExports, WindowedDecodeGivesPyTorchsTokens) {
  const auto& [x, backend] = GetParam();
  const bool cuda = std::string(backend) == "cuda";
  if (cuda)
    if (std::string why = test_support::no_gpu(); !why.empty()) GTEST_SKIP() << why;
  const fs::path d = fs::path(REFORGE_SOURCE_DIR) / "models/hf" / x.dir;
  runtime::PlanEngine e = export_engine(d, x, backend, cuda);
  const auto want = ints_of(read_npy((d / x.reference / "tokens.npy").string()));
  const auto prompt = ints_of(read_npy((d / x.reference / "prompt_ids.npy").string()));
  session::GenerateOptions o = greedy(static_cast<int64_t>(want.size()));
  o.window = 8;
  const session::DecoderLayout l = session::decoder_layout(e.engine());
  if (l.position_ids.empty() || l.attention_mask.empty()) {
    const std::string error = error_of([&] { session::generate(e, {prompt}, o); });
    EXPECT_NE(error.find("a decode window needs the model's position_ids and attention_mask"), std::string::npos)
        << error;
    GTEST_SKIP() << x.dir << " takes no position_ids or attention_mask";
  }
  EXPECT_EQ(session::generate(e, {prompt}, o).tokens.at(0), want);
  if (cuda) {
    const runtime::ReplayStats st = e.engine().replay_stats();
    EXPECT_TRUE(st.declined.empty()) << st.declined;
    EXPECT_EQ(st.failed, 0) << st.last_failure;
    // A window of 8 holds 7 or 8 steps: the first eager, the second recorded, the rest replayed.
    EXPECT_GE(st.replays, static_cast<int64_t>(want.size()) / 2) << "eager runs " << st.eager_runs;
  }
  if (!fs::exists(d / x.reference / "batch_tokens.npy")) return;
  const BatchReference b = batch_reference(d / x.reference);
  o.max_new_tokens = b.tokens.dim(1);
  const auto got = session::generate(e, b.prompts, o);
  for (size_t r = 0; r < b.prompts.size(); ++r) EXPECT_EQ(got.tokens[r], b.row(r)) << "row " << r;
}

INSTANTIATE_TEST_SUITE_P(Hf, GenerateExports,
                         ::testing::Combine(::testing::Values(Export{"llama_decode", "A/model.onnx", "reference/A"},
                                                              Export{"gpt2_generate", "A/model.onnx", "reference/A"},
                                                              Export{"qwen2_generate", "B/model.onnx", "reference/B"}),
                                            ::testing::Values("cpu", "cuda")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).dir) + "_" + std::get<1>(info.param);
                         });
