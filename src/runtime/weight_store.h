// WeightStore: an engine's weight versions.
//
// A version (Engine::Weights) is immutable: the engine weights by slot and what each step's
// prepare step made of them (packed layouts, device uploads), with a generation number no other
// version in the process has had. A version's device weights are uploaded into one allocation of
// the backend's weight memory (backends/capabilities.h: asynchronous copies, one wait); a weight
// that only its upload reads is held as that device copy, with no host copy (unless
// EngineOptions::keep_host_weights). A new version is derived from a base with some weights replaced:
// unchanged weights and their prepared forms are shared with the base (copy on write), and only
// the steps that read a replaced weight are prepared again, before anything is visible, so a
// failure leaves every version as it was. One version is current; runs take a version at their
// start and hold it (a shared_ptr) to their end, so a version lives exactly as long as the store
// or some run uses it, and a switch of the current version happens at run boundaries only.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/schedule.h"

namespace reforge::runtime {

struct Engine::Weights {
  uint64_t generation = 0;                            // new for every derived version
  std::vector<Tensor> values;                         // slot -> value (undefined: computed or missing)
  std::vector<std::shared_ptr<const void>> prepared;  // step -> OpDef::prepare result
};

class WeightStore {
 public:
  // Called with a version's generation when the version is gone (from the thread that released
  // it last, which may be after the store itself is gone).
  using RetireFn = std::function<void(uint64_t generation)>;
  // The first version: `initial` per slot (undefined where stripped), prepared.
  WeightStore(const Schedule& schedule, std::vector<Tensor> initial, RetireFn on_retire = {});

  std::shared_ptr<const Engine::Weights> current() const;
  // A new version from `base` with `values` replaced (each a weight of the engine with its dtype
  // and shape, checked first) and its steps prepared again; changes nothing.
  std::shared_ptr<const Engine::Weights> derive(const Engine::Weights& base,
                                                const std::map<std::string, Tensor>& values) const;
  // Makes `weights` (a version of this engine) current.
  void install(std::shared_ptr<const Engine::Weights> weights);
  // derive from the current version and install, serialized with other replacements.
  void replace(const std::map<std::string, Tensor>& values);

  // Names of weights with no value in the current version, sorted.
  std::vector<std::string> missing() const;
  // Weight `name` in `weights`; undefined when it is not a weight or has no value.
  Tensor value(const Engine::Weights& weights, const std::string& name) const;
  // Versions alive now (current, held by runs, or kept by a caller).
  int64_t live_versions() const { return live_->load(); }
  // Device allocations made for weights, and the bytes uploaded, over the store's life.
  int64_t weight_allocations() const { return weight_allocations_.load(); }
  int64_t weight_bytes_uploaded() const { return weight_bytes_uploaded_.load(); }

 private:
  std::shared_ptr<Engine::Weights> make_version(Engine::Weights w) const;
  // Runs the prepare step of every step in `which` against `values`: host steps with a host
  // context, the steps of a backend with weight memory with one upload per such memory (one
  // allocation, waited for once at the end). A weight whose one reader is its upload
  // (Schedule::upload_step) is then replaced in `values` by its device copy.
  void prepare(std::vector<Tensor>& values, const std::vector<size_t>& which,
               std::vector<std::shared_ptr<const void>>& prepared) const;

  const Schedule& schedule_;
  RetireFn on_retire_;
  std::shared_ptr<std::atomic<int64_t>> live_ = std::make_shared<std::atomic<int64_t>>(0);
  mutable std::mutex current_mutex_;  // guards current_ (the pointer only: runs copy it)
  std::shared_ptr<const Engine::Weights> current_;
  std::mutex writer_mutex_;  // serializes replace()
  mutable std::atomic<int64_t> weight_allocations_{0}, weight_bytes_uploaded_{0};
};

}  // namespace reforge::runtime
