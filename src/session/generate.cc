#include "session/generate.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <numeric>

#include "core/half.h"
#include "core/timing.h"
#include "core/nearest_names.h"

namespace reforge::session {

namespace {

using ir::find_value_info;

std::string names(const std::vector<ir::ValueInfo>& values) {
  std::vector<std::string> n;
  for (const auto& v : values) n.push_back(v.name);
  return quoted_list(n);
}

// An optional int64 input of rank 2, or "" when absent.
std::string int64_input(const runtime::Engine& e, const std::string& name, bool required) {
  const ir::ValueInfo* v = find_value_info(e.inputs(), name);
  if (!v) {
    if (required) fail("generate: the model has no input '", name, "' (its inputs: ", names(e.inputs()), ")");
    return "";
  }
  if (v->dtype != DType::Int64 || (v->has_shape && v->shape.size() != 2))
    fail("generate: input '", name, "' is ", dtype_name(v->dtype), v->has_shape ? " of rank " : "",
         v->has_shape ? std::to_string(v->shape.size()) : "", "; a decoder's ", name, " is int64 [batch, length]");
  return name;
}

float logit(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::Float32:
      return t.data<float>()[i];
    case DType::BFloat16:
      return bfloat16::to_float(t.data<uint16_t>()[i]);
    case DType::Float16:
      return float16::to_float(t.data<uint16_t>()[i]);
    default:
      fail("generate: logits of type ", dtype_name(t.dtype()), " (float32, bfloat16 or float16 expected)");
  }
}

// A uniform double in [0, 1) from 53 bits of the generator (the same on every platform, unlike
// std::uniform_real_distribution).
double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

void check_options(const GenerateOptions& o) {
  if (o.max_new_tokens < 1) fail("generate: max_new_tokens is ", o.max_new_tokens, "; it must be at least 1");
  const Sampling& s = o.sampling;
  if (!(s.temperature >= 0) || std::isinf(s.temperature))
    fail("generate: temperature is ", s.temperature, "; it must be 0 (greedy) or a positive number");
  if (s.top_k < 0) fail("generate: top_k is ", s.top_k, "; it must be 0 (no limit) or positive");
  if (!(s.top_p > 0 && s.top_p <= 1)) fail("generate: top_p is ", s.top_p, "; it must be in (0, 1]");
  if (o.window < -1) fail("generate: window is ", o.window, "; it must be -1 (automatic), 0 (off) or positive");
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Whether the export takes several sequences in one run: input_ids' batch dimension is symbolic.
bool takes_batches(const runtime::Engine& e, const DecoderLayout& l) {
  const ir::ValueInfo* ids = find_value_info(e.inputs(), l.input_ids);
  return ids && ids->has_shape && !ids->shape.empty() && !ids->shape[0].fixed();
}

// The symbolic dimensions of the cache inputs other than their length axis: a symbol they share
// with input_ids' batch dimension is the batch's size; another (a head size the export left
// symbolic) takes the size that the plan's shape inference recorded for the pair's output there.
std::map<std::string, int64_t> cache_dims(const runtime::PlanEngine& engine, const DecoderLayout& l, int64_t batch) {
  const runtime::Engine& e = engine.engine();
  std::map<std::string, int64_t> dims;
  if (takes_batches(e, l)) {
    const std::string& symbol = find_value_info(e.inputs(), l.input_ids)->shape[0].symbol;
    if (!symbol.empty()) dims[symbol] = batch;
  }
  for (const runtime::StatePair& p : l.cache) {
    const ir::ValueInfo* in = find_value_info(e.inputs(), p.input);
    const ir::ValueInfo* out = find_value_info(e.outputs(), p.output);
    const ir::ValueInfo* inferred = find_value_info(engine.plan().values, p.output);
    if (!in || !out || !inferred || !in->has_shape || !out->has_shape || !inferred->has_shape ||
        in->shape.size() != out->shape.size() || inferred->shape.size() != in->shape.size())
      continue;
    for (size_t d = 0; d < in->shape.size(); ++d) {
      const ir::Dim& dim = in->shape[d];
      if (dim.fixed() || dim.symbol.empty() || dims.count(dim.symbol) || out->shape[d].symbol != dim.symbol) continue;
      if (inferred->shape[d].fixed()) dims[dim.symbol] = inferred->shape[d].value;
    }
  }
  return dims;
}

// Whether graph output `name` is copied from a device (a reforge::ToHost that placement inserted).
bool made_on_device(const ir::Graph& g, const std::string& name) {
  for (const ir::Node& n : g.nodes)
    if (!n.outputs.empty() && n.outputs[0] == name) return n.domain == "reforge" && n.op_type == "ToHost";
  return false;
}

// Row `last[b]` of each sequence b of `logits` [B, n, vocab] (its last token: n - 1, or earlier in
// a right-padded batch) as [B, vocab] in host memory: the logits themselves when they are that
// already, else copied into `buffer` (made once).
Tensor last_rows(const Tensor& logits, const std::vector<int64_t>& last, Tensor& buffer) {
  const int64_t B = logits.dim(0), n = logits.dim(1), V = logits.dim(2);
  if (n == 1 && logits.on_host()) return Tensor::wrap(logits.dtype(), {B, V}, logits.storage(), logits.raw());
  if (!buffer.defined() || buffer.dtype() != logits.dtype()) buffer = Tensor::uninitialized(logits.dtype(), {B, V});
  const size_t row = static_cast<size_t>(V) * dtype_size(logits.dtype());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t at = std::min(last[static_cast<size_t>(b)], n - 1);
    const auto* src = static_cast<const char*>(logits.raw()) + static_cast<size_t>(b * n + at) * row;
    void* dst = static_cast<char*>(buffer.mutable_raw()) + static_cast<size_t>(b) * row;
    if (logits.on_host())
      std::memcpy(dst, src, row);
    else
      device_memory().copy(dst, Memory::Host, src, logits.memory(), row);
  }
  return buffer;
}

Tensor matrix(const std::vector<std::vector<int64_t>>& rows) {
  const int64_t width = rows.empty() ? 0 : static_cast<int64_t>(rows[0].size());
  Tensor t = Tensor::empty(DType::Int64, {static_cast<int64_t>(rows.size()), width});
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy(rows[r].begin(), rows[r].end(), t.mutable_data<int64_t>() + r * width);
  return t;
}

// The decode window's granularity for `options` (0: none); refuses a window the export cannot take.
int64_t decode_window(const runtime::Engine& e, const DecoderLayout& l, const GenerateOptions& options) {
  const bool takes_window = !l.position_ids.empty() && !l.attention_mask.empty() && !l.right_padded;
  if (options.window > 0 && l.right_padded)
    fail("generate: a decode window does not apply to a GroupQueryAttention cache (its rows are addressed by "
         "length from position 0; window 0 decodes without one)");
  if (options.window > 0 && !takes_window)
    fail("generate: a decode window needs the model's position_ids and attention_mask inputs; it has ",
         l.position_ids.empty() ? "no position_ids" : "no attention_mask", " (window 0 decodes without one)");
  if (options.window >= 0) return options.window;
  return takes_window && made_on_device(e.graph(), l.logits) && e.replay_stats().declined.empty() ? kDecodeWindow : 0;
}

// Prompts `which` of `prompts` as one batch: left-padded with token 0 under the attention mask
// (as transformers' generate pads a batch), positions counting each row's real tokens (a pad's
// position is 1, as there), or right-padded for a layout that addresses rows by length; each row
// sampled with its own generator seeded alike, so a row gives what its prompt gives alone. A
// finished row goes on with token 0 until every row is done.
void run_batch(const runtime::PlanEngine& engine, const DecoderLayout& l,
               const std::vector<std::vector<int64_t>>& prompts, const std::vector<size_t>& which,
               const GenerateOptions& options, GenerateResult& result) {
  const runtime::Engine& e = engine.engine();
  const size_t B = which.size();
  size_t width = 0;
  for (size_t r : which) width = std::max(width, prompts[r].size());
  const int64_t window_step = decode_window(e, l, options);
  runtime::StateOptions so;
  so.pairs = l.cache;
  so.max_length = static_cast<int64_t>(width) + options.max_new_tokens;
  // A window holds at least one padding position before the sequence, and the run's output one more.
  if (window_step > 0) so.max_length = round_up(so.max_length, window_step) + 1;
  so.dims = cache_dims(engine, l, static_cast<int64_t>(B));
  runtime::State state(e, so);
  runtime::RunOptions ro;
  ro.state = &state;
  uint64_t generation = 0;  // of the weight version each run uses
  ro.weights_generation = &generation;
  // Logits made on a device stay there; only each sequence's last row comes to the host.
  if (made_on_device(e.graph(), l.logits)) ro.outputs = Memory::Device;
  Tensor rows_buffer;
  std::vector<std::vector<int64_t>> ids(B, std::vector<int64_t>(width, 0)), mask(B, std::vector<int64_t>(width, 0)),
      pos(B, std::vector<int64_t>(width, 1));
  std::vector<int64_t> real(B, 0), last(B, static_cast<int64_t>(width) - 1);
  for (size_t b = 0; b < B; ++b) {
    const auto& p = prompts[which[b]];
    const size_t pad = l.right_padded ? 0 : width - p.size();
    for (size_t i = 0; i < p.size(); ++i) {
      ids[b][pad + i] = p[i];
      mask[b][pad + i] = 1;
      pos[b][pad + i] = real[b]++;
    }
    if (l.right_padded) {
      last[b] = static_cast<int64_t>(p.size()) - 1;
      for (size_t i = p.size(); i < width; ++i) pos[b][i] = static_cast<int64_t>(i);
    }
  }
  std::vector<std::mt19937_64> rng(B, std::mt19937_64(options.sampling.seed));
  std::vector<bool> done(B, false);
  const auto li = static_cast<size_t>(find_value_info(engine.outputs(), l.logits) - engine.outputs().data());
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    std::map<std::string, Tensor> feed{{l.input_ids, matrix(ids)}};
    if (!l.position_ids.empty()) feed[l.position_ids] = matrix(pos);
    if (!l.attention_mask.empty()) feed[l.attention_mask] = matrix(mask);
    if (window_step > 0 && step > 0) {
      // The cache at the end of a window of one length, the positions before it masked out.
      if (state.window() == 0 || state.filled() + 1 > state.window())
        state.set_window(round_up(state.filled() + 1, window_step));
      std::vector<std::vector<int64_t>> windowed(B);
      for (size_t b = 0; b < B; ++b) {
        windowed[b].assign(static_cast<size_t>(state.window()) + 1 - mask[b].size(), 0);
        windowed[b].insert(windowed[b].end(), mask[b].begin(), mask[b].end());
      }
      feed[l.attention_mask] = matrix(windowed);
    }
    const std::vector<Tensor> outs = options.version_at ? engine.run(feed, options.version_at(step), ro)
                                                        : engine.run(feed, ro);
    const Tensor& logits = outs[li];
    const int64_t n = static_cast<int64_t>(ids[0].size());
    if (logits.rank() != 3 || logits.dim(0) != static_cast<int64_t>(B) || logits.dim(1) != n)
      fail("generate: the model's logits are ", logits.describe(), " for ", B, " sequence(s) of ", n, " token(s)");
    const Tensor rows = last_rows(logits, last, rows_buffer);
    const double ms = ms_since(t0);
    bool all_done = true;
    for (size_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      const int64_t token = sample_token(rows, static_cast<int64_t>(b), options.sampling, rng[b]);
      result.tokens[which[b]].push_back(token);
      result.weights[which[b]].push_back(generation);
      const bool stop =
          std::find(options.stop_tokens.begin(), options.stop_tokens.end(), token) != options.stop_tokens.end();
      const bool go_on = !options.on_token || options.on_token(which[b], token);
      done[b] = stop || !go_on;
      all_done = all_done && done[b];
      ids[b] = {token};
    }
    if (step == 0)
      for (size_t b = 0; b < B; ++b) result.first_token_ms[which[b]] = ms;
    else
      result.step_ms.push_back(ms);
    if (all_done) break;
    for (size_t b = 0; b < B; ++b) {
      if (done[b]) ids[b] = {0};
      mask[b].push_back(1);
      pos[b] = {real[b]++};
      last[b] = 0;
    }
  }
}

}  // namespace

DecoderLayout decoder_layout(const runtime::Engine& engine) {
  DecoderLayout l;
  l.input_ids = int64_input(engine, "input_ids", true);
  l.position_ids = int64_input(engine, "position_ids", false);
  l.attention_mask = int64_input(engine, "attention_mask", false);
  const ir::ValueInfo* logits = find_value_info(engine.outputs(), "logits");
  if (!logits) fail("generate: the model has no output 'logits' (its outputs: ", names(engine.outputs()), ")");
  if (logits->dtype != DType::Float32 && logits->dtype != DType::BFloat16 && logits->dtype != DType::Float16)
    fail("generate: output 'logits' is ", dtype_name(logits->dtype), "; float32, bfloat16 or float16 expected");
  if (logits->has_shape && logits->shape.size() != 3)
    fail("generate: output 'logits' has rank ", logits->shape.size(),
         "; a decoder's logits are [batch, length, vocab]");
  l.logits = "logits";
  if (logits->has_shape && logits->shape[2].fixed()) l.vocab = logits->shape[2].value;
  l.cache = runtime::state_pairs(engine.graph());
  if (l.cache.empty())
    fail(
        "generate: the model carries no cache: no output is a Concat of a past input or a GroupQueryAttention's "
        "present (a decoder exported with past and present key-values, e.g. optimum's text-generation-with-past, "
        "a dynamo export with a cache or ONNX Runtime GenAI's model builder)");
  // A GroupQueryAttention cache: rows addressed by length, which the builder's graph computes from
  // the attention mask.
  for (const ir::Node& n : engine.graph().nodes)
    if (n.domain == "com.microsoft" && n.op_type == "GroupQueryAttention")
      for (const auto& p : l.cache)
        l.right_padded |= n.inputs.size() > 4 && (n.inputs[3] == p.input || n.inputs[4] == p.input);
  if (l.right_padded && l.attention_mask.empty())
    fail("generate: the model's cache is a GroupQueryAttention's, which reads each row's length from an "
         "attention_mask; the model has no input 'attention_mask'");
  // Every other input must be one the loop gives.
  for (const auto& in : engine.inputs()) {
    if (in.name == l.input_ids || in.name == l.position_ids || in.name == l.attention_mask) continue;
    bool cache = false;
    for (const auto& p : l.cache) cache |= p.input == in.name;
    if (!cache)
      fail("generate: the model's input '", in.name,
           "' is neither input_ids, position_ids, attention_mask nor a cache input carried by an output");
  }
  return l;
}

int64_t sample_token(const Tensor& logits, int64_t row, const Sampling& s, std::mt19937_64& rng) {
  REFORGE_CHECK(logits.on_host() && logits.rank() == 2 && row >= 0 && row < logits.dim(0), "sample_token: bad logits ",
                logits.describe());
  const int64_t vocab = logits.dim(1), base = row * vocab;
  if (s.temperature == 0 || s.top_k == 1) {
    int64_t best = 0;
    float best_v = logit(logits, base);
    for (int64_t v = 1; v < vocab; ++v) {
      const float x = logit(logits, base + v);
      if (x > best_v || (std::isnan(best_v) && !std::isnan(x))) best = v, best_v = x;
    }
    return best;
  }
  // Candidates, most likely first (ties: the lower id first, so the order is total).
  std::vector<int64_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  auto more_likely = [&](int64_t a, int64_t b) {
    const float x = logit(logits, base + a), y = logit(logits, base + b);
    return x > y || (x == y && a < b);
  };
  const size_t k = s.top_k > 0 && s.top_k < vocab ? static_cast<size_t>(s.top_k) : ids.size();
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), more_likely);
  ids.resize(k);
  std::vector<double> p(k);
  const double top = logit(logits, base + ids[0]) / s.temperature;
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += p[i] = std::exp(logit(logits, base + ids[i]) / s.temperature - top);
  // Nucleus: the smallest prefix whose probability reaches top_p.
  size_t keep = k;
  if (s.top_p < 1) {
    double acc = 0;
    for (size_t i = 0; i < k; ++i) {
      acc += p[i] / sum;
      if (acc >= s.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += p[i];
  const double u = uniform(rng) * kept;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return ids[i];
  }
  return ids[keep - 1];
}

GenerateResult generate(const runtime::PlanEngine& engine, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerateOptions& options) {
  check_options(options);
  const runtime::Engine& e = engine.engine();
  const DecoderLayout l = decoder_layout(e);
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) fail("generate: prompt ", i, " is empty");
    for (int64_t id : prompts[i])
      if (id < 0 || (l.vocab > 0 && id >= l.vocab))
        fail("generate: prompt ", i, " holds token id ", id, ", outside the vocabulary [0, ", l.vocab, ")");
  }
  GenerateResult result;
  result.tokens.resize(prompts.size());
  result.weights.resize(prompts.size());
  result.first_token_ms.resize(prompts.size());
  // One batch when the export takes batches and the prompts fit one: of one length, or under an
  // attention mask (left padding); else one prompt after another.
  bool same_length = true;
  for (const auto& p : prompts) same_length = same_length && p.size() == prompts[0].size();
  if (prompts.size() > 1 && takes_batches(e, l) && (same_length || !l.attention_mask.empty())) {
    std::vector<size_t> all(prompts.size());
    std::iota(all.begin(), all.end(), size_t{0});
    run_batch(engine, l, prompts, all, options, result);
  } else {
    for (size_t pi = 0; pi < prompts.size(); ++pi) run_batch(engine, l, prompts, {pi}, options, result);
  }
  return result;
}

}  // namespace reforge::session
