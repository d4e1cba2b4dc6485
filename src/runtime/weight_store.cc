#include "runtime/weight_store.h"

#include <algorithm>
#include <set>

namespace reforge::runtime {

namespace {

// A process-wide counter: every version gets a generation no other version has had.
uint64_t next_generation() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

}  // namespace

WeightStore::WeightStore(const Schedule& schedule, std::vector<Tensor> initial, RetireFn on_retire)
    : schedule_(schedule), on_retire_(std::move(on_retire)) {
  Engine::Weights w;
  w.values = std::move(initial);
  w.prepared.resize(schedule_.steps.size());
  w.generation = next_generation();
  prepare(w.values, schedule_.preparing_steps, w.prepared);
  current_ = make_version(std::move(w));
}

std::shared_ptr<Engine::Weights> WeightStore::make_version(Engine::Weights w) const {
  // Counted while alive: the deleter holds the counter, which may outlive the store.
  auto live = live_;
  ++*live;
  return std::shared_ptr<Engine::Weights>(new Engine::Weights(std::move(w)),
                                          [live, retire = on_retire_](Engine::Weights* p) {
                                            const uint64_t g = p->generation;
                                            delete p;
                                            --*live;
                                            if (retire) retire(g);
                                          });
}

void WeightStore::prepare(std::vector<Tensor>& values, const std::vector<size_t>& which,
                          std::vector<std::shared_ptr<const void>>& prepared) const {
  // One upload per weight memory, reserved for the constants its steps read.
  std::map<backends::WeightMemory*, size_t> reserve;
  for (size_t si : which) {
    const Step& st = schedule_.steps[si];
    if (!st.weight_memory) continue;
    size_t& r = reserve[st.weight_memory];
    for (int v : st.inputs)
      if (v >= 0 && schedule_.is_const[static_cast<size_t>(v)] && values[static_cast<size_t>(v)].defined())
        r += st.weight_memory->weight_bytes(values[static_cast<size_t>(v)].nbytes());
  }
  std::map<backends::WeightMemory*, std::unique_ptr<backends::WeightUpload>> uploads;
  ops::HostPrepareContext host;
  for (size_t si : which) {
    const Step& st = schedule_.steps[si];
    const ir::Node& node = schedule_.graph.nodes[st.node_index];
    std::vector<const Tensor*> cins(st.inputs.size(), nullptr);
    bool complete = true;
    for (size_t i = 0; i < st.inputs.size(); ++i) {
      int v = st.inputs[i];
      if (v < 0 || !schedule_.is_const[static_cast<size_t>(v)]) continue;
      if (!values[static_cast<size_t>(v)].defined()) complete = false;  // stripped: prepared at refit
      cins[i] = &values[static_cast<size_t>(v)];
    }
    prepared[si] = nullptr;
    if (!complete) continue;
    ops::PrepareContext* context = &host;
    if (st.weight_memory) {
      auto& up = uploads[st.weight_memory];
      if (!up) up = st.weight_memory->begin(reserve[st.weight_memory]);
      context = up.get();
    }
    try {
      prepared[si] = (*st.prepare)(node, cins, *context);
    } catch (Error& e) {
      throw e.with_context("while preparing the weights of " + node.label());
    } catch (const std::bad_alloc&) {
      fail("out of memory while preparing the weights of ", node.label());
    }
  }
  for (auto& [memory, up] : uploads) {
    up->finish();
    weight_allocations_ += up->allocations();
    weight_bytes_uploaded_ += static_cast<int64_t>(up->bytes());
  }
  // A weight read only by its upload is kept as its device copy (the ToDevice step's prepared
  // tensor), not on the host.
  for (size_t si : which) {
    const Step& st = schedule_.steps[si];
    if (st.inputs.size() != 1 || st.inputs[0] < 0 || !prepared[si]) continue;
    const auto v = static_cast<size_t>(st.inputs[0]);
    if (schedule_.upload_step[v] == static_cast<int>(si))
      values[v] = *std::static_pointer_cast<const Tensor>(prepared[si]);
  }
}

std::shared_ptr<const Engine::Weights> WeightStore::current() const {
  std::lock_guard<std::mutex> lock(current_mutex_);
  return current_;
}

std::shared_ptr<const Engine::Weights> WeightStore::derive(const Engine::Weights& base,
                                                           const std::map<std::string, Tensor>& values) const {
  const Schedule& s = schedule_;
  REFORGE_CHECK(base.values.size() == s.num_slots, "derive_weights: not a weight set of this engine");
  Engine::Weights next = base;
  next.generation = next_generation();
  std::vector<bool> changed(s.num_slots, false);
  for (const auto& [name, t] : values) {
    auto it = s.const_slot.find(name);
    if (it == s.const_slot.end()) fail("'", name, "' is not an engine weight");
    auto d = s.const_desc.find(name);
    if (d != s.const_desc.end() && (d->second.first != t.dtype() || d->second.second != t.shape()))
      fail("engine weight '", name, "' is ", dtype_name(d->second.first), shape_str(d->second.second),
           ", the replacement is ", t.describe());
    next.values[static_cast<size_t>(it->second)] = t;
    changed[static_cast<size_t>(it->second)] = true;
  }
  // Re-prepare (re-pack, upload) every step that reads a replaced weight, before anything is
  // visible. Unchanged device weights stay where they are, shared with the base, unless they are
  // spread over more than one device allocation: then they are copied (on the device) into the
  // new version's allocation with the replaced ones, so that a version's device weights are in at
  // most two allocations, and older allocations go once no version holds them.
  std::set<const void*> kept_blocks;
  bool any_upload = false;
  std::vector<bool> upload(s.steps.size(), false);
  for (size_t si : s.upload_steps) {
    upload[si] = true;
    if (changed[static_cast<size_t>(s.steps[si].inputs[0])])
      any_upload = true;
    else if (next.prepared[si])
      kept_blocks.insert(std::static_pointer_cast<const Tensor>(next.prepared[si])->storage().get());
  }
  const bool repack = any_upload && kept_blocks.size() > 1;
  std::vector<size_t> redo;
  for (size_t si : s.preparing_steps) {
    if (repack && upload[si]) {
      redo.push_back(si);
      continue;
    }
    for (int v : s.steps[si].inputs)
      if (v >= 0 && changed[static_cast<size_t>(v)]) {
        redo.push_back(si);
        break;
      }
  }
  prepare(next.values, redo, next.prepared);
  return make_version(std::move(next));
}

void WeightStore::install(std::shared_ptr<const Engine::Weights> weights) {
  REFORGE_CHECK(weights && weights->values.size() == schedule_.num_slots,
                "install_weights: not a weight set of this engine");
  std::shared_ptr<const Engine::Weights> old;
  {
    std::lock_guard<std::mutex> lock(current_mutex_);
    old = std::move(current_);
    current_ = std::move(weights);
  }
  // `old` is released here, outside the lock (it may be the last holder of a large version).
}

void WeightStore::replace(const std::map<std::string, Tensor>& values) {
  // Writers queue on writer_mutex_; runs take current_mutex_ only to copy the pointer, so they
  // are not held up while a replacement re-packs.
  std::lock_guard<std::mutex> writer(writer_mutex_);
  install(derive(*current(), values));
}

std::vector<std::string> WeightStore::missing() const {
  const auto w = current();
  std::vector<std::string> out;
  for (const auto& [name, slot] : schedule_.const_slot)
    if (!w->values[static_cast<size_t>(slot)].defined()) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

Tensor WeightStore::value(const Engine::Weights& weights, const std::string& name) const {
  auto it = schedule_.const_slot.find(name);
  if (it == schedule_.const_slot.end()) return Tensor();
  return weights.values[static_cast<size_t>(it->second)];
}

}  // namespace reforge::runtime
