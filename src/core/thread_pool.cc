#include "core/thread_pool.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define REFORGE_PAUSE() _mm_pause()
#else
#define REFORGE_PAUSE() std::this_thread::yield()
#endif

namespace reforge {

namespace {

// How long a worker looks for the next loop before it sleeps, and how long the caller spins for
// claimed tasks to finish before it sleeps.
constexpr auto kWorkerSpin = std::chrono::microseconds(50);
constexpr auto kCallerSpin = std::chrono::microseconds(20);
// Units a loop is published as (16 bits of the state word); more tasks are grouped into ranges.
constexpr int64_t kMaxUnits = 0xffff;

thread_local bool t_in_task = false;

// The published loop is one 64-bit word: epoch (32 bits) | units (16) | next unclaimed unit (16).
// A unit is claimed by a compare-and-swap of the whole word, so a thread that read the word of an
// earlier loop claims nothing of a later one.
constexpr uint64_t word_of(uint32_t epoch, uint64_t units, uint64_t next) {
  return (uint64_t{epoch} << 32) | (units << 16) | next;
}
constexpr uint32_t epoch_of(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
constexpr uint64_t units_of(uint64_t w) { return (w >> 16) & 0xffff; }
constexpr uint64_t next_of(uint64_t w) { return w & 0xffff; }

class Pool {
 public:
  static Pool& instance() {
    static Pool* pool = new Pool;  // never destroyed: workers may sleep in it at exit
    return *pool;
  }

  void run(int64_t tasks, int threads, detail::TaskFn fn, const void* context) {
    std::unique_lock<std::mutex> serving(serving_, std::try_to_lock);
    if (t_in_task || !serving.owns_lock()) {
      for (int64_t t = 0; t < tasks; ++t) fn(context, t);
      return;
    }
    grow(threads - 1);
    fn_ = fn;
    context_ = context;
    tasks_ = tasks;
    units_ = tasks < kMaxUnits ? tasks : kMaxUnits;
    error_ = nullptr;
    finished_.store(0);
    participants_.store(threads - 1);
    const uint32_t epoch = ++epoch_;
    word_.store(word_of(epoch, static_cast<uint64_t>(units_), 0));
    if (sleepers_.load() > 0) {
      signal_.fetch_add(1);
      signal_.notify_all();
    }
    claim(epoch);
    wait_finished();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Runs unit `u` of the current loop: a consecutive range of its tasks.
  void run_unit(uint64_t u) {
    const int64_t per = tasks_ / units_, extra = tasks_ % units_, i = static_cast<int64_t>(u);
    const int64_t begin = i * per + (i < extra ? i : extra), end = begin + per + (i < extra ? 1 : 0);
    t_in_task = true;
    try {
      for (int64_t t = begin; t < end; ++t) fn_(context_, t);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    t_in_task = false;
  }

  // Claims and runs units of loop `epoch` until none is left; returns how many it ran.
  int claim(uint32_t epoch) {
    int ran = 0;
    uint64_t w = word_.load();
    while (epoch_of(w) == epoch && next_of(w) < units_of(w)) {
      if (!word_.compare_exchange_weak(w, w + 1)) continue;  // w reloaded
      ++ran;
      run_unit(next_of(w));
      const uint32_t done = finished_.fetch_add(1) + 1;
      if (done == units_of(w) && caller_waiting_.load()) finished_.notify_all();
      w = word_.load();
    }
    return ran;
  }

  void wait_finished() {
    const auto units = static_cast<uint32_t>(units_);
    const auto until = std::chrono::steady_clock::now() + kCallerSpin;
    while (finished_.load() != units) {
      if (std::chrono::steady_clock::now() < until) {
        REFORGE_PAUSE();
        continue;
      }
      caller_waiting_.store(true);
      for (uint32_t f = finished_.load(); f != units; f = finished_.load()) finished_.wait(f);
      caller_waiting_.store(false);
    }
  }

  void grow(int workers) {
    while (static_cast<int>(workers_.size()) < workers && workers_.size() < 255) {
      const int index = static_cast<int>(workers_.size());
      workers_.emplace_back([this, index] { work(index); });
      workers_.back().detach();
    }
  }

  void work(int index) {
    uint32_t seen = epoch_of(word_.load());
    bool worked = false;  // ran a task of the last loop it saw
    for (;;) {
      const uint64_t w = word_.load();
      if (epoch_of(w) != seen) {
        seen = epoch_of(w);
        worked = index < participants_.load() && claim(seen) > 0;
        continue;
      }
      // Look for the next loop a little while after doing work (a run's loops follow each other),
      // yielding the core to any other runnable thread meanwhile (another library's OpenMP team,
      // which may need this core for its own loop); a worker that woke to find nothing left sleeps
      // at once, so it never holds a core it was not needed on.
      bool changed = false;
      if (worked) {
        const auto until = std::chrono::steady_clock::now() + kWorkerSpin;
        while (!changed && std::chrono::steady_clock::now() < until) {
          for (int i = 0; i < 16 && !changed; ++i) {
            REFORGE_PAUSE();
            changed = epoch_of(word_.load()) != seen;
          }
          if (!changed) std::this_thread::yield();
        }
      }
      if (changed) continue;
      sleepers_.fetch_add(1);
      const uint32_t s = signal_.load();
      if (epoch_of(word_.load()) == seen) signal_.wait(s);
      sleepers_.fetch_sub(1);
    }
  }

  std::mutex serving_;  // held by the caller whose loop the pool runs
  std::vector<std::thread> workers_;
  // The current loop (written by its caller before the word is published).
  detail::TaskFn fn_ = nullptr;
  const void* context_ = nullptr;
  int64_t tasks_ = 0, units_ = 0;
  uint32_t epoch_ = 0;
  std::atomic<uint64_t> word_{0};
  std::atomic<int> participants_{0};  // workers with an index below it take part
  std::atomic<uint32_t> finished_{0};
  std::atomic<bool> caller_waiting_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  // Sleeping workers wait on signal_, which a caller bumps when it publishes a loop.
  std::atomic<int> sleepers_{0};
  std::atomic<uint32_t> signal_{0};
};

}  // namespace

namespace detail {
void run_tasks(int64_t tasks, int threads, TaskFn fn, const void* context) {
  Pool::instance().run(tasks, threads, fn, context);
}
}  // namespace detail

}  // namespace reforge
