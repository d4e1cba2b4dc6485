// `reforge run MODEL.onnx [--input NAME=FILE.npy ...] [--synthesize-missing] [--seed N] [--shape INPUT=AxB|SYMBOL=N
// ...]
//             [--int-range LOW:HIGH] [--output-dir DIR] [--expect NAME=REF.npy ...] [--json]
//             [--precision fp32|bf16|fp16|int8|int4] [--block-size N] [--activations fp32|bf16]`
// An input given no --input is an error naming it, unless --synthesize-missing: then it is
// synthesized from its declared type and shape (common.h, complete_inputs) and listed on stderr.
// The output folder, the output file names (two names that make one file) and the --expect names
// are checked before the model runs. With --json, stdout is one JSON document (inputs, outputs, comparisons).
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "backends/backend.h"
#include "common.h"
#include "core/nearest_names.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "onnxrt_compare.h"
#include "plan_loading.h"
#include "progress.h"

namespace reforge::cli {

namespace {
struct RunArgs {
  std::string model;
  std::vector<std::string> inputs;
  std::vector<std::string> expects;
  std::string output_dir, save_inputs;
  double tolerance = 1e-4;
  int threads = 0;
  std::vector<std::string> weights;
  KeyPrefixes prefixes;
  LoraOptions lora;
  std::string precision, activations;
  int64_t block_size = 0;
  DeviceOptions device;
  bool allow_nonfinite = false;
  bool keep_baked = false;
  bool no_verify = false;
  std::string timing_cache;
  bool json = false;
  SynthOptions synth;
  bool compare_onnxrt = false;
  bool synthesize_missing = false;
  std::string onnxrt_model, python;
  std::vector<std::string> mark_outputs;
  std::vector<std::string> atol, rtol;
};

nlohmann::ordered_json number(double v) {
  return std::isnan(v) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v);
}

nlohmann::ordered_json shape_json(const Tensor& t) { return nlohmann::ordered_json(t.shape()); }

// Whether two folder paths name one folder as written (absolute, normalized; links not followed).
bool same_folder(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto norm = [&](const std::string& p) {
    fs::path n = fs::absolute(p, ec).lexically_normal();
    return n.has_filename() ? n : n.parent_path();
  };
  return norm(a) == norm(b);
}

// --atol / --rtol: X or OUTPUT=X, X finite and 0 or more (the output's name is checked once the
// model is loaded).
CLI::Validator tolerance_check() {
  return CLI::Validator(
      [](std::string& spec) {
        const size_t eq = spec.rfind('=');
        std::string value = eq == std::string::npos ? spec : spec.substr(eq + 1);
        std::string err = number_in(0, INFINITY)(value);
        return err.empty() || eq == std::string::npos ? err : err + " (in '" + spec + "')";
      },
      "X|OUTPUT=X");
}
}  // namespace

Runner add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("model", a->model, "ONNX model or plan file")->required();
  app.add_option(
      "--weights,-w", a->weights,
      "refit in memory from these weights first (a re-exported ONNX model or a bound safetensors checkpoint)");
  app.add_flag("--allow-nonfinite", a->allow_nonfinite,
               "accept NaN/Inf in the weights of an ONNX model built here and in --weights (refused by default)");
  add_key_prefix_options(app, a->prefixes);
  add_lora_options(app, a->lora);
  app.add_flag("--keep-baked", a->keep_baked,
               "with --weights: keep a --refit-individual plan's baked sources where the weights hold other values "
               "(refused by default)");
  app.add_option("--input,-i", a->inputs,
                 "NAME=FILE.npy for a graph input, or FILE.npz (numpy.savez) for one per array name; an input not given is an "
                 "error unless --synthesize-missing");
  app.add_flag("--synthesize-missing", a->synthesize_missing,
               "run on random values for the inputs not given by --input (see --seed, --shape, --int-range); "
               "without it a missing input is an error naming it");
  add_synthetic_options(app, a->synth);
  app.add_option("--output-dir,-o", a->output_dir, "write each output to DIR/NAME.npy");
  app.add_option("--save-inputs", a->save_inputs, "write every input, given or synthesized, to DIR/NAME.npy");
  app.add_option("--expect", a->expects, "NAME=REF.npy: compare output NAME with a reference (exit 1 if off)");
  app.add_option("--tolerance", a->tolerance, "max abs diff allowed by --expect (default 1e-4)")
      ->check(number_in(0, INFINITY));
  app.add_option("--threads", a->threads, "threads (default: all cores)")->check(threads_check());
  app.add_flag("--json", a->json, "print one JSON document on stdout (inputs, outputs, comparisons)");
  auto* ort = app.add_flag("--compare-onnxrt", a->compare_onnxrt,
                           "run the ONNX model in ONNX Runtime on the same inputs too and compare every output "
                           "(max abs, max rel, mean abs error; exit 1 if any is outside --atol/--rtol)");
  app.add_option("--mark-outputs", a->mark_outputs,
                 "make these values of the ONNX model outputs too (all: every value a node makes), to compare "
                 "intermediate values with --compare-onnxrt or --output-dir, as Polygraphy marks them; fusions "
                 "that would hide a marked value are not made");
  app.add_option("--onnxrt-model", a->onnxrt_model,
                 "with --compare-onnxrt: the ONNX model for ONNX Runtime (needed when MODEL is a plan or --weights "
                 "is given)")
      ->needs(ort);
  app.add_option("--atol", a->atol, "with --compare-onnxrt: absolute tolerance, X or OUTPUT=X (default 1e-4)")
      ->needs(ort)
      ->check(tolerance_check());
  app.add_option("--rtol", a->rtol, "with --compare-onnxrt: relative tolerance, X or OUTPUT=X (default 1e-3)")
      ->needs(ort)
      ->check(tolerance_check());
  app.add_option("--python", a->python,
                 "with --compare-onnxrt: the Python with onnxruntime (default $REFORGE_PYTHON, else the source "
                 "tree's .venv)")
      ->needs(ort);
  add_precision_options(app, a->precision, a->activations, a->block_size);
  add_no_verify_option(app, a->no_verify);
  add_device_options(app, a->device);
  add_timing_cache_option(app, a->timing_cache);
  return [a]() {
    auto inputs = load_inputs(a->inputs);
    // Output folder first: a run of minutes must not end in "cannot create folder".
    for (auto [flag, dir] : {std::pair<const char*, std::string>{"--output-dir", a->output_dir},
                             std::pair<const char*, std::string>{"--save-inputs", a->save_inputs}}) {
      if (!dir.empty()) check_output_folder(dir, flag);
    }
    std::vector<std::pair<std::string, std::string>> expects;
    for (const auto& spec : a->expects) {
      auto eq = spec.find('=');
      if (eq == std::string::npos || eq == 0) fail("--expect '", spec, "' is not NAME=REF.npy");
      expects.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
    }
    std::string ort_model = a->onnxrt_model;
    if (a->compare_onnxrt && ort_model.empty()) {
      if (session::is_plan_file(a->model))
        fail("--compare-onnxrt: '", a->model, "' is a plan; give the ONNX model it was built from with --onnxrt-model");
      if (!a->weights.empty())
        fail("--compare-onnxrt with --weights: give the ONNX model holding those weights with --onnxrt-model");
      ort_model = a->model;
    }
    if (!ort_model.empty() && session::is_plan_file(ort_model))
      fail("--onnxrt-model '", ort_model, "' is a plan, not an ONNX model");
    LoadOptions lo;
    lo.threads = a->threads;
    lo.weights = a->weights;
    lo.prefixes = a->prefixes;
    lo.lora = a->lora;
    lo.mark_outputs = a->mark_outputs;
    lo.allow_nonfinite = a->allow_nonfinite;
    lo.keep_baked = a->keep_baked;
    lo.precision = a->precision;
    lo.activations = a->activations;
    lo.block_size = a->block_size;
    lo.device = a->device;
    lo.verify_weights = !a->no_verify;
    std::map<std::string, IndexBound> bounds;
    lo.index_bounds = &bounds;
    const session::Session loaded = load_session(a->model, lo);
    const runtime::PlanEngine& engine = loaded.engine();
    const std::string backend_name = loaded.device();
    if (!a->timing_cache.empty()) backends::load_timing_cache_file(backend_name, a->timing_cache);
    std::vector<std::string> output_names, input_names;
    for (const auto& o : engine.outputs()) output_names.push_back(o.name);
    for (const auto& in : engine.inputs()) input_names.push_back(in.name);
    // Two tensors whose names make one file name: refused before the run, not overwritten after.
    std::vector<std::string> output_files;
    if (!a->output_dir.empty()) output_files = npy_files(a->output_dir, output_names, "--output-dir", "outputs");
    if (!a->save_inputs.empty()) npy_files(a->save_inputs, input_names, "--save-inputs", "inputs");
    if (!a->output_dir.empty() && !a->save_inputs.empty() && same_folder(a->output_dir, a->save_inputs)) {
      std::vector<std::string> files = npy_files(a->save_inputs, input_names, "--save-inputs", "inputs");
      for (size_t i = 0; i < output_files.size(); ++i) {
        auto in = std::find(files.begin(), files.end(), output_files[i]);
        if (in != files.end())
          fail("--output-dir and --save-inputs '", a->output_dir, "': input '", input_names[in - files.begin()],
               "' and output '", output_names[i], "' would both be written to '", output_files[i],
               "'; nothing was run or written");
      }
    }
    // References are read before the run too: a missing file or a wrong name fails now.
    std::map<std::string, Tensor> refs;
    for (const auto& [name, file] : expects) {
      if (std::find(output_names.begin(), output_names.end(), name) == output_names.end()) {
        auto near = nearest_names(name, output_names);
        fail(
            "--expect names '", name, "', which is not an output of the model",
            near.empty() ? "; its outputs: " + quoted_list(output_names) : "; did you mean " + quoted_list(near) + "?");
      }
      if (refs.count(name)) fail("--expect gives output '", name, "' twice");
      refs[name] = read_npy(file);
    }
    for (const auto& name : output_names)  // a wrong output name or value fails before the run
      for (const char* flag : {"--atol", "--rtol"})
        tolerance_for(flag[2] == 'a' ? a->atol : a->rtol, name, 0, output_names, flag);
    // A missing input is an error: random values for an input the model depends on (a mask, a
    // position) would give outputs that look right and are not, unless asked for.
    if (!a->synthesize_missing) require_inputs(missing_inputs(inputs, engine.inputs()), "--synthesize-missing");
    auto made = complete_inputs(inputs, engine.inputs(), a->synth, bounds);
    if (verbosity() != Verbosity::Quiet) std::cerr << describe_synthesized(inputs, made, a->synth, bounds);
    if (!a->save_inputs.empty()) create_output_folder(a->save_inputs, "--save-inputs");
    if (!a->save_inputs.empty())
      for (const auto& [name, t] : inputs)
        write_npy((std::filesystem::path(a->save_inputs) / (safe_file_name(name) + ".npy")).string(), t);
    std::vector<Tensor> outs;
    {
      Phase phase("running '" + a->model + "'");
      outs = engine.run(inputs);
    }
    if (!a->timing_cache.empty()) backends::save_timing_cache_file(backend_name, a->timing_cache);
    if (!a->output_dir.empty()) create_output_folder(a->output_dir, "--output-dir");
    nlohmann::ordered_json doc;
    doc["model"] = a->model;
    doc["inputs"] = nlohmann::ordered_json::array();
    for (const auto& in : engine.inputs()) {
      const Tensor& t = inputs.at(in.name);
      doc["inputs"].push_back({{"name", in.name},
                               {"dtype", dtype_name(t.dtype())},
                               {"shape", shape_json(t)},
                               {"synthesized", std::find(made.begin(), made.end(), in.name) != made.end()}});
    }
    if (!made.empty()) doc["seed"] = a->synth.seed;
    doc["outputs"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < outs.size(); ++i) {
      const std::string& name = output_names[i];
      nlohmann::ordered_json o = {
          {"name", name}, {"dtype", dtype_name(outs[i].dtype())}, {"shape", shape_json(outs[i])}};
      if (!a->json) std::cout << name << ": " << outs[i].describe() << "\n";
      if (!a->output_dir.empty()) {
        const std::string& file = output_files.at(i);
        write_npy(file, outs[i]);
        o["file"] = file;
      }
      doc["outputs"].push_back(o);
    }
    int rc = 0;
    doc["compare"] = nlohmann::ordered_json::array();
    for (const auto& [name, file] : expects) {
      size_t idx = std::find(output_names.begin(), output_names.end(), name) - output_names.begin();
      const Tensor& ref = refs.at(name);
      nlohmann::ordered_json c = {{"name", name}, {"reference", file}, {"tolerance", a->tolerance}};
      if (ref.shape() != outs[idx].shape()) {
        if (!a->json)
          std::cout << "compare " << name << ": shape " << outs[idx].describe() << " vs reference " << ref.describe()
                    << ": MISMATCH\n";
        c["shape_mismatch"] = true;
        c["reference_shape"] = shape_json(ref);
        c["ok"] = false;
        rc = 1;
      } else {
        double d = max_abs_diff(outs[idx], ref);
        bool ok = d <= a->tolerance;
        if (!a->json)
          std::cout << "compare " << name << ": max abs diff " << d << " (tolerance " << a->tolerance
                    << "): " << (ok ? "OK" : "MISMATCH") << "\n";
        c["max_abs_diff"] = std::isnan(d) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(d);
        c["ok"] = ok;
        if (!ok) rc = 1;
      }
      doc["compare"].push_back(c);
    }
    if (a->compare_onnxrt) {
      std::map<std::string, Tensor> ref;
      {
        Phase phase("running '" + ort_model + "' in ONNX Runtime");
        ref = run_onnxrt(ort_model, inputs, a->python, a->mark_outputs);
      }
      if (!a->json)
        std::cout << "compare with ONNX Runtime (" << ort_model << "):\n"
                  << "  output                          max abs      max rel     mean abs        atol        rtol  "
                     "result\n";
      doc["onnxrt"] = nlohmann::ordered_json::array();
      for (size_t i = 0; i < outs.size(); ++i) {
        const std::string& name = output_names[i];
        double atol = tolerance_for(a->atol, name, 1e-4, output_names, "--atol");
        double rtol = tolerance_for(a->rtol, name, 1e-3, output_names, "--rtol");
        nlohmann::ordered_json c = {{"name", name}, {"atol", atol}, {"rtol", rtol}};
        auto it = ref.find(name);
        char line[256];
        if (it == ref.end() || it->second.shape() != outs[i].shape()) {
          std::string why = it == ref.end()
                                ? "ONNX Runtime gave no output of this name"
                                : "shape " + outs[i].describe() + " vs ONNX Runtime " + it->second.describe();
          if (!a->json) std::cout << "  " << name << ": " << why << ": FAIL\n";
          c["error"] = why;
          c["pass"] = false;
          rc = 1;
        } else {
          ErrorStats s = compare_tensors(outs[i], it->second, atol, rtol);
          std::snprintf(line, sizeof line, "  %-28s %12.4g %12.4g %12.4g %11.3g %11.3g  %s", name.c_str(), s.max_abs,
                        s.max_rel, s.mean_abs, atol, rtol, s.pass ? "PASS" : "FAIL");
          if (!a->json) {
            std::cout << line;
            if (!s.pass) std::cout << " (" << s.failing << " of " << outs[i].numel() << " elements outside)";
            std::cout << "\n";
          }
          c["max_abs"] = number(s.max_abs);
          c["max_rel"] = number(s.max_rel);
          c["mean_abs"] = number(s.mean_abs);
          c["failing_elements"] = s.failing;
          c["pass"] = s.pass;
          if (!s.pass) rc = 1;
        }
        doc["onnxrt"].push_back(c);
      }
    }
    doc["ok"] = rc == 0;
    if (a->json) std::cout << doc.dump(2) << "\n";
    return rc;
  };
}

}  // namespace reforge::cli
