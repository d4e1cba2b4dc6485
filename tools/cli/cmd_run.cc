// `reforge run MODEL.onnx --input NAME=FILE.npy ... [--output-dir DIR] [--expect NAME=REF.npy ...]
//             [--precision fp32|bf16|fp16] [--activations fp32|bf16]`
#include <filesystem>
#include <iostream>

#include "common.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "plan_loading.h"

namespace reforge::cli {

namespace {
struct RunArgs {
  std::string model;
  std::vector<std::string> inputs;
  std::vector<std::string> expects;
  std::string output_dir;
  double tolerance = 1e-4;
  int threads = 0;
  std::vector<std::string> weights;
  std::string precision, activations;
  bool allow_nonfinite = false;
  bool no_verify = false;
};
}  // namespace

Runner add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("model", a->model, "ONNX model or plan file")->required();
  auto* w = app.add_option(
      "--weights,-w", a->weights,
      "refit in memory from these weights first (a re-exported ONNX model or a bound safetensors checkpoint)");
  app.add_flag("--allow-nonfinite", a->allow_nonfinite,
               "with --weights: accept NaN/Inf in the new weights (refused by default)")
      ->needs(w);
  app.add_option("--input,-i", a->inputs, "NAME=FILE.npy for each graph input");
  app.add_option("--output-dir,-o", a->output_dir, "write each output to DIR/NAME.npy");
  app.add_option("--expect", a->expects, "NAME=REF.npy: compare output NAME with a reference (exit 1 if off)");
  app.add_option("--tolerance", a->tolerance, "max abs diff allowed by --expect (default 1e-4)");
  app.add_option("--threads", a->threads, "threads (default: all cores)");
  add_precision_options(app, a->precision, a->activations);
  add_no_verify_option(app, a->no_verify);
  return [a]() {
    auto inputs = load_inputs(a->inputs);
    LoadOptions lo;
    lo.threads = a->threads;
    lo.weights = a->weights;
    lo.allow_nonfinite = a->allow_nonfinite;
    lo.precision = a->precision;
    lo.activations = a->activations;
    lo.verify_weights = !a->no_verify;
    auto engine_ptr = load_engine(a->model, lo);
    const runtime::PlanEngine& engine = *engine_ptr;
    auto outs = engine.run(inputs);
    if (!a->output_dir.empty()) std::filesystem::create_directories(a->output_dir);
    for (size_t i = 0; i < outs.size(); ++i) {
      const std::string& name = engine.outputs()[i].name;
      std::cout << name << ": " << outs[i].describe() << "\n";
      if (!a->output_dir.empty())
        write_npy((std::filesystem::path(a->output_dir) / (safe_file_name(name) + ".npy")).string(), outs[i]);
    }
    int rc = 0;
    for (const auto& spec : a->expects) {
      auto eq = spec.find('=');
      if (eq == std::string::npos) fail("--expect '", spec, "' is not NAME=REF.npy");
      std::string name = spec.substr(0, eq);
      size_t idx = outs.size();
      for (size_t i = 0; i < outs.size(); ++i)
        if (engine.outputs()[i].name == name) idx = i;
      if (idx == outs.size()) fail("--expect names '", name, "', which is not an output of the model");
      Tensor ref = read_npy(spec.substr(eq + 1));
      if (ref.shape() != outs[idx].shape()) {
        std::cout << "compare " << name << ": shape " << outs[idx].describe() << " vs reference " << ref.describe()
                  << ": MISMATCH\n";
        rc = 1;
        continue;
      }
      double d = max_abs_diff(outs[idx], ref);
      bool ok = d <= a->tolerance;
      std::cout << "compare " << name << ": max abs diff " << d << " (tolerance " << a->tolerance
                << "): " << (ok ? "OK" : "MISMATCH") << "\n";
      if (!ok) rc = 1;
    }
    return rc;
  };
}

}  // namespace reforge::cli
