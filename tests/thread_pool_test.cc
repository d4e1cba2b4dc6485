// The kernels' thread pool (core/thread_pool.h): every task runs exactly once for any task count
// and thread count; ranges cover a loop exactly; loops inside tasks, exceptions and concurrent
// callers; and a loop never waits for threads that are held elsewhere.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace reforge;

namespace {

TEST(ThreadPool, EveryTaskRunsOnce) {
  for (int threads : {1, 2, 3, 8})
    for (int64_t tasks : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{7}, int64_t{1000}, int64_t{70001}}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
      parallel_tasks(tasks, threads, [&](int64_t t) { runs[static_cast<size_t>(t)].fetch_add(1); });
      for (int64_t t = 0; t < tasks; ++t)
        ASSERT_EQ(runs[static_cast<size_t>(t)].load(), 1) << "task " << t << " of " << tasks << ", " << threads << " threads";
    }
}

TEST(ThreadPool, RangesCoverTheLoopExactly) {
  for (int threads : {1, 2, 4})
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{63}, int64_t{4096}, int64_t{100003}})
      for (int64_t grain : {int64_t{1}, int64_t{16}, int64_t{1 << 12}}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int64_t> ranges{0};
        parallel_for(n, threads, grain, [&](int64_t b, int64_t e) {
          ASSERT_LT(b, e);
          ++ranges;
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << n << " " << grain;
        EXPECT_LE(ranges.load(), std::max<int64_t>(1, (n + grain - 1) / grain));
      }
}

TEST(ThreadPool, LoopsInsideTasksRunInline) {
  std::atomic<int64_t> sum{0};
  parallel_tasks(8, 4, [&](int64_t t) {
    parallel_tasks(100, 4, [&](int64_t u) { sum += t * 100 + u; });
  });
  int64_t want = 0;
  for (int64_t i = 0; i < 800; ++i) want += i;
  EXPECT_EQ(sum.load(), want);
}

TEST(ThreadPool, AnExceptionReachesTheCaller) {
  std::atomic<int> ran{0};
  EXPECT_THROW(parallel_tasks(64, 4,
                              [&](int64_t t) {
                                ++ran;
                                if (t == 17) throw std::runtime_error("task 17");
                              }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 64);  // the other tasks still ran
  // The pool serves the next loop.
  std::atomic<int> after{0};
  parallel_tasks(10, 4, [&](int64_t) { ++after; });
  EXPECT_EQ(after.load(), 10);
}

TEST(ThreadPool, ConcurrentCallersEachGetTheirOwnLoop) {
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int round = 0; round < 200; ++round) {
        std::vector<int> out(257, 0);
        parallel_tasks(257, 2, [&](int64_t t) { out[static_cast<size_t>(t)] = c * 1000 + static_cast<int>(t); });
        for (int t = 0; t < 257; ++t)
          if (out[static_cast<size_t>(t)] != c * 1000 + t) ++wrong;
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// A caller never waits for a thread that is held elsewhere: while every task of one loop is
// blocked, another caller's loop completes on its own thread.
TEST(ThreadPool, ALoopNeverWaitsForHeldThreads) {
  std::atomic<bool> release{false};
  std::atomic<int> blocked{0};
  std::thread holder([&] {
    parallel_tasks(2, 2, [&](int64_t) {
      ++blocked;
      while (!release.load()) std::this_thread::yield();
    });
  });
  while (blocked.load() == 0) std::this_thread::yield();  // the holder's loop is running
  std::atomic<int> done{0};
  parallel_tasks(100, 2, [&](int64_t) { ++done; });
  EXPECT_EQ(done.load(), 100);
  release = true;
  holder.join();
  EXPECT_EQ(blocked.load(), 2);
}

}  // namespace
