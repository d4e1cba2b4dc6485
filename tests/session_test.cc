// The session (session/session.h, session/build.h), the orchestration the CLI and the Python
// binding share, on the committed Llama-style model: builds bound to a checkpoint, reads and saves
// plans, refits from each kind of source; and the refit report's one schema, which `reforge refit
// --json` prints and Python's Plan.refit returns (docs/refit.md, "The refit report").
#include "session/session.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "refit/safetensors.h"
#include "session/build.h"
#include "support/engine_checks.h"
#include "support/scratch_dir.h"

using namespace reforge;
using test_support::derived_weight_hashes;
using test_support::error_of;
using test_support::ScratchDir;
namespace fs = std::filesystem;

namespace {

const fs::path kLlama = fs::path(REFORGE_SOURCE_DIR) / "models" / "llama";

std::string onnx_of(const char* weights) { return (kLlama / "dynamo" / weights / "model.onnx").string(); }
std::string checkpoint_of(const char* weights) {
  return (kLlama / (std::string("checkpoint_") + weights + ".safetensors")).string();
}

// Records what a session tells its observer.
struct Recorder : session::Observer {
  std::vector<std::string> phases, steps;
  int open = 0;
  void begin_phase(const std::string& what) override {
    phases.push_back(what);
    ++open;
  }
  void end_phase() override { --open; }
  void progress(const Progress& p) override {
    if (p.done == 0) steps.push_back(p.step);
  }
};

session::BuildRequest refit_build(const char* weights) {
  session::BuildRequest req;
  req.model = onnx_of(weights);
  req.options.mode = plan::BuildMode::Refit;
  return req;
}

// The schema's keys, in order (docs/refit.md).
const std::vector<std::string> kReportKeys = {
    "from",       "reader",      "mode",        "device",    "sources_set", "sources_unchanged",
    "weights_replayed", "bytes_in",   "bytes_out",   "bytes_copied", "packed_from_transposed",
    "weights_on_device", "bytes_streamed", "transposed_on_device",
    "read_ms",    "validate_ms", "replay_ms",   "commit_ms", "verify_ms",
    "verified_weights", "unused_checkpoint_tensors", "baked_given", "baked_differing_kept", "literals_given",
    "literals_differing_kept", "quantized", "lora", "note", "summary"};

std::vector<std::string> keys_of(const nlohmann::ordered_json& j) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  return keys;
}

}  // namespace

// A build bound to checkpoint A through the session: its phases, the binding summary counted
// from the plan's sources, and a refit from checkpoint B equal to a fresh build of B.
TEST(Session, BuildBoundToACheckpointThenRefitFromAnother) {
  session::BuildRequest req = refit_build("A");
  req.checkpoint.files = {checkpoint_of("A")};
  Recorder rec;
  session::Built built = session::build_plan(req, &rec);
  ASSERT_TRUE(built.binding);
  EXPECT_EQ(rec.phases, (std::vector<std::string>{"importing '" + onnx_of("A") + "'",
                                                  "building '" + onnx_of("A") + "' bound to checkpoint '" +
                                                      checkpoint_of("A") + "'"}));
  EXPECT_EQ(rec.open, 0);
  size_t bound = 0;
  for (const auto& s : built.plan.sources) bound += s.binding.status == plan::Binding::Status::Bound;
  EXPECT_EQ(built.binding->sources, built.plan.sources.size());
  EXPECT_EQ(built.binding->bound, bound);
  EXPECT_GT(bound, 0u);
  EXPECT_EQ(built.binding->checkpoint_bytes, refit::Checkpoint::open(checkpoint_of("A")).total_bytes());

  session::Session s(std::move(built.plan));
  EXPECT_TRUE(s.bound());
  EXPECT_EQ(s.device(), "cpu");
  refit::RefitRequest r;
  r.files = {checkpoint_of("B")};
  Recorder refit_rec;
  const refit::RefitReport rep = s.refit(r, &refit_rec);
  EXPECT_EQ(refit_rec.phases, (std::vector<std::string>{"refitting from '" + checkpoint_of("B") + "'"}));
  EXPECT_NE(std::find(refit_rec.steps.begin(), refit_rec.steps.end(), "validating sources"), refit_rec.steps.end());
  EXPECT_EQ(rep.from, "checkpoint");
  EXPECT_EQ(rep.reader, "safetensors");
  EXPECT_EQ(rep.device, "cpu");
  session::Session fresh(session::build_plan(refit_build("B")).plan);
  EXPECT_EQ(derived_weight_hashes(s.engine()), derived_weight_hashes(fresh.engine()));
}

TEST(Session, InconsistentBuildRequestsAreRefusedBeforeAnyWork) {
  session::BuildRequest req = refit_build("A");
  req.checkpoint.binds = {{"x", "y", "--bind x=y"}};
  EXPECT_NE(error_of([&] { session::build_plan(req); }).find("need a checkpoint to bind to"), std::string::npos);
  req = refit_build("A");
  req.checkpoint.files = {checkpoint_of("A")};
  req.checkpoint.tensors = {{"x", Tensor::scalar(DType::Float32, 1.0f)}};
  EXPECT_NE(error_of([&] { session::build_plan(req); }).find("as files or as tensors, not both"), std::string::npos);
  req = refit_build("A");
  req.options.strip_weights = true;
  req.options.mode = plan::BuildMode::Baked;
  EXPECT_NE(error_of([&] { session::build_plan(req); }), "");
}

// Saving: a plan with sources still missing is written stripped or not at all; a saved plan reads
// back verified, with the same weights.
TEST(Session, SaveAndReadBack) {
  ScratchDir dir("session_save");
  session::BuildRequest req = refit_build("A");
  req.options.strip_weights = true;
  session::Session s(session::build_plan(req).plan);
  ASSERT_FALSE(s.engine().missing_sources().empty());
  const std::string err = error_of([&] { s.save(dir.file("full.plan"), false); });
  EXPECT_NE(err.find("have no value yet"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir.file("full.plan")));
  refit::RefitRequest r;
  r.files = {onnx_of("B")};
  EXPECT_EQ(s.refit(r).reader, "onnx");
  Recorder rec;
  s.save(dir.file("b.plan"), false, &rec);
  EXPECT_EQ(rec.phases, (std::vector<std::string>{"writing '" + dir.file("b.plan") + "'"}));
  EXPECT_EQ(s.path(), dir.file("b.plan"));
  EXPECT_TRUE(session::is_plan_file(dir.file("b.plan")));
  EXPECT_FALSE(session::is_plan_file(onnx_of("B")));

  session::Session back(session::read_plan_file(dir.file("b.plan"), true));
  EXPECT_EQ(derived_weight_hashes(back.engine()), derived_weight_hashes(s.engine()));
  const nlohmann::json info = back.inspect();
  EXPECT_GT(info["verified"]["weights"].get<size_t>(), 0u);
  EXPECT_EQ(info["file_bytes"].get<size_t>(), fs::file_size(dir.file("b.plan")));
}

// One schema: the report's JSON has exactly the documented keys, in order, with the struct's
// values; a checkpoint's tensors no binding reads are listed by name.
TEST(Session, RefitReportSchema) {
  ScratchDir dir("session_schema");
  auto tensors = refit::Checkpoint::open(checkpoint_of("B")).tensors();
  tensors["optimizer.step"] = Tensor::scalar(DType::Int64, int64_t{3});
  refit::write_safetensors(dir.file("b_extra.bin"), tensors);

  session::BuildRequest req = refit_build("A");
  req.checkpoint.files = {checkpoint_of("A")};
  session::Session bound(session::build_plan(req).plan);
  refit::RefitRequest r;
  r.files = {dir.file("b_extra.bin")};
  const refit::RefitReport rep = bound.refit(r);
  const nlohmann::ordered_json j = rep.json();
  EXPECT_EQ(keys_of(j), kReportKeys);
  EXPECT_EQ(j["from"], "checkpoint");
  EXPECT_EQ(j["reader"], "safetensors");
  EXPECT_EQ(j["mode"], "fast");
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["sources_set"].get<size_t>(), rep.commit.sources_set);
  EXPECT_EQ(j["weights_replayed"].get<size_t>(), rep.commit.weights_replayed);
  EXPECT_EQ(j["unused_checkpoint_tensors"], nlohmann::ordered_json::array({"optimizer.step"}));
  EXPECT_EQ(j["verified_weights"].get<size_t>(), 0u);
  EXPECT_EQ(j["summary"], rep.summary());

  // Verify from ONNX: every derived engine weight compared.
  session::Session by_model(session::build_plan(refit_build("A")).plan);
  refit::RefitRequest v;
  v.files = {onnx_of("B")};
  v.mode = refit::RefitMode::Verify;
  const refit::RefitReport vrep = by_model.refit(v);
  size_t derived = 0;
  for (const auto& w : by_model.plan().weights) derived += w.kind == plan::WeightKind::Derived;
  EXPECT_EQ(vrep.json()["verified_weights"].get<size_t>(), derived);
  EXPECT_EQ(vrep.json()["mode"], "verify");
  EXPECT_EQ(keys_of(vrep.json()), kReportKeys);
}

// `reforge refit --json` prints the written file, then the same schema.
TEST(Session, CliRefitJsonIsTheReportSchema) {
  ScratchDir dir("session_cli");
  session::Session s(session::build_plan(refit_build("A")).plan);
  s.save(dir.file("a.plan"), false);
  std::string out;
  FILE* f = ::popen((std::string(REFORGE_CLI_PATH) + " --quiet refit " + dir.file("a.plan") + " --weights " +
                     onnx_of("B") + " -o " + dir.file("b.plan") + " --json 2>/dev/null")
                        .c_str(),
                    "r");
  ASSERT_NE(f, nullptr);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(f), 0) << out;
  const auto j = nlohmann::ordered_json::parse(out);
  std::vector<std::string> want = {"plan", "stripped"};
  want.insert(want.end(), kReportKeys.begin(), kReportKeys.end());
  EXPECT_EQ(keys_of(j), want);
  EXPECT_EQ(j["plan"], dir.file("b.plan"));
  EXPECT_EQ(j["reader"], "onnx");
  refit::RefitRequest req;
  req.files = {onnx_of("B")};
  EXPECT_EQ(j["sources_set"].get<size_t>(), s.refit(req).commit.sources_set);
}
