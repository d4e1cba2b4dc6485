// session: the one orchestration layer of reforge's front ends. The command-line tool
// (tools/cli) and the Python binding (python/src) parse their arguments, show progress and map
// errors to their conventions; what happens and in which order — building (session/build.h),
// reading a plan, checking it can run here, refitting from any source, running, saving — is
// decided here, once.
//
//   session::Session s(session::read_plan_file("model.plan", true, &observer));
//   refit::RefitRequest req;
//   req.files = {"B.safetensors"};                       // any source: refit/source_readers.h
//   refit::RefitReport rep = s.refit(req, &observer);    // rep.json(): the one report schema
//   std::vector<Tensor> out = s.run(inputs);
//
// A Session owns one PlanEngine; run() may be called from several threads at once and
// concurrently with refit() (runtime/plan_engine.h: each run sees one weight set).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "refit/refit_from.h"
#include "runtime/plan_engine.h"
#include "session/observer.h"

namespace reforge::session {

// Whether `path` is a regular file that begins with a plan's magic (plan/plan_format.h),
// whatever its name.
bool is_plan_file(const std::string& path);

// Throws, naming `subject` ("plan 'x.plan'") and the reason, when a backend that nodes of `p`
// are placed on cannot run here (a CUDA plan on a machine without a usable GPU).
void require_runnable(const plan::Plan& p, const std::string& subject);

// A plan read from a file, and whether its stored weights were hashed against its record.
struct PlanFile {
  plan::Plan plan;
  std::string path;
  bool verified = false;
};
// Reads `path` (phase "loading plan 'PATH'"), hashing every stored weight when `verify_weights`.
PlanFile read_plan_file(const std::string& path, bool verify_weights, Observer* observer = nullptr);

// Writes `p` to `path` atomically (phase "writing 'PATH'").
void save_plan(const plan::Plan& p, const std::string& path, Observer* observer = nullptr);

class Session {
 public:
  // A plan read from a file; refused, naming it, when it is placed on a backend that cannot run here.
  explicit Session(PlanFile file, const runtime::EngineOptions& options = {});
  // A plan built in this process.
  explicit Session(plan::Plan built, const runtime::EngineOptions& options = {});

  runtime::PlanEngine& engine() { return *engine_; }
  const runtime::PlanEngine& engine() const { return *engine_; }
  // The plan's metadata (the engine's; its weight data is the build-time data).
  const plan::Plan& plan() const { return engine_->plan(); }
  // The backend the plan was built for: where it runs and refits.
  std::string device() const { return plan::backend_of(plan()); }
  // Whether any source is bound to a checkpoint (a build with one).
  bool bound() const;
  // The file the plan was read from or last saved to.
  const std::optional<std::string>& path() const { return path_; }

  // Gives the engine new weights from any source (build::refit_from: files recognized by content,
  // tensors, a state dict), phase "refitting from ...", as one transaction. The report's device is
  // the plan's.
  // With `version` (not ""), the new weights become the session's version of that name (made,
  // or replaced when the refit succeeds) and the engine's current weights stay; a failed refit
  // leaves every version as it was.
  refit::RefitReport refit(refit::RefitRequest request, Observer* observer = nullptr, const std::string& version = "");

  // Throws naming the first input that is unknown, missing, or of another dtype or shape.
  void check_inputs(const std::map<std::string, Tensor>& inputs) const;
  // On the engine's current weights, or (`version` not "") on the named version.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs, const runtime::RunOptions& options = {},
                          const std::string& version = "") const;
  // The named versions, sorted; drop_version frees one (runs on it finish first). An unknown name
  // is an error naming the versions there are.
  std::vector<std::string> versions() const;
  void drop_version(const std::string& name);
  // The named version `name`, or ("") the engine's current weights; an unknown name is an error
  // naming the versions there are.
  runtime::PlanEngine::Version version(const std::string& name) const;
  // For each of `outputs` (of a run on `inputs`): whether its bytes lie in an input's or an engine
  // weight's (an Identity or a Reshape of one), so that a caller handing it out can keep it from
  // being written.
  std::vector<bool> shares_memory(const std::vector<Tensor>& outputs, const std::map<std::string, Tensor>& inputs) const;

  // Writes the plan with its current weights; `strip` leaves the refittable weight data out.
  // Without `strip`, refuses while refittable sources have no value, naming the first.
  void save(const std::string& path, bool strip, Observer* observer = nullptr);
  // `reforge inspect --json` of the plan (plan/plan_inspect.h), with the file's size when it has
  // one and {"verified": {weights, bytes}} when its stored weights were hashed at reading.
  nlohmann::json inspect() const;
  // The engine's runtime counters (runtime::EngineStats) as JSON: `reforge bench`'s "stats" and
  // Python's Plan.stats().
  nlohmann::json stats() const;

 private:
  struct Versions {
    mutable std::mutex mutex;
    std::map<std::string, runtime::PlanEngine::Version> named;
  };
  std::unique_ptr<runtime::PlanEngine> engine_;
  std::shared_ptr<Versions> versions_ = std::make_shared<Versions>();
  std::optional<std::string> path_;
  std::optional<std::pair<size_t, size_t>> verified_;  // weights and bytes hashed at reading
};

// runtime::EngineStats as JSON, with the field names of EngineStats.
nlohmann::json stats_json(const runtime::EngineStats& st);

}  // namespace reforge::session
