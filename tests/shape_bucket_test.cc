// Shape buckets (runtime/shape_bucket.h) and the engine's counters (Engine::stats): a thousand
// sequence lengths through the dynamic Llama export cost one shape inference and one arena plan per
// bucket, never one per length; runs inside a bucket take every activation from the arena; and the
// outputs equal, bit for bit, those of an engine that plans every signature exactly.
#include "runtime/shape_bucket.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "builder/builder.h"
#include "onnx/importer.h"
#include "runtime/plan_engine.h"
#include "support/same_bits.h"

using namespace reforge;
using test_support::same_bits;
namespace fs = std::filesystem;

namespace {

const fs::path kLlama = fs::path(REFORGE_SOURCE_DIR) / "models/llama/dynamo/A/model.onnx";

Tensor token_ids(int64_t batch, int64_t seq) {
  Tensor t = Tensor::empty(DType::Int64, {batch, seq});
  int64_t* p = t.mutable_data<int64_t>();
  for (int64_t i = 0; i < batch * seq; ++i) p[i] = (i * 7919 + 13) % 97;
  return t;
}

TEST(ShapeBucket, DimensionBuckets) {
  EXPECT_EQ(runtime::dimension_bucket(0), 0);
  EXPECT_EQ(runtime::dimension_bucket(1), 1);
  EXPECT_EQ(runtime::dimension_bucket(2), 2);
  EXPECT_EQ(runtime::dimension_bucket(3), 4);
  EXPECT_EQ(runtime::dimension_bucket(64), 64);
  EXPECT_EQ(runtime::dimension_bucket(65), 128);
  EXPECT_EQ(runtime::dimension_bucket(1000), 1024);
}

TEST(ShapeBucket, FixedDimensionsStayAndOthersRoundUp) {
  ir::ValueInfo x;
  x.name = "x";
  x.dtype = DType::Float32;
  x.has_shape = true;
  x.shape = {ir::Dim{2, ""}, ir::Dim{-1, "seq"}, ir::Dim{5, ""}};
  const std::map<std::string, Tensor> in{{"x", Tensor::empty(DType::Float32, {2, 37, 5})}};
  const runtime::ShapeBucket b = runtime::shape_bucket({x}, in);
  EXPECT_EQ(b.bounds.at("x"), (Shape{2, 64, 5}));
  EXPECT_FALSE(b.exact);
  EXPECT_EQ(b.key, "bucket:float32[2,64,5];");
  const runtime::ShapeBucket e = runtime::shape_bucket({x}, {{"x", Tensor::empty(DType::Float32, {2, 32, 5})}});
  EXPECT_TRUE(e.exact);
}

TEST(ShapeBucket, ThousandLengthsInferAndPlanOncePerBucket) {
  const plan::Plan p = build::build_plan(reforge::onnx::import_model_file(kLlama.string()), build::BuildOptions{});
  runtime::EngineOptions exact_options;
  exact_options.threads = 1;
  exact_options.shape_buckets = false;
  runtime::EngineOptions bucket_options = exact_options;
  bucket_options.shape_buckets = true;
  const runtime::PlanEngine bucketed(p, bucket_options), exact(p, exact_options);

  constexpr int64_t kLengths = 1000;
  std::set<int64_t> buckets;
  int64_t compared = 0;
  for (int64_t len = 1; len <= kLengths; ++len) {
    const int64_t batch = 1 + len % 2;  // both dimensions change
    const std::map<std::string, Tensor> in{{"input_ids", token_ids(batch, len)}};
    const runtime::EngineStats before = bucketed.stats();
    const std::vector<Tensor> out = bucketed.run(in);
    const runtime::EngineStats after = bucketed.stats();
    const bool new_bucket = buckets.insert(runtime::dimension_bucket(batch) * 100000 + runtime::dimension_bucket(len)).second;
    if (!new_bucket) {
      // Inside a known bucket: no inference and no plan, and every activation from the arena.
      EXPECT_EQ(after.inference_passes, before.inference_passes) << "batch " << batch << ", length " << len;
      EXPECT_EQ(after.arena_plans, before.arena_plans) << "batch " << batch << ", length " << len;
      const runtime::ArenaStats a = bucketed.arena_stats();
      EXPECT_EQ(a.unplanned_allocations, 0u) << "length " << len;
      EXPECT_EQ(a.copies, 0u) << "length " << len;
      EXPECT_EQ(a.heap_allocations, a.leaving_allocations) << "length " << len;
    }
    if (len % 37 == 1 || len == kLengths) {
      const std::vector<Tensor> want = exact.run(in);
      ASSERT_EQ(out.size(), want.size());
      for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(same_bits(out[i], want[i])) << "length " << len;
      ++compared;
    }
  }
  const runtime::EngineStats st = bucketed.stats();
  EXPECT_EQ(st.runs, kLengths);
  EXPECT_EQ(st.inference_passes, static_cast<int64_t>(buckets.size()));
  EXPECT_LE(st.arena_plans, 2 * static_cast<int64_t>(buckets.size()));
  EXPECT_EQ(st.live_weight_versions, 1);
  // The exact engine inferred once per signature it ran.
  EXPECT_EQ(exact.stats().inference_passes, compared);
}

}  // namespace
