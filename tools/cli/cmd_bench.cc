// `reforge bench MODEL.onnx --input NAME=FILE.npy ... [--threads N] [--iterations N] [--warmup N]`
// Times runs in process after warm-up; the last line printed is JSON.
#include <algorithm>
#include <chrono>
#include <iostream>

#include "core/timing.h"
#include "common.h"
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
};
}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("model", a->model, "ONNX model or plan file")->required();
  app.add_option("--weights,-w", a->weights, "refit from these weights first");
  app.add_option("--input,-i", a->inputs, "NAME=FILE.npy for each graph input");
  app.add_option("--threads", a->threads, "threads (default: all cores)");
  app.add_option("--iterations", a->iterations, "timed runs")->check(CLI::PositiveNumber);
  app.add_option("--warmup", a->warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  return [a]() {
    auto inputs = load_inputs(a->inputs);
    auto t0 = std::chrono::steady_clock::now();
    LoadOptions lo;
    lo.threads = a->threads;
    lo.weights = a->weights;
    lo.quiet = true;
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
    std::sort(times.begin(), times.end());
    double median = times.size() % 2 ? times[times.size() / 2] : 0.5 * (times[times.size() / 2 - 1] + times[times.size() / 2]);
    std::cout << "{\"median_ms\": " << median << ", \"min_ms\": " << times.front() << ", \"max_ms\": " << times.back()
              << ", \"iterations\": " << times.size() << ", \"build_ms\": " << build_ms << "}" << std::endl;
    return 0;
  };
}

}  // namespace reforge::cli
