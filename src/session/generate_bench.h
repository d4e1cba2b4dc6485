// Timing text generation the way people who serve decoders measure it (`reforge generate --bench`):
// time to first token, time per token (p50 / p90 of the decode steps), decode tokens per second,
// and the fraction of the memory bandwidth a decode step reaches.
//
// One generation with the same prompts and options warms the engine up (kernel selection, arena
// plans, the shape memo) and is not counted; then `rounds` generations are timed. A decode step
// reads every weight once and the cache of every sequence up to its length, so its bytes are the
// plan's weight bytes plus the cache's bytes per position times the mean length the steps saw;
// divided by the step's median time and by the memory's copy bandwidth (measured once, here: a
// copy of a 256 MiB buffer in device memory for a device plan, in host memory otherwise; read
// plus write bytes per second, the best of several) it is the fraction of the bandwidth reached.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "session/generate.h"

namespace reforge::session {

struct GenerateBenchResult {
  int64_t rounds = 0, batch = 0, prompt_tokens = 0, new_tokens = 0;
  double first_token_ms = 0;          // median over the rounds
  double step_ms_p50 = 0, step_ms_p90 = 0;  // over every decode step of every round
  double decode_tokens_per_s = 0;     // batch / p50
  double weight_bytes = 0;            // the plan's weights
  double cache_bytes_per_token = 0;   // all layers' keys and values of one position of one sequence
  double step_bytes = 0;              // weights + the cache at the mean length the steps read
  double copy_gb_s = 0;               // the memory's measured copy bandwidth (read + write)
  std::string memory;                 // "device" or "host"
  double bandwidth_fraction = 0;      // step_bytes / step_ms_p50 / copy bandwidth
  std::vector<std::vector<int64_t>> tokens;  // the last round's
};

// Benchmarks generate(engine, prompts, options) (options.on_token is not called); rounds >= 1.
GenerateBenchResult bench_generate(const runtime::PlanEngine& engine, const std::vector<std::vector<int64_t>>& prompts,
                                   GenerateOptions options, int rounds);

}  // namespace reforge::session
