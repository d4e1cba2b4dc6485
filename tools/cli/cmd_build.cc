// `reforge build MODEL.onnx -o OUT.plan [--refit | --refit-identical | --refit-individual PATTERN...]
//                          [--strip-weights] [--literal NAME...] [--print-passes] [--threads N] [--allow-nonfinite]
//                          [--precision fp32|bf16|fp16|int8|int4] [--block-size N] [--activations fp32|bf16]
//                          [--checkpoint CKPT... [--bind ONNX=CKPT...] [--bind-file F.json] [--strict-binding]]`
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "common.h"
#include "progress.h"
#include "session/build.h"
#include "session/session.h"

namespace reforge::cli {

namespace {
struct BuildArgs {
  std::string model, out;
  bool refit = false, identical = false, strip = false, print_passes = false;
  std::vector<std::string> skip_passes;
  std::vector<std::string> individual, literals, checkpoints, binds;
  std::string bind_file, precision, activations;
  int64_t block_size = 0;
  bool strict_binding = false, allow_partial = false;
  KeyPrefixes prefixes;
  int threads = 0;
  bool json = false;
  bool reference_rounding = false;
  bool allow_nonfinite = false;
  DeviceOptions device;
};
}  // namespace

namespace {

// The kind of a constant binding rule ("structural: all-equal (0.5) float32[]" -> "all-equal").
std::string constant_kind(const std::string& rule) {
  std::string k = rule;
  if (k.rfind("structural: ", 0) == 0) k = k.substr(12);
  const size_t end = k.find_first_of("(0123456789[");
  k = k.substr(0, end);
  while (!k.empty() && k.back() == ' ') k.pop_back();
  return k.empty() ? rule : k;
}

}  // namespace

Runner add_build(CLI::App& app) {
  auto a = std::make_shared<BuildArgs>();
  app.add_option("model", a->model, "ONNX model file")->required();
  app.add_option("-o,--output", a->out, "plan file to write")->required();
  auto* r1 =
      app.add_flag("--refit", a->refit, "every source refittable (transforms recorded, never specialized on values)");
  auto* r2 =
      app.add_flag("--refit-identical", a->identical, "refit accepts only the build-time weights (checked by hash)");
  auto* r3 =
      app.add_option("--refit-individual", a->individual, "only sources matching these glob patterns are refittable");
  r1->excludes(r2)->excludes(r3);
  r2->excludes(r3);
  app.add_flag("--strip-weights", a->strip, "leave refittable weight data out of the plan");
  app.add_option("--literal", a->literals, "initializers to treat as literals (structure, never refit)");
  app.add_flag("--print-passes", a->print_passes, "print graph size after each pass");
  app.add_option("--skip-pass", a->skip_passes, "do not run build passes matching this glob (e.g. 'fuse-*')");
  app.add_option("--checkpoint", a->checkpoints,
                 "bind sources to this framework checkpoint (safetensors file(s), a sharded checkpoint's index or "
                 "its folder; read as what their content is, whatever their names)");
  app.add_option("--bind", a->binds, "ONNX_NAME=CHECKPOINT_NAME: settles a binding the values cannot decide");
  app.add_option("--bind-file", a->bind_file,
                 "JSON object {ONNX_NAME: CHECKPOINT_NAME, ..., \"literals\": [ONNX_NAME, ...]}");
  add_precision_options(app, a->precision, a->activations, a->block_size);
  add_key_prefix_options(app, a->prefixes);
  app.add_flag("--strict-binding", a->strict_binding,
               "declared literals must also be structural or provably configuration-only");
  app.add_flag(
      "--allow-partial-binding", a->allow_partial,
      "build even when the checkpoint binds under half of the weight sources (a checkpoint refit is then refused)");
  app.add_option("--threads", a->threads, "threads for folding and verification (default: all cores)")
      ->check(threads_check());
  app.add_flag("--json", a->json, "print one JSON document on stdout (the build's summary); other text goes to stderr");
  app.add_flag("--allow-nonfinite", a->allow_nonfinite,
               "accept NaN/Inf in the model's weights (refused by default, as refit refuses them)");
  add_device_options(app, a->device);
  app.add_flag("--reference-rounding", a->reference_rounding,
               "round 16-bit Softmax/Attention sums after each addition, as the ONNX reference does (default: "
               "accumulate in float32 and round once; the reference's sums stop growing on long rows)");
  return [a]() {
    check_output_file(a->out, "-o");
    std::ostream& out = a->json ? std::cerr : std::cout;
    nlohmann::ordered_json doc;
    session::BuildRequest req;
    req.model = a->model;
    req.threads = a->threads;
    build::BuildOptions& o = req.options;
    o.mode = a->refit                 ? plan::BuildMode::Refit
             : a->identical           ? plan::BuildMode::RefitIdentical
             : !a->individual.empty() ? plan::BuildMode::RefitIndividual
                                      : plan::BuildMode::Baked;
    o.individual_patterns = a->individual;
    o.literal_names = a->literals;
    o.strip_weights = a->strip;
    o.print_passes = a->print_passes;
    o.skip_passes = a->skip_passes;
    o.precision = parse_precision(a->precision);
    o.activations = parse_precision(a->activations);
    o.block_size = a->block_size;
    o.backend = a->device.device.empty() ? std::string("cpu") : a->device.device;
    o.host_fallback = a->device.cpu_fallback;
    o.reference_rounding = a->reference_rounding;
    o.check_finite = !a->allow_nonfinite;
    session::CheckpointBinding& c = req.checkpoint;
    c.files = a->checkpoints;
    for (const auto& b : a->binds) {
      auto eq = b.find('=');
      if (eq == std::string::npos) fail("--bind '", b, "' is not ONNX_NAME=CHECKPOINT_NAME");
      c.binds.push_back({b.substr(0, eq), b.substr(eq + 1), "--bind " + b});
    }
    c.bind_file = a->bind_file;
    c.strict = a->strict_binding;
    c.allow_partial = a->allow_partial;
    c.strip_prefix = a->prefixes.strip;
    c.add_prefix = a->prefixes.add;
    req.validate();
    if (verbosity() != Verbosity::Quiet) note_bf16_activations(o.activations);
    auto t0 = std::chrono::steady_clock::now();
    PhaseObserver observer;
    session::Built built = session::build_plan(req, &observer);
    const plan::Plan& p = built.plan;
    if (built.binding) {
      const session::BindingSummary& b = *built.binding;
      doc["binding"] = {{"checkpoint", b.checkpoint},
                        {"sources", b.sources},
                        {"bound", b.bound},
                        {"constant", b.constant},
                        {"unbound", b.unbound}};
      out << "binding: " << b.bound << "/" << b.sources << " sources bound to " << b.checkpoint << ", " << b.constant
          << " constant, " << b.unbound << " unbound (" << b.checkpoint_bytes << " bytes; index " << b.index_ms
          << " ms, match " << b.match_ms << " ms)\n";
      // The constants binding proved functions of the configuration: one line by kind (all-equal,
      // causal mask, ...) unless --verbose lists each.
      if (verbosity() == Verbosity::Verbose) {
        for (const auto& s : p.sources)
          if (s.binding.status == plan::Binding::Status::Constant)
            out << "  constant " << s.key << " " << dtype_name(s.dtype) << shape_str(s.shape) << ": "
                << s.binding.rule << "\n";
      } else if (b.constant > 0) {
        std::map<std::string, int> kinds;
        for (const auto& s : p.sources)
          if (s.binding.status == plan::Binding::Status::Constant) ++kinds[constant_kind(s.binding.rule)];
        out << "  " << b.constant << " constant" << (b.constant == 1 ? " is a function" : "s are functions")
            << " of the model's configuration, not of the checkpoint (";
        bool first = true;
        for (const auto& [kind, n] : kinds) {
          out << (first ? "" : ", ") << kind << " " << n;
          first = false;
        }
        out << "); --verbose lists them\n";
      }
      for (const auto& s : p.sources)
        if (s.binding.status == plan::Binding::Status::Unbound)
          out << "  unbound " << s.key << " " << dtype_name(s.dtype) << shape_str(s.shape) << ": " << s.binding.note
              << "\n";
      if (b.unbound)
        out << "a refit from a checkpoint will be refused until every source is bound (--bind, --literal); "
               "a refit from a re-exported ONNX model works\n";
    }
    session::save_plan(p, a->out, &observer);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    size_t derived = 0, literal = 0, baked = 0, refittable = 0;
    for (const auto& w : p.weights)
      (w.kind == plan::WeightKind::Derived ? derived : w.kind == plan::WeightKind::Literal ? literal : baked)++;
    for (const auto& s : p.sources) refittable += s.refittable;
    out << "built " << a->out << " (" << plan::build_mode_name(p.mode) << (p.stripped ? ", stripped" : "")
        << (p.precision != plan::Precision::Fp32 ? std::string(", ") + plan::precision_name(p.precision) : "")
        << (p.activations != plan::Precision::Fp32
                ? std::string(" with ") + plan::precision_name(p.activations) + " activations"
                : "")
        << "): " << p.graph.nodes.size() << " nodes, " << p.weights.size() << " engine weights (" << derived
        << " derived, " << literal << " literal, " << baked << " baked), " << refittable << "/" << p.sources.size()
        << " sources refittable, " << std::filesystem::file_size(a->out) << " bytes, " << ms << " ms\n";
    const PlacementSummary placed = summarize_placement(p);
    if (placed.device_memory)
      out << "placement: " << placed.on_device << " node(s) on " << o.backend << ", " << placed.shape_on_host
          << " shape computation on the CPU, " << placed.fallback << " fallback on the CPU, " << placed.transfers
          << " transfers\n";
    if (a->json) {
      nlohmann::ordered_json j = {{"plan", a->out},
                                  {"mode", plan::build_mode_name(p.mode)},
                                  {"stripped", p.stripped},
                                  {"precision", plan::precision_name(p.precision)},
                                  {"activations", plan::precision_name(p.activations)},
                                  {"nodes", p.graph.nodes.size()},
                                  {"engine_weights", p.weights.size()},
                                  {"derived_weights", derived},
                                  {"literal_weights", literal},
                                  {"baked_weights", baked},
                                  {"sources", p.sources.size()},
                                  {"refittable_sources", refittable},
                                  {"device", o.backend},
                                  {"placement",
                                   {{"on_device", placed.on_device},
                                    {"shape_on_host", placed.shape_on_host},
                                    {"fallback_on_host", placed.fallback},
                                    {"transfers", placed.transfers}}},
                                  {"bytes", std::filesystem::file_size(a->out)},
                                  {"build_ms", ms}};
      if (doc.contains("binding")) j["binding"] = doc["binding"];
      std::cout << j.dump(2) << "\n";
    }
    return 0;
  };
}

}  // namespace reforge::cli
