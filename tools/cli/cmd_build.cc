// `reforge build MODEL.onnx -o OUT.plan [--refit | --refit-identical | --refit-individual PATTERN...]
//                          [--strip-weights] [--literal NAME...] [--print-passes]`
#include <chrono>
#include <filesystem>
#include <iostream>

#include "build/builder.h"
#include "common.h"
#include "onnx/importer.h"
#include "plan/plan_io.h"

namespace reforge::cli {

namespace {
struct BuildArgs {
  std::string model, out;
  bool refit = false, identical = false, strip = false, print_passes = false;
  std::vector<std::string> individual, literals;
};
}  // namespace

Runner add_build(CLI::App& app) {
  auto a = std::make_shared<BuildArgs>();
  app.add_option("model", a->model, "ONNX model file")->required();
  app.add_option("-o,--output", a->out, "plan file to write")->required();
  auto* r1 = app.add_flag("--refit", a->refit, "every source refittable (transforms recorded, never specialized on values)");
  auto* r2 = app.add_flag("--refit-identical", a->identical, "refit accepts only the build-time weights (checked by hash)");
  auto* r3 = app.add_option("--refit-individual", a->individual, "only sources matching these glob patterns are refittable");
  r1->excludes(r2)->excludes(r3);
  r2->excludes(r3);
  app.add_flag("--strip-weights", a->strip, "leave refittable weight data out of the plan");
  app.add_option("--literal", a->literals, "initializers to treat as literals (structure, never refit)");
  app.add_flag("--print-passes", a->print_passes, "print graph size after each pass");
  return [a]() {
    build::BuildOptions o;
    o.mode = a->refit ? plan::BuildMode::Refit
             : a->identical ? plan::BuildMode::RefitIdentical
             : !a->individual.empty() ? plan::BuildMode::RefitIndividual
                                      : plan::BuildMode::Baked;
    o.individual_patterns = a->individual;
    o.literal_names = a->literals;
    o.strip_weights = a->strip;
    o.print_passes = a->print_passes;
    o.validate();
    auto t0 = std::chrono::steady_clock::now();
    plan::Plan p = build::build_plan(onnx::import_model_file(a->model), o);
    plan::write_plan(p, a->out);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    size_t derived = 0, literal = 0, baked = 0, refittable = 0;
    for (const auto& w : p.weights)
      (w.kind == plan::WeightKind::Derived ? derived : w.kind == plan::WeightKind::Literal ? literal : baked)++;
    for (const auto& s : p.sources) refittable += s.refittable;
    std::cout << "built " << a->out << " (" << plan::build_mode_name(p.mode) << (p.stripped ? ", stripped" : "") << "): "
              << p.graph.nodes.size() << " nodes, " << p.weights.size() << " engine weights (" << derived << " derived, "
              << literal << " literal, " << baked << " baked), " << refittable << "/" << p.sources.size()
              << " sources refittable, " << std::filesystem::file_size(a->out) << " bytes, " << ms << " ms\n";
    return 0;
  };
}

}  // namespace reforge::cli
