#include "runtime/plan_engine.h"

#include "runtime/weight_store.h"
#include "transforms/recipe.h"

namespace reforge::runtime {

namespace {
ir::Graph graph_with_weights(const plan::Plan& p) {
  ir::Graph g = p.graph;
  g.initializers.clear();
  for (const auto& w : p.weights) g.initializers[w.name] = w.data;
  return g;
}
}  // namespace

PlanEngine::PlanEngine(plan::Plan plan, EngineOptions options)
    : plan_(std::move(plan)), engine_(LoweredGraph(graph_with_weights(plan_), plan::node_backends(plan_)), options) {
  auto st = std::make_shared<State>();
  st->weights = engine_.weights();
  st->sources.resize(plan_.sources.size());
  identity_weight_.resize(plan_.sources.size());
  for (const auto& s : plan_.sources) st->hashes.push_back(s.hash);
  for (size_t i = 0; i < plan_.weights.size(); ++i) {
    plan::WeightEntry& w = plan_.weights[i];
    weight_index_[w.name] = i;
    if (w.kind == plan::WeightKind::Derived && w.recipe.steps.empty() &&
        w.recipe.result.kind == plan::Operand::Kind::Source) {
      identity_weight_[w.recipe.result.index] = w.name;
      if (w.data.defined()) st->hashes[w.recipe.result.index] = w.hash;  // the weight's bytes are the source's
    }
    // The engine owns the data now; the plan copy keeps metadata only.
    w.data = Tensor();
  }
  st->missing = missing_in(*st);
  state_ = std::move(st);
}

std::shared_ptr<const PlanEngine::State> PlanEngine::state() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return state_;
}

std::vector<std::string> PlanEngine::missing_in(const State& st) const {
  std::vector<bool> needed(plan_.sources.size(), false);
  for (const auto& w : plan_.weights) {
    if (w.kind != plan::WeightKind::Derived || engine_.has_weight_value(*st.weights, w.name)) continue;
    for (uint32_t s : w.sources) needed[s] = true;
  }
  std::vector<std::string> out;
  for (size_t s = 0; s < plan_.sources.size(); ++s)
    if (needed[s] && !knows_source(st, static_cast<uint32_t>(s))) out.push_back(plan_.sources[s].key);
  return out;
}

bool PlanEngine::knows_source(const State& st, uint32_t id) const {
  if (st.sources[id].defined()) return true;
  const std::string& w = identity_weight_[id];
  return !w.empty() && engine_.has_weight_value(*st.weights, w);
}

std::vector<std::string> PlanEngine::missing_sources() const { return state()->missing; }

uint64_t PlanEngine::Version::generation() const { return state_ ? state_->weights->generation : 0; }

std::vector<Tensor> PlanEngine::run(const std::map<std::string, Tensor>& inputs, const RunOptions& options) const {
  const std::shared_ptr<const State> st = state();  // the one weight set this run uses
  return run_state(inputs, *st, options);
}

std::vector<Tensor> PlanEngine::run(const std::map<std::string, Tensor>& inputs, const Version& version,
                                    const RunOptions& options) const {
  REFORGE_CHECK(version.valid(), "run: the weight version is empty");
  return run_state(inputs, *version.state_, options);
}

std::vector<Tensor> PlanEngine::run_state(const std::map<std::string, Tensor>& inputs, const State& st,
                                          const RunOptions& options) const {
  const auto& missing = st.missing;
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 10; ++i) list += "\n  " + missing[i];
    if (missing.size() > 10) list += "\n  ...";
    fail("the engine is stripped and ", missing.size(), " source(s) have no value yet; refit them first:", list);
  }
  return engine_.run(inputs, *st.weights, options);
}

Tensor PlanEngine::weight(const std::string& name) const { return engine_.constant(*state()->weights, name); }

bool PlanEngine::has_weight(const std::string& name) const { return engine_.has_weight_value(*state()->weights, name); }

Memory PlanEngine::weight_location(const std::string& name) const {
  return engine_.constant_location(*state()->weights, name);
}

Tensor PlanEngine::device_weight(const std::string& name) const {
  return engine_.device_constant(*state()->weights, name);
}

Tensor PlanEngine::source_value(uint32_t id) const {
  const auto st = state();
  REFORGE_CHECK(id < st->sources.size(), "no source with id ", id);
  if (st->sources[id].defined() || identity_weight_[id].empty()) return st->sources[id];
  return engine_.constant(*st->weights, identity_weight_[id]);
}

uint64_t PlanEngine::source_hash(uint32_t id) const {
  const auto st = state();
  REFORGE_CHECK(id < st->hashes.size(), "no source with id ", id);
  return st->hashes[id];
}

void PlanEngine::validate(const WeightUpdate& update) const {
  for (const auto& [name, t] : update.weights()) {
    auto it = weight_index_.find(name);
    if (it == weight_index_.end()) fail("weight update: '", name, "' is not an engine weight of this plan");
    const plan::WeightEntry& w = plan_.weights[it->second];
    if (w.kind != plan::WeightKind::Derived)
      fail("weight update: engine weight '", w.name, "' is ",
           w.kind == plan::WeightKind::Literal ? "a literal" : "baked", " in this plan and never changes");
    if (!t.defined()) fail("weight update: engine weight '", w.name, "' is given no value");
    if (t.dtype() != w.dtype || t.shape() != w.shape)
      fail("weight update: engine weight '", w.name, "' is given ", t.describe(), ", the plan expects ",
           dtype_name(w.dtype), shape_str(w.shape));
  }
  for (const auto& [id, rec] : update.sources()) {
    if (id >= plan_.sources.size()) fail("weight update: no source with id ", id);
    const plan::Source& s = plan_.sources[id];
    if (!s.refittable) fail("weight update: source '", s.key, "' is baked into this plan");
    if (rec.value.defined() && (rec.value.dtype() != s.dtype || rec.value.shape() != s.shape))
      fail("weight update: source '", s.key, "' is given ", rec.value.describe(), ", the plan expects ",
           dtype_name(s.dtype), shape_str(s.shape));
  }
}

PlanEngine::Version PlanEngine::derive_version(const Version& base, const WeightUpdate& update) const {
  REFORGE_CHECK(base.valid(), "derive_version: the base version is empty");
  validate(update);
  const State& from = *base.state_;
  auto next = std::make_shared<State>(from);
  // The one step that can still fail (preparing the new weights for the kernels).
  if (!update.weights().empty()) next->weights = engine_.derive_weights(*from.weights, update.weights());
  for (const auto& [id, rec] : update.sources()) {
    // An identity weight set by the update holds the source's bytes: no second copy.
    const bool held = !identity_weight_[id].empty() && update.weight(identity_weight_[id]);
    next->sources[id] = held ? Tensor() : rec.value;
    next->hashes[id] = rec.hash;
  }
  next->missing = missing_in(*next);
  return Version(std::move(next));
}

void PlanEngine::install_version(const Version& version) {
  REFORGE_CHECK(version.valid() && version.state_->sources.size() == plan_.sources.size(),
                "install_version: not a version of this engine");
  std::shared_ptr<const State> published = version.state_;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    state_.swap(published);
  }
  // The engine's own current set follows, so that it holds no superseded weights alive.
  engine_.install_weights(version.state_->weights);
  // `published` now holds the old State: released here, outside the lock (runs may still hold it).
}

void PlanEngine::commit(const WeightUpdate& update) {
  std::lock_guard<std::mutex> commit_lock(commit_mutex_);
  // Nothing is visible before install_version publishes the new State.
  install_version(derive_version(current_version(), update));
}

plan::Plan PlanEngine::current_plan(bool strip) const {
  const auto st = state();
  plan::Plan p = plan_;
  for (auto& w : p.weights) {
    w.data = engine_.constant(*st->weights, w.name);
    if (w.data.defined()) w.hash = transforms::hash_tensor(w.data);
    if (strip && w.kind == plan::WeightKind::Derived) w.data = Tensor();
  }
  p.stripped = strip;
  return p;
}

}  // namespace reforge::runtime
