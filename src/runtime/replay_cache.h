// ReplayCache: recordings of device work (backends/device_replay.h), one per input signature and
// weight version, evicted least-recently-used.
//
// A recording replays exactly the run it recorded: the kernels it launched read the weight
// version's device memory and the recording's own buffers, with the launch sizes of one input
// signature. So it is keyed by (signature, weight generation): a refit's new version gets its own
// recordings, and an engine switching between live versions keeps the recordings of each. A key
// is recorded on its second run (the first, eager, tells the result shapes). When the cache is
// full, the least-recently-used entry not in use by a run is dropped (never all at once); a run
// that holds an entry keeps it alive until it ends.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "runtime/engine.h"

namespace reforge::runtime {

// One (signature, weight version)'s recorded run.
struct Recording {
  std::mutex busy;                                   // held by the run that records or replays it
  int eager_runs = 0;                                // runs of this key before a recording
  int failures = 0;                                  // failed recordings; after two the key stays eager
  std::shared_ptr<const void> work;                  // the recording, or null
  std::vector<Tensor> staging;                       // per graph input: the device buffer its ToDevice step hands out
  std::vector<Tensor> results;                       // per graph output: the device buffer the recording copies it into
  std::vector<std::pair<DType, Shape>> result_desc;  // per graph output, as the last eager run made it
  std::shared_ptr<const void> keep;                  // the shape memo whose device values the recording reads

  // Drops the recording and its buffers.
  void discard() {
    work.reset();
    staging.clear();
    results.clear();
    keep.reset();
  }
};

class ReplayCache {
 public:
  explicit ReplayCache(size_t capacity) : capacity_(capacity) {}

  // The entry of (signature, generation), made (and the least-recently-used idle entry evicted
  // when full) on first use; marks it most recently used. Null when every entry is in use.
  std::shared_ptr<Recording> find_or_add(const std::string& signature, uint64_t generation);

  // Drops every entry of weight generation `g` (a version no run can use any more: it is gone).
  void drop_generation(uint64_t g);
  // Drops every entry whose signature holds `part` (a State's recordings, runtime/state.h: their
  // buffers are gone or re-laid; no run holds them).
  void drop_containing(const std::string& part);

  // Counters, over the engine's life.
  // live: entries holding a recording now (the engine counts one up when it records; eviction
  // and retirement count it down). evicted: recordings dropped for room; retired: recordings
  // dropped because their weight version was gone.
  std::atomic<int64_t> recorded{0}, replays{0}, eager_runs{0}, failed{0}, evicted{0}, retired{0}, live{0};
  void note_failure(const std::string& error);
  std::string last_failure() const;

 private:
  using Key = std::pair<std::string, uint64_t>;
  struct Slot {
    std::shared_ptr<Recording> recording;
    std::list<Key>::iterator order;  // position in lru_
  };
  bool evict_one();  // under mu_
  // Drops the entries whose key `drop` picks (no run holds them).
  void drop_if(const std::function<bool(const Key&)>& drop);

  const size_t capacity_;
  mutable std::mutex mu_;
  std::map<Key, Slot> entries_;
  std::list<Key> lru_;  // most recently used first
  std::string last_failure_;
};

}  // namespace reforge::runtime
