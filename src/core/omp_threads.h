// OmpThreads: the OpenMP thread count for one piece of work, restored afterwards.
//
// oneDNN and OpenBLAS (their OpenMP builds) size their teams from the calling thread's
// omp_get_max_threads(). That setting belongs to the thread, and in a process that also runs
// PyTorch (which links the same OpenMP runtime) it is PyTorch's setting too: a library that set it
// and left it would change how many threads PyTorch's own work uses afterwards. So reforge sets it
// only for the span of a run or a build, and puts back what it found.
#pragma once

#include <omp.h>

namespace reforge {

class OmpThreads {
 public:
  explicit OmpThreads(int threads) : saved_(omp_get_max_threads()) {
    if (threads > 0 && threads != saved_) omp_set_num_threads(threads);
  }
  ~OmpThreads() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

}  // namespace reforge
