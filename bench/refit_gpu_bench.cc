// Refit of a CUDA plan against the copy floors of the same bytes, in one process on one card.
// The plan (stripped, refittable, bound to a checkpoint at build time) is refit from checkpoint
// FILE each way below, --repeat times each (the first of each kind untimed: it warms the page
// cache, the staging ring and the kernels); each row is the best and the median time:
//
//   file              refit_from the safetensors file (memory-mapped, page-cached): the default path
//                     (recipes with device steps replayed on the device, sources streamed through the
//                     staging ring)
//   file, host replay the same with CommitOptions::device_replay off (every recipe on the host)
//   pinned            refit_from a state dict in pinned host memory (the checkpoint's tensors copied
//                     into one cudaHostAlloc buffer once, outside the timing)
//   pinned, no finite check  the same with CommitOptions::check_finite off (no host scan of the values)
//
// and the floors, the same total bytes: one cudaMemcpy from pinned memory (H2D pinned), one from
// the file's mapping (H2D pageable), and one device-to-device copy (D2D). Each refit's phases
// (read, validate, replay, commit) come from its report; the device memory a refit takes beyond
// the engine's weights is the stream-ordered pool's peak during it (sources streamed, weights made
// there) and the weight allocations' peak (the new version beside the old).
//
// With --decode-steps N (a plan of a decoder with a key-value cache: session/generate.h), the
// latency of a decoding step (greedy, N new tokens after a 16-token prompt, each window's step
// recorded and replayed) with the engine idle, then while another thread refits it from the pinned
// state dict back to back: p50 and p90 of each and their ratio (the goal: at most 1.5x idle).
//
//   build/reforge_refit_gpu_bench --plan PLAN --checkpoint FILE [--repeat 5] [--staging-bytes N]
//                                 [--decode-steps N]
//
// Prints a table and a final JSON line (bench/refit_gpu.py reads it). Not a test.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <iomanip>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/backend.h"
#include "core/mapped_file.h"
#include "core/timing.h"
#include "plan/plan_io.h"
#include "refit/refit_from.h"
#include "refit/safetensors.h"
#include "runtime/plan_engine.h"
#include "session/generate.h"

using namespace reforge;

namespace {

#define CHECK_CUDA(x)                                                                                \
  do {                                                                                               \
    cudaError_t e_ = (x);                                                                            \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#x) + ": " + cudaGetErrorString(e_)); \
  } while (0)

struct Timing {
  double best = 0, median = 0;
  nlohmann::ordered_json last;  // the last refit's report (refits) or {}
  size_t pool_peak = 0, weights_peak = 0;
};

double ms_of(const std::function<void()>& f) {
  CHECK_CUDA(cudaDeviceSynchronize());
  auto t0 = std::chrono::steady_clock::now();
  f();
  CHECK_CUDA(cudaDeviceSynchronize());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

Timing repeat(int n, const std::function<void()>& f) {
  f();  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) ms.push_back(ms_of(f));
  std::sort(ms.begin(), ms.end());
  return {ms.front(), ms[ms.size() / 2], {}, 0, 0};
}

cudaMemPool_t pool() {
  cudaMemPool_t p;
  CHECK_CUDA(cudaDeviceGetDefaultMemPool(&p, 0));
  return p;
}

size_t pool_used_high() {
  uint64_t v = 0;
  CHECK_CUDA(cudaMemPoolGetAttribute(pool(), cudaMemPoolAttrUsedMemHigh, &v));
  return static_cast<size_t>(v);
}

void reset_pool_high() {
  uint64_t zero = 0;
  CHECK_CUDA(cudaMemPoolSetAttribute(pool(), cudaMemPoolAttrUsedMemHigh, &zero));
}

}  // namespace

int main(int argc, char** argv) {
  std::string plan_path, file;
  int n = 5, decode_steps = 0;
  size_t staging = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--plan")
      plan_path = value();
    else if (a == "--checkpoint")
      file = value();
    else if (a == "--repeat")
      n = std::max(1, std::stoi(value()));
    else if (a == "--staging-bytes")
      staging = std::stoull(value());
    else if (a == "--decode-steps")
      decode_steps = std::max(0, std::stoi(value()));
    else {
      std::cerr << "usage: reforge_refit_gpu_bench --plan PLAN --checkpoint FILE [--repeat 5] [--staging-bytes N] "
                   "[--decode-steps N]\n";
      return 2;
    }
  }
  if (plan_path.empty() || file.empty()) {
    std::cerr << "reforge_refit_gpu_bench: --plan and --checkpoint are required\n";
    return 2;
  }
  try {
    const backends::Backend* cuda = backends::find_backend("cuda");
    if (!cuda || (cuda->unavailable && !cuda->unavailable().empty()))
      throw std::runtime_error("no CUDA device: " + (cuda && cuda->unavailable ? cuda->unavailable() : "no backend"));
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    runtime::EngineOptions eo;
    eo.device_replay = true;  // decoding steps recorded once per window and replayed (refits are not runs)
    runtime::PlanEngine engine(plan::read_plan(plan_path), eo);
    refit::Checkpoint ckpt = refit::Checkpoint::open(file);
    size_t total = 0;
    for (const auto& [name, t] : ckpt.tensors()) total += t.nbytes();

    // The state dict in pinned memory: one buffer, each tensor at its offset.
    char* pinned = nullptr;
    CHECK_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&pinned), total, cudaHostAllocDefault));
    std::shared_ptr<const void> pinned_owner(pinned, [](const void* p) { (void)cudaFreeHost(const_cast<void*>(p)); });
    std::map<std::string, Tensor> pinned_dict;
    size_t off = 0;
    for (const auto& [name, t] : ckpt.tensors()) {
      std::memcpy(pinned + off, t.raw(), t.nbytes());
      pinned_dict[name] = Tensor::wrap(t.dtype(), t.shape(), pinned_owner, pinned + off, Memory::Pinned);
      off += t.nbytes();
    }

    auto refit_timing = [&](refit::RefitRequest req) {
      if (staging) req.commit.staging_bytes = staging;
      Timing t;
      refit::RefitReport last;
      std::vector<double> ms;
      for (int i = 0; i <= n; ++i) {
        reset_pool_high();
        const size_t weights_before = cuda->streams->memory_stats().weights_bytes;
        const double m = ms_of([&] { last = refit::refit_from(engine, req); });
        if (i == 0) continue;  // warm-up
        ms.push_back(m);
        t.pool_peak = std::max(t.pool_peak, pool_used_high());
        const size_t wp = cuda->streams->memory_stats().weights_peak_bytes;
        t.weights_peak = std::max(t.weights_peak, wp > weights_before ? wp - weights_before : 0);
      }
      std::sort(ms.begin(), ms.end());
      t.best = ms.front();
      t.median = ms[ms.size() / 2];
      t.last = last.json();
      t.last.erase("summary");
      return t;
    };

    std::vector<std::pair<std::string, Timing>> rows;
    {
      refit::RefitRequest req;
      req.files = {file};
      rows.emplace_back("file", refit_timing(req));
      req.commit.device_replay = false;
      rows.emplace_back("file, host replay", refit_timing(req));
    }
    {
      refit::RefitRequest req;
      req.checkpoint_tensors = pinned_dict;
      rows.emplace_back("pinned", refit_timing(req));
      req.commit.check_finite = false;
      rows.emplace_back("pinned, no finite check", refit_timing(req));
    }

    // The floors.
    void *dev = nullptr, *dev2 = nullptr;
    CHECK_CUDA(cudaMalloc(&dev, total));
    CHECK_CUDA(cudaMalloc(&dev2, total));
    const auto mapped = MappedFile::open(file, "checkpoint");
    rows.emplace_back("floor: H2D pinned",
                      repeat(n, [&] { CHECK_CUDA(cudaMemcpy(dev, pinned, total, cudaMemcpyHostToDevice)); }));
    // The data section ends the file.
    const char* data = reinterpret_cast<const char*>(mapped->data()) + (mapped->size() - total);
    rows.emplace_back("floor: H2D pageable (file mapping)",
                      repeat(n, [&] { CHECK_CUDA(cudaMemcpy(dev, data, total, cudaMemcpyHostToDevice)); }));
    rows.emplace_back("floor: D2D", repeat(n, [&] { CHECK_CUDA(cudaMemcpy(dev2, dev, total, cudaMemcpyDeviceToDevice)); }));
    (void)cudaFree(dev);
    (void)cudaFree(dev2);

    const double floor_ms = rows[4].second.best;  // H2D pinned
    std::cout << prop.name << ": " << total / 1e9 << " GB of weights, best (median) of " << n << "\n";
    std::cout << std::left << std::setw(36) << "source" << std::right << std::setw(10) << "best ms" << std::setw(10)
              << "median" << std::setw(9) << "GB/s" << std::setw(10) << "x floor" << "   phases ms (read/validate/replay/commit)\n";
    nlohmann::ordered_json out = {{"card", prop.name}, {"bytes", total}, {"repeat", n}, {"rows", nlohmann::ordered_json::array()}};
    for (const auto& [name, t] : rows) {
      std::cout << std::left << std::setw(36) << name << std::right << std::fixed << std::setprecision(2) << std::setw(10)
                << t.best << std::setw(10) << t.median << std::setw(9) << total / 1e6 / t.best << std::setw(10)
                << t.best / floor_ms;
      if (!t.last.empty())
        std::cout << "   " << t.last["read_ms"].get<double>() << " / " << t.last["validate_ms"].get<double>() << " / "
                  << t.last["replay_ms"].get<double>() << " / " << t.last["commit_ms"].get<double>() << "  ("
                  << t.last["weights_on_device"].get<size_t>() << " weights made on the device; pool peak "
                  << t.pool_peak / 1e6 << " MB, new version " << t.weights_peak / 1e6 << " MB)";
      std::cout << "\n";
      out["rows"].push_back({{"source", name},
                             {"best_ms", t.best},
                             {"median_ms", t.median},
                             {"gb_s", total / 1e6 / t.best},
                             {"x_floor", t.best / floor_ms},
                             {"pool_peak_bytes", t.pool_peak},
                             {"new_version_bytes", t.weights_peak},
                             {"report", t.last}});
    }
    if (decode_steps > 0) {
      session::GenerateOptions go;
      go.max_new_tokens = decode_steps;
      std::vector<int64_t> prompt;
      for (int64_t t = 1; t <= 16; ++t) prompt.push_back(t);
      auto steps = [&] { return session::generate(engine, {prompt}, go).step_ms; };
      steps();  // warm-up: the window's recording
      std::vector<double> idle = steps();
      refit::RefitRequest req;
      req.checkpoint_tensors = pinned_dict;
      if (staging) req.commit.staging_bytes = staging;
      std::atomic<bool> stop{false}, failed{false};
      std::atomic<int> refits{0};
      std::string error;
      std::thread refitting([&] {
        try {
          while (!stop.load()) {
            refit::refit_from(engine, req);
            ++refits;
          }
        } catch (const std::exception& e) {
          error = e.what();
          failed = true;
        }
      });
      std::vector<double> during;
      // Generations until the refits have run through at least two (the steps of one generation
      // may all fall between two refits' commits).
      while (!failed.load() && (during.empty() || refits.load() < 2)) {
        const std::vector<double> ms = steps();
        during.insert(during.end(), ms.begin(), ms.end());
      }
      stop = true;
      refitting.join();
      if (failed.load()) throw std::runtime_error("refit during decoding: " + error);
      std::sort(idle.begin(), idle.end());
      std::sort(during.begin(), during.end());
      const double i50 = percentile(idle, 50), i90 = percentile(idle, 90), d50 = percentile(during, 50),
                   d90 = percentile(during, 90);
      std::cout << "decode step idle p50 " << i50 << " ms, p90 " << i90 << " ms; while refitting (" << refits.load()
                << " refits) p50 " << d50 << " ms, p90 " << d90 << " ms: " << d50 / i50 << "x idle\n";
      out["decode"] = {{"steps", decode_steps},      {"idle_p50_ms", i50},      {"idle_p90_ms", i90},
                       {"during_refit_p50_ms", d50}, {"during_refit_p90_ms", d90}, {"refits", refits.load()},
                       {"ratio_p50", d50 / i50}};
    }
    std::cout << out.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "reforge_refit_gpu_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
