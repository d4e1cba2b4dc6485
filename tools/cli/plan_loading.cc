#include "plan_loading.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <map>

#include "backends/backend.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "common.h"
#include "core/regular_file.h"
#include "onnx/importer.h"
#include "plan/plan_format.h"
#include "plan/plan_io.h"
#include "progress.h"

namespace reforge::cli {

bool is_plan_file(const std::string& path) {
  // Only a regular file is looked into (reading a FIFO blocks); anything else is left to the
  // importer, whose error says what it is.
  try {
    RegularFile f = RegularFile::open(path);
    char magic[sizeof plan::format::kMagic] = {};
    return ::pread(f.fd(), magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic) &&
           std::memcmp(magic, plan::format::kMagic, sizeof magic) == 0;
  } catch (const Error&) {
    return false;
  }
}

void require_runnable(const plan::Plan& p, const std::string& subject) {
  const std::vector<std::string> where = plan::node_backends(p);
  std::map<std::string, size_t> count;
  for (const auto& b : where) ++count[b];
  for (const auto& [name, n] : count) {
    const backends::Backend* b = backends::find_backend(name);
    if (!b || !b->unavailable) continue;  // an unknown backend: the engine names it
    if (std::string why = b->unavailable(); !why.empty())
      fail("the ", name == "cuda" ? std::string("CUDA") : name, " backend cannot run here: ", why, "; ", subject,
           " runs ", n, " of its ", where.size(), " nodes on '", name,
           "' (a plan runs, and refits, on the device it was built for: use a machine with one, or build the model "
           "again with --device cpu)");
  }
}

std::unique_ptr<runtime::PlanEngine> load_engine(const std::string& path, const LoadOptions& o) {
  runtime::EngineOptions eo;
  eo.threads = o.threads;
  eo.profile = o.profile;
  eo.arena = o.arena;
  eo.device_trace = o.device_trace;
  if (o.device_replay) eo.device_replay = *o.device_replay;
  if (o.keep_baked && o.weights.empty()) fail("--keep-baked applies when refitting with --weights; none were given");
  plan::Plan p;
  if (is_plan_file(path)) {
    if (!o.skip_passes.empty())
      fail("--skip-pass applies when building an ONNX model; '", path, "' is a plan, built already");
    if (o.allow_nonfinite && o.weights.empty())
      fail("--allow-nonfinite applies when building an ONNX model or refitting with --weights; '", path,
           "' is a plan, built already");
    plan::ReadOptions ro;
    ro.verify_weight_hashes = o.verify_weights;
    {
      Phase phase("loading plan '" + path + "'" + (o.verify_weights ? " (hashing its weights)" : ""));
      p = plan::read_plan(path, ro);
    }
    if (o.index_bounds) *o.index_bounds = index_bounds(p);
    if (!o.precision.empty() && parse_precision(o.precision) != p.precision)
      fail("--precision ", o.precision, " applies when building an ONNX model; plan '", path, "' was built with ",
           plan::precision_name(p.precision));
    if (!o.activations.empty() && parse_precision(o.activations) != p.activations)
      fail("--activations ", o.activations, " applies when building an ONNX model; plan '", path, "' was built with ",
           plan::precision_name(p.activations), " activations");
    const std::string built_for = p.build ? p.build->backend : std::string("cpu");
    if (!o.device.device.empty() && o.device.device != built_for)
      fail("plan '", path, "' was built for device '", built_for, "', not '", o.device.device,
           "': build it again with --device ", o.device.device);
    if (o.device.cpu_fallback)
      fail("--allow-cpu-fallback applies when building an ONNX model; plan '", path, "' is placed already");
    require_runnable(p, "plan '" + path + "'");
  } else {
    build::BuildOptions bo;
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
    ir::Graph g;
    {
      Phase phase("importing '" + path + "'");
      g = onnx::import_model_file(path);
    }
    if (o.index_bounds) *o.index_bounds = index_bounds(g);
    {
      Phase phase("building '" + path + "'");
      bo.progress = phase.reporter();
      p = build::build_plan(std::move(g), bo);
    }
    if (!o.quiet && verbosity() != Verbosity::Quiet) note_bf16_activations(bo.activations);
  }
  auto engine = std::make_unique<runtime::PlanEngine>(std::move(p), eo);
  if (!o.weights.empty()) refit_engine(*engine, o);
  return engine;
}

refit::RefitReport refit_engine(runtime::PlanEngine& engine, const LoadOptions& o) {
  refit::RefitRequest req;
  req.files = o.weights;
  req.mode = o.verify ? refit::RefitMode::Verify : o.slow ? refit::RefitMode::Slow : refit::RefitMode::Fast;
  req.commit.check_finite = !o.allow_nonfinite;
  req.commit.keep_baked = o.keep_baked;
  refit::RefitReport rep;
  {
    Phase phase("refitting from " + (o.weights.size() == 1 ? "'" + o.weights[0] + "'" : "the weight files"));
    req.commit.progress = phase.reporter();
    rep = build::refit_from(engine, req);
  }
  if (!o.quiet && verbosity() != Verbosity::Quiet) std::cerr << rep.summary();
  return rep;
}

}  // namespace reforge::cli
