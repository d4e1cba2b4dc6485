// Loading what `run`, `bench` and `refit` accept: an ONNX model (built on the fly, baked) or a
// plan file, optionally refit from weight files before use. The work is the session's
// (session/session.h); this file checks that the command's flags fit what the path holds.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "refit/refit_from.h"
#include "session/session.h"

namespace reforge::cli {

struct LoadOptions {
  int threads = 0;
  std::vector<std::string> weights;      // new weights, each file recognized by its content
  KeyPrefixes prefixes;                  // a checkpoint's names renamed (--strip-prefix, --add-prefix)
  LoraOptions lora;                      // a LoRA adapter merged into the checkpoint (--lora, --lora-scale)
  std::vector<std::string> mark_outputs;  // --mark-outputs (session::BuildRequest::mark_outputs)
  bool slow = false;                     // slow refit: rebuild from the new model
  bool verify = false;                   // run fast and slow, compare every engine weight
  bool quiet = false;                    // do not print refit phases
  bool profile = false;                  // time every node (runtime::EngineOptions::profile)
  std::vector<std::string> skip_passes;  // build passes not to run (glob patterns)
  bool arena = true;                     // runtime::EngineOptions::arena
  bool device_trace = false;             // runtime::EngineOptions::device_trace
  std::optional<bool> device_replay;     // runtime::EngineOptions::device_replay (unset: its default)
  std::string precision;                 // --precision for an ONNX model built on the fly ("" = fp32)
  std::string activations;               // --activations likewise ("" = fp32)
  int64_t block_size = 0;                // --block-size likewise (int4; 0 = 32)
  DeviceOptions device;                  // --device / --allow-cpu-fallback for an ONNX model; a plan's must match
  bool allow_nonfinite = false;          // accept NaN/Inf in an ONNX model built here and in new weights
  bool keep_baked = false;               // keep the plan's baked sources where the new weights differ
  bool skip_unchanged = false;           // refit::CommitOptions::skip_unchanged
  bool host_replay = false;              // refit::CommitOptions::device_replay off
  // Hash every stored weight of a plan file against the hashes it records before using it
  // (plan::ReadOptions::verify_weight_hashes); false is `--no-verify`.
  bool verify_weights = true;
  // When set: the provable bounds of the model's or plan's integer inputs (common.h,
  // index_bounds), for synthetic inputs.
  std::map<std::string, IndexBound>* index_bounds = nullptr;
};

session::Session load_session(const std::string& path, const LoadOptions& options);

// Refits the session's engine from the weight files in `options` (fast, slow or verify) and
// prints its summary unless quiet.
refit::RefitReport refit_session(session::Session& s, const LoadOptions& options);

}  // namespace reforge::cli
