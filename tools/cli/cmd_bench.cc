// `reforge bench MODEL.onnx [--input NAME=FILE.npy ...] [--seed N] [--shape INPUT=AxB|SYMBOL=N]
//                [--threads N] [--iterations N] [--duration S] [--warmup N] [--profile]
//                [--profile-json FILE] [--precision fp32|bf16|fp16|int8|int4] [--block-size N] [--activations
//                fp32|bf16]`
// Times runs in process after warm-up (at least --iterations runs and, with --duration, at
// least that many seconds, as trtexec does); the one line on stdout is JSON: mean, median
// (p50), p90, p99, min, max and standard deviation in ms, throughput in runs per second, and
// the process's peak resident memory. Inputs not given are synthesized (common.h), listed on
// stderr and in the JSON's "synthesized_inputs". --profile
// prints where the time went (per op type and the slowest nodes) to stderr; --profile-json
// writes the last runs' node-by-node timeline as a Chrome trace (chrome://tracing, Perfetto).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "backends/backend.h"
#include "common.h"
#include "core/atomic_file.h"
#include "core/timing.h"
#include "onnx/importer.h"
#include "plan_loading.h"
#include "progress.h"

namespace reforge::cli {

namespace {
struct BenchArgs {
  std::string model;
  std::vector<std::string> inputs;
  int threads = 0;
  int iterations = 20;
  int warmup = 3;
  std::vector<std::string> weights;
  KeyPrefixes prefixes;
  LoraOptions lora;
  bool allow_nonfinite = false;
  bool keep_baked = false;
  std::string precision, activations;
  int64_t block_size = 0;
  DeviceOptions device;
  bool profile = false;
  std::vector<std::string> skip_passes;
  bool no_arena = false;
  bool no_verify = false;
  std::string timing_cache;
  double duration_s = 0;
  std::string profile_json;
  SynthOptions synth;
  bool device_io = false;
  bool device_trace = false;
  bool device_replay = false, no_device_replay = false;
};

// Upper bounds of --iterations/--warmup and --duration: a run count whose times fit in memory,
// and a day.
constexpr int64_t kMaxRuns = 10000000;
constexpr double kMaxDurationS = 86400;

// A Chrome trace (the JSON Object Format of the Trace Event Format) of the engine's last runs as
// they happened: every node of every traced run a complete ("X") event at its real start, on a
// track per calling thread, so the gaps between nodes and between runs show.
std::string chrome_trace(const std::vector<runtime::NodeProfile>& nodes, const std::vector<runtime::TraceEvent>& trace,
                         const std::string& model) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  const double t0 = trace.empty() ? 0.0 : trace.front().start_us;
  for (const auto& e : trace) {
    const runtime::NodeProfile& n = nodes.at(e.step);
    events.push_back({{"name", n.node},
                      {"cat", n.op_type},
                      {"ph", "X"},
                      {"ts", e.start_us - t0},
                      {"dur", e.dur_us},
                      {"pid", 1},
                      {"tid", e.thread + 1},
                      {"args", {{"op_type", n.op_type}, {"run", e.run}}}});
  }
  const int64_t runs = trace.empty() ? 0 : trace.back().run - trace.front().run + 1;
  nlohmann::ordered_json doc = {
      {"traceEvents", events},
      {"displayTimeUnit", "ms"},
      {"otherData",
       {{"model", model},
        {"note", "the last " + std::to_string(runs) + " runs (warm-up included when there were fewer timed runs), " +
                     "each node at its real start; device nodes wait for their work"}}}};
  return doc.dump(1) + "\n";
}

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

// The op types whose device kernels are matrix products (cuBLASLt on CUDA).
bool is_product(const std::string& op_type) {
  return op_type == "MatMul" || op_type == "Gemm" || op_type == "reforge::MatMulAdd";
}
bool is_convolution(const std::string& op_type) {
  return op_type == "Conv" || op_type == "reforge::FusedConv" || op_type == "ConvTranspose";
}

// --device-trace: traces `runs` runs with the device's profiler, then runs every product node
// alone `runs` times on the inputs it had; prints the account to `os` and adds its figures to
// `doc`. `median_ms` is the untraced runs' median, the wall time the shares are taken of.
void device_trace(const runtime::PlanEngine& engine, const std::string& backend_name,
                  const std::map<std::string, Tensor>& inputs, const runtime::RunOptions& run_options, int runs,
                  double median_ms, nlohmann::ordered_json& doc, std::ostream& os) {
  const backends::Backend* backend = backends::find_backend(backend_name);
  if (!backend || !backend->tracer)
    fail("--device-trace: backend '", backend_name, "' has no device profiler (build the plan with --device cuda)");
  const std::vector<runtime::NodeProfile> steps = engine.steps();
  backends::DeviceTracer& tracer = *backend->tracer;
  // Per step: kernel launches and device time in `runs` runs, then alone.
  struct Account {
    int64_t kernels = 0, copies = 0, memsets = 0;
    double ms = 0;
  };
  auto account = [&](const std::vector<backends::DeviceActivity>& acts, std::map<int64_t, Account>& by_step,
                     Account& all) {
    for (const auto& a : acts) {
      Account& s = by_step[a.tag];
      const double ms = 1e-6 * static_cast<double>(a.end_ns - a.start_ns);
      for (Account* x : {&s, &all}) {
        x->ms += ms;
        if (a.kind == backends::DeviceActivity::Kind::Kernel) x->kernels += 1;
        if (a.kind == backends::DeviceActivity::Kind::Copy) x->copies += 1;
        if (a.kind == backends::DeviceActivity::Kind::Memset) x->memsets += 1;
      }
    }
  };
  size_t dropped = 0;
  tracer.start();
  for (int i = 0; i < runs; ++i) engine.run(inputs, run_options);
  std::map<int64_t, Account> in_run;
  Account total;
  account(tracer.stop(dropped), in_run, total);
  if (dropped) fail("--device-trace: the profiler dropped ", dropped, " records; trace fewer runs (--iterations)");
  // Every product alone, on the inputs of the last traced run.
  std::vector<size_t> products;
  for (size_t si = 0; si < steps.size(); ++si)
    if (is_product(steps[si].op_type) && in_run.count(static_cast<int64_t>(si))) products.push_back(si);
  // Alone twice: back to back, so that operands small enough stay in the device's cache from one
  // call to the next (a warm cache, which a run rarely gives a weight), and with the caches
  // flushed before each call (what a benchmark of one kernel measures by default, nvbench's
  // convention): the goal is judged against the second, the first is shown beside it.
  std::map<int64_t, Account> alone, alone_warm;
  const bool flush = backend->streams != nullptr;
  if (!products.empty()) {
    for (size_t si : products) engine.rerun_step(si, 2);  // the same kernels and workspaces as in the runs
    Account unused;
    tracer.start();
    for (size_t si : products) engine.rerun_step(si, runs);
    account(tracer.stop(dropped), alone_warm, unused);
    if (dropped) fail("--device-trace: the profiler dropped ", dropped, " records; trace fewer runs (--iterations)");
    if (flush) {
      tracer.start();
      for (size_t si : products)
        for (int i = 0; i < runs; ++i) {
          backend->streams->flush_caches();  // untagged: not counted as the product's
          engine.rerun_step(si, 1);
        }
      account(tracer.stop(dropped), alone, unused);
      if (dropped) fail("--device-trace: the profiler dropped ", dropped, " records; trace fewer runs (--iterations)");
    } else {
      alone = alone_warm;
    }
  }
  const double n = static_cast<double>(runs);
  double product_ms = 0, conv_ms = 0, other_ms = 0, untagged_ms = 0;
  for (const auto& [tag, a] : in_run) {
    if (tag < 0 || static_cast<size_t>(tag) >= steps.size()) {
      untagged_ms += a.ms;
      continue;
    }
    const std::string& op = steps[static_cast<size_t>(tag)].op_type;
    (is_product(op) ? product_ms : is_convolution(op) ? conv_ms : other_ms) += a.ms;
  }
  product_ms /= n, conv_ms /= n, other_ms /= n, untagged_ms /= n;
  const double busy_ms = total.ms / n;
  char line[320];
  os << "device trace over " << runs << " runs (device clock; wall time per run is the untimed median, " << median_ms
     << " ms):\n";
  std::snprintf(line, sizeof line,
                "  per run: %.1f kernel launches, %.1f copies, %.1f memsets; device busy %.3f ms (%.1f%% of the run)\n",
                static_cast<double>(total.kernels) / n, static_cast<double>(total.copies) / n,
                static_cast<double>(total.memsets) / n, busy_ms, 100.0 * busy_ms / median_ms);
  os << line;
  std::snprintf(line, sizeof line,
                "  matrix products %.3f ms (%.1f%%), convolutions %.3f ms (%.1f%%), other kernels %.3f ms (%.1f%%), "
                "idle %.3f ms (%.1f%%)\n",
                product_ms, 100.0 * product_ms / median_ms, conv_ms, 100.0 * conv_ms / median_ms,
                other_ms + untagged_ms, 100.0 * (other_ms + untagged_ms) / median_ms,
                std::max(0.0, median_ms - busy_ms), 100.0 * std::max(0.0, median_ms - busy_ms) / median_ms);
  os << line;
  // Each product in the run against the same call alone.
  struct Row {
    size_t step;
    double run_ms, alone_ms, warm_ms;
  };
  std::vector<Row> rows;
  double worst = 0, sum_run = 0, sum_alone = 0, sum_warm = 0;
  for (size_t si : products) {
    const auto tag = static_cast<int64_t>(si);
    const double r = in_run[tag].ms / n, a = alone[tag].ms / n, warm = alone_warm[tag].ms / n;
    if (a <= 0) continue;
    rows.push_back({si, r, a, warm});
    worst = std::max(worst, r / a);
    sum_run += r;
    sum_alone += a;
    sum_warm += warm;
  }
  std::sort(rows.begin(), rows.end(),
            [](const Row& x, const Row& y) { return x.run_ms / x.alone_ms > y.run_ms / y.alone_ms; });
  if (!rows.empty()) {
    std::snprintf(line, sizeof line,
                  "  %zu products: in the run %.3f ms, alone %.3f ms%s (in run / alone %.3f overall, %.3f at worst); "
                  "alone back to back, caches warm: %.3f ms (in run / that %.3f); the least like alone:\n",
                  rows.size(), sum_run, sum_alone, flush ? " with the caches flushed before each call" : "",
                  sum_run / sum_alone, worst, sum_warm, sum_run / sum_warm);
    os << line;
    for (size_t i = 0; i < rows.size() && i < 8; ++i) {
      std::snprintf(line, sizeof line, "    %-48s %-20s %8.4f ms in run %8.4f ms alone  %.3f   (warm %8.4f ms  %.3f)\n",
                    steps[rows[i].step].node.c_str(), steps[rows[i].step].op_type.c_str(), rows[i].run_ms,
                    rows[i].alone_ms, rows[i].run_ms / rows[i].alone_ms, rows[i].warm_ms,
                    rows[i].run_ms / rows[i].warm_ms);
      os << line;
    }
    size_t within = 0;
    for (const Row& r : rows) within += r.run_ms <= 1.1 * r.alone_ms;
    os << "  products within 10% of alone: " << within << " of " << rows.size() << "\n";
    doc["products_within_10pct_of_alone"] = within;
    doc["products"] = rows.size();
    doc["products_in_run_over_alone"] = sum_run / sum_alone;
    doc["products_worst_in_run_over_alone"] = worst;
    doc["products_alone_caches_flushed"] = flush;
    doc["products_in_run_over_alone_warm"] = sum_run / sum_warm;
  }
  // Device time by op type, the most first: where a run's kernels spend it.
  std::map<std::string, Account> by_op;
  for (const auto& [tag, a] : in_run) {
    const bool known = tag >= 0 && static_cast<size_t>(tag) < steps.size();
    Account& o = by_op[known ? steps[static_cast<size_t>(tag)].op_type : std::string("(untagged)")];
    o.kernels += a.kernels + a.copies + a.memsets;
    o.ms += a.ms;
  }
  std::vector<std::pair<std::string, Account>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(), [](const auto& x, const auto& y) { return x.second.ms > y.second.ms; });
  os << "  device time by op type:          launches/run      ms/run   us/launch\n";
  nlohmann::ordered_json op_doc = nlohmann::ordered_json::object();
  for (const auto& [op, a] : ops) {
    const double launches = static_cast<double>(a.kernels) / n, ms = a.ms / n;
    std::snprintf(line, sizeof line, "    %-28s %12.1f %11.4f %11.2f\n", op.c_str(), launches, ms,
                  launches > 0 ? 1e3 * ms / launches : 0.0);
    os << line;
    op_doc[op] = {{"launches", launches}, {"ms", ms}};
  }
  doc["device_ms_by_op_type"] = op_doc;
  doc["kernel_launches_per_run"] = static_cast<double>(total.kernels) / n;
  doc["device_copies_per_run"] = static_cast<double>(total.copies) / n;
  doc["device_memsets_per_run"] = static_cast<double>(total.memsets) / n;
  doc["device_busy_ms"] = busy_ms;
  doc["product_ms"] = product_ms;
  doc["convolution_ms"] = conv_ms;
  doc["outside_products_fraction"] = 1.0 - product_ms / median_ms;
  doc["outside_products_and_convolutions_fraction"] = 1.0 - (product_ms + conv_ms) / median_ms;
}
}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("model", a->model, "ONNX model or plan file")->required();
  app.add_option("--weights,-w", a->weights, "refit from these weights first");
  app.add_flag("--allow-nonfinite", a->allow_nonfinite,
               "accept NaN/Inf in the weights of an ONNX model built here and in --weights (refused by default)");
  add_key_prefix_options(app, a->prefixes);
  add_lora_options(app, a->lora);
  app.add_flag("--keep-baked", a->keep_baked,
               "with --weights: keep a --refit-individual plan's baked sources where the weights hold other values "
               "(refused by default)");
  app.add_option("--input,-i", a->inputs, "NAME=FILE.npy for each graph input, or FILE.npz (numpy.savez): one per array name");
  app.add_option("--threads", a->threads, "threads (default: all cores)")->check(threads_check());
  add_precision_options(app, a->precision, a->activations, a->block_size);
  add_synthetic_options(app, a->synth);
  app.add_option("--iterations", a->iterations, "timed runs (at least; default 20)")
      ->check(integer_in(1, kMaxRuns, " (it counts timed runs)"));
  app.add_option("--duration", a->duration_s, "keep timing runs until this many seconds have passed (and --iterations)")
      ->check(number_in(0, kMaxDurationS, " seconds"));
  app.add_option("--warmup", a->warmup, "untimed runs first")->check(integer_in(0, kMaxRuns, " (untimed runs)"));
  app.add_flag("--profile", a->profile, "print time per op type and the slowest nodes (stderr)");
  app.add_option("--profile-json", a->profile_json,
                 "write the last " + std::to_string(runtime::kTraceRuns) +
                     " runs node by node, each at its real start, as a Chrome trace (chrome://tracing, Perfetto)");
  app.add_option("--skip-pass", a->skip_passes, "do not run build passes matching this glob (e.g. 'fuse-*')");
  app.add_flag("--no-arena", a->no_arena, "allocate intermediates on the heap (for comparison)");
  add_no_verify_option(app, a->no_verify);
  add_device_options(app, a->device);
  add_timing_cache_option(app, a->timing_cache);
  app.add_flag("--device-io", a->device_io,
               "with a GPU plan: copy the inputs to the GPU once before timing and leave the outputs there, as a "
               "framework's timing of tensors that live on the GPU does (by default each run copies both ways)");
  auto* replay = app.add_flag("--device-replay", a->device_replay,
                              "with a GPU plan: record each input signature's run after its first (a CUDA graph) and "
                              "replay it, instead of launching every kernel from the host in every run");
  app.add_flag("--no-device-replay", a->no_device_replay,
               "with a GPU plan: launch every kernel of every run from the host (the default)")
      ->excludes(replay);
  app.add_flag("--device-trace", a->device_trace,
               "with a GPU plan: after timing, trace as many runs with the GPU's profiler (CUPTI): kernel launches "
               "per run, device time of matrix products, convolutions and the rest, and each product in the run "
               "against the same product run alone, with the device's caches flushed before each call and back to back "
               "(stderr; figures in the JSON)");
  return [a]() {
    auto inputs = load_inputs(a->inputs);
    auto t0 = std::chrono::steady_clock::now();
    LoadOptions lo;
    lo.threads = a->threads;
    lo.weights = a->weights;
    lo.prefixes = a->prefixes;
    lo.lora = a->lora;
    lo.allow_nonfinite = a->allow_nonfinite;
    lo.keep_baked = a->keep_baked;
    lo.precision = a->precision;
    lo.activations = a->activations;
    lo.block_size = a->block_size;
    lo.device = a->device;
    lo.quiet = true;
    lo.profile = a->profile || !a->profile_json.empty();
    lo.skip_passes = a->skip_passes;
    lo.arena = !a->no_arena;
    lo.device_trace = a->device_trace;
    if (a->device_replay || a->no_device_replay) lo.device_replay = a->device_replay;
    lo.verify_weights = !a->no_verify;
    std::map<std::string, IndexBound> bounds;
    lo.index_bounds = &bounds;
    const session::Session loaded = load_session(a->model, lo);
    const runtime::PlanEngine& engine = loaded.engine();
    double build_ms = ms_since(t0);
    // Unlike run, bench makes the inputs not given (the times do not depend on most values), and
    // says so: on stderr, and in the JSON line's "synthesized_inputs".
    auto made = complete_inputs(inputs, engine.inputs(), a->synth, bounds);
    if (verbosity() != Verbosity::Quiet) std::cerr << describe_synthesized(inputs, made, a->synth, bounds);
    runtime::RunOptions run_options;
    const std::string backend_name = loaded.device();
    if (!a->timing_cache.empty()) backends::load_timing_cache_file(backend_name, a->timing_cache);
    if (a->device_io) {
      if (backend_name == "cpu")
        fail("--device-io: '", a->model, "' is a plan for the CPU (build it with --device cuda)");
      for (auto& [name, t] : inputs) t = to_memory(t, Memory::Device);
      run_options.outputs = Memory::Device;
    }
    for (int i = 0; i < a->warmup; ++i) engine.run(inputs, run_options);
    // The profile covers the timed runs only: the first runs load kernels and choose algorithms.
    const std::vector<runtime::NodeProfile> warm = a->profile ? engine.profile() : std::vector<runtime::NodeProfile>();
    std::vector<double> times;
    auto start = std::chrono::steady_clock::now();
    while (static_cast<int>(times.size()) < a->iterations || ms_since(start) < 1000.0 * a->duration_s) {
      auto t = std::chrono::steady_clock::now();
      engine.run(inputs, run_options);
      times.push_back(ms_since(t));
    }
    double wall_ms = ms_since(start);
    if (a->profile) {
      std::vector<runtime::NodeProfile> timed = engine.profile();
      for (size_t i = 0; i < timed.size() && i < warm.size(); ++i) {
        timed[i].calls -= warm[i].calls;
        timed[i].total_ms -= warm[i].total_ms;
      }
      print_profile(timed, std::cerr);
    }
    if (!a->profile_json.empty()) {
      std::string text = chrome_trace(engine.profile(), engine.trace(), a->model);
      AtomicFile f(a->profile_json, "profile");
      f.write(text.data(), text.size());
      f.commit();
    }
    double sum = 0;
    for (double t : times) sum += t;
    double mean = sum / static_cast<double>(times.size()), var = 0;
    for (double t : times) var += (t - mean) * (t - mean);
    double stddev = times.size() > 1 ? std::sqrt(var / static_cast<double>(times.size() - 1)) : 0.0;
    std::sort(times.begin(), times.end());
    double median =
        times.size() % 2 ? times[times.size() / 2] : 0.5 * (times[times.size() / 2 - 1] + times[times.size() / 2]);
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    int64_t peak_rss = static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
    // The activation arena of the last run: its size (planned from inferred shapes) and the
    // allocations it did not serve (graph outputs, values of data-dependent size).
    const runtime::ArenaStats arena = engine.arena_stats();
    nlohmann::ordered_json doc = {{"median_ms", median},
                                  {"mean_ms", mean},
                                  {"p50_ms", percentile(times, 50)},
                                  {"p90_ms", percentile(times, 90)},
                                  {"p99_ms", percentile(times, 99)},
                                  {"min_ms", times.front()},
                                  {"max_ms", times.back()},
                                  {"stddev_ms", stddev},
                                  {"iterations", times.size()},
                                  {"throughput_per_s", 1000.0 * static_cast<double>(times.size()) / wall_ms},
                                  {"build_ms", build_ms},
                                  {"peak_rss_bytes", peak_rss},
                                  {"arena_bytes", arena.arena_bytes},
                                  {"arena_allocations", arena.arena_allocations},
                                  {"heap_allocations", arena.heap_allocations},
                                  {"synthesized_inputs", made},
                                  {"stats", session::stats_json(engine.stats())}};
    if (const backends::Backend* be = backends::find_backend(backend_name); be && be->streams) {
      // Device memory: engine weights (and what kernels prepared from them), library workspaces,
      // and the most the runs' values held at once (the device arena of an eager run is one
      // allocation of the backend's: in that figure), with the device arena of the last eager run.
      const backends::DeviceMemoryStats m = be->streams->memory_stats();
      doc["device_weights_bytes"] = m.weights_bytes;
      doc["device_workspace_bytes"] = m.workspace_bytes;
      doc["device_activations_peak_bytes"] = m.activations_peak_bytes;  // the device arena's buffers included
      doc["device_arena_bytes"] = arena.device.arena_bytes;
      doc["device_arena_allocations"] = arena.device.arena_allocations;
      doc["device_backend_allocations"] = arena.device.backend_allocations;
      doc["device_peak_bytes"] =
          m.weights_peak_bytes + m.workspace_bytes + m.activations_reserved_peak_bytes + m.replay_peak_bytes;
      doc["device_replay_peak_bytes"] = m.replay_peak_bytes;
      // Recorded replay (CUDA graphs): how many of the runs replayed a recording, or why none could.
      const runtime::ReplayStats r = engine.replay_stats();
      doc["device_replays"] = r.replays;
      doc["device_eager_runs"] = r.eager_runs;
      if (!r.declined.empty()) doc["device_replay_declined"] = r.declined;
      if (r.failed) doc["device_replay_failure"] = r.last_failure;
      if (!r.declined.empty() && a->device_replay && !a->device_trace && !a->profile && a->profile_json.empty())
        std::cerr << "device replay: not used (" << r.declined << ")\n";
      else if (r.failed)
        std::cerr << "device replay: recording failed, runs were eager (" << r.last_failure << ")\n";
    }
    if (a->device_trace) device_trace(engine, backend_name, inputs, run_options, a->iterations, median, doc, std::cerr);
    if (!a->timing_cache.empty()) backends::save_timing_cache_file(backend_name, a->timing_cache);
    std::cout << doc.dump() << std::endl;
    return 0;
  };
}

}  // namespace reforge::cli
