// A stripped plan of a Llama-style model with >= 10 MB of weights is at most 2% of the full
// plan, and refitting it gives the same outputs as the full plan.
#include <gtest/gtest.h>

#include <iostream>

#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "plan/plan_io.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/synthetic_llama.h"
#include "transforms/recipe.h"

using namespace reforge;

TEST(StrippedPlan, AtMostTwoPercentOfFullAndRefitsExactly) {
  synth::LlamaSpec spec;
  spec.hidden = 256;
  spec.ffn = 704;
  spec.layers = 4;
  spec.vocab = 1024;
  ir::Graph g = synth::synthetic_llama(spec);
  size_t weight_bytes = 0;
  for (const auto& [n, t] : g.initializers) weight_bytes += t.nbytes();
  ASSERT_GE(weight_bytes, size_t{10} << 20);

  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  plan::Plan full = build::build_plan(g, o);
  o.strip_weights = true;
  plan::Plan stripped = build::build_plan(g, o);
  std::string full_bytes = plan::serialize_plan(full);
  std::string stripped_bytes = plan::serialize_plan(stripped);
  std::cout << "stripped plan " << stripped_bytes.size() << " bytes, full plan " << full_bytes.size() << " bytes\n";
  EXPECT_LE(stripped_bytes.size(), full_bytes.size() / 50)
      << "stripped " << stripped_bytes.size() << " bytes, full " << full_bytes.size() << " bytes";

  Tensor ids = Tensor::empty(DType::Int64, Shape{1, spec.seq});
  for (int64_t i = 0; i < spec.seq; ++i) ids.mutable_data<int64_t>()[i] = (i * 37) % spec.vocab;
  auto owner = std::make_shared<std::string>(std::move(stripped_bytes));
  runtime::PlanEngine e(plan::parse_plan(owner, owner->data(), owner->size()));
  EXPECT_THROW(e.run({{"input_ids", ids}}), Error);
  refit::Refitter r(e);
  for (const auto& [id, t] : build::read_sources_from_onnx(e.plan(), g)) r.set_source(id, t);
  r.commit();
  runtime::PlanEngine reference(std::move(full));
  auto got = e.run({{"input_ids", ids}});
  auto want = reference.run({{"input_ids", ids}});
  EXPECT_TRUE(transforms::bit_equal(got[0], want[0]));
}
