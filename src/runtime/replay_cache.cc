#include "runtime/replay_cache.h"

namespace reforge::runtime {

std::shared_ptr<Recording> ReplayCache::find_or_add(const std::string& signature, uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  Key key{signature, generation};
  if (auto it = entries_.find(key); it != entries_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.order);
    return it->second.recording;
  }
  if (entries_.size() >= capacity_ && !evict_one()) return nullptr;
  lru_.push_front(key);
  Slot& s = entries_[key];
  s.recording = std::make_shared<Recording>();
  s.order = lru_.begin();
  return s.recording;
}

bool ReplayCache::evict_one() {
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
    auto e = entries_.find(*it);
    Recording& r = *e->second.recording;
    // An entry a run holds is in use: the run would record into or replay a dropped entry.
    std::unique_lock<std::mutex> busy(r.busy, std::try_to_lock);
    if (!busy.owns_lock() || e->second.recording.use_count() > 1) continue;
    if (r.work) {
      ++evicted;
      --live;
    }
    busy.unlock();
    lru_.erase(std::next(it).base());
    entries_.erase(e);
    return true;
  }
  return false;
}

void ReplayCache::drop_generation(uint64_t g) {
  drop_if([g](const Key& k) { return k.second == g; });
}

void ReplayCache::drop_containing(const std::string& part) {
  drop_if([&part](const Key& k) { return k.first.find(part) != std::string::npos; });
}

void ReplayCache::drop_if(const std::function<bool(const Key&)>& drop) {
  std::vector<std::shared_ptr<Recording>> dropped;  // released after the lock
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (!drop(it->first)) {
      ++it;
      continue;
    }
    // No run holds the version any more, so none holds its entries: nothing else reads `work`.
    if (it->second.recording->work) {
      ++retired;
      --live;
    }
    dropped.push_back(std::move(it->second.recording));
    lru_.erase(it->second.order);
    it = entries_.erase(it);
  }
}

void ReplayCache::note_failure(const std::string& error) {
  ++failed;
  std::lock_guard<std::mutex> lock(mu_);
  last_failure_ = error;
}

std::string ReplayCache::last_failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_failure_;
}

}  // namespace reforge::runtime
