// Inference during refit: PlanEngine's concurrency contract (runtime/plan_engine.h). Runs race
// commits and each must see one whole weight set: every output equals, bit for bit, the output
// of weights A or of weights B, never a mix. Concurrent commits are serialized, leaving the
// engine exactly on one of the sets with its source records and missing list consistent. A
// stripped engine refuses runs until the first complete refit, and never again after a thread
// has seen it run. Named weight versions of a session keep serving their own weights, bit for
// bit, while refits (LoRA adapters on a base checkpoint) replace them thousands of times and some
// fail mid-way. Built for ThreadSanitizer too (REFORGE_TSAN).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "refit/refitter.h"
#include "refit/safetensors.h"
#include "runtime/plan_engine.h"
#include "session/build.h"
#include "session/session.h"
#include "support/engine_checks.h"
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

// Named versions under a storm of refits (session/session.h): one thread runs versions "A" and
// "B" of the real Llama export alternately, logging the version each run used and whether its
// output was that version's, while this thread replaces them in turn with the base checkpoint plus
// LoRA adapter A or B (refit/lora.h), as many times as fit in about two seconds and at least
// kMinRefits. After each refit it waits (no time limit, no sleep) for a run of that version that
// started after it, so that every version made is run. Every fifth refit is made to fail mid-way:
// the other adapter's weights, refused by the commit's `replayed` hook once half of the engine
// weights are replayed; the version must go on serving its own weights. Every logged run must
// equal, bit for bit, the output of the version it ran on: never the other's, never a mix.
TEST(RefitConcurrency, NamedVersionsServeTheirOwnWeightsWhileRefitsReplaceThem) {
  const fs::path hf = kModels / "hf" / "llama";
  session::BuildRequest build;
  build.model = (hf / "A" / "model.onnx").string();
  build.options.mode = plan::BuildMode::Refit;
  build.checkpoint.files = {(hf / "checkpoint_A.safetensors").string()};
  session::Session s(session::build_plan(build).plan, one_thread());
  const auto base = refit::Checkpoint::open((hf / "checkpoint_A.safetensors").string()).tensors();
  const std::string names[2] = {"A", "B"};
  refit::LoraSource adapters[2];
  for (int v = 0; v < 2; ++v) {
    const fs::path dir = hf / "lora" / names[v];
    adapters[v].tensors = refit::Checkpoint::open((dir / "adapter_model.safetensors").string()).tensors();
    std::ifstream f(dir / "adapter_config.json");
    adapters[v].config_json.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto request = [&](int adapter) {
    refit::RefitRequest req;
    req.checkpoint_tensors = base;
    req.lora = adapters[adapter];
    return req;
  };
  const std::map<std::string, Tensor> in = {{"input_ids", read_npy((hf / "inputs" / "input_ids.npy").string())}};
  Tensor want[2];
  size_t replays = 0;  // engine weights a refit replays
  for (int v = 0; v < 2; ++v) {
    replays = s.refit(request(v), nullptr, names[v]).commit.weights_replayed;
    want[v] = s.run(in, {}, names[v])[0];
  }
  ASSERT_FALSE(transforms::bit_equal(want[0], want[1]));
  ASSERT_GT(replays, 2u);

  // epoch[v]: the number of the last refit of version v, successful or not, once it has returned;
  // fresh[v]: the largest epoch[v] that a finished run of v read before it started.
  std::atomic<int> epoch[2] = {0, 0}, fresh[2] = {0, 0};
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  struct Logged {
    int version;
    Seen seen;  // A: the version's own output, B: the other version's, Mix: neither
  };
  std::vector<Logged> log;
  std::thread runner([&] {
    for (int i = 0; !stop.load(); ++i) {
      const int v = i % 2;
      const int e = epoch[v].load();
      try {
        const Tensor out = s.run(in, {}, names[v])[0];
        log.push_back({v, transforms::bit_equal(out, want[v])         ? Seen::A
                          : transforms::bit_equal(out, want[1 - v]) ? Seen::B
                                                                    : Seen::Mix});
      } catch (const std::exception&) {
        ++errors;
      }
      fresh[v].store(e);
    }
  });

  constexpr int kMinRefits = 40, kMaxRefits = 20000;
  const auto start = std::chrono::steady_clock::now();
  int refits = 0, injected = 0;
  for (int k = 1; k <= kMinRefits || (k <= kMaxRefits && std::chrono::steady_clock::now() - start <
                                                              std::chrono::seconds(2));
       ++k) {
    const int v = k % 2;
    const bool fail_midway = k % 5 == 0;
    refit::RefitRequest req = request(fail_midway ? 1 - v : v);
    if (fail_midway) {
      auto replayed = std::make_shared<std::atomic<size_t>>(0);  // replays may run on several threads
      req.commit.replayed = [replayed, replays](const std::string& name, Tensor t) {
        if (++*replayed > replays / 2) fail("injected failure at engine weight '", name, "'");
        return t;
      };
      const std::string err = test_support::error_of([&] { s.refit(req, nullptr, names[v]); });
      EXPECT_NE(err.find("injected failure"), std::string::npos) << err;
      ++injected;
    } else {
      s.refit(req, nullptr, names[v]);
    }
    ++refits;
    epoch[v].store(k);
    // A runner that throws goes on running, so this wait ends (and the error is counted).
    while (fresh[v].load() < k && errors.load() == 0) std::this_thread::yield();
    if (errors.load()) break;
  }
  stop = true;
  runner.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GE(refits, kMinRefits);
  EXPECT_GE(injected, refits / 5);
  size_t own[2] = {0, 0}, other = 0, mixed = 0;
  for (const Logged& l : log) {
    own[l.version] += l.seen == Seen::A;
    other += l.seen == Seen::B;
    mixed += l.seen == Seen::Mix;
  }
  EXPECT_EQ(other, 0u) << "runs that saw the other version's weights";
  EXPECT_EQ(mixed, 0u) << "runs that saw a mix of weights";
  // A run of each version after every refit of it (about half the refits each).
  EXPECT_GE(own[0], static_cast<size_t>(refits / 2));
  EXPECT_GE(own[1], static_cast<size_t>(refits / 2));
  EXPECT_EQ(s.versions(), (std::vector<std::string>{"A", "B"}));
  for (int v = 0; v < 2; ++v) EXPECT_TRUE(transforms::bit_equal(s.run(in, {}, names[v])[0], want[v]));
  std::printf("[          ] %d refits (%d made to fail mid-way), %zu runs logged\n", refits, injected, log.size());
}

}  // namespace
