// The replay cache (runtime/replay_cache.h): entries per (signature, weight generation), evicted
// least-recently-used one at a time and never while a run holds them, and dropped with their
// weight version. (The recordings themselves need a GPU: tests/cuda_replay_test.cc.)
#include "runtime/replay_cache.h"

#include <gtest/gtest.h>

using namespace reforge;
using runtime::Recording;
using runtime::ReplayCache;

namespace {

std::shared_ptr<const void> fake_work() { return std::make_shared<int>(1); }

TEST(ReplayCache, KeyedBySignatureAndGeneration) {
  ReplayCache c(4);
  auto a1 = c.find_or_add("s", 1), a2 = c.find_or_add("s", 2), b1 = c.find_or_add("t", 1);
  EXPECT_NE(a1, a2);
  EXPECT_NE(a1, b1);
  EXPECT_EQ(c.find_or_add("s", 1), a1);
  EXPECT_EQ(c.find_or_add("s", 2), a2);
}

TEST(ReplayCache, EvictsTheLeastRecentlyUsedOneAtATime) {
  ReplayCache c(3);
  for (const char* k : {"a", "b", "c"}) {
    auto r = c.find_or_add(k, 1);
    r->work = fake_work();
    ++c.live;
  }
  c.find_or_add("a", 1);  // "b" is now the least recently used
  auto d = c.find_or_add("d", 1);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(c.evicted.load(), 1);
  EXPECT_EQ(c.live.load(), 2);
  // "a" and "c" survived: the same entries with their recordings.
  EXPECT_NE(c.find_or_add("a", 1)->work, nullptr);
  EXPECT_NE(c.find_or_add("c", 1)->work, nullptr);
  // "b" was dropped: a new, empty entry (evicting the least recently used entry no run holds).
  EXPECT_EQ(c.find_or_add("b", 1)->work, nullptr);
}

TEST(ReplayCache, NeverEvictsAnEntryARunHolds) {
  ReplayCache c(2);
  auto held_a = c.find_or_add("a", 1);
  auto held_b = c.find_or_add("b", 1);
  EXPECT_EQ(c.find_or_add("c", 1), nullptr);  // both entries in use: the run goes eager
  held_a.reset();
  auto e = c.find_or_add("c", 1);
  EXPECT_NE(e, nullptr);
  EXPECT_EQ(c.find_or_add("b", 1), held_b);  // the held one stayed
}

TEST(ReplayCache, ARetiredVersionTakesItsRecordingsAlong) {
  ReplayCache c(8);
  for (const char* k : {"a", "b"})
    for (uint64_t g : {1, 2}) {
      auto r = c.find_or_add(k, g);
      r->work = fake_work();
      ++c.live;
    }
  c.drop_generation(1);
  EXPECT_EQ(c.retired.load(), 2);
  EXPECT_EQ(c.live.load(), 2);
  EXPECT_EQ(c.find_or_add("a", 1)->work, nullptr);
  EXPECT_NE(c.find_or_add("a", 2)->work, nullptr);
  EXPECT_NE(c.find_or_add("b", 2)->work, nullptr);
}

}  // namespace
