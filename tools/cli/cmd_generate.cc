// `reforge generate MODEL_OR_PLAN (--input-ids FILE.npy ... | --prompt TEXT ... --tokenizer PATH)
//                  [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--stop ID ...]
//                  [--no-bos] [--json] [--threads N] [--device D]`
// Generates from the prompts with the library's decoding loop (session/generate.h): token ids in
// FILE.npy files, in order (int64: one prompt [n], or one prompt per row [prompts, n]; several
// files for prompts of different lengths), or text (--prompt, in order) that --tokenizer encodes.
// Without a tokenizer it prints the new tokens: a single prompt's as they are made, several
// prompts' a line each. With --tokenizer (a sentencepiece tokenizer.model: tools/cli/tokenizer.h)
// it prints the new tokens as text, decoded incrementally (session/text_stream.h: a character
// spread over several tokens appears once complete), a single prompt's as it is made, several
// prompts' a line each (--json to tell apart texts holding newlines); generation then also stops
// at the tokenizer's end-of-sequence token, and text prompts are encoded after its
// beginning-of-sequence token unless --no-bos, as transformers' and ONNX Runtime GenAI's
// tokenizers do for Llama-family models. With --json, stdout is one JSON document: {"tokens":
// [[...], ...], "text": [...] (with --tokenizer), "prompt_tokens": [[...], ...] (what --prompt
// texts encode to), "first_token_ms": [...], "step_ms_p50": ...,
// "step_ms_p90": ..., "decode_tokens_per_s": ...} (the steps after the prompts' first token).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/npy.h"
#include "plan_loading.h"
#include "session/generate.h"
#include "session/generate_bench.h"
#include "session/text_stream.h"
#include "tokenizer.h"

namespace reforge::cli {

namespace {

struct GenerateArgs {
  std::string model;
  std::vector<std::string> input_ids;
  std::vector<std::string> prompts;
  std::string tokenizer;
  bool no_bos = false;
  int bench = 0;  // timed rounds (0: no benchmark)
  int64_t max_new_tokens = 32;
  double temperature = 0, top_p = 1;
  int64_t top_k = 0;
  uint64_t seed = 0;
  std::vector<int64_t> stop;
  bool json = false;
  int threads = 0;
  int64_t window = -1;
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

// --bench's report (session/generate_bench.h): a table, or with --json one document.
int print_bench(const session::GenerateBenchResult& b, bool json) {
  if (json) {
    nlohmann::ordered_json j;
    j["tokens"] = b.tokens;
    j["bench"] = {{"rounds", b.rounds},
                  {"batch", b.batch},
                  {"prompt_tokens", b.prompt_tokens},
                  {"new_tokens", b.new_tokens},
                  {"first_token_ms", b.first_token_ms},
                  {"step_ms_p50", b.step_ms_p50},
                  {"step_ms_p90", b.step_ms_p90},
                  {"decode_tokens_per_s", b.decode_tokens_per_s},
                  {"weight_bytes", b.weight_bytes},
                  {"cache_bytes_per_token", b.cache_bytes_per_token},
                  {"step_bytes", b.step_bytes},
                  {"memory", b.memory},
                  {"copy_gb_s", b.copy_gb_s},
                  {"bandwidth_fraction", b.bandwidth_fraction}};
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::printf("batch %lld, prompt %lld tokens, %lld new tokens, %lld timed rounds after one warm-up\n",
              static_cast<long long>(b.batch), static_cast<long long>(b.prompt_tokens),
              static_cast<long long>(b.new_tokens), static_cast<long long>(b.rounds));
  std::printf("time to first token  %10.3f ms (median)\n", b.first_token_ms);
  std::printf("per token            %10.3f ms p50, %.3f ms p90\n", b.step_ms_p50, b.step_ms_p90);
  std::printf("decode               %10.1f tokens/s\n", b.decode_tokens_per_s);
  std::printf("bytes per step       %10.1f MB (weights %.1f MB, cache %.1f KB per token)\n", b.step_bytes / 1e6,
              b.weight_bytes / 1e6, b.cache_bytes_per_token / 1e3);
  std::printf("%s copy bandwidth %7.1f GB/s: a decode step reaches %.1f%% of it\n", b.memory.c_str(), b.copy_gb_s,
              100.0 * b.bandwidth_fraction);
  return 0;
}

}  // namespace

Runner add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  app.add_option("model", a->model, "ONNX model or plan file of a decoder with past/present key-values")->required();
  app.add_option("--input-ids", a->input_ids,
                 "the prompts' token ids: FILE.npy, int64 [n] or [prompts, n]; repeat for prompts of other lengths");
  CLI::Option* prompt =
      app.add_option("--prompt", a->prompts, "a prompt as text, encoded by --tokenizer; repeat for several prompts");
  app.add_option("--tokenizer", a->tokenizer,
                 "sentencepiece tokenizer.model, or a folder holding one: encodes --prompt, prints the new tokens "
                 "as text, stops at its end-of-sequence token");
  app.add_flag("--no-bos", a->no_bos, "encode --prompt text without the tokenizer's beginning-of-sequence token")
      ->needs(prompt);
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
  app.add_flag("--bench{3}", a->bench,
               "time it: one warm-up generation, then N (--bench=N; default 3) timed ones; prints time to first "
               "token, per-token p50/p90, tokens/s and the fraction of the memory bandwidth a decode step reaches");
  app.add_option("--window", a->window,
                 "decode in windows of a multiple of N cache positions (masked padding before the sequence), so "
                 "that a GPU plan records a decode step once per window and replays it; default 128 on a GPU "
                 "plan whose export takes position_ids and attention_mask; 0: caches grow step by step")
      ->check(integer_in(0, int64_t{1} << 30));
  add_device_options(app, a->device);
  return [a]() {
    if (a->input_ids.empty() && a->prompts.empty())
      fail("no prompts: give token ids with --input-ids FILE.npy, or text with --prompt TEXT and --tokenizer PATH");
    if (!a->input_ids.empty() && !a->prompts.empty())
      fail("--input-ids and --prompt both given: the prompts are token ids or text, one or the other");
    if (!a->prompts.empty() && a->tokenizer.empty())
      fail("--prompt needs --tokenizer PATH (a sentencepiece tokenizer.model) to encode its text; or give token ids "
           "with --input-ids FILE.npy");
    // Opened before the model is loaded, so that a wrong --tokenizer fails at once.
    std::optional<Tokenizer> tokenizer;
    if (!a->tokenizer.empty()) tokenizer.emplace(Tokenizer::open(a->tokenizer));
    std::vector<std::vector<int64_t>> prompts;
    for (const auto& file : a->input_ids)
      for (auto& p : prompts_of(file)) prompts.push_back(std::move(p));
    for (const auto& text : a->prompts) {
      prompts.push_back(tokenizer->encode(text, !a->no_bos));
      if (prompts.back().empty())
        fail("--prompt '", text, "' encodes to no tokens with --tokenizer '", tokenizer->path(), "'");
    }
    LoadOptions lo;
    lo.threads = a->threads;
    lo.device = a->device;
    // A GPU plan records its decode steps and replays them (GenerateOptions::window).
    if (a->window != 0) lo.device_replay = true;
    const session::Session loaded = load_session(a->model, lo);
    session::GenerateOptions o;
    o.window = a->window;
    o.max_new_tokens = a->max_new_tokens;
    o.sampling.temperature = a->temperature;
    o.sampling.top_k = a->top_k;
    o.sampling.top_p = a->top_p;
    o.sampling.seed = a->seed;
    o.stop_tokens = a->stop;
    if (tokenizer && tokenizer->eos() >= 0) o.stop_tokens.push_back(tokenizer->eos());
    const auto decode = [&](const std::vector<int64_t>& tokens) { return tokenizer->decode(tokens); };
    // One prompt: its tokens (or text) printed as they are made. Several (a batch makes them in
    // turns): a line per prompt at the end.
    bool open = false;
    std::optional<session::TextStream> stream;
    if (!a->json && prompts.size() == 1) {
      if (tokenizer) {
        if (a->bench == 0) {  // --bench generates several times over: nothing to stream
          stream.emplace(decode, prompts[0]);
          o.on_token = [&](size_t, int64_t token) {
            std::cout << stream->push(token) << std::flush;
            return true;
          };
        }
      } else {
        o.on_token = [&](size_t, int64_t token) {
          std::cout << (open ? " " : "") << token << std::flush;
          open = true;
          return true;
        };
      }
    }
    if (a->bench > 0) return print_bench(session::bench_generate(loaded.engine(), prompts, o, a->bench), a->json);
    const session::GenerateResult r = session::generate(loaded.engine(), prompts, o);
    // Each prompt's text, decoded as the stream decodes it (what a single prompt printed).
    std::vector<std::string> texts;
    std::string held_back;  // the streamed prompt's text not printed yet (an unfinished character)
    if (tokenizer) {
      if (stream) {
        held_back = stream->finish();
        texts.push_back(stream->text());
      } else {
        for (size_t i = 0; i < prompts.size(); ++i) {
          session::TextStream s(decode, prompts[i]);
          for (int64_t t : r.tokens[i]) s.push(t);
          s.finish();
          texts.push_back(s.text());
        }
      }
    }
    if (!a->json) {
      if (stream) std::cout << held_back << "\n";
      if (open) std::cout << "\n";
      if (prompts.size() > 1) {
        if (tokenizer) {
          for (const auto& text : texts) std::cout << text << "\n";
        } else {
          for (const auto& row : r.tokens) {
            for (size_t i = 0; i < row.size(); ++i) std::cout << (i ? " " : "") << row[i];
            std::cout << "\n";
          }
        }
      }
      return 0;
    }
    nlohmann::ordered_json j;
    j["tokens"] = r.tokens;
    if (tokenizer) j["text"] = texts;
    if (!a->prompts.empty()) j["prompt_tokens"] = prompts;
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
