// `reforge bench MODEL.onnx --input NAME=FILE.npy ... [--threads N] [--iterations N] [--warmup N]
//                [--precision fp32|bf16|fp16] [--activations fp32|bf16]`
// Times runs in process after warm-up; the last line printed is JSON. --profile prints where
// the time went (per op type and the slowest nodes) to stderr first.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>

#include "common.h"
#include "core/timing.h"
#include "onnx/importer.h"
#include "plan_loading.h"

namespace reforge::cli {

namespace {
struct BenchArgs {
  std::string model;
  std::vector<std::string> inputs;
  int threads = 0;
  int iterations = 20;
  int warmup = 3;
  std::vector<std::string> weights;
  bool allow_nonfinite = false;
  std::string precision, activations;
  bool profile = false;
  std::vector<std::string> skip_passes;
  bool no_arena = false;
  bool no_verify = false;
};

// Per op type (sorted by time) and the slowest nodes, from the engine's per-node timings.
void print_profile(const std::vector<runtime::NodeProfile>& nodes, std::ostream& os) {
  struct Row {
    int64_t nodes = 0, calls = 0;
    double ms = 0;
  };
  std::map<std::string, Row> by_op;
  double total = 0;
  for (const auto& n : nodes) {
    Row& r = by_op[n.op_type];
    r.nodes += 1;
    r.calls += n.calls;
    r.ms += n.total_ms;
    total += n.total_ms;
  }
  int64_t runs = nodes.empty() ? 0 : nodes.front().calls;
  if (runs == 0 || total <= 0) return;
  std::vector<std::pair<std::string, Row>> rows(by_op.begin(), by_op.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  char line[256];
  os << "profile over " << runs << " runs (" << total / static_cast<double>(runs) << " ms per run in kernels)\n";
  os << "  op type                      nodes   ms/run     share\n";
  for (const auto& [op, r] : rows) {
    std::snprintf(line, sizeof line, "  %-28s %5lld %8.3f %8.1f%%\n", op.c_str(), static_cast<long long>(r.nodes),
                  r.ms / static_cast<double>(runs), 100.0 * r.ms / total);
    os << line;
  }
  std::vector<runtime::NodeProfile> slow(nodes.begin(), nodes.end());
  std::sort(slow.begin(), slow.end(), [](const auto& a, const auto& b) { return a.total_ms > b.total_ms; });
  os << "  slowest nodes:\n";
  for (size_t i = 0; i < slow.size() && i < 10; ++i) {
    std::snprintf(line, sizeof line, "    %-40s %-20s %8.3f ms/run\n", slow[i].node.c_str(), slow[i].op_type.c_str(),
                  slow[i].total_ms / static_cast<double>(runs));
    os << line;
  }
}
}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("model", a->model, "ONNX model or plan file")->required();
  auto* w = app.add_option("--weights,-w", a->weights, "refit from these weights first");
  app.add_flag("--allow-nonfinite", a->allow_nonfinite,
               "with --weights: accept NaN/Inf in the new weights (refused by default)")
      ->needs(w);
  app.add_option("--input,-i", a->inputs, "NAME=FILE.npy for each graph input");
  app.add_option("--threads", a->threads, "threads (default: all cores)");
  add_precision_options(app, a->precision, a->activations);
  app.add_option("--iterations", a->iterations, "timed runs")->check(CLI::PositiveNumber);
  app.add_option("--warmup", a->warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  app.add_flag("--profile", a->profile, "print time per op type and the slowest nodes (stderr)");
  app.add_option("--skip-pass", a->skip_passes, "do not run build passes matching this glob (e.g. 'fuse-*')");
  app.add_flag("--no-arena", a->no_arena, "allocate intermediates on the heap (for comparison)");
  add_no_verify_option(app, a->no_verify);
  return [a]() {
    auto inputs = load_inputs(a->inputs);
    auto t0 = std::chrono::steady_clock::now();
    LoadOptions lo;
    lo.threads = a->threads;
    lo.weights = a->weights;
    lo.allow_nonfinite = a->allow_nonfinite;
    lo.precision = a->precision;
    lo.activations = a->activations;
    lo.quiet = true;
    lo.profile = a->profile;
    lo.skip_passes = a->skip_passes;
    lo.arena = !a->no_arena;
    lo.verify_weights = !a->no_verify;
    auto engine_ptr = load_engine(a->model, lo);
    const runtime::PlanEngine& engine = *engine_ptr;
    double build_ms = ms_since(t0);
    for (int i = 0; i < a->warmup; ++i) engine.run(inputs);
    std::vector<double> times;
    for (int i = 0; i < a->iterations; ++i) {
      auto t = std::chrono::steady_clock::now();
      engine.run(inputs);
      times.push_back(ms_since(t));
    }
    if (a->profile) print_profile(engine.profile(), std::cerr);
    std::sort(times.begin(), times.end());
    double median =
        times.size() % 2 ? times[times.size() / 2] : 0.5 * (times[times.size() / 2 - 1] + times[times.size() / 2]);
    // The activation arena of the last run: its size (planned from inferred shapes) and the
    // allocations it did not serve (graph outputs, values of data-dependent size).
    const runtime::ArenaStats arena = engine.arena_stats();
    std::cout << "{\"median_ms\": " << median << ", \"min_ms\": " << times.front() << ", \"max_ms\": " << times.back()
              << ", \"iterations\": " << times.size() << ", \"build_ms\": " << build_ms
              << ", \"arena_bytes\": " << arena.arena_bytes << ", \"arena_allocations\": " << arena.arena_allocations
              << ", \"heap_allocations\": " << arena.heap_allocations << "}" << std::endl;
    return 0;
  };
}

}  // namespace reforge::cli
