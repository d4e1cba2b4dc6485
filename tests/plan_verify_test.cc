// Weight bytes are verified when a plan is loaded: a plan whose weight section was damaged is an
// error that names the weight for `run`, `bench`, `refit` and `inspect --verify`, and no output
// is written; `--no-verify` (run, bench) skips the check; `refit` always verifies, so a corrupted
// literal of a stripped plan is refused instead of being re-hashed into the refit plan. The CLI
// cases run the real `reforge` binary on a small real export (models/llama, dynamo).
#include <sys/wait.h>

#include "builder/builder.h"
#include "onnx/importer.h"
#include "plan/plan_format.h"
#include "plan_test_util.h"
#include "runtime/plan_engine.h"
#include "support/cli.h"

using namespace plan_test;

namespace {

const std::string kRoot = REFORGE_SOURCE_DIR;
const std::string kModelA = kRoot + "/models/llama/dynamo/A/model.onnx";
const std::string kModelB = kRoot + "/models/llama/dynamo/B/model.onnx";
const std::string kInput = "input_ids=" + kRoot + "/models/llama/inputs/b1_s7/input_ids.npy";

struct Cli {
  int rc;
  std::string out;  // stdout and stderr
};

Cli cli(const TempDir&, const std::string& args) {
  auto r = test_support::run_cli(args);
  return {WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1, r.output};
}

Plan refit_plan() {
  build::BuildOptions bo;
  bo.mode = BuildMode::Refit;
  return build::build_plan(onnx::import_model_file(kModelA), bo);
}

// Index of the stored weight of `kind` with the most bytes.
size_t largest_stored(const json& meta, const std::string& kind) {
  size_t best = meta["weights"].size();
  uint64_t best_bytes = 0;
  for (size_t i = 0; i < meta["weights"].size(); ++i) {
    const json& w = meta["weights"][i];
    if (w["kind"] != kind || w["data"].is_null()) continue;
    uint64_t n = w["data"]["nbytes"].get<uint64_t>();
    if (best == meta["weights"].size() || n > best_bytes) best = i, best_bytes = n;
  }
  EXPECT_LT(best, meta["weights"].size()) << "no stored " << kind << " weight";
  return best;
}

// Flips up to 4 KiB of weight `index`'s bytes (from its start) in the plan file at `path`.
void flip_weight_bytes(const std::string& path, size_t index) {
  std::string b = slurp(path);
  json meta = metadata_of(b);
  const json& w = meta["weights"][index];
  size_t off = u64_at(b, 32) + w["data"]["offset"].get<uint64_t>();
  size_t n = std::min<size_t>(4096, w["data"]["nbytes"].get<uint64_t>());
  ASSERT_GT(n, 0u);
  for (size_t i = 0; i < n; ++i) b[off + i] = static_cast<char>(b[off + i] ^ 0x5a);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
}

}  // namespace

TEST(PlanVerify, ReaderNamesTheCorruptedWeight) {
  TempDir dir;
  std::string path = dir.file("p.plan");
  write_plan(refit_plan(), path);
  json meta = metadata_of(slurp(path));
  size_t i = largest_stored(meta, "derived");
  std::string name = meta["weights"][i]["name"];
  EXPECT_NO_THROW(read_plan(path));  // verifies by default
  flip_weight_bytes(path, i);
  std::string e = error_of([&] { read_plan(path); });
  EXPECT_NE(e.find("engine weight '" + name + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("data hash mismatch"), std::string::npos) << e;
  EXPECT_NE(e.find("the file is corrupted"), std::string::npos) << e;
  // Opting out loads the damaged bytes; reading metadata only touches none.
  EXPECT_NO_THROW(read_plan(path, {.verify_weight_hashes = false}));
  EXPECT_NO_THROW(read_plan(path, {.load_weights = false}));
}

TEST(PlanVerify, EveryCorruptedWeightIsListed) {
  TempDir dir;
  std::string path = dir.file("p.plan");
  write_plan(refit_plan(), path);
  json meta = metadata_of(slurp(path));
  std::vector<std::string> names;
  for (size_t i = 0; i < meta["weights"].size() && names.size() < 3; ++i) {
    const json& w = meta["weights"][i];
    if (w["data"].is_null() || w["data"]["nbytes"].get<uint64_t>() == 0) continue;
    flip_weight_bytes(path, i);
    names.push_back(w["name"]);
  }
  ASSERT_EQ(names.size(), 3u);
  std::string e = error_of([&] { read_plan(path); });
  EXPECT_NE(e.find("3 engine weights are corrupted"), std::string::npos) << e;
  for (const auto& n : names) EXPECT_NE(e.find("engine weight '" + n + "'"), std::string::npos) << n << ": " << e;
}

TEST(PlanVerify, RunAndBenchRefuseACorruptedPlanUnlessNoVerify) {
  TempDir dir;
  std::string good = dir.file("good.plan"), bad = dir.file("bad.plan");
  write_plan(refit_plan(), good);
  fs::copy_file(good, bad);
  json meta = metadata_of(slurp(bad));
  size_t i = largest_stored(meta, "derived");
  std::string name = meta["weights"][i]["name"];
  flip_weight_bytes(bad, i);

  Cli ok = cli(dir, "run " + good + " --input " + kInput + " --output-dir " + dir.file("out_good"));
  ASSERT_EQ(ok.rc, 0) << ok.out;
  EXPECT_TRUE(fs::exists(dir.file("out_good/logits.npy")));

  Cli r = cli(dir, "run " + bad + " --input " + kInput + " --output-dir " + dir.file("out_bad"));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("engine weight '" + name + "'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the file is corrupted"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.file("out_bad")));

  Cli b = cli(dir, "bench " + bad + " --input " + kInput + " --iterations 1 --warmup 0");
  EXPECT_EQ(b.rc, 1) << b.out;
  EXPECT_NE(b.out.find("engine weight '" + name + "'"), std::string::npos) << b.out;
  EXPECT_EQ(b.out.find("median_ms"), std::string::npos) << b.out;

  // --no-verify runs on the damaged bytes (the point of the check: nothing else notices).
  Cli nv = cli(dir, "run " + bad + " --no-verify --input " + kInput + " --output-dir " + dir.file("out_nv"));
  EXPECT_EQ(nv.rc, 0) << nv.out;
  EXPECT_TRUE(fs::exists(dir.file("out_nv/logits.npy")));
  Cli nb = cli(dir, "bench " + bad + " --no-verify --input " + kInput + " --iterations 1 --warmup 0");
  EXPECT_EQ(nb.rc, 0) << nb.out;
  EXPECT_NE(nb.out.find("median_ms"), std::string::npos) << nb.out;
}

TEST(PlanVerify, InspectVerifyChecksWithoutRunning) {
  TempDir dir;
  std::string path = dir.file("p.plan");
  write_plan(refit_plan(), path);
  Cli ok = cli(dir, "inspect --verify " + path);
  ASSERT_EQ(ok.rc, 0) << ok.out;
  EXPECT_NE(ok.out.find("match their recorded hashes"), std::string::npos) << ok.out;
  Cli js = cli(dir, "inspect --verify --json " + path);
  ASSERT_EQ(js.rc, 0) << js.out;
  EXPECT_GT(json::parse(js.out)["verified"]["weights"].get<size_t>(), 0u);

  json meta = metadata_of(slurp(path));
  size_t i = largest_stored(meta, "derived");
  std::string name = meta["weights"][i]["name"];
  flip_weight_bytes(path, i);
  Cli bad = cli(dir, "inspect --verify " + path);
  EXPECT_EQ(bad.rc, 1) << bad.out;
  EXPECT_NE(bad.out.find("engine weight '" + name + "'"), std::string::npos) << bad.out;
  // Without --verify inspect reads metadata only and still works on the damaged file.
  Cli plain = cli(dir, "inspect " + path);
  EXPECT_EQ(plain.rc, 0) << plain.out;
}

TEST(PlanVerify, RefitRefusesACorruptedPlanAndWritesNothing) {
  TempDir dir;
  std::string path = dir.file("p.plan");
  write_plan(refit_plan(), path);
  Cli ok = cli(dir, "refit " + path + " --weights " + kModelB + " -o " + dir.file("ok.plan"));
  ASSERT_EQ(ok.rc, 0) << ok.out;
  ASSERT_TRUE(fs::exists(dir.file("ok.plan")));

  json meta = metadata_of(slurp(path));
  size_t i = largest_stored(meta, "derived");
  std::string name = meta["weights"][i]["name"];
  flip_weight_bytes(path, i);
  std::string before = slurp(path);
  Cli r = cli(dir, "refit " + path + " --weights " + kModelB + " -o " + dir.file("out.plan"));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("engine weight '" + name + "'"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.file("out.plan")));
  // In place (no -o) the damaged plan is left exactly as it was.
  Cli in_place = cli(dir, "refit " + path + " --weights " + kModelB);
  EXPECT_EQ(in_place.rc, 1) << in_place.out;
  EXPECT_EQ(slurp(path), before);
}

TEST(PlanVerify, RefitOfAStrippedPlanStaysStrippedAndRefusesACorruptedLiteral) {
  TempDir dir;
  std::string path = dir.file("stripped.plan");
  write_plan(runtime::PlanEngine(refit_plan()).current_plan(/*strip=*/true), path);
  // The refit plan of a stripped plan is stripped too, unless --full asks for every weight.
  Cli small = cli(dir, "refit " + path + " --weights " + kModelB + " -o " + dir.file("small.plan"));
  ASSERT_EQ(small.rc, 0) << small.out;
  EXPECT_NE(small.out.find("(stripped)"), std::string::npos) << small.out;
  EXPECT_EQ(fs::file_size(dir.file("small.plan")), fs::file_size(path));
  Cli run_small = cli(dir, "run " + dir.file("small.plan") + " --input " + kInput);
  EXPECT_EQ(run_small.rc, 1) << run_small.out;
  EXPECT_NE(run_small.out.find("stripped"), std::string::npos) << run_small.out;
  Cli ok = cli(dir, "refit " + path + " --weights " + kModelB + " -o " + dir.file("ok.plan") + " --full");
  ASSERT_EQ(ok.rc, 0) << ok.out;
  EXPECT_GT(fs::file_size(dir.file("ok.plan")), fs::file_size(path));
  Cli run_ok = cli(dir, "run " + dir.file("ok.plan") + " --input " + kInput);
  ASSERT_EQ(run_ok.rc, 0) << run_ok.out;

  // A literal is stored in every plan, stripped or not, and the refit plan carries it over: it
  // must not leave the refit with a fresh hash over damaged bytes.
  json meta = metadata_of(slurp(path));
  size_t i = largest_stored(meta, "literal");
  std::string name = meta["weights"][i]["name"];
  flip_weight_bytes(path, i);
  Cli r = cli(dir, "refit " + path + " --weights " + kModelB + " -o " + dir.file("out.plan"));
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("engine weight '" + name + "' (literal"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.file("out.plan")));
  Cli insp = cli(dir, "inspect --verify " + path);
  EXPECT_EQ(insp.rc, 1) << insp.out;
  EXPECT_NE(insp.out.find("engine weight '" + name + "'"), std::string::npos) << insp.out;
}

// A weight larger than one piece (plan::format::kPiece) records a hash per piece, verified on all
// threads at once: one flipped byte in its second piece is an error naming the weight and piece.
TEST(PlanVerify, LargeWeightsAreVerifiedPieceByPiece) {
  ir::Graph g;
  g.name = "big";
  g.opsets[""] = 18;
  const int64_t k = 1200;  // a 1200x1200 float32 weight: 5.5 MiB, two pieces
  g.inputs.push_back({"x", DType::Float32, true, {{1, ""}, {k, ""}}});
  g.outputs.push_back({"y", DType::Float32, true, {{1, ""}, {k, ""}}});
  Tensor w = Tensor::empty(DType::Float32, {k, k});
  for (int64_t i = 0; i < w.numel(); ++i) w.mutable_data<float>()[i] = static_cast<float>(i % 977) * 1e-3f;
  g.initializers["w"] = w;
  ir::Node n;
  n.name = "mm", n.op_type = "MatMul", n.opset = 18, n.inputs = {"x", "w"}, n.outputs = {"y"};
  g.nodes = {n};
  TempDir dir;
  std::string path = dir.file("big.plan");
  write_plan(build::build_plan(g, {}), path);
  std::string b = slurp(path);
  json meta = metadata_of(b);
  size_t big = meta["weights"].size();
  for (size_t i = 0; i < meta["weights"].size(); ++i)
    if (!meta["weights"][i]["data"].is_null() &&
        meta["weights"][i]["data"]["nbytes"].get<uint64_t>() > plan::format::kPiece)
      big = i;
  ASSERT_LT(big, meta["weights"].size());
  const json& data = meta["weights"][big]["data"];
  ASSERT_EQ(data["xxh3_pieces"].size(),
            (data["nbytes"].get<uint64_t>() + plan::format::kPiece - 1) / plan::format::kPiece);
  EXPECT_NO_THROW(read_plan(path));
  size_t off = u64_at(b, 32) + data["offset"].get<uint64_t>() + plan::format::kPiece + 123;
  b[off] = static_cast<char>(b[off] ^ 0x01);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
  std::string e = error_of([&] { read_plan(path); });
  EXPECT_NE(e.find("engine weight '" + meta["weights"][big]["name"].get<std::string>() + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("piece 1 of"), std::string::npos) << e;
}
