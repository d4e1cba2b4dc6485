#include "session/generate_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backends/placement.h"
#include "core/timing.h"

namespace reforge::session {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Whether any node of the engine runs on a device (a transfer was placed).
bool runs_on_device(const runtime::Engine& e) {
  for (const ir::Node& n : e.graph().nodes)
    if (backends::is_transfer(n)) return true;
  return false;
}

// Read + write bytes per second of a copy of 256 MiB within device or host memory, best of 5.
double copy_bandwidth(bool device) {
  constexpr int64_t kBytes = int64_t{256} << 20;
  const Tensor a = device ? device_memory().allocate(DType::UInt8, {kBytes}) : Tensor::empty(DType::UInt8, {kBytes});
  Tensor b = device ? device_memory().allocate(DType::UInt8, {kBytes}) : Tensor::empty(DType::UInt8, {kBytes});
  const Memory m = device ? Memory::Device : Memory::Host;
  auto copy = [&] {
    if (device)
      device_memory().copy(b.mutable_raw(), m, a.raw(), m, static_cast<size_t>(kBytes));
    else
      std::memcpy(b.mutable_raw(), a.raw(), static_cast<size_t>(kBytes));
  };
  copy();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    copy();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(kBytes) / best / 1e9;
}

// Bytes of one position of one sequence in all the caches: each pair's input dimensions but the
// length axis (where input and output differ) and the batch (input_ids' batch symbol); 0 when a
// dimension is unknown.
double cache_bytes_per_token(const runtime::Engine& e, const DecoderLayout& l) {
  const ir::ValueInfo* ids = ir::find_value_info(e.inputs(), l.input_ids);
  const std::string batch = ids && ids->has_shape && !ids->shape.empty() ? ids->shape[0].symbol : "";
  double total = 0;
  for (const auto& pair : l.cache) {
    const ir::ValueInfo* in = ir::find_value_info(e.inputs(), pair.input);
    const ir::ValueInfo* out = ir::find_value_info(e.outputs(), pair.output);
    if (!in || !out || !in->has_shape || !out->has_shape || in->shape.size() != out->shape.size()) return 0;
    double n = static_cast<double>(dtype_size(in->dtype));
    for (size_t d = 0; d < in->shape.size(); ++d) {
      const ir::Dim &a = in->shape[d], &b = out->shape[d];
      const bool same = a.fixed() ? b.fixed() && a.value == b.value : !a.symbol.empty() && a.symbol == b.symbol;
      if (!same || (d == 0 && !a.fixed() && a.symbol == batch)) continue;  // the length axis, the batch
      if (!a.fixed()) return 0;
      n *= static_cast<double>(a.value);
    }
    total += n;
  }
  return total;
}

}  // namespace

GenerateBenchResult bench_generate(const runtime::PlanEngine& engine, const std::vector<std::vector<int64_t>>& prompts,
                                   GenerateOptions options, int rounds) {
  if (rounds < 1) fail("generate --bench: rounds is ", rounds, "; it must be at least 1");
  options.on_token = nullptr;
  const DecoderLayout l = decoder_layout(engine.engine());
  GenerateBenchResult r;
  r.rounds = rounds;
  r.batch = static_cast<int64_t>(prompts.size());
  for (const auto& p : prompts) r.prompt_tokens = std::max(r.prompt_tokens, static_cast<int64_t>(p.size()));
  generate(engine, prompts, options);  // warm-up
  std::vector<double> first, steps;
  for (int i = 0; i < rounds; ++i) {
    GenerateResult g = generate(engine, prompts, options);
    first.push_back(g.first_token_ms.empty() ? 0.0 : g.first_token_ms[0]);
    steps.insert(steps.end(), g.step_ms.begin(), g.step_ms.end());
    r.tokens = std::move(g.tokens);
  }
  for (const auto& t : r.tokens) r.new_tokens = std::max(r.new_tokens, static_cast<int64_t>(t.size()));
  std::sort(steps.begin(), steps.end());
  r.first_token_ms = median(first);
  r.step_ms_p50 = percentile(steps, 50);
  r.step_ms_p90 = percentile(steps, 90);
  // Prompts that ran as one batch made a token per row each step (generate.h): no more steps a
  // round than the longest sequence's; prompts run one after another made one.
  const bool one_batch = r.batch > 1 && static_cast<int64_t>(steps.size()) <= rounds * (r.new_tokens - 1);
  const double rows = one_batch ? static_cast<double>(r.batch) : 1.0;
  r.decode_tokens_per_s = r.step_ms_p50 > 0 ? 1000.0 * rows / r.step_ms_p50 : 0;
  for (const plan::WeightEntry& w : engine.plan().weights)
    r.weight_bytes += static_cast<double>(shape_numel(w.shape)) * static_cast<double>(dtype_size(w.dtype));
  r.cache_bytes_per_token = cache_bytes_per_token(engine.engine(), l);
  const double mean_length = static_cast<double>(r.prompt_tokens) + static_cast<double>(r.new_tokens) / 2.0;
  r.step_bytes = r.weight_bytes + r.cache_bytes_per_token * mean_length * rows;
  const bool device = runs_on_device(engine.engine());
  r.memory = device ? "device" : "host";
  r.copy_gb_s = copy_bandwidth(device);
  if (r.step_ms_p50 > 0 && r.copy_gb_s > 0) r.bandwidth_fraction = r.step_bytes / (r.step_ms_p50 * 1e-3) / (r.copy_gb_s * 1e9);
  return r;
}

}  // namespace reforge::session
