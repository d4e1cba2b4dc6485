// Building a plan from an ONNX model, alone or bound to a framework checkpoint: what
// `reforge build` and Python's reforge.build() both do, in one order with one set of checks.
//
//   session::BuildRequest req;
//   req.model = "model.onnx";
//   req.options.mode = plan::BuildMode::Refit;
//   req.checkpoint.files = {"A.safetensors"};         // or .tensors (a state dict in memory)
//   req.checkpoint.binds = {{"fc.weight", "fc.w", "--bind fc.weight=fc.w"}};
//   session::Built b = session::build_plan(req, &observer);
//
// The checkpoint's files are recognized by their content (refit/source_readers.h). A bind file's
// binds come before the request's binds, its literals join options.literal_names; a key bound
// twice to different tensors is an error naming where each was given (build::BindOptions).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "builder/builder.h"
#include "plan/plan.h"
#include "session/observer.h"

namespace reforge::session {

// One bind: a source key or initializer name -> a checkpoint tensor, and where it was given
// ("--bind a=b", "bind={'a': 'b'}"), for errors.
struct Bind {
  std::string key, tensor, origin;
};

// The checkpoint a build binds every source to, and how.
struct CheckpointBinding {
  std::vector<std::string> files;         // safetensors files, a sharded checkpoint's index or its folder
  std::map<std::string, Tensor> tensors;  // or a state dict in memory, by framework name
  std::vector<Bind> binds;                // settle bindings the values cannot decide
  std::string bind_file;                  // JSON {ONNX_NAME: CKPT_NAME, ..., "literals": [ONNX_NAME, ...]}
  bool strict = false;                    // declared literals must be structural or provably configuration-only
  bool allow_partial = false;             // build although the checkpoint binds under half of the sources
  std::string strip_prefix, add_prefix;   // the checkpoint's names renamed (refit::Checkpoint::with_key_prefix)
  bool given() const { return !files.empty() || !tensors.empty(); }
};

struct BuildRequest {
  std::string model;            // the ONNX file
  build::BuildOptions options;  // `progress` is not used: the observer is told the build's steps
  CheckpointBinding checkpoint;
  int threads = 0;  // OpenMP threads of this process for the build's folding and verification; 0: as they are
  // Values of the model to make graph outputs too, to compare intermediate values (as Polygraphy's
  // --onnx-outputs): each must be a value a node makes; "all" alone: every value a node makes
  // (Constant nodes' aside). A marked value keeps the fusions that would hide it from being made.
  std::vector<std::string> mark_outputs;
  // Called with the imported model before it is built (the CLI reads synthetic inputs' bounds there).
  std::function<void(const ir::Graph&)> imported;
  // Throws for inconsistent options: BuildOptions::validate, binding options without a
  // checkpoint, a checkpoint given both as files and as tensors.
  void validate() const;
};

// How the sources of a plan built with a checkpoint were bound.
struct BindingSummary {
  std::string checkpoint;  // "checkpoint 'a.safetensors'"
  size_t sources = 0, bound = 0, constant = 0, unbound = 0;
  uint64_t checkpoint_bytes = 0;
  double index_ms = 0, match_ms = 0;
};

struct Built {
  plan::Plan plan;
  std::optional<BindingSummary> binding;  // with a checkpoint
};

// Validates the request, imports the model and builds it (bound to the checkpoint when one is
// given). Phases: "importing 'MODEL'", "building 'MODEL'" (or "... bound to CHECKPOINT").
Built build_plan(const BuildRequest& request, Observer* observer = nullptr);

}  // namespace reforge::session
