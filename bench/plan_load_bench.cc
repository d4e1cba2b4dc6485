// Plan load benchmark: what verifying every weight's hash costs when a plan is loaded.
//
//   build/reforge_load_bench [--mb 411] [--dir DIR] [--repeat 5] [--keep]
//
// Builds a baked synthetic Llama-style decoder (tests/support/synthetic_llama.h: hidden 1024,
// ffn 2816, vocab 32000, as many layers as it takes to reach --mb x 10^6 bytes of float32
// weights), writes its plan to DIR, then loads it as `reforge run` does (read_plan + PlanEngine)
// with and without ReadOptions::verify_weight_hashes, alternating, and runs it once on a [1, 8]
// input. Two page-cache states: warm (the file was just read) and cold (the file's pages dropped
// with posix_fadvise(DONTNEED) before each load). Reports, per state and mode, the median over
// --repeat of the load time and of load + first run (the first run pays the page-in of every
// weight that a non-verifying load leaves untouched). The plan is removed unless --keep. Not a
// test; prints a table and a final JSON line.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "builder/builder.h"
#include "core/timing.h"
#include "plan/plan_io.h"
#include "runtime/plan_engine.h"
#include "support/synthetic_llama.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

void drop_page_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  double mb = 411;
  std::string dir = fs::temp_directory_path().string();
  int repeat = 5;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--keep") {
      keep = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "usage: reforge_load_bench [--mb 411] [--dir DIR] [--repeat 5] [--keep]\n";
      return 2;
    }
    std::string v = argv[++i];
    if (k == "--mb")
      mb = std::stod(v);
    else if (k == "--dir")
      dir = v;
    else if (k == "--repeat")
      repeat = std::max(1, std::stoi(v));
    else {
      std::cerr << "unknown option " << k << "\n";
      return 2;
    }
  }
  synth::LlamaSpec spec;
  spec.hidden = 1024;
  spec.ffn = 2816;
  spec.vocab = 32000;
  spec.share_norms = false;
  double fixed = 2.0 * spec.vocab * spec.hidden * 4,
         per_layer = (4.0 * spec.hidden * spec.hidden + 3.0 * spec.hidden * spec.ffn) * 4;
  spec.layers = std::max<int64_t>(1, std::llround((mb * 1e6 - fixed) / per_layer));
  std::string path = (fs::path(dir) / ("reforge_load_bench_" + std::to_string(::getpid()) + ".plan")).string();
  {
    plan::Plan p = build::build_plan(synth::synthetic_llama(spec), build::BuildOptions{});
    plan::write_plan(p, path);
  }
  auto file_bytes = fs::file_size(path);
  auto inputs = synth::synthetic_llama_inputs(8);
  size_t weights = 0;
  std::vector<double> load[2][2], first[2][2];  // [cold][verify]
  for (int r = 0; r < repeat; ++r)
    for (int cold = 0; cold < 2; ++cold)
      for (int verify = 0; verify < 2; ++verify) {
        if (cold) drop_page_cache(path);
        auto t0 = std::chrono::steady_clock::now();
        plan::ReadOptions ro;
        ro.verify_weight_hashes = verify != 0;
        plan::Plan p = plan::read_plan(path, ro);
        weights = p.weights.size();
        runtime::PlanEngine engine(std::move(p));
        load[cold][verify].push_back(ms_since(t0));
        engine.run(inputs);
        first[cold][verify].push_back(ms_since(t0));
      }
  if (!keep) fs::remove(path);
  std::cout << "plan " << (keep ? path : std::string("(removed)")) << ": " << file_bytes << " bytes, " << weights
            << " engine weights, " << spec.layers << " layers; median of " << repeat << "\n";
  std::cout << "cache  verify   load ms  load+run ms  verify cost (of load+run)\n"
            << std::fixed << std::setprecision(1);
  for (int cold = 0; cold < 2; ++cold)
    for (int verify = 0; verify < 2; ++verify) {
      double l = median(load[cold][verify]), f = median(first[cold][verify]), f0 = median(first[cold][0]);
      std::cout << (cold ? "cold   " : "warm   ") << (verify ? "on     " : "off    ") << std::setw(8) << l
                << std::setw(13) << f;
      if (verify) std::cout << "   " << std::setw(6) << f - f0 << " ms (" << 100.0 * (f - f0) / f0 << "%)";
      std::cout << "\n";
    }
  std::cout << "{\"file_bytes\": " << file_bytes;
  for (int cold = 0; cold < 2; ++cold)
    for (int verify = 0; verify < 2; ++verify) {
      std::string key = std::string(cold ? "cold" : "warm") + (verify ? "_verify" : "_noverify");
      std::cout << ", \"" << key << "_load_ms\": " << median(load[cold][verify]) << ", \"" << key
                << "_first_run_ms\": " << median(first[cold][verify]);
    }
  std::cout << "}" << std::endl;
  return 0;
}
