// Refit benchmark: fast refit of a stripped plan, from a memory-mapped ONNX external-data file
// and from a memory-mapped safetensors checkpoint, next to a plain memcpy of the same number of
// bytes measured in the same run; optionally slow refit and a fresh build.
//
//   build/reforge_refit_bench [--gb G | --hidden 768 --ffn 2048 --layers 6 --vocab 8192]
//                             [--seq 8] [--dir DIR] [--repeat 3] [--no-slow] [--write-models DIR]
//
// The model is a synthetic Llama-style decoder (tests/support/synthetic_llama.h). --gb G picks
// hidden 2048, ffn 5632, vocab 32000 and as many layers as it takes to reach G x 10^9 bytes of
// float32 weights. Weights A build the plan (refittable, every source bound to checkpoint A, then
// stripped and written to a plan file, which is read back as a deployment would); weights B are
// written as an ONNX file with page-aligned external data and as a safetensors checkpoint, both
// then refit from their memory mappings (warm page cache: the files were just written).
//
// Baselines, same run, same byte count: memcpy between two resident buffers (the baseline the
// ratios use: the strictest, no page faults); memcpy from a resident buffer into a fresh
// (untouched) buffer, which pays the page faults that new engine weights pay; the same into a
// buffer advised as transparent huge pages; and memcpy of the safetensors data from a fresh
// mapping of the file. Each figure is the best of --repeat runs. After the
// last safetensors refit the engine runs once (first run: pays page-in of weights that alias the
// mapping) and once more (steady), on a [1, 8] input. Files go to DIR (default: the system temp
// folder) and are removed at the end. Prints a table and a final JSON line. Not a test.
// --write-models DIR only writes the model for other benchmarks (bench/py_refit.py) and exits:
// DIR/model_a.onnx (external data in DIR/model_a.onnx.data), DIR/weights_a.safetensors and
// DIR/weights_b.safetensors (the checkpoints of weights A and B), all kept. --seq S sets the
// model's (static) sequence length: 1 for single-token decoding (bench/quant_decode.py).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "builder/binding.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/mapped_file.h"
#include "core/timing.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "plan/plan_io.h"
#include "refit/checkpoint_refit.h"
#include "refit/refitter.h"
#include "refit/safetensors.h"
#include "runtime/plan_engine.h"
#include "support/synthetic_llama.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

struct Options {
  synth::LlamaSpec spec;
  double gb = 0;  // > 0: size the model to this many 10^9 bytes
  std::string dir = fs::temp_directory_path().string();
  std::string write_models;  // set: write the model files there and exit
  int repeat = 3;
  bool slow = true;
};

double number(const std::string& option, const std::string& v) {
  try {
    size_t used = 0;
    double d = std::stod(v, &used);
    if (used == v.size()) return d;
  } catch (const std::exception&) {
  }
  throw std::runtime_error("option " + option + " expects a number, got '" + v + "'");
}

Options parse(int argc, char** argv) {
  Options o;
  o.spec.hidden = 768;
  o.spec.ffn = 2048;
  o.spec.layers = 6;
  o.spec.vocab = 8192;
  o.spec.share_norms = false;  // checkpoint binding needs one checkpoint tensor per norm weight
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--no-slow") {
      o.slow = false;
      continue;
    }
    if (i + 1 >= argc) throw std::runtime_error("option " + k + " needs a value");
    std::string v = argv[++i];
    if (k == "--hidden")
      o.spec.hidden = static_cast<int64_t>(number(k, v));
    else if (k == "--ffn")
      o.spec.ffn = static_cast<int64_t>(number(k, v));
    else if (k == "--layers")
      o.spec.layers = static_cast<int64_t>(number(k, v));
    else if (k == "--vocab")
      o.spec.vocab = static_cast<int64_t>(number(k, v));
    else if (k == "--seq")
      o.spec.seq = static_cast<int64_t>(number(k, v));
    else if (k == "--gb")
      o.gb = number(k, v);
    else if (k == "--dir")
      o.dir = v;
    else if (k == "--write-models")
      o.write_models = v;
    else if (k == "--repeat")
      o.repeat = std::max(1, static_cast<int>(number(k, v)));
    else
      throw std::runtime_error("unknown option " + k);
  }
  if (o.gb > 0) {
    o.spec.hidden = 2048;
    o.spec.ffn = 5632;
    o.spec.vocab = 32000;
    double fixed = 4.0 * (2.0 * o.spec.vocab * o.spec.hidden + o.spec.hidden);
    double per_layer =
        4.0 * (4.0 * o.spec.hidden * o.spec.hidden + 3.0 * o.spec.hidden * o.spec.ffn + 2.0 * o.spec.hidden);
    o.spec.layers = std::max<int64_t>(1, static_cast<int64_t>(std::ceil((o.gb * 1e9 - fixed) / per_layer)));
  }
  return o;
}

template <typename F>
double best_of(int n, F&& f) {
  double best = 1e300;
  for (int i = 0; i < n; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, ms_since(t0));
  }
  return best;
}

// best_of for a refit: the fastest run's time and that run's commit report, and the first run's
// time. The first refit of a process writes the new weights into fresh pages; later ones reuse
// the pages the previous weights leave (core/tensor.h: released storage is kept for reuse), so
// the best time is the steady state of repeated refits.
struct RefitTimes {
  double best_ms = 1e300, first_ms = 0;
  refit::CommitReport report;
};

template <typename F>
RefitTimes best_refit(int n, F&& f) {
  RefitTimes t;
  for (int i = 0; i < n; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    refit::CommitReport rep = f();
    double ms = ms_since(t0);
    if (i == 0) t.first_ms = ms;
    if (ms < t.best_ms) t.best_ms = ms, t.report = rep;
  }
  return t;
}

size_t weight_bytes(const ir::Graph& g) {
  size_t bytes = 0;
  for (const auto& [n, t] : g.initializers) bytes += t.nbytes();
  return bytes;
}

// The bracketed choice of a transparent-huge-page setting ("madvise" from "always [madvise]
// never"), or "unknown": engine weights of 2 MiB or more ask for huge pages (core/tensor.h), so
// the refit figures depend on it.
std::string thp_setting(const char* name) {
  std::ifstream f(std::string("/sys/kernel/mm/transparent_hugepage/") + name);
  std::string line;
  if (!std::getline(f, line)) return "unknown";
  auto a = line.find('['), b = line.find(']');
  return a == std::string::npos || b == std::string::npos || b < a ? line : line.substr(a + 1, b - a - 1);
}

// Fresh, untouched destination: std::make_unique_for_overwrite-style, no zero fill.
std::unique_ptr<unsigned char[]> fresh_buffer(size_t n) {
  return std::unique_ptr<unsigned char[]>(new unsigned char[n]);
}

}  // namespace

int main(int argc, char** argv) {
  fs::path work;
  try {
    Options o = parse(argc, argv);
    if (!o.write_models.empty()) {
      const fs::path dir = o.write_models;
      fs::create_directories(dir);
      for (uint32_t seed : {1u, 2u}) {
        o.spec.seed = seed;
        ir::Graph g = synth::synthetic_llama(o.spec);
        const std::string w = seed == 1 ? "a" : "b";
        refit::write_safetensors((dir / ("weights_" + w + ".safetensors")).string(), g.initializers);
        if (seed == 1) {
          onnx::ExportOptions eo;
          eo.external_threshold = 1024;
          onnx::write_model_file(g, (dir / "model_a.onnx").string(), eo);
        }
        std::cerr << "wrote weights " << w << ": " << weight_bytes(g) / 1e6 << " MB in " << dir << "\n";
      }
      return 0;
    }
    work = fs::path(o.dir) / ("reforge_refit_bench_" + std::to_string(::getpid()));
    fs::create_directories(work);
    const std::string ckpt_a = (work / "weights_a.safetensors").string();
    const std::string ckpt_b = (work / "weights_b.safetensors").string();
    const std::string onnx_b = (work / "model_b.onnx").string();
    const std::string plan_path = (work / "stripped.plan").string();

    // Plan: built from weights A, every source bound to checkpoint A, stripped, saved.
    auto t0 = std::chrono::steady_clock::now();
    size_t bytes = 0;
    double build_ms = 0;
    {
      o.spec.seed = 1;
      ir::Graph ga = synth::synthetic_llama(o.spec);
      bytes = weight_bytes(ga);
      std::cerr << "weights: " << bytes / 1e6 << " MB; writing checkpoint A and building the plan in " << work << "\n";
      refit::write_safetensors(ckpt_a, ga.initializers);
      build::BuildOptions bo;
      bo.mode = plan::BuildMode::Refit;
      bo.strip_weights = true;
      t0 = std::chrono::steady_clock::now();
      plan::write_plan(build::build_plan_with_checkpoint(ga, bo, refit::Checkpoint::open(ckpt_a), {}), plan_path);
      build_ms = ms_since(t0);
    }
    fs::remove(ckpt_a);
    // Weights B: ONNX with external data, and a safetensors checkpoint.
    {
      o.spec.seed = 2;
      ir::Graph gb = synth::synthetic_llama(o.spec);
      onnx::ExportOptions eo;
      eo.external_threshold = 1024;
      onnx::write_model_file(gb, onnx_b, eo);
      refit::write_safetensors(ckpt_b, gb.initializers);
    }
    const size_t plan_bytes = fs::file_size(plan_path);
    runtime::PlanEngine engine(plan::read_plan(plan_path));

    std::cerr << "timing (best of " << o.repeat << ")\n";
    double memcpy_ms = 0, memcpy_fresh_ms = 0, memcpy_huge_ms = 0, memcpy_mapped_ms = 0;
    {
      auto src = fresh_buffer(bytes);
      std::memset(src.get(), 1, bytes);
      memcpy_fresh_ms = best_of(o.repeat, [&] {
        auto dst = fresh_buffer(bytes);
        std::memcpy(dst.get(), src.get(), bytes);
        asm volatile("" : : "r"(dst.get()) : "memory");
      });
      // The same into fresh memory advised as transparent huge pages (THP is "madvise" on many
      // systems): what a refit that writes new buffers could reach with 512x fewer page faults.
      memcpy_huge_ms = best_of(o.repeat, [&] {
        const size_t huge = size_t{2} << 20, n = (bytes + huge - 1) / huge * huge;
        std::unique_ptr<void, decltype(&std::free)> dst(std::aligned_alloc(huge, n), &std::free);
        if (!dst) throw std::runtime_error("aligned_alloc of " + std::to_string(n) + " bytes failed");
        ::madvise(dst.get(), n, MADV_HUGEPAGE);  // advisory: a refusal only makes this slower
        std::memcpy(dst.get(), src.get(), bytes);
        asm volatile("" : : "r"(dst.get()) : "memory");
      });
      auto dst = fresh_buffer(bytes);
      std::memset(dst.get(), 0, bytes);
      memcpy_ms = best_of(o.repeat, [&] {
        std::memcpy(dst.get(), src.get(), bytes);
        asm volatile("" : : "r"(dst.get()) : "memory");
      });
    }
    memcpy_mapped_ms = best_of(o.repeat, [&] {
      auto file = MappedFile::open(ckpt_b);
      size_t n = std::min(bytes, file->size());
      auto dst = fresh_buffer(n);
      std::memcpy(dst.get(), file->data() + (file->size() - n), n);  // the data section is the tail
      asm volatile("" : : "r"(dst.get()) : "memory");
    });
    // Empty the storage cache (the baselines' buffers went there): the first ONNX refit then
    // writes into fresh pages, as the first refit of a process does.
    const size_t cache_limit = storage_cache_limit();
    set_storage_cache_limit(0);
    set_storage_cache_limit(cache_limit);
    const RefitTimes onnx_t = best_refit(o.repeat, [&] {
      refit::Refitter r(engine);
      for (const auto& [id, t] : build::read_sources_from_onnx(engine.plan(), onnx_b)) r.set_source(id, t);
      return r.commit();
    });
    const RefitTimes st_t = best_refit(o.repeat, [&] {
      refit::Refitter r(engine);
      auto cs = refit::sources_from_checkpoint(engine.plan(), refit::Checkpoint::open(ckpt_b));
      if (!cs.unused.empty()) throw std::runtime_error(refit::unused_summary(cs.unused));
      refit::set_sources(r, cs);
      return r.commit();
    });
    const double onnx_ms = onnx_t.best_ms, st_ms = st_t.best_ms;
    const refit::CommitReport &onnx_rep = onnx_t.report, &st_rep = st_t.report;
    Tensor ids = Tensor::empty(DType::Int64, {1, o.spec.seq});
    double first_run_ms = best_of(1, [&] { engine.run({{"input_ids", ids}}); });
    double steady_run_ms = best_of(o.repeat, [&] { engine.run({{"input_ids", ids}}); });

    double slow_ms = -1, fresh_ms = -1;
    if (o.slow) {
      slow_ms = best_of(o.repeat, [&] {
        refit::Refitter r(engine);
        r.commit_rebuilt(build::rebuild_from_onnx(engine.plan(), onnx::import_model_file(onnx_b)));
      });
      fresh_ms = best_of(o.repeat, [&] {
        build::BuildOptions fo;
        fo.mode = plan::BuildMode::Refit;
        runtime::PlanEngine fresh(build::build_plan(onnx::import_model_file(onnx_b), fo));
      });
    }
    fs::remove_all(work);

    auto ratio = [&](double ms) {
      std::ostringstream r;
      r << std::setprecision(3) << ms / memcpy_ms;
      return r.str();
    };
    auto ratio_fresh = [&](double ms) {
      std::ostringstream r;
      r << std::setprecision(3) << ms / memcpy_fresh_ms;
      return r.str();
    };
    // Phases of the fastest commit; commit_ms includes re-preparing (re-packing) kernel state.
    auto phases = [](const refit::CommitReport& rep) {
      std::ostringstream r;
      r << std::fixed << std::setprecision(2) << "validate " << rep.validate_ms << " ms, replay " << rep.replay_ms
        << " ms, commit " << rep.commit_ms << " ms";
      return r.str();
    };
    std::cout << std::fixed << std::setprecision(2) << "weights: " << bytes / 1e6 << " MB (" << o.spec.layers
              << " layers, hidden " << o.spec.hidden << ", ffn " << o.spec.ffn << ", vocab " << o.spec.vocab
              << "); stripped plan " << plan_bytes << " bytes, built in " << build_ms << " ms\n"
              << "transparent huge pages: enabled " << thp_setting("enabled") << ", defrag " << thp_setting("defrag")
              << "\n"
              << "memcpy, resident -> resident (the baseline): " << memcpy_ms << " ms (" << bytes / 1e6 / memcpy_ms
              << " GB/s)\n"
              << "memcpy, resident -> fresh buffer:            " << memcpy_fresh_ms << " ms\n"
              << "memcpy, resident -> fresh huge-page buffer:  " << memcpy_huge_ms << " ms\n"
              << "memcpy, fresh safetensors mapping -> fresh:  " << memcpy_mapped_ms << " ms\n"
              << "fast refit from ONNX external data (mapped): " << onnx_ms << " ms (" << ratio(onnx_ms) << "x memcpy, "
              << ratio_fresh(onnx_ms) << "x fresh); " << phases(onnx_rep) << "\n"
              << "fast refit from safetensors (mapped):        " << st_ms << " ms (" << ratio(st_ms) << "x memcpy, "
              << ratio_fresh(st_ms) << "x fresh); " << phases(st_rep) << "\n"
              << "first ONNX refit (into fresh pages):         " << onnx_t.first_ms << " ms (" << ratio(onnx_t.first_ms)
              << "x memcpy, " << ratio_fresh(onnx_t.first_ms) << "x fresh)\n"
              << "first run after refit / steady run:          " << first_run_ms << " / " << steady_run_ms << " ms\n";
    if (o.slow)
      std::cout << "slow refit (import + rebuild + commit):      " << slow_ms << " ms\n"
                << "fresh build (import + build + engine):       " << fresh_ms << " ms\n";
    std::cout << std::defaultfloat << std::setprecision(4) << "{\"weight_bytes\": " << bytes
              << ", \"layers\": " << o.spec.layers << ", \"plan_bytes\": " << plan_bytes
              << ", \"memcpy_ms\": " << memcpy_ms << ", \"memcpy_fresh_ms\": " << memcpy_fresh_ms
              << ", \"memcpy_huge_ms\": " << memcpy_huge_ms << ", \"memcpy_mapped_ms\": " << memcpy_mapped_ms
              << ", \"fast_refit_onnx_ms\": " << onnx_ms << ", \"fast_refit_safetensors_ms\": " << st_ms
              << ", \"first_refit_onnx_ms\": " << onnx_t.first_ms << ", \"onnx_over_memcpy\": " << onnx_ms / memcpy_ms
              << ", \"safetensors_over_memcpy\": " << st_ms / memcpy_ms
              << ", \"onnx_over_memcpy_fresh\": " << onnx_ms / memcpy_fresh_ms
              << ", \"safetensors_over_memcpy_fresh\": " << st_ms / memcpy_fresh_ms
              << ", \"first_run_ms\": " << first_run_ms << ", \"steady_run_ms\": " << steady_run_ms
              << ", \"slow_refit_ms\": " << slow_ms << ", \"fresh_build_ms\": " << fresh_ms << "}" << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    if (!work.empty()) {
      std::error_code ec;
      fs::remove_all(work, ec);
    }
    return 1;
  }
  return 0;
}
