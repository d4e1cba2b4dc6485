// Progress of long library work, reported to a caller's callback: the library prints nothing, the
// caller (the CLI's progress lines, the Python package) decides what to show.
//
// A piece of work is a sequence of named steps. Each step is reported as it starts, with done = 0,
// and a counted step (total > 0) again as its units get done, done growing to total. A step whose
// size is known only once it runs (a pass that counts what it packs) is reported at its start
// uncounted, then once more with done = 0 and its total:
//   build_plan:  "shape inference", "pass NAME" for each pass that runs (the packing pass counts the
//                bytes of the weights it packs), "verifying recipes" (counts engine weights),
//                "hashing weights" (bytes), "placing nodes"; build_plan_with_checkpoint reports
//                "binding the checkpoint" before those
//   Refitter:    "validating sources", "replaying recipes" (bytes of the engine weights replayed)
//   write_plan:  "encoding the plan", "writing the plan" (bytes of the file), "syncing to disk"
// Calls come on the working thread, in order. An exception a callback throws stops the work as its
// error (a build makes no plan; a refit leaves the engine as it was).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace reforge {

struct Progress {
  std::string step;       // "pass linear-weights-packing", "replaying recipes"
  uint64_t done = 0;      // units done so far in this step
  uint64_t total = 0;     // units in this step; 0: the step is not counted (only its start is reported)
  const char* unit = "";  // "bytes", "weights"; "" when not counted
};

using ProgressCallback = std::function<void(const Progress&)>;

// Reports one step to `cb` (when set): its start, then its units as they get done.
class ProgressStep {
 public:
  ProgressStep(const ProgressCallback& cb, std::string step, uint64_t total = 0, const char* unit = "")
      : cb_(cb), p_{std::move(step), 0, total, unit} {
    if (cb_) cb_(p_);
  }
  // `n` more units done.
  void advance(uint64_t n) {
    if (!cb_ || p_.total == 0 || n == 0) return;
    p_.done += n;
    cb_(p_);
  }

 private:
  const ProgressCallback& cb_;
  Progress p_;
};

}  // namespace reforge
