#include "runtime/plan_engine.h"

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
    : plan_(std::move(plan)), engine_(graph_with_weights(plan_), options) {
  known_sources_.resize(plan_.sources.size());
  for (const auto& s : plan_.sources) source_hashes_.push_back(s.hash);
  for (size_t i = 0; i < plan_.weights.size(); ++i) {
    plan::WeightEntry& w = plan_.weights[i];
    weight_index_[w.name] = i;
    if (w.kind == plan::WeightKind::Derived && w.recipe.steps.empty() && w.data.defined() &&
        w.recipe.result.kind == plan::Operand::Kind::Source) {
      known_sources_[w.recipe.result.index] = w.data;
      source_hashes_[w.recipe.result.index] = w.hash;  // the weight's bytes are the source's
    }
    // The engine owns the data now; the plan copy keeps metadata only.
    w.data = Tensor();
  }
}

std::vector<std::string> PlanEngine::missing_sources() const {
  std::vector<bool> needed(plan_.sources.size(), false);
  for (size_t i = 0; i < plan_.weights.size(); ++i) {
    const auto& w = plan_.weights[i];
    if (w.kind != plan::WeightKind::Derived || engine_.constant(w.name).defined()) continue;
    for (uint32_t s : w.sources) needed[s] = true;
  }
  std::vector<std::string> out;
  for (size_t s = 0; s < plan_.sources.size(); ++s)
    if (needed[s] && !known_sources_[s].defined()) out.push_back(plan_.sources[s].key);
  return out;
}

std::vector<Tensor> PlanEngine::run(const std::map<std::string, Tensor>& inputs) const {
  auto missing = missing_sources();
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 10; ++i) list += "\n  " + missing[i];
    if (missing.size() > 10) list += "\n  ...";
    fail("the engine is stripped and ", missing.size(), " source(s) have no value yet; refit them first:", list);
  }
  return engine_.run(inputs);
}

const Tensor& PlanEngine::source_value(uint32_t id) const {
  REFORGE_CHECK(id < known_sources_.size(), "no source with id ", id);
  return known_sources_[id];
}

uint64_t PlanEngine::source_hash(uint32_t id) const {
  REFORGE_CHECK(id < source_hashes_.size(), "no source with id ", id);
  return source_hashes_[id];
}

void PlanEngine::validate(const WeightUpdate& update) const {
  for (const auto& [name, t] : update.weights()) {
    auto it = weight_index_.find(name);
    if (it == weight_index_.end()) fail("weight update: '", name, "' is not an engine weight of this plan");
    const plan::WeightEntry& w = plan_.weights[it->second];
    if (w.kind != plan::WeightKind::Derived)
      fail("weight update: engine weight '", w.name, "' is ", w.kind == plan::WeightKind::Literal ? "a literal" : "baked",
           " in this plan and never changes");
    if (!t.defined()) fail("weight update: engine weight '", w.name, "' is given no value");
    if (t.dtype() != w.dtype || t.shape() != w.shape)
      fail("weight update: engine weight '", w.name, "' is given ", t.describe(), ", the plan expects ", dtype_name(w.dtype),
           shape_str(w.shape));
  }
  for (const auto& [id, rec] : update.sources()) {
    if (id >= plan_.sources.size()) fail("weight update: no source with id ", id);
    const plan::Source& s = plan_.sources[id];
    if (!s.refittable) fail("weight update: source '", s.key, "' is baked into this plan");
    if (rec.value.defined() && (rec.value.dtype() != s.dtype || rec.value.shape() != s.shape))
      fail("weight update: source '", s.key, "' is given ", rec.value.describe(), ", the plan expects ", dtype_name(s.dtype),
           shape_str(s.shape));
  }
}

void PlanEngine::commit(const WeightUpdate& update) {
  validate(update);
  if (!update.weights().empty()) engine_.replace_constants(update.weights());  // the one step that can still fail
  for (const auto& [id, rec] : update.sources()) {
    known_sources_[id] = rec.value;
    source_hashes_[id] = rec.hash;
  }
}

plan::Plan PlanEngine::current_plan(bool strip) const {
  plan::Plan p = plan_;
  for (auto& w : p.weights) {
    w.data = engine_.constant(w.name);
    if (w.data.defined()) w.hash = transforms::hash_tensor(w.data);
    if (strip && w.kind == plan::WeightKind::Derived) w.data = Tensor();
  }
  p.stripped = strip;
  return p;
}

}  // namespace reforge::runtime
