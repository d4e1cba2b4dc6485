#include "plan_loading.h"

#include <iostream>

#include "common.h"
#include "progress.h"
#include "session/build.h"

namespace reforge::cli {

namespace {

// The flags that apply to building an ONNX model, refused for a plan built already.
void check_plan_flags(const plan::Plan& p, const std::string& path, const LoadOptions& o) {
  if (!o.precision.empty() && parse_precision(o.precision) != p.precision)
    fail("--precision ", o.precision, " applies when building an ONNX model; plan '", path, "' was built with ",
         plan::precision_name(p.precision));
  if (!o.activations.empty() && parse_precision(o.activations) != p.activations)
    fail("--activations ", o.activations, " applies when building an ONNX model; plan '", path, "' was built with ",
         plan::precision_name(p.activations), " activations");
  const std::string built_for = plan::backend_of(p);
  if (!o.device.device.empty() && o.device.device != built_for)
    fail("plan '", path, "' was built for device '", built_for, "', not '", o.device.device,
         "': build it again with --device ", o.device.device);
  if (o.device.cpu_fallback)
    fail("--allow-cpu-fallback applies when building an ONNX model; plan '", path, "' is placed already");
}

}  // namespace

session::Session load_session(const std::string& path, const LoadOptions& o) {
  runtime::EngineOptions eo;
  eo.threads = o.threads;
  eo.profile = o.profile;
  eo.arena = o.arena;
  eo.device_trace = o.device_trace;
  if (o.device_replay) eo.device_replay = *o.device_replay;
  if (o.keep_baked && o.weights.empty()) fail("--keep-baked applies when refitting with --weights; none were given");
  if ((!o.prefixes.strip.empty() || !o.prefixes.add.empty()) && o.weights.empty())
    fail("--strip-prefix and --add-prefix rename the tensors of a checkpoint given with --weights; none was given");
  if (!o.lora.path.empty() && o.weights.empty())
    fail("--lora merges an adapter into the checkpoint given with --weights (its base weights); none was given");
  PhaseObserver observer;
  std::optional<session::Session> s;
  if (session::is_plan_file(path)) {
    if (!o.skip_passes.empty())
      fail("--skip-pass applies when building an ONNX model; '", path, "' is a plan, built already");
    if (o.allow_nonfinite && o.weights.empty())
      fail("--allow-nonfinite applies when building an ONNX model or refitting with --weights; '", path,
           "' is a plan, built already");
    if (!o.mark_outputs.empty())
      fail("--mark-outputs applies when building an ONNX model; '", path,
           "' is a plan, built already (run the ONNX model it was built from)");
    session::PlanFile f = session::read_plan_file(path, o.verify_weights, &observer);
    if (o.index_bounds) *o.index_bounds = index_bounds(f.plan);
    check_plan_flags(f.plan, path, o);
    s.emplace(std::move(f), eo);
  } else {
    session::BuildRequest req;
    req.model = path;
    req.mark_outputs = o.mark_outputs;
    build::BuildOptions& bo = req.options;
    bo.mode = o.weights.empty() ? plan::BuildMode::Baked : plan::BuildMode::Refit;
    bo.skip_passes = o.skip_passes;
    bo.precision = parse_precision(o.precision);
    bo.activations = parse_precision(o.activations);
    bo.block_size = o.block_size;
    bo.backend = o.device.device.empty() ? std::string("cpu") : o.device.device;
    bo.host_fallback = o.device.cpu_fallback;
    bo.check_finite = !o.allow_nonfinite;
    // Before the import and the build: a device that cannot run here fails at once.
    require_backend_here(bo.backend, "--device " + bo.backend + " for '" + path + "'");
    if (o.index_bounds) req.imported = [&](const ir::Graph& g) { *o.index_bounds = index_bounds(g); };
    s.emplace(session::build_plan(req, &observer).plan, eo);
    if (!o.quiet && verbosity() != Verbosity::Quiet) note_bf16_activations(bo.activations);
  }
  if (!o.weights.empty()) refit_session(*s, o);
  return std::move(*s);
}

refit::RefitReport refit_session(session::Session& s, const LoadOptions& o) {
  refit::RefitRequest req;
  req.files = o.weights;
  req.strip_prefix = o.prefixes.strip;
  req.add_prefix = o.prefixes.add;
  req.lora.path = o.lora.path;
  req.lora.multiplier = o.lora.scale;
  req.mode = o.verify ? refit::RefitMode::Verify : o.slow ? refit::RefitMode::Slow : refit::RefitMode::Fast;
  req.commit.check_finite = !o.allow_nonfinite;
  req.commit.keep_baked = o.keep_baked;
  req.commit.skip_unchanged = o.skip_unchanged;
  req.commit.device_replay = !o.host_replay;
  PhaseObserver observer;
  refit::RefitReport rep = s.refit(req, &observer);
  if (!o.quiet && verbosity() != Verbosity::Quiet) std::cerr << rep.summary();
  return rep;
}

}  // namespace reforge::cli
