#include "core/timing.h"
#include "plan_loading.h"

#include <chrono>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>

#include "build/builder.h"
#include "common.h"
#include "build/onnx_refit.h"
#include "onnx/importer.h"
#include "plan/plan_format.h"
#include "plan/plan_io.h"
#include "refit/checkpoint_refit.h"
#include "refit/recipe.h"

namespace reforge::cli {

bool is_plan_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[sizeof plan::format::kMagic] = {};
  f.read(magic, sizeof magic);
  return f.gcount() == static_cast<std::streamsize>(sizeof magic) && std::memcmp(magic, plan::format::kMagic, sizeof magic) == 0;
}

std::unique_ptr<runtime::PlanEngine> load_engine(const std::string& path, const LoadOptions& o) {
  runtime::EngineOptions eo;
  eo.threads = o.threads;
  eo.profile = o.profile;
  eo.arena = o.arena;
  plan::Plan p;
  if (is_plan_file(path)) {
    if (!o.skip_passes.empty())
      fail("--skip-pass applies when building an ONNX model; '", path, "' is a plan, built already");
    plan::ReadOptions ro;
    ro.verify_weight_hashes = o.verify_weights;
    p = plan::read_plan(path, ro);
    if (!o.precision.empty() && parse_precision(o.precision) != p.precision)
      fail("--precision ", o.precision, " applies when building an ONNX model; plan '", path, "' was built with ",
           plan::precision_name(p.precision));
    if (!o.activations.empty() && parse_precision(o.activations) != p.activations)
      fail("--activations ", o.activations, " applies when building an ONNX model; plan '", path, "' was built with ",
           plan::precision_name(p.activations), " activations");
  } else {
    build::BuildOptions bo;
    bo.mode = o.weights.empty() ? plan::BuildMode::Baked : plan::BuildMode::Refit;
    bo.skip_passes = o.skip_passes;
    bo.precision = parse_precision(o.precision);
    bo.activations = parse_precision(o.activations);
    p = build::build_plan(onnx::import_model_file(path), bo);
    if (!o.quiet) note_bf16_activations(bo.activations);
  }
  auto engine = std::make_unique<runtime::PlanEngine>(std::move(p), eo);
  if (!o.weights.empty()) refit_engine(*engine, o);
  return engine;
}

refit::CommitReport refit_engine(runtime::PlanEngine& engine, const LoadOptions& o) {
  const plan::Plan& p = engine.plan();
  if (p.mode == plan::BuildMode::Baked) fail("this plan was built without a refit flag; it cannot be refit");
  refit::Refitter r(engine);
  refit::CommitOptions co;
  co.check_finite = !o.allow_nonfinite;
  refit::CommitReport rep;
  auto t0 = std::chrono::steady_clock::now();
  if (!o.weights.empty() && refit::is_safetensors_path(o.weights[0])) {
    if (o.slow || o.verify) fail("--slow and --verify need a re-exported ONNX model, not a checkpoint");
    auto ckpt = refit::Checkpoint::open(o.weights);
    auto cs = refit::sources_from_checkpoint(p, ckpt);
    double read_ms = ms_since(t0);
    for (const auto& [id, t] : cs.sources) r.set_source(id, t);
    rep = r.commit(co);
    if (!o.quiet) {
      std::cerr << std::fixed << std::setprecision(2) << "refit (checkpoint): read+bind " << read_ms << " ms, validate "
                << rep.validate_ms << " ms, replay " << rep.replay_ms << " ms, commit " << rep.commit_ms << " ms; "
                << rep.sources_set << " sources -> " << rep.weights_replayed << " engine weights\n";
      if (!cs.unused.empty()) std::cerr << refit::unused_summary(cs.unused) << "\n";
    }
    return rep;
  }
  if (o.weights.size() != 1) fail("refit from ONNX takes exactly one model file (got ", o.weights.size(), ")");
  const std::string& src = o.weights[0];
  if (o.slow) {
    std::string note;
    plan::Plan fresh = build::rebuild_from_onnx(p, onnx::import_model_file(src), &note);
    if (!note.empty()) std::cerr << "refit (slow): " << note << "\n";
    double read_ms = ms_since(t0);
    rep = r.commit_rebuilt(fresh, co);
    if (!o.quiet)
      std::cerr << std::fixed << std::setprecision(2) << "refit (slow): import+build " << read_ms << " ms, validate "
                << rep.validate_ms << " ms, commit " << rep.commit_ms << " ms, " << rep.weights_replayed << " weights, "
                << rep.bytes_out << " bytes\n";
    return rep;
  }
  auto sources = build::read_sources_from_onnx(p, src);
  double read_ms = ms_since(t0);
  for (const auto& [id, t] : sources) r.set_source(id, t);
  rep = r.commit(co);
  if (!o.quiet)
    std::cerr << std::fixed << std::setprecision(2) << "refit (fast): read " << read_ms << " ms, validate " << rep.validate_ms
              << " ms, replay " << rep.replay_ms << " ms, commit " << rep.commit_ms << " ms; " << rep.sources_set
              << " sources (" << rep.bytes_in << " bytes) -> " << rep.weights_replayed << " engine weights (" << rep.bytes_out
              << " bytes)\n";
  if (o.verify) {
    std::string note;
    plan::Plan fresh = build::rebuild_from_onnx(p, onnx::import_model_file(src), &note);
    if (!note.empty()) std::cerr << "refit (verify): " << note << "\n";
    size_t compared = 0;
    for (const auto& w : fresh.weights) {
      if (w.kind != plan::WeightKind::Derived) continue;
      Tensor mine = engine.weight(w.name);
      if (!refit::bit_equal(mine, w.data))
        fail("refit --verify: engine weight '", w.name, "' differs between fast refit and a fresh build");
      ++compared;
    }
    if (!o.quiet) std::cerr << "refit --verify: fast == slow for all " << compared << " derived engine weights, bit for bit\n";
  }
  return rep;
}

}  // namespace reforge::cli
