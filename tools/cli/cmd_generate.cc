// `reforge generate MODEL_OR_PLAN --input-ids FILE.npy ... [--max-new-tokens N] [--temperature T]
//                  [--top-k K] [--top-p P] [--seed S] [--stop ID ...] [--json] [--threads N] [--device D]`
// Generates from the prompts in the FILE.npy files, in order (int64 token ids: one prompt [n], or
// one prompt per row [prompts, n]; several files for prompts of different lengths) with the
// library's decoding loop (session/generate.h), printing the new tokens: a single prompt's as they
// are made, several prompts' a line each. With --json, stdout is one JSON document: {"tokens":
// [[...], ...], "first_token_ms": [...], "step_ms_p50": ..., "step_ms_p90": ...,
// "decode_tokens_per_s": ...} (the steps after the prompts' first token).
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/npy.h"
#include "plan_loading.h"
#include "session/generate.h"

namespace reforge::cli {

namespace {

struct GenerateArgs {
  std::string model;
  std::vector<std::string> input_ids;
  int64_t max_new_tokens = 32;
  double temperature = 0, top_p = 1;
  int64_t top_k = 0;
  uint64_t seed = 0;
  std::vector<int64_t> stop;
  bool json = false;
  int threads = 0;
  DeviceOptions device;
};

std::vector<std::vector<int64_t>> prompts_of(const std::string& path) {
  const Tensor t = read_npy(path);
  if (t.dtype() != DType::Int64 && t.dtype() != DType::Int32)
    fail("--input-ids '", path, "' holds ", t.describe(), "; token ids are int64 (or int32) [n] or [prompts, n]");
  if (t.rank() != 1 && t.rank() != 2)
    fail("--input-ids '", path, "' holds ", t.describe(), "; token ids are [n] or [prompts, n]");
  const int64_t rows = t.rank() == 1 ? 1 : t.dim(0), n = t.rank() == 1 ? t.dim(0) : t.dim(1);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(r)].push_back(t.as_int64(r * n + i));
  return out;
}

}  // namespace

Runner add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  app.add_option("model", a->model, "ONNX model or plan file of a decoder with past/present key-values")->required();
  app.add_option("--input-ids", a->input_ids,
                 "the prompts' token ids: FILE.npy, int64 [n] or [prompts, n]; repeat for prompts of other lengths")
      ->required();
  app.add_option("--max-new-tokens", a->max_new_tokens, "tokens to generate per prompt (default 32)")
      ->check(integer_in(1, int64_t{1} << 30));
  app.add_option("--temperature", a->temperature, "0 (default): greedy; else sample from softmax(logits / T)")
      ->check(number_in(0, INFINITY));
  app.add_option("--top-k", a->top_k, "sample from the K most likely tokens (0, the default: all)")
      ->check(integer_in(0, int64_t{1} << 40));
  app.add_option("--top-p", a->top_p, "sample from the most likely tokens that reach probability P (default 1)")
      ->check(number_in(1e-9, 1));
  app.add_option("--seed", a->seed, "the sampler's seed (default 0)")->check(unsigned_integer());
  app.add_option("--stop", a->stop, "token id that ends a sequence (kept in its output); may repeat");
  app.add_flag("--json", a->json, "print one JSON document on stdout (the generated ids, timings)");
  app.add_option("--threads", a->threads, "threads (default: all cores)")->check(threads_check());
  add_device_options(app, a->device);
  return [a]() {
    std::vector<std::vector<int64_t>> prompts;
    for (const auto& file : a->input_ids)
      for (auto& p : prompts_of(file)) prompts.push_back(std::move(p));
    LoadOptions lo;
    lo.threads = a->threads;
    lo.device = a->device;
    const session::Session loaded = load_session(a->model, lo);
    session::GenerateOptions o;
    o.max_new_tokens = a->max_new_tokens;
    o.sampling.temperature = a->temperature;
    o.sampling.top_k = a->top_k;
    o.sampling.top_p = a->top_p;
    o.sampling.seed = a->seed;
    o.stop_tokens = a->stop;
    // One prompt: its tokens printed as they are made. Several (a batch makes them in turns): a
    // line per prompt at the end.
    bool open = false;
    if (!a->json && prompts.size() == 1)
      o.on_token = [&](size_t, int64_t token) {
        std::cout << (open ? " " : "") << token << std::flush;
        open = true;
        return true;
      };
    const session::GenerateResult r = session::generate(loaded.engine(), prompts, o);
    if (!a->json) {
      if (open) std::cout << "\n";
      if (prompts.size() > 1)
        for (const auto& row : r.tokens) {
          for (size_t i = 0; i < row.size(); ++i) std::cout << (i ? " " : "") << row[i];
          std::cout << "\n";
        }
      return 0;
    }
    nlohmann::ordered_json j;
    j["tokens"] = r.tokens;
    j["first_token_ms"] = r.first_token_ms;
    std::vector<double> steps_sorted = r.step_ms;
    std::sort(steps_sorted.begin(), steps_sorted.end());
    j["step_ms_p50"] = steps_sorted.empty() ? 0.0 : percentile(steps_sorted, 50);
    j["step_ms_p90"] = steps_sorted.empty() ? 0.0 : percentile(steps_sorted, 90);
    double steps = 0;
    for (double ms : r.step_ms) steps += ms;
    j["decode_tokens_per_s"] = steps > 0 ? 1000.0 * static_cast<double>(r.step_ms.size()) / steps : 0.0;
    std::cout << j.dump() << "\n";
    return 0;
  };
}

}  // namespace reforge::cli
