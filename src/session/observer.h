// What a session (session/session.h) tells its caller as it works: the phases it goes through
// ("importing 'm.onnx'", "building 'm.onnx' bound to checkpoint 'a.safetensors'", "loading plan
// 'p.plan'", "refitting from 'b.onnx'", "writing 'out.plan'") and the library's progress steps
// within each (core/progress.h). The library prints nothing: the CLI shows the phases on stderr,
// the Python binding hands the steps to the caller's callback.
//
// Phases do not nest; each begins on the working thread and ends before the next begins, also
// when its work throws. A callback that throws stops the work with its error (a build makes no
// plan, a refit leaves the engine as it was).
#pragma once

#include <string>

#include "core/progress.h"

namespace reforge::session {

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void begin_phase(const std::string& what) {}
  virtual void end_phase() {}
  // A library step within the current phase.
  virtual void progress(const Progress& p) {}
};

// One phase of `observer` (none: nothing is told), from construction to destruction.
class PhaseScope {
 public:
  PhaseScope(Observer* observer, const std::string& what) : observer_(observer) {
    if (observer_) observer_->begin_phase(what);
  }
  ~PhaseScope() {
    if (observer_) observer_->end_phase();
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

  // The progress callback for the library's work in this phase; empty without an observer.
  ProgressCallback steps() const {
    if (!observer_) return {};
    Observer* o = observer_;
    return [o](const Progress& p) { o->progress(p); };
  }

 private:
  Observer* observer_;
};

}  // namespace reforge::session
