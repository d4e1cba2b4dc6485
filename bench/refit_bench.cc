// Refit benchmark: fast refit vs slow refit vs a fresh build, next to a plain memcpy of the same
// bytes measured in the same run, on a synthetic Llama-style model (default ~220 MB of float32
// weights) whose new weights come from an ONNX file with external data (memory-mapped).
//
//   build/reforge_refit_bench [--hidden 768] [--ffn 2048] [--layers 6] [--vocab 8192] [--dir /tmp]
//
// Prints a table and a final JSON line. Not a test: timings depend on the machine.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

#include "core/timing.h"
#include "build/builder.h"
#include "build/onnx_refit.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "refit/recipe.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/synthetic_llama.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {
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
}  // namespace

int main(int argc, char** argv) {
  synth::LlamaSpec spec;
  spec.hidden = 768;
  spec.ffn = 2048;
  spec.layers = 6;
  spec.vocab = 8192;
  std::string dir = fs::temp_directory_path().string();
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    int64_t v = std::atoll(argv[i + 1]);
    if (k == "--hidden") spec.hidden = v;
    else if (k == "--ffn") spec.ffn = v;
    else if (k == "--layers") spec.layers = v;
    else if (k == "--vocab") spec.vocab = v;
    else if (k == "--dir") dir = argv[i + 1];
    else { std::cerr << "unknown option " << k << "\n"; return 2; }
  }
  try {
    fs::path work = fs::path(dir) / ("reforge_refit_bench_" + std::to_string(::getpid()));
    fs::create_directories(work);
    spec.seed = 1;
    ir::Graph ga = synth::synthetic_llama(spec);
    spec.seed = 2;
    spec.share_norms = false;
    ir::Graph gb = synth::synthetic_llama(spec);
    size_t bytes = 0;
    for (const auto& [n, t] : gb.initializers) bytes += t.nbytes();
    onnx::ExportOptions eo;
    eo.external_threshold = 1024;
    std::string path_b = (work / "model_b.onnx").string();
    onnx::write_model_file(gb, path_b, eo);

    build::BuildOptions bo;
    bo.mode = plan::BuildMode::Refit;
    bo.strip_weights = true;
    runtime::PlanEngine engine(build::build_plan(ga, bo));

    // memcpy of the same bytes, from the same mapped file, into fresh buffers.
    double memcpy_ms = best_of(3, [&] {
      ir::Graph g = onnx::import_model_file(path_b);
      for (const auto& [n, t] : g.initializers) {
        Tensor dst = Tensor::empty(t.dtype(), t.shape());
        std::memcpy(dst.mutable_raw(), t.raw(), t.nbytes());
      }
    });
    double fast_ms = best_of(3, [&] {
      refit::Refitter r(engine);
      for (const auto& [id, t] : build::read_sources_from_onnx(engine.plan(), path_b)) r.set_source(id, t);
      r.commit();
    });
    double slow_ms = best_of(3, [&] {
      refit::Refitter r(engine);
      r.commit_rebuilt(build::rebuild_from_onnx(engine.plan(), onnx::import_model_file(path_b)));
    });
    double fresh_ms = best_of(3, [&] {
      build::BuildOptions fo;
      fo.mode = plan::BuildMode::Refit;
      runtime::PlanEngine fresh(build::build_plan(onnx::import_model_file(path_b), fo));
    });
    fs::remove_all(work);
    std::cout << "weights: " << bytes / 1e6 << " MB (" << spec.layers << " layers, hidden " << spec.hidden << ")\n"
              << "import + memcpy of the same bytes: " << memcpy_ms << " ms\n"
              << "fast refit (read by position, replay, commit): " << fast_ms << " ms (" << fast_ms / memcpy_ms << "x memcpy)\n"
              << "slow refit (import + rebuild + commit): " << slow_ms << " ms\n"
              << "fresh build (import + build + engine): " << fresh_ms << " ms\n";
    std::cout << "{\"weight_bytes\": " << bytes << ", \"memcpy_ms\": " << memcpy_ms << ", \"fast_refit_ms\": " << fast_ms
              << ", \"slow_refit_ms\": " << slow_ms << ", \"fresh_build_ms\": " << fresh_ms << "}" << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
