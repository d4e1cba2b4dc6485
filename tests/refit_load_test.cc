// Refit under load: reader threads run one PlanEngine in a loop while a writer refits it hundreds
// of times through each refit path the library has — a re-exported ONNX model (fast, slow and
// verify), a bound safetensors checkpoint (file and state dict), and incremental refits of a few
// sources at a time — with refits that fail (NaN, wrong shape or dtype in a late source, a
// checkpoint missing a tensor, a model of another structure, a bad staged weight) in between.
//
// The writer follows a schedule fixed before the readers start: schedule[i] is the weight state
// the engine holds after the i-th successful refit, and every state's output was computed first,
// single-threaded, by complete refits of a fresh engine (never by the path under test). Around
// refit i the writer publishes begun = i (before) and done = i (after). A reader reads done
// before a run and begun after it; the State that run took was published by a refit k with
// done-before <= k <= begun-after, so its output must equal, bit for bit, the reference of
// schedule[k] for some k in that window: never a state that was already replaced when the run
// began, never a mix, never an error. A failed refit publishes nothing and must leave the engine
// on the same weight tensors and source records it had.
//
// The engines run with one thread each (the readers are the parallelism), so a state's output is
// bitwise reproducible. REFORGE_LOAD_REFITS sets the refits per test (default 200). Built for
// ThreadSanitizer too (reforge_concurrency_tests).
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "builder/binding.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "refit/refit_from.h"
#include "refit/refitter.h"
#include "refit/safetensors.h"
#include "runtime/plan_engine.h"
#include "support/engine_checks.h"
#include "support/llama_fixture.h"
#include "transforms/recipe.h"

using namespace reforge;
namespace fs = std::filesystem;
using test_support::derived_weight_hashes;
using test_support::error_of;
using test_support::kLlamaA;
using test_support::kLlamaB;
using test_support::kModels;
using test_support::llama_inputs;
using test_support::llama_plan;

namespace {

constexpr int kReaders = 3;
const std::string kCheckpointA = (kModels / "llama/checkpoint_A.safetensors").string();
const std::string kCheckpointB = (kModels / "llama/checkpoint_B.safetensors").string();

int refits_per_test() {
  if (const char* v = std::getenv("REFORGE_LOAD_REFITS")) {
    const int n = std::atoi(v);
    if (n > 0) return n;
  }
  return 200;
}

runtime::EngineOptions one_thread() {
  runtime::EngineOptions o;
  o.threads = 1;
  return o;
}

// A scratch folder, removed at the end of the test.
struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& name)
      : path(fs::temp_directory_path() / ("reforge_load_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// What a failed refit must leave as it was: the weight tensors themselves (same storage), the
// source records and the missing list.
struct Fingerprint {
  std::vector<const void*> weights;
  std::vector<const void*> sources;
  std::vector<uint64_t> hashes;
  std::vector<std::string> missing;
  bool operator==(const Fingerprint&) const = default;
};

Fingerprint fingerprint_of(const runtime::PlanEngine& e) {
  Fingerprint f;
  for (const auto& w : e.plan().weights) f.weights.push_back(e.weight(w.name).raw());
  for (uint32_t i = 0; i < e.plan().sources.size(); ++i) {
    const Tensor v = e.source_value(i);
    f.sources.push_back(v.defined() ? v.raw() : nullptr);
    f.hashes.push_back(e.source_hash(i));
  }
  f.missing = e.missing_sources();
  return f;
}

// The highest-numbered refittable source (the last one a refit reads and validates).
uint32_t last_source(const plan::Plan& p) {
  for (size_t i = p.sources.size(); i-- > 0;)
    if (p.sources[i].refittable) return static_cast<uint32_t>(i);
  ADD_FAILURE() << "the plan has no refittable source";
  return 0;
}

// The last derived engine weight of the plan's weight table.
const plan::WeightEntry& last_derived_weight(const plan::Plan& p) {
  for (size_t i = p.weights.size(); i-- > 0;)
    if (p.weights[i].kind == plan::WeightKind::Derived) return p.weights[i];
  throw std::runtime_error("the plan has no derived weight");
}

// A float32 copy of `t` with NaN in its last element.
Tensor with_nan(const Tensor& t) {
  Tensor c = t.clone();
  EXPECT_EQ(c.dtype(), DType::Float32);
  c.mutable_data<float>()[c.numel() - 1] = std::numeric_limits<float>::quiet_NaN();
  return c;
}

// Sources by key, for refit::RefitRequest::tensors.
std::map<std::string, Tensor> by_key(const plan::Plan& p, const std::map<uint32_t, Tensor>& sources) {
  std::map<std::string, Tensor> out;
  for (const auto& [id, t] : sources) out[p.sources[id].key] = t;
  return out;
}

// The readers, the window check and the writer's side of the protocol described at the top.
class Load {
 public:
  Load(const runtime::PlanEngine& engine, std::vector<Tensor> refs, std::vector<int> schedule)
      : engine_(engine), refs_(std::move(refs)), schedule_(std::move(schedule)), inputs_(llama_inputs()) {
    for (int t = 0; t < kReaders; ++t) readers_.emplace_back([this] { read(); });
  }
  ~Load() { stop(); }

  // Refit i (1-based) is about to start / has returned successfully.
  void begin(int i) { begun_.store(i); }
  void end(int i) {
    done_.store(i);
    // Wait for a run that began after refit i, so that every committed state is run (on 2
    // cores the writer would otherwise outpace the readers).
    while (started_after_.load() < i && !stopped_.load()) std::this_thread::yield();
  }
  void stop() {
    if (stopped_.exchange(true)) return;
    for (auto& t : readers_) t.join();
  }

  int runs() const { return runs_.load(); }
  int stale_or_mixed() const { return bad_.load(); }
  int mixed() const { return mixed_.load(); }
  int errors() const { return errors_.load(); }
  std::string first_error() const {
    std::lock_guard<std::mutex> lock(error_mutex_);
    return first_error_;
  }
  // Runs whose output was each state's (by state id).
  std::vector<int> seen() const {
    std::vector<int> out;
    for (const auto& s : seen_) out.push_back(s.load());
    return out;
  }

 private:
  void read() {
    while (!stopped_.load()) {
      const int lo = done_.load();
      Tensor out;
      try {
        out = engine_.run(inputs_)[0];
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (errors_++ == 0) first_error_ = e.what();
      }
      const int hi = begun_.load();
      if (out.defined()) check(out, lo, hi);
      ++runs_;
      int prev = started_after_.load();
      while (prev < lo && !started_after_.compare_exchange_weak(prev, lo)) {
      }
    }
  }
  void check(const Tensor& out, int lo, int hi) {
    for (int k = lo; k <= hi && k < static_cast<int>(schedule_.size()); ++k)
      if (transforms::bit_equal(out, refs_[schedule_[k]])) {
        ++seen_[schedule_[k]];
        return;
      }
    ++bad_;
    bool any = false;  // a state outside the window (stale), or none at all (a mix)
    for (const Tensor& r : refs_) any = any || transforms::bit_equal(out, r);
    if (!any) ++mixed_;
  }

  const runtime::PlanEngine& engine_;
  const std::vector<Tensor> refs_;
  const std::vector<int> schedule_;
  const std::map<std::string, Tensor> inputs_;
  std::atomic<int> begun_{0}, done_{0}, started_after_{0};
  std::atomic<bool> stopped_{false};
  std::atomic<int> runs_{0}, bad_{0}, mixed_{0}, errors_{0};
  std::array<std::atomic<int>, 64> seen_{};
  mutable std::mutex error_mutex_;
  std::string first_error_;
  std::vector<std::thread> readers_;
};

// Runs refit(i) for i = 1..refits under load (refit(i) must take the engine to schedule[i]), and
// fail(i) after each one (refused attempts; each must leave the engine as it was). Then checks
// the readers' account: every output in its window, every state seen, no error.
void run_under_load(const runtime::PlanEngine& e, const std::vector<Tensor>& refs, const std::vector<int>& schedule,
                    const std::function<void(int)>& refit, const std::function<void(int)>& fail_some) {
  ASSERT_LE(refs.size(), 64u);
  for (size_t a = 0; a < refs.size(); ++a)
    for (size_t b = a + 1; b < refs.size(); ++b)
      ASSERT_FALSE(transforms::bit_equal(refs[a], refs[b])) << "states " << a << " and " << b << " are not told apart";
  Load load(e, refs, schedule);
  for (int i = 1; i < static_cast<int>(schedule.size()); ++i) {
    load.begin(i);
    refit(i);
    load.end(i);
    const Fingerprint before = fingerprint_of(e);
    fail_some(i);
    ASSERT_TRUE(fingerprint_of(e) == before) << "a refused refit after refit " << i << " changed the engine";
    if (::testing::Test::HasFatalFailure()) break;
  }
  load.stop();
  EXPECT_EQ(load.stale_or_mixed(), 0) << load.mixed() << " of them matching no state at all";
  EXPECT_EQ(load.errors(), 0) << load.first_error();
  EXPECT_GT(load.runs(), static_cast<int>(schedule.size()) - 1);
  const auto seen = load.seen();
  for (size_t s = 0; s < refs.size(); ++s) EXPECT_GT(seen[s], 0) << "no run saw state " << s;
  // The engine ends on the last state of the schedule.
  EXPECT_TRUE(transforms::bit_equal(e.run(llama_inputs())[0], refs[schedule.back()]));
}

// A schedule alternating A (0) and B (1), starting from A.
std::vector<int> alternating(int refits) {
  std::vector<int> s(refits + 1);
  for (int i = 0; i <= refits; ++i) s[i] = i % 2;
  return s;
}

// Expects `f` to throw a reforge::Error whose message contains `what`.
void expect_refused(const std::function<void()>& f, const std::string& what, const std::string& case_name) {
  const std::string msg = error_of(f);
  EXPECT_NE(msg.find(what), std::string::npos)
      << case_name << ": expected an error containing '" << what << "', got: " << (msg.empty() ? "no error" : msg);
}

// Refits from a re-exported ONNX model, A and B alternately, mostly fast, some slow and verify;
// refused in between: a model with NaN in its last-read initializer, one with that initializer
// of another shape, a model of another structure, caller tensors of B with the last source NaN or
// of the wrong dtype, and a staged update of B whose last engine weight has the wrong shape.
TEST(RefitLoad, OnnxRefitsFastSlowVerify) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit, false), one_thread());
  const plan::Plan& p = e.plan();
  const auto src_a = build::read_sources_from_onnx(p, kLlamaA);
  const auto src_b = build::read_sources_from_onnx(p, kLlamaB);

  // References: a fresh engine, complete refits.
  std::vector<Tensor> refs;
  {
    runtime::PlanEngine fresh(llama_plan(plan::BuildMode::Refit, false), one_thread());
    refs.push_back(fresh.run(llama_inputs())[0]);
    refit::Refitter r(fresh);
    for (const auto& [id, t] : src_b) r.set_source(id, t);
    r.commit();
    refs.push_back(fresh.run(llama_inputs())[0]);
  }

  // The refused inputs.
  ScratchDir dir("onnx");
  const uint32_t last = last_source(p);
  const std::string& last_name = p.sources[last].names.at(0);
  {
    ir::Graph g = onnx::import_model_file(kLlamaB);
    g.initializers.at(last_name) = with_nan(g.initializers.at(last_name));
    onnx::write_model_file(g, dir.file("nan.onnx"));
    const Tensor& t = g.initializers.at(last_name);
    g.initializers.at(last_name) = Tensor::empty(t.dtype(), {t.numel() + 1});
    onnx::write_model_file(g, dir.file("shape.onnx"));
  }
  const std::string other_model = (kModels / "cnn/dynamo/A/model.onnx").string();
  auto tensors_b = by_key(p, src_b);
  auto nan_tensors = tensors_b;
  nan_tensors.at(p.sources[last].key) = with_nan(src_b.at(last));
  auto dtype_tensors = tensors_b;
  dtype_tensors.at(p.sources[last].key) = Tensor::empty(DType::Float64, p.sources[last].shape);
  runtime::WeightUpdate bad_update;
  {
    refit::Refitter r(e);
    for (const auto& [id, t] : src_b) r.set_source(id, t);
    bad_update = r.stage().update;
    const plan::WeightEntry& w = last_derived_weight(p);
    bad_update.set_weight(w.name, Tensor::empty(w.dtype, {w.shape.empty() ? 2 : w.shape[0] + 1}));
  }

  auto onnx_refit = [&](const std::string& file, refit::RefitMode mode) {
    refit::RefitRequest req;
    req.files = {file};
    req.mode = mode;
    return build::refit_from(e, req);
  };
  const int refits = refits_per_test();
  run_under_load(
      e, refs, alternating(refits),
      [&](int i) {
        const std::string& file = i % 2 ? kLlamaB : kLlamaA;
        const refit::RefitMode mode = i % 20 == 10  ? refit::RefitMode::Verify
                                      : i % 20 == 5 ? refit::RefitMode::Slow
                                                    : refit::RefitMode::Fast;
        EXPECT_EQ(onnx_refit(file, mode).mode, mode);
      },
      [&](int i) {
        if (i % 3) return;
        switch (i / 3 % 6) {
          case 0:
            expect_refused([&] { onnx_refit(dir.file("nan.onnx"), refit::RefitMode::Fast); }, "holds NaN",
                           "NaN in the model");
            break;
          case 1:
            expect_refused([&] { onnx_refit(dir.file("shape.onnx"), refit::RefitMode::Verify); }, "structure differs",
                           "wrong shape in the model");
            break;
          case 2:
            expect_refused([&] { onnx_refit(other_model, refit::RefitMode::Fast); }, "structure differs",
                           "another model");
            break;
          case 3: {
            refit::RefitRequest req;
            req.tensors = nan_tensors;
            expect_refused([&] { refit::refit_from(e, req); }, "holds NaN", "NaN tensor");
            break;
          }
          case 4: {
            refit::RefitRequest req;
            req.tensors = dtype_tensors;
            expect_refused([&] { refit::refit_from(e, req); }, "the plan expects", "float64 tensor");
            break;
          }
          case 5:
            expect_refused([&] { e.commit(bad_update); }, "the plan expects", "bad staged weight");
            break;
        }
      });
}

// Refits from the bound safetensors checkpoints A and B alternately (files; every fourth from a
// state dict in memory); refused in between: checkpoint B without the tensor bound to the last
// source, B with NaN in that tensor, and a state dict with that tensor of the wrong shape.
TEST(RefitLoad, CheckpointRefits) {
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  auto make_plan = [&] {
    return build::build_plan_with_checkpoint(onnx::import_model_file(kLlamaA), o, refit::Checkpoint::open(kCheckpointA),
                                             {});
  };
  runtime::PlanEngine e(make_plan(), one_thread());
  const plan::Plan& p = e.plan();

  auto file_refit = [](runtime::PlanEngine& engine, const std::string& file) {
    refit::RefitRequest req;
    req.files = {file};
    return refit::refit_from(engine, req);
  };
  std::vector<Tensor> refs;
  {
    runtime::PlanEngine fresh(make_plan(), one_thread());
    refs.push_back(fresh.run(llama_inputs())[0]);
    file_refit(fresh, kCheckpointB);
    refs.push_back(fresh.run(llama_inputs())[0]);
  }

  // The tensor bound to the last refittable source, and the refused checkpoints.
  const plan::Source& last = p.sources[last_source(p)];
  ASSERT_FALSE(last.binding.checkpoint.empty()) << last.key << " is not bound to a checkpoint tensor";
  const std::string bound = last.binding.checkpoint.back().name;
  ScratchDir dir("checkpoint");
  std::map<std::string, Tensor> state_a, state_b;
  {
    const refit::Checkpoint a = refit::Checkpoint::open(kCheckpointA), b = refit::Checkpoint::open(kCheckpointB);
    for (const auto& [name, t] : a.tensors()) state_a[name] = t.clone();
    for (const auto& [name, t] : b.tensors()) state_b[name] = t.clone();
  }
  {
    auto missing = state_b;
    missing.erase(bound);
    refit::write_safetensors(dir.file("missing.safetensors"), missing);
    auto nan = state_b;
    nan.at(bound) = with_nan(nan.at(bound));
    refit::write_safetensors(dir.file("nan.safetensors"), nan);
  }
  auto bad_shape = state_b;
  bad_shape.at(bound) = Tensor::empty(DType::Float32, {bad_shape.at(bound).numel() + 1});

  run_under_load(
      e, refs, alternating(refits_per_test()),
      [&](int i) {
        if (i % 4 == 0) {
          refit::RefitRequest req;
          req.checkpoint_tensors = i % 2 ? state_b : state_a;
          EXPECT_EQ(refit::refit_from(e, req).from, "checkpoint");
        } else {
          EXPECT_EQ(file_refit(e, i % 2 ? kCheckpointB : kCheckpointA).from, "checkpoint");
        }
      },
      [&](int i) {
        if (i % 3) return;
        switch (i / 3 % 3) {
          case 0:
            expect_refused([&] { file_refit(e, dir.file("missing.safetensors")); }, "'" + bound + "'",
                           "missing tensor");
            break;
          case 1:
            expect_refused([&] { file_refit(e, dir.file("nan.safetensors")); }, "holds NaN", "NaN tensor");
            break;
          case 2: {
            refit::RefitRequest req;
            req.checkpoint_tensors = bad_shape;
            expect_refused([&] { refit::refit_from(e, req); }, "the plan expects", "wrong shape");
            break;
          }
        }
      });
}

// Incremental refits: the refittable sources, in id order, fall into groups of 1, 2 and 3 in
// turn; state j has the first j groups from B and the rest from A. The writer walks j up to the
// last group and back down, refitting one group at a time (incremental, so the engine passes
// through every mixed state), through refit_from's caller tensors and the Refitter in turn.
// Each state's reference is a complete refit of a fresh engine with that state's values.
// Refused in between: an incremental refit of the next group with NaN in its last source, or
// with a float64 tensor for it.
TEST(RefitLoad, IncrementalRefitsPassThroughConsistentMixedStates) {
  runtime::PlanEngine e(llama_plan(plan::BuildMode::Refit, false), one_thread());
  const plan::Plan& p = e.plan();
  const auto src_a = build::read_sources_from_onnx(p, kLlamaA);
  const auto src_b = build::read_sources_from_onnx(p, kLlamaB);

  std::vector<std::vector<uint32_t>> groups;
  {
    std::vector<uint32_t> ids;
    for (const auto& [id, t] : src_a) ids.push_back(id);
    for (size_t at = 0, size = 1; at < ids.size(); at += size, size = size % 3 + 1)
      groups.emplace_back(ids.begin() + at, ids.begin() + std::min(ids.size(), at + size));
  }
  const int n = static_cast<int>(groups.size());
  ASSERT_GE(n, 3);
  ASSERT_LT(n, 64);
  auto values_of = [&](int j) {  // state j's sources
    std::map<uint32_t, Tensor> v = src_a;
    for (int g = 0; g < j; ++g)
      for (uint32_t id : groups[g]) v[id] = src_b.at(id);
    return v;
  };
  std::vector<Tensor> refs;
  std::vector<std::map<std::string, uint64_t>> ref_weights;
  {
    runtime::PlanEngine fresh(llama_plan(plan::BuildMode::Refit, false), one_thread());
    for (int j = 0; j <= n; ++j) {
      refit::Refitter r(fresh);
      for (const auto& [id, t] : values_of(j)) r.set_source(id, t);
      r.commit();
      refs.push_back(fresh.run(llama_inputs())[0]);
      ref_weights.push_back(derived_weight_hashes(fresh));
    }
  }
  // Some groups change no output bit (a source whose effect rounds away would make two states
  // equal): merge such states' groups forward until every state is told apart.
  // (The last group, having none after it, merges into the one before.)
  for (int j = 1; j < static_cast<int>(refs.size());) {
    if (!transforms::bit_equal(refs[j], refs[j - 1])) {
      ++j;
      continue;
    }
    const int into = j < static_cast<int>(groups.size()) ? j - 1 : j - 2;
    ASSERT_GE(into, 0);
    groups[into].insert(groups[into].end(), groups[into + 1].begin(), groups[into + 1].end());
    groups.erase(groups.begin() + into + 1);
    refs.erase(refs.begin() + into + 1);
    ref_weights.erase(ref_weights.begin() + into + 1);
    j = into + 1;
  }

  const int states = static_cast<int>(groups.size()) + 1;
  const int refits = refits_per_test();
  std::vector<int> schedule(refits + 1);
  for (int i = 0; i <= refits; ++i) {
    const int pos = i % (2 * (states - 1));
    schedule[i] = pos < states ? pos : 2 * (states - 1) - pos;
  }
  // The group that refit i changes, and whether to B's values (up) or back to A's (down).
  auto step = [&](int i) {
    const bool up = schedule[i] > schedule[i - 1];
    const int g = up ? schedule[i - 1] : schedule[i];
    std::map<uint32_t, Tensor> values;
    for (uint32_t id : groups[g]) values[id] = (up ? src_b : src_a).at(id);
    return values;
  };

  run_under_load(
      e, refs, schedule,
      [&](int i) {
        const auto values = step(i);
        refit::CommitOptions opts;
        opts.incremental = true;
        if (i % 2) {
          refit::RefitRequest req;
          req.tensors = by_key(p, values);
          req.commit = opts;
          EXPECT_EQ(refit::refit_from(e, req).commit.sources_set, values.size());
        } else {
          refit::Refitter r(e);
          for (const auto& [id, t] : values) r.set_source(id, t);
          r.commit(opts);
        }
      },
      [&](int i) {
        if (i % 2 || i + 1 >= static_cast<int>(schedule.size())) return;
        auto values = step(i + 1);
        const uint32_t late = values.rbegin()->first;
        refit::RefitRequest req;
        req.commit.incremental = true;
        if (i % 4) {
          values.at(late) = with_nan(values.at(late));
          req.tensors = by_key(p, values);
          expect_refused([&] { refit::refit_from(e, req); }, "holds NaN", "NaN in an incremental refit");
        } else {
          values.at(late) = Tensor::empty(DType::Float64, p.sources[late].shape);
          req.tensors = by_key(p, values);
          expect_refused([&] { refit::refit_from(e, req); }, "the plan expects", "float64 in an incremental refit");
        }
      });
  // The incremental chain left the same engine weights, bit for bit, as a complete refit to the
  // last state.
  EXPECT_EQ(derived_weight_hashes(e), ref_weights[schedule.back()]);
}

}  // namespace
