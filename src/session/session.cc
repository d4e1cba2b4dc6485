#include "session/session.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "backends/backend.h"
#include "builder/onnx_refit.h"
#include "core/nearest_names.h"
#include "core/regular_file.h"
#include "plan/plan_format.h"
#include "plan/plan_inspect.h"
#include "plan/plan_io.h"

namespace reforge::session {

bool is_plan_file(const std::string& path) {
  // Only a regular file is looked into (reading a FIFO blocks); anything else is left to the
  // reader the caller tries next, whose error says what it is.
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
           "again for the CPU: --device cpu, in Python device=\"cpu\")");
  }
}

PlanFile read_plan_file(const std::string& path, bool verify_weights, Observer* observer) {
  PlanFile f;
  f.path = path;
  f.verified = verify_weights;
  plan::ReadOptions ro;
  ro.verify_weight_hashes = verify_weights;
  PhaseScope phase(observer, "loading plan '" + path + "'" + (verify_weights ? " (hashing its weights)" : ""));
  f.plan = plan::read_plan(path, ro);
  return f;
}

void save_plan(const plan::Plan& p, const std::string& path, Observer* observer) {
  PhaseScope phase(observer, "writing '" + path + "'");
  plan::write_plan(p, path, phase.steps());
}

Session::Session(PlanFile file, const runtime::EngineOptions& options) : path_(file.path) {
  require_runnable(file.plan, "plan '" + file.path + "'");
  if (file.verified) {
    // What read_plan hashed (the engine takes the data over, so count it now).
    size_t n = 0, bytes = 0;
    for (const auto& w : file.plan.weights)
      if (w.data.defined()) ++n, bytes += w.data.nbytes();
    verified_ = std::make_pair(n, bytes);
  }
  engine_ = std::make_unique<runtime::PlanEngine>(std::move(file.plan), options);
}

Session::Session(plan::Plan built, const runtime::EngineOptions& options)
    : engine_(std::make_unique<runtime::PlanEngine>(std::move(built), options)) {}

bool Session::bound() const {
  for (const auto& s : plan().sources)
    if (s.binding.status != plan::Binding::Status::None) return true;
  return false;
}

refit::RefitReport Session::refit(refit::RefitRequest req, Observer* observer, const std::string& version) {
  const std::string from = req.files.size() == 1             ? "'" + req.files[0] + "'"
                           : !req.files.empty()              ? std::string("the weight files")
                           : !req.checkpoint_tensors.empty() ? std::string("a state dict")
                                                             : std::string("tensors");
  const std::string lora = !req.lora.given()         ? ""
                           : req.lora.path.empty() ? std::string(" with a LoRA adapter")
                                                   : " with LoRA adapter '" + req.lora.path + "'";
  PhaseScope phase(observer,
                   "refitting from " + from + lora + (version.empty() ? "" : " into version '" + version + "'"));
  if (!req.commit.progress) req.commit.progress = phase.steps();
  if (version.empty()) return build::refit_from(*engine_, req);
  runtime::PlanEngine::Version made;
  req.into_version = &made;
  refit::RefitReport rep = build::refit_from(*engine_, req);
  std::lock_guard<std::mutex> lock(versions_->mutex);
  versions_->named[version] = std::move(made);
  return rep;
}

namespace {

std::vector<std::string> names_of(const std::map<std::string, runtime::PlanEngine::Version>& named) {
  std::vector<std::string> names;
  for (const auto& [n, _] : named) names.push_back(n);
  return names;
}

[[noreturn]] void unknown_version(const std::string& name,
                                  const std::map<std::string, runtime::PlanEngine::Version>& named) {
  fail("no weight version named '", name, "'",
       named.empty() ? std::string(" (there are none: refit with a version name makes one)")
                     : " (the versions: " + quoted_list(names_of(named)) + ")");
}

}  // namespace

runtime::PlanEngine::Version Session::version(const std::string& name) const {
  if (name.empty()) return engine_->current_version();
  std::lock_guard<std::mutex> lock(versions_->mutex);
  auto it = versions_->named.find(name);
  if (it == versions_->named.end()) unknown_version(name, versions_->named);
  return it->second;
}

std::vector<std::string> Session::versions() const {
  std::lock_guard<std::mutex> lock(versions_->mutex);
  return names_of(versions_->named);
}

void Session::drop_version(const std::string& name) {
  runtime::PlanEngine::Version dropped;  // released after the lock: the last holder frees it
  std::lock_guard<std::mutex> lock(versions_->mutex);
  auto it = versions_->named.find(name);
  if (it == versions_->named.end()) unknown_version(name, versions_->named);
  dropped = std::move(it->second);
  versions_->named.erase(it);
}

void Session::check_inputs(const std::map<std::string, Tensor>& inputs) const {
  runtime::check_inputs(engine_->inputs(), inputs);
}

std::vector<Tensor> Session::run(const std::map<std::string, Tensor>& inputs, const runtime::RunOptions& options,
                                 const std::string& version) const {
  return engine_->run(inputs, this->version(version), options);
}

std::vector<bool> Session::shares_memory(const std::vector<Tensor>& outputs,
                                         const std::map<std::string, Tensor>& inputs) const {
  std::vector<std::pair<const char*, const char*>> ranges;
  auto add = [&](const Tensor& t) {
    if (t.defined() && t.nbytes() && t.on_host())
      ranges.emplace_back(static_cast<const char*>(t.raw()), static_cast<const char*>(t.raw()) + t.nbytes());
  };
  for (const auto& [name, t] : inputs) add(t);
  std::vector<Tensor> weights;  // held while comparing; a weight held on the device only is no host output's
  for (const auto& w : plan().weights)
    if (engine_->weight_location(w.name) != Memory::Device)
      weights.push_back(engine_->weight(w.name)), add(weights.back());
  std::vector<bool> out;
  for (const auto& t : outputs) {
    const char* b = static_cast<const char*>(t.raw());
    bool in = false;
    for (const auto& [lo, hi] : ranges) in |= t.nbytes() && b >= lo && b < hi;
    out.push_back(in);
  }
  return out;
}

void Session::save(const std::string& path, bool strip, Observer* observer) {
  if (!strip) {
    const auto missing = engine_->missing_sources();
    if (!missing.empty())
      fail("save: ", missing.size(), " refittable source(s) have no value yet (first: '", missing[0],
           "'); refit them first, or save the plan stripped");
  }
  save_plan(engine_->current_plan(strip), path, observer);
  path_ = path;
}

nlohmann::json Session::inspect() const {
  std::optional<size_t> bytes;
  std::error_code ec;
  if (path_ && std::filesystem::exists(*path_, ec)) bytes = std::filesystem::file_size(*path_, ec);
  nlohmann::json j = plan::inspect_json(plan(), bytes, false);
  if (verified_) j["verified"] = {{"weights", verified_->first}, {"bytes", verified_->second}};
  return j;
}

nlohmann::json Session::stats() const { return stats_json(engine_->stats()); }

nlohmann::json stats_json(const runtime::EngineStats& st) {
  return {{"runs", st.runs},
          {"inference_passes", st.inference_passes},
          {"arena_plans", st.arena_plans},
          {"shape_buckets", st.shape_buckets},
          {"shape_buckets_evicted", st.shape_buckets_evicted},
          {"recordings_made", st.recordings_made},
          {"replays", st.replays},
          {"recordings_evicted", st.recordings_evicted},
          {"recordings_retired", st.recordings_retired},
          {"live_recordings", st.live_recordings},
          {"eager_runs", st.eager_runs},
          {"last_run_allocations", st.last_run_allocations},
          {"live_weight_versions", st.live_weight_versions},
          {"weight_allocations", st.weight_allocations},
          {"weight_bytes_uploaded", st.weight_bytes_uploaded}};
}

}  // namespace reforge::session
