// refit_from: the one call that gives a PlanEngine new weights, read from where they are.
//
//   refit::RefitRequest req;
//   req.files = {"/ckpt/model.safetensors"};            // or req.tensors = {{"fc.weight", t}, ...}
//   refit::RefitReport rep = refit::refit_from(engine, req);
//
// Two layers, one request type. This one (runtime library, no importer, no protobuf) reads a
// checkpoint the plan was bound to at build time (safetensors files, a sharded checkpoint's
// index), or takes caller tensors by initializer name or source key. What a file is comes from
// its content (refit/source_readers.h), never its name. build::refit_from (builder/onnx_refit.h)
// takes the same request and adds re-exported ONNX models: fast (sources by graph position,
// recipes replayed), slow (a rebuild with the plan's options) or verify (both, every derived
// engine weight compared bit for bit before anything changes); it hands every other request to
// this one. The front ends reach it through the session (session/session.h); a deployment that
// only loads plans calls this one.
//
// Every refit is one transaction (refit/refitter.h): any error, including a verify mismatch,
// leaves the engine exactly as it was. Every refit returns one RefitReport, whose JSON
// (RefitReport::json, the schema in docs/refit.md) is what `reforge refit --json` prints and what
// Python's Plan.refit returns.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "refit/lora.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"

namespace reforge::refit {

// How a re-exported ONNX model refits (other sources have one way: the fast one).
enum class RefitMode {
  Fast,    // read the sources by graph position, replay the recipes
  Slow,    // rebuild the plan from the new model with the plan's options, swap its weights in
  Verify,  // fast, then slow: commit only when every derived engine weight agrees bit for bit
};
const char* refit_mode_name(RefitMode m);

struct RefitRequest {
  // New weights from files, each recognized by its content (refit/source_readers.h): a
  // checkpoint the plan was bound to (safetensors files, a sharded checkpoint's index or its
  // folder), or one re-exported ONNX model (build::refit_from only).
  std::vector<std::string> files;
  // New weights from memory, by initializer name or source key (Refitter::set). Not together
  // with `files`.
  std::map<std::string, Tensor> tensors;
  // New weights from memory by checkpoint (framework) name, a state dict: read through the
  // bindings of a plan built with a checkpoint, exactly as a safetensors file would be. Alone.
  std::map<std::string, Tensor> checkpoint_tensors;
  // The reader that made the in-memory tensors, as the report names it: "tensors" (given as
  // Tensors), "dlpack" (refit/dlpack.h).
  std::string memory_reader = "tensors";
  // A checkpoint's names (files or checkpoint_tensors) as Checkpoint::with_key_prefix renames them.
  std::string strip_prefix, add_prefix;
  RefitMode mode = RefitMode::Fast;  // ONNX models only; otherwise it must be Fast
  // A LoRA adapter merged into the checkpoint (files or checkpoint_tensors, after the renaming
  // above) before its bindings read it (refit/lora.h): the new weights are those of the merged
  // checkpoint, as a refit from it or a fresh build bound to it makes them.
  LoraSource lora;
  // check_finite (NaN/Inf refused), incremental (only the sources given change; caller tensors
  // only: a checkpoint or a model gives every source).
  CommitOptions commit;
  // Where the new weights go: null, the engine (its current weights, as a commit); else a new
  // version derived from the engine's current one (runtime::PlanEngine::derive_version), stored
  // here, the engine left as it is (session::Session's named versions). Not for a slow refit.
  runtime::PlanEngine::Version* into_version = nullptr;
};

struct StagedRefit;

struct RefitReport {
  std::string from;    // how sources were found: "checkpoint" (bindings), "tensors" (names), "onnx" (positions)
  std::string reader;  // what read them: "safetensors", "safetensors-index", "onnx", "tensors", "dlpack"
  std::string device;  // the plan's backend, where the new weights were committed
  RefitMode mode = RefitMode::Fast;
  CommitReport commit;   // of the fast commit (slow: of the rebuilt one)
  double read_ms = 0;    // reading the new weights: checkpoint read and bindings, ONNX import (slow: and rebuild)
  double verify_ms = 0;  // verify: the rebuild and the comparison
  size_t verified = 0;   // verify: derived engine weights found equal, bit for bit
  std::vector<std::string> unused;  // checkpoint tensors no binding reads (ignored)
  // Checkpoint tensors of --literal initializers the plan keeps (plan::LiteralBinding): how many
  // the checkpoint held, and which differ from the plan's (kept only with CommitOptions::keep_baked).
  size_t literals_given = 0;
  std::vector<std::string> literals_differing;
  std::string note;  // slow/verify: how the rebuild's options were found, when not from the plan's record
  // With a LoRA adapter: what was merged (the checkpoint tensors it changed, sorted), its rank and
  // the scale applied, and the time the merge took (within read_ms).
  struct Lora {
    std::string adapter;
    std::vector<std::string> merged;
    int64_t r = 0;
    float scale = 0;
    double merge_ms = 0;
  };
  std::optional<Lora> lora;

  // What the CLI prints: a line of phases and counts, and one on verification or unused tensors.
  std::string summary() const;
  // The report's one serialization (docs/refit.md, "The refit report"), summary() included.
  nlohmann::ordered_json json() const;
};

// Refits `engine` from a checkpoint or caller tensors. Throws (engine unchanged) when the plan
// is not refittable, the request is inconsistent, a source is missing, unbound or of another
// dtype or shape, or a value is refused (NaN/Inf, refit-identical hash); and, naming
// build::refit_from, when the request names an ONNX model.
RefitReport refit_from(runtime::PlanEngine& engine, const RefitRequest& request);

// Applies a refit that `r` staged: commits it to the engine, or with req.into_version derives the
// version from the engine's current one into it (the engine unchanged). The one place both refit
// layers finish a refit.
CommitReport apply_staged(runtime::PlanEngine& engine, Refitter& r, StagedRefit staged, const RefitRequest& req);

}  // namespace reforge::refit
