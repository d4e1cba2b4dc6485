// Inference during refit: PlanEngine's concurrency contract (runtime/plan_engine.h). Runs race
// commits and each must see one whole weight set: every output equals, bit for bit, the output
// of weights A or of weights B, never a mix. Concurrent commits are serialized, leaving the
// engine exactly on one of the sets with its source records and missing list consistent. A
// stripped engine refuses runs until the first complete refit, and never again after a thread
// has seen it run. Built for ThreadSanitizer too (REFORGE_TSAN).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/llama_fixture.h"
#include "transforms/recipe.h"

using namespace reforge;
namespace fs = std::filesystem;
using test_support::kLlamaA;
using test_support::kLlamaB;
using test_support::kModels;
using test_support::llama_inputs;
using test_support::llama_plan;
using test_support::weight_snapshot;

namespace {

constexpr int kReaders = 3;

runtime::EngineOptions one_thread() {
  runtime::EngineOptions o;
  o.threads = 1;  // the readers are the parallelism here
  return o;
}

// A complete refit to the weights of `onnx_path`, staged once and committed many times.
runtime::WeightUpdate staged_update(runtime::PlanEngine& e, const std::string& onnx_path) {
  refit::Refitter r(e);
  for (const auto& [id, t] : build::read_sources_from_onnx(e.plan(), onnx_path)) r.set_source(id, t);
  return r.stage().update;
}

// Everything a commit changes, as readers see it.
struct Snapshot {
  std::map<std::string, Tensor> weights;
  std::vector<Tensor> sources;
  std::vector<uint64_t> hashes;
};

Snapshot snapshot_of(const runtime::PlanEngine& e) {
  Snapshot s;
  for (const auto& w : e.plan().weights) s.weights[w.name] = e.weight(w.name);
  for (uint32_t i = 0; i < e.plan().sources.size(); ++i) {
    s.sources.push_back(e.source_value(i));
    s.hashes.push_back(e.source_hash(i));
  }
  return s;
}

bool same(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || transforms::bit_equal(a, b);
}

bool same(const Snapshot& a, const Snapshot& b) {
  if (a.hashes != b.hashes || a.sources.size() != b.sources.size()) return false;
  for (const auto& [name, t] : a.weights)
    if (!same(t, b.weights.at(name))) return false;
  for (size_t i = 0; i < a.sources.size(); ++i)
    if (!same(a.sources[i], b.sources[i])) return false;
  return true;
}

// The two weight sets' updates, outputs and engine snapshots, computed once for all tests.
struct Fixture {
  runtime::WeightUpdate update_a, update_b;
  Tensor out_a, out_b;
  Snapshot snap_a, snap_b;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture f;
    runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit, false), one_thread());
    f.update_a = staged_update(e, kLlamaA);
    f.update_b = staged_update(e, kLlamaB);
    e.commit(f.update_b);
    f.out_b = e.run(llama_inputs())[0];
    f.snap_b = snapshot_of(e);
    e.commit(f.update_a);
    f.out_a = e.run(llama_inputs())[0];
    f.snap_a = snapshot_of(e);
    return f;
  }();
  return f;
}

enum class Seen { A, B, Mix };

Seen classify(const Tensor& out) {
  const Fixture& f = fixture();
  if (transforms::bit_equal(out, f.out_a)) return Seen::A;
  if (transforms::bit_equal(out, f.out_b)) return Seen::B;
  return Seen::Mix;
}

TEST(RefitConcurrency, TheTwoWeightSetsDiffer) {
  const Fixture& f = fixture();
  ASSERT_FALSE(transforms::bit_equal(f.out_a, f.out_b));
  EXPECT_FALSE(same(f.snap_a, f.snap_b));
}

// Readers run in a loop while the main thread commits A and B alternately (every fifth commit
// through the whole Refitter path, replaying recipes): each output is A's or B's, exactly. A run
// that overlapped no commit sees the last one's set; after each commit the main thread waits
// (without a time limit or a sleep) for such a run, so that every committed set is run.
TEST(RefitConcurrency, InferenceDuringRefitSeesOneWholeWeightSet) {
  const Fixture& f = fixture();
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit, false), one_thread());
  const auto in = llama_inputs();
  constexpr int kCommits = 200;
  // Commit k (from 1) takes the engine to B for odd k, A for even k; 0 is the engine as built (A).
  auto set_after = [](int k) { return k % 2 ? Seen::B : Seen::A; };
  // Commit k begins with begun = k and ends with done = k: a run that starts at done = k and ends
  // with begun still k overlapped no commit ("clean"); clean_after is the largest such k.
  std::atomic<int> begun{0}, done{0}, clean_after{-1};
  std::atomic<bool> stop{false};
  std::atomic<int> mixes{0}, errors{0}, stale{0}, seen_a{0}, seen_b{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < kReaders; ++t)
    readers.emplace_back([&] {
      while (!stop.load()) {
        const int lo = done.load();
        Seen seen = Seen::Mix;
        try {
          seen = classify(e.run(in)[0]);
        } catch (const std::exception&) {
          ++errors;
          continue;
        }
        const bool clean = begun.load() == lo;
        if (seen == Seen::Mix) ++mixes;
        if (seen == Seen::A) ++seen_a;
        if (seen == Seen::B) ++seen_b;
        if (clean && seen != set_after(lo)) ++stale;
        if (clean) {
          int prev = clean_after.load();
          while (prev < lo && !clean_after.compare_exchange_weak(prev, lo)) {
          }
        }
      }
    });
  const auto src_a = build::read_sources_from_onnx(e.plan(), kLlamaA);
  const auto src_b = build::read_sources_from_onnx(e.plan(), kLlamaB);
  for (int k = 1; k <= kCommits; ++k) {
    const bool to_b = set_after(k) == Seen::B;
    begun = k;
    if (k % 5 == 0) {
      refit::Refitter r(e);
      for (const auto& [id, t] : to_b ? src_b : src_a) r.set_source(id, t);
      r.commit();
    } else {
      e.commit(to_b ? f.update_b : f.update_a);
    }
    done = k;
    // A reader that throws goes on reading, so this wait ends (and the error is counted).
    while (clean_after.load() < k && errors.load() == 0) std::this_thread::yield();
    if (errors.load()) break;
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(mixes.load(), 0) << "runs that saw parts of two weight sets";
  EXPECT_EQ(stale.load(), 0) << "runs that overlapped no commit but saw another set than the last one";
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(clean_after.load(), kCommits);
  EXPECT_GE(seen_a.load(), kCommits / 2);  // a clean run after every commit
  EXPECT_GE(seen_b.load(), kCommits / 2);
  // The last commit (k = kCommits, even) was A.
  EXPECT_TRUE(same(snapshot_of(e), f.snap_a));
  EXPECT_TRUE(transforms::bit_equal(e.run(in)[0], f.out_a));
}

// Two threads commit A and B respectively, many times at once, while readers run: the engine
// ends exactly on one of the two sets — weights, source values and hashes — with nothing
// missing, a current_plan of the same weights, and runs giving that set's output.
TEST(RefitConcurrency, ConcurrentCommitsAreSerialized) {
  const Fixture& f = fixture();
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit, false), one_thread());
  const auto in = llama_inputs();
  std::atomic<bool> stop{false};
  std::atomic<int> mixes{0};
  std::thread reader([&] {
    while (!stop.load())
      if (classify(e.run(in)[0]) == Seen::Mix) ++mixes;
  });
  std::atomic<int> ready{0};
  auto committer = [&](const runtime::WeightUpdate& u) {
    ++ready;
    while (ready.load() < 2) std::this_thread::yield();
    for (int i = 0; i < 100; ++i) {
      e.commit(u);
      // current_plan reads one State: its weights are one set's, never a mix of two commits.
      // (Separate accessor calls may straddle the other thread's commit; snapshot_of would.)
      const plan::Plan cur = e.current_plan(/*strip=*/false);
      bool all_a = true, all_b = true;
      for (const auto& w : cur.weights) {
        all_a = all_a && same(w.data, f.snap_a.weights.at(w.name));
        all_b = all_b && same(w.data, f.snap_b.weights.at(w.name));
      }
      if (!all_a && !all_b) ++mixes;
    }
  };
  std::thread ta(committer, std::cref(f.update_a));
  std::thread tb(committer, std::cref(f.update_b));
  ta.join();
  tb.join();
  stop = true;
  reader.join();
  EXPECT_EQ(mixes.load(), 0);

  const Snapshot s = snapshot_of(e);
  const bool on_a = same(s, f.snap_a), on_b = same(s, f.snap_b);
  ASSERT_TRUE(on_a || on_b) << "the engine holds neither weight set whole";
  EXPECT_TRUE(e.missing_sources().empty());
  const plan::Plan cur = e.current_plan(/*strip=*/false);
  for (const auto& w : cur.weights)
    EXPECT_TRUE(same(w.data, (on_a ? f.snap_a : f.snap_b).weights.at(w.name))) << w.name;
  EXPECT_TRUE(transforms::bit_equal(e.run(in)[0], on_a ? f.out_a : f.out_b));
}

// A stripped engine: readers racing the first commit are refused with the missing-sources error
// until it lands, then every run is valid (A's output); no thread is refused after a success.
TEST(RefitConcurrency, StrippedEngineRunsOnlyAfterTheFirstCompleteRefit) {
  const Fixture& f = fixture();
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit, true), one_thread());
  ASSERT_FALSE(e.missing_sources().empty());
  const auto in = llama_inputs();
  std::atomic<int> refused{0}, readers_refused{0}, bad_errors{0}, mixes{0}, refused_after_success{0}, done{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < kReaders; ++t)
    readers.emplace_back([&] {
      int valid = 0, mine_refused = 0;
      while (valid < 5) {
        try {
          Tensor out = e.run(in)[0];
          ++valid;
          if (classify(out) != Seen::A) ++mixes;
        } catch (const Error& err) {
          if (valid > 0) ++refused_after_success;
          if (std::string(err.what()).find("stripped") == std::string::npos) ++bad_errors;
          if (mine_refused++ == 0) ++readers_refused;
          ++refused;
        }
      }
      ++done;
    });
  // Let every reader be refused at least once, then commit A while they run.
  while (readers_refused.load() < kReaders) std::this_thread::yield();
  e.commit(f.update_a);
  for (auto& t : readers) t.join();
  EXPECT_EQ(done.load(), kReaders);
  EXPECT_EQ(mixes.load(), 0);
  EXPECT_EQ(bad_errors.load(), 0);
  EXPECT_EQ(refused_after_success.load(), 0);
  EXPECT_GE(refused.load(), kReaders);
  EXPECT_TRUE(e.missing_sources().empty());
  EXPECT_TRUE(same(snapshot_of(e), f.snap_a));
}

}  // namespace
