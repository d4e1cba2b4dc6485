// Refit from a re-exported ONNX model (build side: it reads ONNX files).
//
// Fast path: read_sources_from_onnx() imports the new model without running any pass, checks
// that its structure matches the plan's fingerprint, and returns each source's new tensor (the
// baked ones too, which the refitter compares with the plan's values), found by graph position (node position in
// canonical order, input slot), so a re-export that merged or split equal initializers differently still refits
// correctly. Slow path: rebuild_from_onnx() re-runs the whole build on the new model with the plan's options and
// returns the fresh plan, whose engine weights the refitter can swap in. refit_from() is the entry point that does
// either, or both compared (verify), and hands checkpoints and caller tensors to the runtime's refit::refit_from.
#pragma once

#include <map>
#include <string>

#include "builder/builder.h"
#include "ir/graph.h"
#include "plan/plan.h"
#include "refit/refit_from.h"
#include "runtime/plan_engine.h"

namespace reforge::build {

// Sources by id. Throws an Error naming what differs when the structure does not match.
std::map<uint32_t, Tensor> read_sources_from_onnx(const plan::Plan& plan, const ir::Graph& model);
std::map<uint32_t, Tensor> read_sources_from_onnx(const plan::Plan& plan, const std::string& path);

// A fresh build of `model` with `plan`'s build options (not stripped); checks the fingerprint.
// The options come from the plan's build record (Plan::build), layouts and skipped passes
// included. A plan without one (an older reforge's) is rebuilt with options inferred from its
// nodes, and `note`, when given, says so. `progress` is told the build's steps (BuildOptions::progress).
plan::Plan rebuild_from_onnx(const plan::Plan& plan, const ir::Graph& model, std::string* note = nullptr,
                             const ProgressCallback& progress = {});

// The options rebuild_from_onnx() builds with (same `note`).
BuildOptions rebuild_options(const plan::Plan& plan, const ir::Graph& model, std::string* note = nullptr);

// refit::refit_from (refit/refit_from.h) plus re-exported ONNX models: when request.files is one
// ONNX file, refits `engine` by request.mode: Fast reads the sources by graph position and
// replays the recipes; Slow rebuilds and swaps the rebuilt weights in; Verify stages the fast
// refit, rebuilds, and commits only when every derived engine weight equals the rebuilt one bit
// for bit (otherwise it throws naming the first that differs, engine unchanged). Any other
// request goes to refit::refit_from.
refit::RefitReport refit_from(runtime::PlanEngine& engine, const refit::RefitRequest& request);

}  // namespace reforge::build
