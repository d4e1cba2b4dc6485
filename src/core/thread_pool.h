// Parallel loops for kernels, made for machines that other work shares.
//
// A fork-join team (OpenMP's) splits a loop into one share per thread and waits at the end for
// every thread to arrive. When another process, or another library's thread team in the same
// process (PyTorch's, numpy's BLAS), holds a core, the thread that owns a share may not run for
// a scheduler time slice, and the whole loop waits for it: a 0.5 ms run becomes tens of
// milliseconds. Spinning teams also take cores from the work around them between loops.
//
// Here a loop is a number of tasks that threads claim one at a time. The calling thread claims
// tasks too, and it waits only for tasks another thread has claimed and is running: a worker that
// was not scheduled in time finds nothing left when it wakes, and nobody waited for it. Workers
// spin briefly after a loop (a run's loops follow each other within microseconds), then sleep.
// One pool serves the process. A loop started while the pool serves another caller, or from inside
// a task, runs its tasks on the calling thread alone.
//
// Task boundaries are the only synchronization: a task must not wait for another task.
//
// oneDNN and OpenBLAS keep their own OpenMP teams, which spin on the cores for a while after each
// call. Kernels that run between such calls (the Winograd convolution between oneDNN's) keep
// OpenMP, so that one team serves both; the pool serves the kernels of transformer models.
#pragma once

#include <cstdint>

namespace reforge {

namespace detail {
using TaskFn = void (*)(const void* context, int64_t task);
void run_tasks(int64_t tasks, int threads, TaskFn fn, const void* context);
}  // namespace detail

// Calls fn(t) once for every t in [0, tasks), on up to `threads` threads (the caller included;
// threads <= 1, or one task, runs inline). Returns when every call has returned; the first
// exception a task throws is rethrown here (later tasks may still run).
template <typename F>
void parallel_tasks(int64_t tasks, int threads, const F& fn) {
  if (tasks <= 0) return;
  if (threads <= 1 || tasks == 1) {
    for (int64_t t = 0; t < tasks; ++t) fn(t);
    return;
  }
  detail::run_tasks(
      tasks, threads, [](const void* c, int64_t t) { (*static_cast<const F*>(c))(t); }, &fn);
}

// Calls fn(begin, end) on consecutive ranges covering [0, n), each of at least `grain` elements
// (but the last), with about four ranges per thread so that a late thread's share is taken by the
// others; on up to `threads` threads as parallel_tasks.
template <typename F>
void parallel_for(int64_t n, int threads, int64_t grain, const F& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t ranges = threads <= 1 ? 1 : int64_t{4} * threads;
  if (ranges > (n + grain - 1) / grain) ranges = (n + grain - 1) / grain;
  if (ranges <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t step = n / ranges, extra = n % ranges;
  parallel_tasks(ranges, threads, [&](int64_t r) {
    const int64_t begin = r * step + (r < extra ? r : extra);
    fn(begin, begin + step + (r < extra ? 1 : 0));
  });
}

}  // namespace reforge
