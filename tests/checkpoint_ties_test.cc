// Tied checkpoint tensors (plan::Binding::Input::ties) in the plan file: written only when a bound
// checkpoint tensor had copies at build, read back as written, and a malformed list refused naming
// the field. What binding records and what a checkpoint refit refuses is tested on the bundled
// Hugging Face exports in python/tests/test_checkpoint_ties.py.
#include "plan_test_util.h"

using namespace plan_test;

namespace {

// The sample plan with source 0 bound to checkpoint tensor "embed" with `ties`.
Plan bound_sample(std::vector<std::string> ties) {
  Plan p = sample_plan();
  Binding& b = p.sources[0].binding;
  b.status = Binding::Status::Bound;
  b.checkpoint = {{"embed", p.sources[0].dtype, p.sources[0].shape, std::move(ties)}};
  b.note = "identity";
  return p;
}

}  // namespace

TEST(CheckpointTies, RoundTripAndWrittenOnlyWhenPresent) {
  Plan p = bound_sample({"lm_head", "shared"});
  Plan q = parse_bytes(serialize_plan(p));
  ASSERT_EQ(q.sources[0].binding.checkpoint.size(), 1u);
  EXPECT_EQ(q.sources[0].binding.checkpoint[0].name, "embed");
  EXPECT_EQ(q.sources[0].binding.checkpoint[0].ties, (std::vector<std::string>{"lm_head", "shared"}));
  EXPECT_EQ(serialize_plan(q), serialize_plan(p));
  EXPECT_EQ(metadata_of(serialize_plan(p))["sources"][0]["binding"]["checkpoint"][0]["ties"],
            json::array({"lm_head", "shared"}));

  // No ties: no field, so plans of checkpoints without tied copies keep their bytes.
  std::string plain = serialize_plan(bound_sample({}));
  EXPECT_FALSE(metadata_of(plain)["sources"][0]["binding"]["checkpoint"][0].contains("ties"));
  EXPECT_TRUE(parse_bytes(plain).sources[0].binding.checkpoint[0].ties.empty());
}

TEST(CheckpointTies, MalformedTiesAreRefusedNamingTheField) {
  const std::string b = serialize_plan(bound_sample({"shared"}));
  const json base = metadata_of(b);
  struct Case {
    json ties;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{{json("shared"), "expected an array"},
                                         {json::array({1}), "expected a string"},
                                         {json::array({""}), "a tie names no tensor"},
                                         {json::array({"embed"}), "a tie names the tensor itself"}}) {
    json m = base;
    m["sources"][0]["binding"]["checkpoint"][0]["ties"] = c.ties;
    std::string e = error_of([&] { parse_bytes(with_metadata(b, m.dump())); });
    EXPECT_NE(e.find("checkpoint[0].ties"), std::string::npos) << c.ties.dump() << ": " << e;
    EXPECT_NE(e.find(c.want), std::string::npos) << c.ties.dump() << ": " << e;
  }
}
