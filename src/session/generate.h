// Text generation: the decoding loop of a decoder-only export with past and present key-values,
// in the library (`reforge generate` and Python's plan.generate call it).
//
// The layout is read from the graph, never guessed from a file name: an int64 `input_ids` input
// [batch, seq]; optional `position_ids` [batch, seq] and `attention_mask` [batch, past + seq]
// (int64); a `logits` output [batch, seq, vocab] (float32, bfloat16 or float16); and the cache:
// every pair the graph proves (runtime/state.h, state_pairs: a present output made by a Concat of
// its past input), as Hugging Face `optimum` (`past_key_values.N.key` -> `present.N.key`) and
// PyTorch's dynamo export of a `transformers` model with a cache (`past.N.key` -> `present.N.key`)
// make them, or a com.microsoft GroupQueryAttention's past and present, as ONNX Runtime GenAI's
// model builder exports them (`past_key_values.N.key` -> `present.N.key`, with an attention_mask
// and no position_ids: the attention takes each row's length from the mask and its positions from
// that length). Anything else is refused, naming what is missing.
//
// The prompts are one batch on one runtime::State (the KV caches allocated once at the longest
// prompt plus max_new_tokens, written in place): a first run on the whole prompts, then one run
// per new token with each row's token. A batch needs an export whose batch dimension is symbolic,
// and for prompts of different lengths an attention_mask: they are left-padded with token 0 under
// it, with positions counting each row's real tokens, as transformers' generate pads a batch; for
// a GroupQueryAttention cache they are right-padded (token 0, mask 0), as its rows are addressed
// by length, and each step's mask is the last one with a 1 added (ONNX Runtime GenAI feeds it so).
// Otherwise the prompts run one after another. Each prompt finishes on its own (a finished row
// goes on with token 0, its tokens no longer taken, until every row is done). On a device plan the
// caches stay in device memory (runtime/state.h) and so do the logits: each step brings only each
// sequence's last row of logits to the host.
//
// With a decode window (GenerateOptions::window) the steps after the prompt run on caches of a
// fixed length, the positions before the sequence zero and masked out; a full window moves to the
// next multiple. A GroupQueryAttention cache takes no window (its rows start at position 0).
//
// Sampling, per row with its own generator seeded alike (a row gives what its prompt gives
// alone): greedy (temperature 0: the most likely token, the lowest id on a tie), or the logits
// divided by the temperature, kept to the top_k most likely (0: all), then to the smallest set of
// most likely tokens whose probability reaches top_p, and drawn from with a 64-bit Mersenne
// Twister seeded by `seed` (so a seed gives the same tokens on every machine).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/plan_engine.h"
#include "runtime/state.h"

namespace reforge::session {

struct DecoderLayout {
  std::string input_ids, position_ids, attention_mask, logits;  // "" for an absent optional input
  std::vector<runtime::StatePair> cache;
  int64_t vocab = 0;  // 0 when the export leaves it symbolic
  // The cache is a com.microsoft GroupQueryAttention's, which finds each row's tokens from its
  // length (the attention mask's sum): a batch is right-padded.
  bool right_padded = false;
};

// The layout of `engine`'s graph; throws an Error naming what it lacks.
DecoderLayout decoder_layout(const runtime::Engine& engine);

struct Sampling {
  double temperature = 0;  // 0: greedy
  int64_t top_k = 0;       // 0: no limit
  double top_p = 1;        // (0, 1]
  uint64_t seed = 0;
};

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  Sampling sampling;
  // A sequence ends with the first of these it makes (the token is kept in its output).
  std::vector<int64_t> stop_tokens;
  // Called with each token as it is made (prompt index, token); returning false ends that prompt.
  std::function<bool(size_t prompt, int64_t token)> on_token;
  // Decode steps in windows of a multiple of this many positions (runtime/state.h,
  // State::set_window): the cache inputs keep one length, the sequence at their end under the
  // attention mask, so that every step of a window has one input signature and a device plan
  // records it once and replays it (EngineOptions::device_replay). The tokens are the same.
  // -1: kDecodeWindow where the engine replays and the export takes position_ids and an
  // attention_mask, else off; 0: off; N > 0: windows of multiples of N (needs those inputs).
  int64_t window = -1;
  // Set: step k (0: the run of the prompts, then one per new token) runs on the weight version it
  // returns (a version of this engine: PlanEngine::derive_version) instead of the current one.
  std::function<runtime::PlanEngine::Version(int64_t step)> version_at;
};

// The decode window generate uses on an engine that replays its device work.
inline constexpr int64_t kDecodeWindow = 128;

struct GenerateResult {
  std::vector<std::vector<int64_t>> tokens;  // per prompt: the new tokens only
  std::vector<double> first_token_ms;        // per prompt: the run of its prompt (its batch's) and sampling
  std::vector<double> step_ms;               // every later step (of a batch, or of each prompt), in order
  // Per prompt, per new token: the weight version its step ran on (PlanEngine::Version::
  // generation). Each step runs on the version current when it starts, so refits committed
  // during a generation show here as the token where the version changed.
  std::vector<std::vector<uint64_t>> weights;
};

// Generates from each prompt (token ids). Throws an Error naming the problem: a layout the graph
// lacks, an empty prompt, a token id outside the vocabulary, options out of range.
GenerateResult generate(const runtime::PlanEngine& engine, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerateOptions& options);

// The next token from row `row` of host `logits` [rows, vocab] (float32, bfloat16 or float16), as
// generate samples; `rng` is the sequence's generator (seeded with Sampling::seed).
int64_t sample_token(const Tensor& logits, int64_t row, const Sampling& sampling, std::mt19937_64& rng);

}  // namespace reforge::session
