#include "core/timing.h"
#include "refit/refitter.h"

#include <chrono>
#include <cmath>
#include <set>

#include "core/dispatch.h"
#include "refit/recipe.h"

namespace reforge::refit {

namespace {

bool all_finite(const Tensor& t) {
  if (!is_float(t.dtype())) return true;
  return dispatch_float(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (!std::isfinite(static_cast<double>(to_compute(p[i])))) return false;
    return true;
  });
}
}  // namespace

Refitter::Refitter(runtime::PlanEngine& engine) : engine_(engine) {}

std::vector<SourceDesc> Refitter::all_sources() const {
  const plan::Plan& p = engine_.plan_;
  auto missing_keys = missing();
  std::set<std::string> miss(missing_keys.begin(), missing_keys.end());
  std::vector<SourceDesc> out;
  for (size_t i = 0; i < p.sources.size(); ++i) {
    const auto& s = p.sources[i];
    SourceDesc d;
    d.id = static_cast<uint32_t>(i);
    d.key = s.key;
    d.names = s.names;
    d.consumer = s.consumer;
    d.op_type = s.op_type;
    d.dtype = s.dtype;
    d.shape = s.shape;
    d.refittable = s.refittable;
    d.has_value = s.refittable && !miss.count(s.key);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<std::string> Refitter::missing() const {
  const plan::Plan& p = engine_.plan_;
  std::vector<bool> needed(p.sources.size(), false);
  for (const auto& w : p.weights) {
    if (w.kind != plan::WeightKind::Derived) continue;
    bool absent = !engine_.engine_.constant(w.name).defined();
    bool touched = false;
    for (uint32_t s : w.sources) touched |= pending_.count(s) != 0;
    // A stripped weight needs all its sources; a present weight whose recipe is being replayed
    // because one of its sources changed needs the others too.
    if (absent || touched)
      for (uint32_t s : w.sources) needed[s] = true;
  }
  std::vector<std::string> out;
  for (size_t s = 0; s < p.sources.size(); ++s)
    if (needed[s] && !pending_.count(static_cast<uint32_t>(s)) && !engine_.known_sources_[s].defined())
      out.push_back(p.sources[s].key);
  return out;
}

void Refitter::set_source(uint32_t id, const Tensor& value) {
  const plan::Plan& p = engine_.plan_;
  REFORGE_CHECK(id < p.sources.size(), "refit: no source with id ", id);
  const plan::Source& s = p.sources[id];
  if (!s.refittable)
    fail("refit: source '", s.key, "' is baked into this plan (", plan::build_mode_name(p.mode), " build) and cannot be refit");
  if (value.dtype() != s.dtype || value.shape() != s.shape)
    fail("refit: source '", s.key, "' has ", value.describe(), ", the plan expects ", dtype_name(s.dtype), shape_str(s.shape));
  pending_[id] = value;
}

void Refitter::set(const std::string& name, const Tensor& value) {
  const plan::Plan& p = engine_.plan_;
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < p.sources.size(); ++i) {
    const auto& s = p.sources[i];
    bool match = s.key == name;
    for (const auto& n : s.names) match |= n == name;
    if (match) ids.push_back(static_cast<uint32_t>(i));
  }
  if (ids.empty()) fail("refit: '", name, "' is not a source of this plan");
  // Validate every use before recording any, so a failing set() changes nothing.
  std::map<uint32_t, Tensor> saved = pending_;
  try {
    for (uint32_t id : ids) set_source(id, value);
  } catch (...) {
    pending_ = std::move(saved);
    throw;
  }
}

CommitReport Refitter::commit(const CommitOptions& options) {
  const plan::Plan& p = engine_.plan_;
  CommitReport rep;
  auto t0 = std::chrono::steady_clock::now();
  auto miss = missing();
  if (!miss.empty()) {
    std::string list;
    for (size_t i = 0; i < miss.size() && i < 10; ++i) list += "\n  " + miss[i];
    if (miss.size() > 10) list += "\n  ...";
    fail("refit: ", miss.size(), " source(s) have no value:", list);
  }
  for (const auto& [id, t] : pending_) {
    const plan::Source& s = p.sources[id];
    if (p.mode == plan::BuildMode::RefitIdentical && hash_tensor(t) != s.hash)
      fail("refit: source '", s.key, "' differs from the weights this refit-identical plan was built with; "
           "refit-identical plans accept only the build-time weights (rebuild with --refit to change weights)");
    if (options.check_finite && !all_finite(t)) fail("refit: source '", s.key, "' contains NaN or Inf");
    rep.bytes_in += t.nbytes();
  }
  rep.validate_ms = ms_since(t0);

  auto t1 = std::chrono::steady_clock::now();
  std::vector<Tensor> values = engine_.known_sources_;
  for (const auto& [id, t] : pending_) values[id] = t;
  std::map<std::string, Tensor> staged;
  for (const auto& w : p.weights) {
    if (w.kind != plan::WeightKind::Derived) continue;
    bool touched = !engine_.engine_.constant(w.name).defined();
    for (uint32_t s : w.sources) touched |= pending_.count(s) != 0;
    if (!touched) continue;
    Tensor t;
    try {
      t = replay_recipe(w.recipe, values, p.literals);
    } catch (Error& e) {
      throw e.with_context("while replaying the recipe of engine weight '" + w.name + "'");
    }
    if (t.dtype() != w.dtype || t.shape() != w.shape)
      fail("refit: engine weight '", w.name, "' came out ", t.describe(), ", the plan expects ", dtype_name(w.dtype), shape_str(w.shape));
    rep.bytes_out += t.nbytes();
    staged[w.name] = std::move(t);
  }
  rep.weights_replayed = staged.size();
  rep.replay_ms = ms_since(t1);

  auto t2 = std::chrono::steady_clock::now();
  engine_.engine_.replace_constants(staged);  // the one step that changes the engine
  // Remember sources that a later partial refit may need: identity weights alias the engine
  // weight; sources of multi-source recipes are kept.
  std::set<uint32_t> keep;
  for (const auto& w : p.weights)
    if (w.kind == plan::WeightKind::Derived && (w.sources.size() > 1 || w.recipe.steps.empty()))
      keep.insert(w.sources.begin(), w.sources.end());
  for (const auto& [id, t] : pending_) engine_.known_sources_[id] = keep.count(id) ? t : Tensor();
  rep.sources_set = pending_.size();
  pending_.clear();
  rep.commit_ms = ms_since(t2);
  return rep;
}

CommitReport Refitter::commit_rebuilt(const plan::Plan& fresh) {
  const plan::Plan& p = engine_.plan_;
  CommitReport rep;
  auto t0 = std::chrono::steady_clock::now();
  REFORGE_CHECK(fresh.weights.size() == p.weights.size() && fresh.sources.size() == p.sources.size(),
                "refit: the rebuilt plan does not match this engine's weight table");
  if (p.mode == plan::BuildMode::RefitIdentical)
    for (size_t i = 0; i < p.sources.size(); ++i)
      if (fresh.sources[i].hash != p.sources[i].hash)
        fail("refit: source '", p.sources[i].key, "' differs from the weights this refit-identical plan was built with");
  std::map<std::string, Tensor> staged;
  for (size_t i = 0; i < p.weights.size(); ++i) {
    const auto& w = p.weights[i];
    const auto& f = fresh.weights[i];
    if (w.kind != plan::WeightKind::Derived) continue;
    if (f.name != w.name || !f.data.defined() || f.data.dtype() != w.dtype || f.data.shape() != w.shape)
      fail("refit: engine weight '", w.name, "' of the rebuilt plan does not match");
    rep.bytes_out += f.data.nbytes();
    staged[w.name] = f.data;
  }
  rep.validate_ms = ms_since(t0);
  auto t2 = std::chrono::steady_clock::now();
  engine_.engine_.replace_constants(staged);
  for (size_t i = 0; i < p.weights.size(); ++i) {
    const auto& w = p.weights[i];
    if (w.kind == plan::WeightKind::Derived && w.recipe.steps.empty() && w.recipe.result.kind == plan::Operand::Kind::Source)
      engine_.known_sources_[w.recipe.result.index] = staged[w.name];
    else
      for (uint32_t s : w.sources) engine_.known_sources_[s] = Tensor();
  }
  pending_.clear();
  rep.weights_replayed = staged.size();
  rep.commit_ms = ms_since(t2);
  return rep;
}

}  // namespace reforge::refit
