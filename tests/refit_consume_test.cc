// A refit that consumes its values (refit::CommitOptions::consume, what a refit from an ONNX file
// uses): the refitter drops each value once its last recipe has replayed, so that the values
// the engine does not keep are freed during the refit (a stripped plan's refit from ONNX then
// holds about the new weights, not the file's weights as well). Checked by the values' storage:
// after the commit each is freed, or held by the engine (an identity weight that is the value, a
// source value the engine keeps); and the refit equals one that consumes nothing, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>

#include "builder/onnx_refit.h"
#include "refit/refitter.h"
#include "support/llama_fixture.h"
#include "support/same_bits.h"

using namespace reforge;

namespace {

// Refits `e` from ONNX B, the file's values handed over as a refit from an ONNX file does
// (the refitter holds the only references); returns how many of those values were already freed
// when the last weight was replayed, and leaves in `alive` the storage still alive afterwards.
size_t refit_counting_freed(runtime::PlanEngine& e, bool consume, std::vector<std::shared_ptr<const void>>& alive) {
  std::vector<std::weak_ptr<const void>> storage;
  size_t freed_during = 0;
  {
    refit::Refitter r(e);
    for (const auto& [id, t] : build::read_sources_from_onnx(e.plan(), test_support::kLlamaB)) {
      r.set_source(id, t);
      storage.push_back(t.storage());
    }
    refit::CommitOptions o;
    o.consume = consume;
    o.replayed = [&](const std::string&, Tensor t) {
      size_t freed = 0;
      for (const auto& w : storage) freed += w.expired();
      freed_during = std::max(freed_during, freed);
      return t;
    };
    r.commit(o);
  }
  for (const auto& w : storage)
    if (auto a = w.lock()) alive.push_back(a);
  return freed_during;
}

TEST(RefitConsume, ValuesFreedOnceReplayedUnlessTheEngineKeepsThem) {
  runtime::PlanEngine consumed(test_support::llama_plan(plan::BuildMode::Refit, true));
  runtime::PlanEngine kept(test_support::llama_plan(plan::BuildMode::Refit, true));
  std::vector<std::shared_ptr<const void>> alive, alive_kept;
  // During the refit: values dropped as their recipes finish, where nothing consumed holds all.
  EXPECT_GT(refit_counting_freed(consumed, true, alive), 0u);
  EXPECT_EQ(refit_counting_freed(kept, false, alive_kept), 0u);

  // After it: what is alive is what the engine holds (its weights, the source values it keeps).
  std::set<const void*> held;
  for (const auto& w : consumed.plan().weights) held.insert(consumed.weight(w.name).storage().get());
  for (size_t s = 0; s < consumed.plan().sources.size(); ++s)
    held.insert(consumed.source_value(static_cast<uint32_t>(s)).storage().get());
  for (const auto& a : alive) EXPECT_TRUE(held.count(a.get())) << "a value outlives the refit, not held by the engine";

  // And the refit is the same.
  for (const auto& w : consumed.plan().weights)
    EXPECT_TRUE(test_support::same_bits(consumed.weight(w.name), kept.weight(w.name))) << w.name;
  const auto in = test_support::llama_inputs();
  EXPECT_TRUE(test_support::same_bits(consumed.run(in)[0], kept.run(in)[0]));
}

TEST(RefitConsume, ExcludesOwnValues) {
  runtime::PlanEngine e(test_support::llama_plan(plan::BuildMode::Refit, true));
  refit::Refitter r(e);
  for (const auto& [id, t] : build::read_sources_from_onnx(e.plan(), test_support::kLlamaB)) r.set_source(id, t);
  refit::CommitOptions o;
  o.consume = true;
  o.own_values = true;
  EXPECT_THROW(r.commit(o), Error);
  EXPECT_FALSE(e.missing_sources().empty());  // nothing committed
}

}  // namespace
