// A test hook of the extension, not part of reforge's API: it lets python/tests/test_threads.py
// prove that Plan.run releases the GIL while the engine runs, without depending on how threads
// are scheduled.
//
// Armed (_reforge._test_park_next_run()), the next run() to reach the section that runs the
// engine parks there, without the GIL, until _reforge._test_unpark(). Another thread learns that
// it parked from _reforge._test_wait_parked(), which waits without the GIL; that thread then
// executes Python while the run is provably inside that section, since the run cannot leave it
// before the thread unparks it. A run that reaches the point holding the GIL does not park (it
// would deadlock the test): _test_wait_parked() returns False, so a binding that stopped releasing
// the GIL fails the test instead of hanging it. _test_unpark() with no run parked disarms the gate
// (a test's cleanup). Unarmed, a run pays one relaxed atomic load.
#pragma once

#include <nanobind/nanobind.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "core/error.h"

namespace reforge::python {

class RunGate {
 public:
  static RunGate& instance() {
    static RunGate gate;
    return gate;
  }

  // Called by run() inside the section that runs the engine, where it holds no GIL.
  void pass() {
    if (!armed_.load(std::memory_order_relaxed)) return;
    std::unique_lock<std::mutex> lock(mutex_);
    if (state_ != State::Armed) return;  // another run took it
    armed_.store(false, std::memory_order_relaxed);
    if (PyGILState_Check()) {
      state_ = State::HeldGil;
      changed_.notify_all();
      return;
    }
    state_ = State::Parked;
    changed_.notify_all();
    changed_.wait(lock, [&] { return state_ == State::Open; });
    state_ = State::Idle;
  }

  void arm() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (state_ != State::Idle) fail("_test_park_next_run: the run gate is already in use");
    state_ = State::Armed;
    armed_.store(true, std::memory_order_relaxed);
  }

  // Waits (without the GIL) until an armed gate is passed or disarmed; true when a run parked
  // without the GIL, false when it arrived holding the GIL or the gate was disarmed.
  bool wait_parked() {
    nanobind::gil_scoped_release release;
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return state_ != State::Armed; });
    if (state_ == State::HeldGil) state_ = State::Idle;
    return state_ == State::Parked;
  }

  // Lets the parked run go on; with none parked, disarms the gate.
  void unpark() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (state_ == State::Parked)
      state_ = State::Open;
    else if (state_ != State::Open)
      state_ = State::Idle, armed_.store(false, std::memory_order_relaxed);
    changed_.notify_all();
  }

  static void register_functions(nanobind::module_& m) {
    m.def(
        "_test_park_next_run", [] { instance().arm(); }, "Test hook: the next run() parks without the GIL.");
    m.def(
        "_test_wait_parked", [] { return instance().wait_parked(); },
        "Test hook: waits until a run parked (True) or arrived holding the GIL (False).");
    m.def(
        "_test_unpark", [] { instance().unpark(); }, "Test hook: lets the parked run go on, or disarms.");
  }

 private:
  enum class State { Idle, Armed, Parked, HeldGil, Open };
  std::mutex mutex_;
  std::condition_variable changed_;
  State state_ = State::Idle;
  std::atomic<bool> armed_{false};
};

}  // namespace reforge::python
