// The reforge tool as users of trtexec and Polygraphy use it: synthetic inputs, --json,
// --compare-onnxrt, bench statistics and the hints on a parse error.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "core/npy.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "support/cli.h"
#include "support/make_tensor.h"

namespace reforge {
namespace {

namespace fs = std::filesystem;
using test_support::run_cli;

const std::string kRoot = REFORGE_SOURCE_DIR;
// input_ids: int64[batch, seq]; logits: float32[batch, seq, 128].
const std::string kGpt2 = kRoot + "/models/gpt2/torch113_fold_dynamic/A/model.onnx";
const std::string kGpt2B = kRoot + "/models/gpt2/torch113_fold_dynamic/B/model.onnx";

// stdout alone (stderr dropped), for the JSON documents.
test_support::CliResult run_stdout(const std::string& args) {
  test_support::CliResult r;
  FILE* f = ::popen((std::string(REFORGE_CLI_PATH) + " " + args + " 2>/dev/null").c_str(), "r");
  if (!f) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) r.output.append(buf, n);
  r.status = ::pclose(f);
  return r;
}

fs::path scratch_root() { return fs::temp_directory_path() / ("reforge_cli_options_" + std::to_string(::getpid())); }

// Removes this process's scratch folder when the tests end.
struct ScratchCleanup {
  ~ScratchCleanup() {
    std::error_code ec;
    fs::remove_all(scratch_root(), ec);
  }
} scratch_cleanup;

std::string fresh_dir(const std::string& name) {
  fs::path d = scratch_root() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(CliSynthetic, DeterministicShapedAsDeclaredAndInRange) {
  std::string a = fresh_dir("synth_a"), b = fresh_dir("synth_b"), c = fresh_dir("synth_c");
  auto ra =
      run_cli("run " + kGpt2 + " --synthesize-missing --shape batch=2 --shape seq=5 --save-inputs " + a + " -o " + a);
  ASSERT_EQ(ra.status, 0) << ra.output;
  EXPECT_NE(ra.output.find("synthesized input 'input_ids': int64[2,5] uniform in [0, 100)"), std::string::npos)
      << ra.output;
  // The whole shape given by input name is the same thing as its symbols given one by one.
  auto rb = run_cli("run " + kGpt2 + " --synthesize-missing --shape input_ids=2x5 --save-inputs " + b + " -o " + b);
  ASSERT_EQ(rb.status, 0) << rb.output;
  EXPECT_EQ(file_bytes(a + "/input_ids.npy"), file_bytes(b + "/input_ids.npy"));
  EXPECT_EQ(file_bytes(a + "/logits.npy"), file_bytes(b + "/logits.npy"));
  Tensor ids = read_npy(a + "/input_ids.npy");
  ASSERT_EQ(ids.dtype(), DType::Int64);
  ASSERT_EQ(ids.shape(), (Shape{2, 5}));
  std::set<int64_t> distinct;
  for (int64_t i = 0; i < ids.numel(); ++i) {
    EXPECT_GE(ids.as_int64(i), 0);
    EXPECT_LT(ids.as_int64(i), 100);
    distinct.insert(ids.as_int64(i));
  }
  EXPECT_GT(distinct.size(), 3u);  // drawn, not a constant fill
  EXPECT_EQ(read_npy(a + "/logits.npy").shape(), (Shape{2, 5, 128}));
  // Another seed and range give other inputs, inside that range.
  auto rc =
      run_cli("run " + kGpt2 +
              " --synthesize-missing --shape batch=2 --shape seq=5 --seed 7 --int-range 10:20 --save-inputs " + c);
  ASSERT_EQ(rc.status, 0) << rc.output;
  Tensor other = read_npy(c + "/input_ids.npy");
  EXPECT_NE(file_bytes(a + "/input_ids.npy"), file_bytes(c + "/input_ids.npy"));
  for (int64_t i = 0; i < other.numel(); ++i) {
    EXPECT_GE(other.as_int64(i), 10);
    EXPECT_LT(other.as_int64(i), 20);
  }
}

// ids: int64[batch, 3] indexing the 10 rows of 'emb' (Gather): synthetic ids stay below 10.
TEST(CliSynthetic, TokenIdsStayBelowTheRowsOfTheirEmbedding) {
  std::string d = fresh_dir("embedding");
  ir::Graph g;
  g.name = "embedding";
  g.ir_version = 10;
  g.opsets = {{"", 18}};
  g.inputs.push_back({"ids", DType::Int64, true, {{-1, "batch"}, {3, ""}}});
  g.outputs.push_back({"y", DType::Float32, false, {}});
  g.initializers["emb"] = test_support::random_floats({10, 4}, 1);
  ir::Node n;
  n.name = "embed";
  n.op_type = "Gather";
  n.opset = 18;
  n.inputs = {"emb", "ids"};
  n.outputs = {"y"};
  g.nodes.push_back(n);
  std::string model = d + "/embedding.onnx";
  onnx::write_model_file(g, model);
  auto r = run_cli("run " + model + " --synthesize-missing --shape batch=40 --save-inputs " + d + " -o " + d);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("synthesized input 'ids': int64[40,3] uniform in [0, 10) (below the 10 rows of 'emb' that "
                          "node 'embed' (Gather) indexes"),
            std::string::npos)
      << r.output;
  Tensor ids = read_npy(d + "/ids.npy");
  ASSERT_EQ(ids.numel(), 120);
  std::set<int64_t> seen;
  for (int64_t i = 0; i < ids.numel(); ++i) seen.insert(ids.as_int64(i));
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 9);  // 120 draws from 10 values reach both ends
  // The output is the table's rows the ids pick.
  Tensor y = read_npy(d + "/y.npy"), emb = g.initializers["emb"];
  ASSERT_EQ(y.shape(), (Shape{40, 3, 4}));
  for (int64_t i = 0; i < ids.numel(); ++i)
    for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(y.as_double(i * 4 + k), emb.as_double(ids.as_int64(i) * 4 + k));
  // A plan keeps the bound, a weight-stripped one too (its weights' shapes are recorded): the
  // optimized graph's Gather and the table's recorded rows.
  std::string plan = d + "/embedding.plan";
  auto b = run_cli("build " + model + " --refit --strip-weights -o " + plan);
  ASSERT_EQ(b.status, 0) << b.output;
  std::string pd = d + "/plan";
  auto rp =
      run_cli("run " + plan + " --synthesize-missing --weights " + model + " --shape batch=40 --save-inputs " + pd);
  ASSERT_EQ(rp.status, 0) << rp.output;
  EXPECT_NE(rp.output.find("uniform in [0, 10) (below the 10 rows of 'emb'"), std::string::npos) << rp.output;
  Tensor pids = read_npy(pd + "/ids.npy");
  for (int64_t i = 0; i < pids.numel(); ++i) EXPECT_LT(pids.as_int64(i), 10);
}

// b: uint8[4], cast to float: the integer range must fit uint8.
TEST(CliSynthetic, IntegerRangeMustFitTheInputType) {
  std::string d = fresh_dir("uint8");
  ir::Graph g;
  g.name = "cast";
  g.ir_version = 10;
  g.opsets = {{"", 18}};
  g.inputs.push_back({"b", DType::UInt8, true, {{4, ""}}});
  g.outputs.push_back({"y", DType::Float32, false, {}});
  ir::Node n;
  n.name = "cast";
  n.op_type = "Cast";
  n.opset = 18;
  n.inputs = {"b"};
  n.outputs = {"y"};
  n.attrs["to"] = ir::int_attr("to", 1);  // ONNX FLOAT
  g.nodes.push_back(n);
  std::string model = d + "/cast.onnx";
  onnx::write_model_file(g, model);
  auto wide = run_cli("run " + model + " --synthesize-missing --int-range 0:300");
  EXPECT_EQ(WEXITSTATUS(wide.status), 1);
  EXPECT_NE(
      wide.output.find("input 'b' is uint8: the integer range [0, 300) does not fit it; give one within [0, 255]"),
      std::string::npos)
      << wide.output;
  auto ok = run_cli("run " + model + " --synthesize-missing --int-range 250:256 --save-inputs " + d);
  ASSERT_EQ(ok.status, 0) << ok.output;
  Tensor b = read_npy(d + "/b.npy");
  ASSERT_EQ(b.dtype(), DType::UInt8);
  for (int64_t i = 0; i < b.numel(); ++i) EXPECT_GE(b.as_int64(i), 250);
}

TEST(CliSynthetic, UnfixedSymbolIsAnErrorNamingIt) {
  auto r = run_cli("run " + kGpt2 + " --synthesize-missing --shape batch=1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("input 'input_ids' dimension 1 is the symbol 'seq'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--shape seq=N"), std::string::npos) << r.output;
  auto typo = run_cli("run " + kGpt2 + " --synthesize-missing --shape bacth=1 --shape seq=2");
  EXPECT_NE(typo.status, 0);
  EXPECT_NE(typo.output.find("did you mean 'batch'?"), std::string::npos) << typo.output;
  auto wrong = run_cli("run " + kGpt2 + " --synthesize-missing --shape input_ids=2x3x4");
  EXPECT_NE(wrong.status, 0);
  EXPECT_NE(wrong.output.find("does not fit its declared shape"), std::string::npos) << wrong.output;
}

TEST(CliJson, RunCheckBuildRefitAndBenchPrintOneDocument) {
  std::string d = fresh_dir("json");
  auto run = run_stdout("run " + kGpt2 + " --synthesize-missing --shape batch=1 --shape seq=3 --json -o " + d);
  ASSERT_EQ(run.status, 0) << run.output;
  auto j = nlohmann::json::parse(run.output);
  ASSERT_EQ(j["inputs"].size(), 1u);
  EXPECT_EQ(j["inputs"][0]["name"], "input_ids");
  EXPECT_EQ(j["inputs"][0]["shape"], nlohmann::json::array({1, 3}));
  EXPECT_EQ(j["inputs"][0]["synthesized"], true);
  EXPECT_EQ(j["outputs"][0]["name"], "logits");
  EXPECT_EQ(j["outputs"][0]["shape"], nlohmann::json::array({1, 3, 128}));
  EXPECT_EQ(j["outputs"][0]["file"], d + "/logits.npy");
  EXPECT_EQ(j["ok"], true);

  auto check = run_stdout("check " + kGpt2 + " --json");
  ASSERT_EQ(check.status, 0) << check.output;
  auto c = nlohmann::json::parse(check.output);
  EXPECT_EQ(c["unsupported"].size(), 0u);
  EXPECT_TRUE(c["shape_error"].is_null());
  EXPECT_EQ(c["outputs"][0]["type"], "float32[batch,seq,128]");

  std::string plan = d + "/a.plan", refit = d + "/b.plan";
  auto build = run_stdout("build " + kGpt2 + " --refit -o " + plan + " --json");
  ASSERT_EQ(build.status, 0) << build.output;
  auto b = nlohmann::json::parse(build.output);
  EXPECT_EQ(b["plan"], plan);
  EXPECT_EQ(b["mode"], "refit");
  EXPECT_EQ(b["bytes"], fs::file_size(plan));
  EXPECT_GT(b["refittable_sources"].get<int>(), 0);

  auto rf = run_stdout("refit " + plan + " -w " + kGpt2B + " -o " + refit + " --json");
  ASSERT_EQ(rf.status, 0) << rf.output;
  auto r = nlohmann::json::parse(rf.output);
  EXPECT_EQ(r["plan"], refit);
  EXPECT_EQ(r["from"], "onnx");
  EXPECT_EQ(r["sources_set"], b["refittable_sources"]);
  EXPECT_TRUE(fs::exists(refit));
}

TEST(CliBench, StatisticsAndChromeTrace) {
  std::string d = fresh_dir("bench");
  std::string trace = d + "/trace.json";
  auto r = run_stdout("bench " + kGpt2 + " --shape batch=1 --shape seq=4 --iterations 25 --warmup 1 --profile-json " +
                      trace);
  ASSERT_EQ(r.status, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["iterations"], 25);
  double mn = j["min_ms"], mx = j["max_ms"], mean = j["mean_ms"];
  double p50 = j["p50_ms"], p90 = j["p90_ms"], p99 = j["p99_ms"];
  EXPECT_LE(mn, p50);
  EXPECT_LE(p50, p90);
  EXPECT_LE(p90, p99);
  EXPECT_LE(p99, mx);
  EXPECT_LE(mn, mean);
  EXPECT_LE(mean, mx);
  EXPECT_EQ(p99, mx);  // nearest rank: ceil(0.99 * 25) = 25, the largest
  EXPECT_GE(j["stddev_ms"].get<double>(), 0.0);
  EXPECT_GT(j["throughput_per_s"].get<double>(), 0.0);
  EXPECT_LE(j["throughput_per_s"].get<double>(), 1000.0 / mn);
  EXPECT_GT(j["peak_rss_bytes"].get<int64_t>(), 1 << 20);
  auto t = nlohmann::json::parse(file_bytes(trace));
  auto check = nlohmann::json::parse(run_stdout("check " + kGpt2 + " --json").output);
  ASSERT_FALSE(t["traceEvents"].empty());
  // Every node of the 26 runs (warm-up and timed, under the 64 kept) at its real start: within a
  // run in execution order without overlap, each run after the one before.
  double end = 0;
  int64_t run = -1;
  std::map<int64_t, size_t> per_run;
  std::vector<std::string> first_run_nodes, run_nodes;
  for (const auto& e : t["traceEvents"]) {
    EXPECT_EQ(e["ph"], "X");
    EXPECT_EQ(e["tid"], 1);  // one calling thread
    const int64_t r = e["args"]["run"];
    if (r != run) {
      EXPECT_EQ(r, run + 1);
      if (run == 0) first_run_nodes = run_nodes;
      if (run > 0) {
        EXPECT_EQ(run_nodes, first_run_nodes) << "run " << run;
      }
      run_nodes.clear();
      run = r;
    }
    EXPECT_GE(e["ts"].get<double>(), end - 1e-3);
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    end = e["ts"].get<double>() + e["dur"].get<double>();
    run_nodes.push_back(e["name"]);
    per_run[r] += 1;
  }
  EXPECT_EQ(run, 25);
  ASSERT_EQ(per_run.size(), 26u);
  // The trace's nodes are the built plan's, fewer than the model's after fusion, never more.
  EXPECT_LE(per_run[0], check["nodes"].get<size_t>());
  EXPECT_GT(end, 0.0);
}

TEST(CliHints, DidYouMeanAndTrtexecFlags) {
  auto cmd = run_cli("buidl " + kGpt2);
  EXPECT_EQ(WEXITSTATUS(cmd.status), 2);
  EXPECT_NE(cmd.output.find("'buidl' is not a reforge command; did you mean 'build'?"), std::string::npos)
      << cmd.output;
  auto flag = run_cli("run " + kGpt2 + " --sed 3");
  EXPECT_NE(flag.output.find("'--sed' is not an option of 'run'; did you mean '--seed'?"), std::string::npos)
      << flag.output;
  auto trt = run_cli("build " + kGpt2 + " --fp16 --saveEngine=x.plan");
  EXPECT_NE(trt.output.find("'--fp16' is a trtexec/Polygraphy flag: reforge takes '--precision fp16'"),
            std::string::npos)
      << trt.output;
  EXPECT_NE(trt.output.find("'--saveEngine' is a trtexec/Polygraphy flag: reforge writes the plan with '-o FILE'"),
            std::string::npos)
      << trt.output;
  auto zero = run_cli("bench " + kGpt2 + " --iterations 0");
  EXPECT_EQ(WEXITSTATUS(zero.status), 2);
  EXPECT_NE(zero.output.find("--iterations: must be an integer from 1 to 10000000 (it counts timed runs), got '0'"),
            std::string::npos)
      << zero.output;
  EXPECT_NE(zero.output.find("--duration SECONDS"), std::string::npos) << zero.output;
}

TEST(CliChecks, OutputFolderAndExpectNamesBeforeTheRun) {
  std::string d = fresh_dir("checks");
  auto expect =
      run_cli("run " + kGpt2 + " --synthesize-missing --shape batch=1 --shape seq=2 --expect logit=" + d + "/none.npy");
  EXPECT_EQ(WEXITSTATUS(expect.status), 1);
  EXPECT_NE(expect.output.find("--expect names 'logit', which is not an output of the model; did you mean 'logits'?"),
            std::string::npos)
      << expect.output;
  EXPECT_EQ(expect.output.find("synthesized input"), std::string::npos) << "checked after the inputs were made";
  std::ofstream(d + "/file") << "x";
  auto out = run_cli("run " + kGpt2 + " --synthesize-missing --shape batch=1 --shape seq=2 -o " + d + "/file/out");
  EXPECT_EQ(WEXITSTATUS(out.status), 1);
  EXPECT_NE(out.output.find("--output-dir '" + d + "/file/out': '" + d + "/file' is not a folder"), std::string::npos)
      << out.output;
  EXPECT_EQ(out.output.find("synthesized input"), std::string::npos) << "checked after the inputs were made";
  auto build = run_cli("build " + kGpt2 + " -o " + d + "/missing/a.plan");
  EXPECT_EQ(WEXITSTATUS(build.status), 1);
  EXPECT_NE(build.output.find("the folder '" + d + "/missing' does not exist"), std::string::npos) << build.output;
}

// Without the node suite, conformance says what the folder is and where it comes from.
TEST(CliConformance, MissingSuiteFolderSaysWhereItComesFrom) {
  for (const std::string& args : {std::string("conformance"), "conformance " + fresh_dir("nosuite") + "/node"}) {
    auto r = run_cli(args + " --list " + kRoot + "/tests/conformance/required-standard-types.txt");
    EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.output;
    EXPECT_NE(r.output.find("the 'node' folder of the ONNX backend node suite"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("$REFORGE_ONNX_SUITE"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("test folder not found"), std::string::npos) << "no test runs: " << r.output;
  }
}

TEST(CliProgress, VerbosePrintsEveryPhaseQuietNone) {
  std::string d = fresh_dir("progress");
  auto v = run_cli("build " + kGpt2 + " --refit -o " + d + "/a.plan --verbose");
  ASSERT_EQ(v.status, 0) << v.output;
  for (const char* phase : {"reforge: importing '", "reforge: building '", "reforge: writing '"})
    EXPECT_NE(v.output.find(phase), std::string::npos) << phase << "\n" << v.output;
  EXPECT_NE(v.output.find("reforge: building '" + kGpt2 + "': done in "), std::string::npos) << v.output;
  // The build's steps, each with its time, in order: inference, the passes, recipes, placement.
  size_t at = 0;
  for (const char* step : {"reforge:   shape inference: ", "reforge:   pass ", "reforge:   verifying recipes (",
                           "reforge:   hashing weights (", "reforge:   placing nodes: "}) {
    const size_t found = v.output.find(step, at);
    EXPECT_NE(found, std::string::npos) << step << "\n" << v.output;
    if (found != std::string::npos) at = found;
  }
  // Counted steps end with their size: engine weights verified, bytes hashed.
  const std::regex verified("reforge:   verifying recipes \\([0-9]+ weights\\): [0-9.]+ m?s\n");
  const std::regex hashed("reforge:   hashing weights \\([0-9.]+ [KMG]B\\): [0-9.]+ m?s\n");
  EXPECT_TRUE(std::regex_search(v.output, verified)) << v.output;
  EXPECT_TRUE(std::regex_search(v.output, hashed)) << v.output;
  auto r = run_cli("--verbose refit " + d + "/a.plan -w " + kGpt2B + " -o " + d + "/b.plan");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("reforge: refitting from '" + kGpt2B + "': done in "), std::string::npos) << r.output;
  // The refit's steps from inside the library, in order, the replay with the bytes it wrote.
  at = 0;
  for (const char* step :
       {"reforge:   importing the model: ", "reforge:   validating sources: ", "reforge:   replaying recipes ("}) {
    const size_t found = r.output.find(step, at);
    EXPECT_NE(found, std::string::npos) << step << "\n" << r.output;
    if (found != std::string::npos) at = found;
  }
  auto rq = run_cli("--quiet refit " + d + "/a.plan -w " + kGpt2B + " -o " + d + "/c.plan");
  ASSERT_EQ(rq.status, 0) << rq.output;
  EXPECT_EQ(rq.output, "refit plan written to " + d + "/c.plan\n") << "--quiet: no progress, no summary";
  // Quick phases print nothing by default; --quiet also drops the notes.
  auto n = run_cli("run " + kGpt2 + " --synthesize-missing --shape batch=1 --shape seq=2");
  ASSERT_EQ(n.status, 0) << n.output;
  EXPECT_EQ(n.output.find("reforge: "), std::string::npos) << n.output;
  EXPECT_NE(n.output.find("synthesized input"), std::string::npos) << n.output;
  auto q = run_cli("run " + kGpt2 + " --synthesize-missing --shape batch=1 --shape seq=2 --quiet");
  ASSERT_EQ(q.status, 0) << q.output;
  EXPECT_EQ(q.output, "logits: float32[1,2,128]\n");
}

bool venv_has_onnxruntime() {
  std::string cmd = kRoot + "/.venv/bin/python -c 'import onnxruntime' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

TEST(CliOnnxrt, ComparePassesAndZeroToleranceFails) {
  if (!venv_has_onnxruntime()) GTEST_SKIP() << kRoot << "/.venv has no onnxruntime (scripts/setup.sh installs it)";
  auto ok = run_cli("run " + kGpt2 + " --synthesize-missing --shape batch=1 --shape seq=6 --compare-onnxrt");
  ASSERT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("compare with ONNX Runtime"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("PASS"), std::string::npos) << ok.output;
  // The two engines round differently: with no tolerance at all some element differs.
  auto strict = run_cli("run " + kGpt2 +
                        " --synthesize-missing --shape batch=1 --shape seq=6 --compare-onnxrt --atol 0 --rtol 0");
  EXPECT_EQ(WEXITSTATUS(strict.status), 1) << strict.output;
  EXPECT_NE(strict.output.find("max abs"), std::string::npos) << strict.output;
  EXPECT_NE(strict.output.find("FAIL ("), std::string::npos) << strict.output;
  auto j = nlohmann::json::parse(
      run_stdout("run " + kGpt2 +
                 " --synthesize-missing --shape batch=1 --shape seq=6 --compare-onnxrt --atol logits=0 --rtol 0 --json")
          .output);
  ASSERT_EQ(j["onnxrt"].size(), 1u);
  EXPECT_EQ(j["onnxrt"][0]["pass"], false);
  EXPECT_GT(j["onnxrt"][0]["max_abs"].get<double>(), 0.0);
  EXPECT_LT(j["onnxrt"][0]["max_abs"].get<double>(), 1e-3);
  EXPECT_LE(j["onnxrt"][0]["mean_abs"].get<double>(), j["onnxrt"][0]["max_abs"].get<double>());
  EXPECT_EQ(j["ok"], false);
  auto plan = run_cli("run " + kRoot +
                      "/models/gpt2/torch113_fold_dynamic/A/model.onnx --synthesize-missing --compare-onnxrt -w " +
                      kGpt2B + " --shape batch=1 --shape seq=2");
  EXPECT_NE(plan.output.find("give the ONNX model holding those weights with --onnxrt-model"), std::string::npos)
      << plan.output;
}

// --mark-outputs (Polygraphy's marking): every value a node makes (all), or the named ones, is an
// output of both engines and compared; a name that matches no value is refused naming the nearest;
// a plan, built already, is refused.
TEST(CliOnnxrt, MarkedOutputsCompareIntermediateValues) {
  if (!venv_has_onnxruntime()) GTEST_SKIP() << kRoot << "/.venv has no onnxruntime (scripts/setup.sh installs it)";
  const ir::Graph g = onnx::import_model_file(kGpt2);
  std::vector<std::string> made;
  for (const ir::Node& n : g.nodes)
    if (n.op_type != "Constant")
      for (const auto& o : n.outputs)
        if (!o.empty() && o != "logits") made.push_back(o);
  ASSERT_GT(made.size(), 20u);
  const std::string args = "run " + kGpt2 + " --synthesize-missing --shape batch=1 --shape seq=6 --compare-onnxrt --json";
  auto j = nlohmann::json::parse(run_stdout(args + " --mark-outputs all").output);
  ASSERT_EQ(j["onnxrt"].size(), made.size() + 1);
  std::set<std::string> compared;
  for (const auto& c : j["onnxrt"]) {
    compared.insert(c["name"].get<std::string>());
    EXPECT_EQ(c["pass"], true) << c.dump();
  }
  for (const auto& m : made) EXPECT_TRUE(compared.count(m)) << m;
  j = nlohmann::json::parse(run_stdout(args + " --mark-outputs " + made[made.size() / 2]).output);
  ASSERT_EQ(j["onnxrt"].size(), 2u);
  EXPECT_EQ(j["onnxrt"][1]["name"], made[made.size() / 2]);
  auto typo = run_cli(args + " --mark-outputs " + made[3] + "x");
  EXPECT_NE(typo.status, 0);
  EXPECT_NE(typo.output.find("makes a value named '" + made[3] + "x' (nearest: '" + made[3] + "'"), std::string::npos)
      << typo.output;
  const fs::path plan = scratch_root() / "marked.plan";
  fs::create_directories(plan.parent_path());
  ASSERT_EQ(run_cli("build " + kGpt2 + " -o " + plan.string()).status, 0);
  auto built = run_cli("run " + plan.string() + " --synthesize-missing --shape batch=1 --shape seq=2 --mark-outputs all");
  EXPECT_NE(built.status, 0);
  EXPECT_NE(built.output.find("--mark-outputs applies when building an ONNX model"), std::string::npos)
      << built.output;
}

// --timing-cache is for a GPU plan: a CPU plan's run or bench is refused, naming the file and
// writing nothing.
TEST(CliTimingCache, ACpuPlanKeepsNoTimingCache) {
  const fs::path cache = scratch_root() / "timing" / "t.cache";
  fs::create_directories(cache.parent_path());
  for (const std::string cmd : {"run", "bench"}) {
    auto r = run_cli(cmd + " " + kGpt2 + (cmd == "run" ? " --synthesize-missing" : "") +
                     " --shape batch=1 --shape seq=2 --timing-cache " + cache.string() +
                     (cmd == "bench" ? " --iterations 1 --warmup 0" : ""));
    EXPECT_NE(r.status, 0) << cmd;
    EXPECT_NE(r.output.find("timing cache '" + cache.string() + "': backend 'cpu' keeps no timing cache"),
              std::string::npos)
        << r.output;
    EXPECT_FALSE(fs::exists(cache));
  }
}

ir::Node unary(const std::string& op, const std::string& in, const std::string& out) {
  ir::Node n;
  n.name = out + "/" + op;
  n.op_type = op;
  n.opset = 18;
  n.inputs = {in};
  n.outputs = {out};
  return n;
}

// `input`: float32[2] -> Neg -> `first`, Abs -> `second`.
std::string two_output_model(const std::string& dir, const std::string& first, const std::string& second,
                             const std::string& input = "x") {
  ir::Graph g;
  g.name = "two_outputs";
  g.ir_version = 10;
  g.opsets = {{"", 18}};
  g.inputs.push_back({input, DType::Float32, true, {{2, ""}}});
  g.outputs.push_back({first, DType::Float32, false, {}});
  g.outputs.push_back({second, DType::Float32, false, {}});
  g.nodes.push_back(unary("Neg", input, first));
  g.nodes.push_back(unary("Abs", input, second));
  std::string model = dir + "/two_outputs.onnx";
  onnx::write_model_file(g, model);
  return model;
}

// `run` refuses a model input it is not given (issue 31, item 4): random values for a mask or a
// position would give outputs that look right and are not. --synthesize-missing asks for them.
TEST(CliInputs, RunRefusesAMissingInputUnlessAskedToSynthesize) {
  std::string d = fresh_dir("missing");
  auto r = run_cli("run " + kGpt2 + " --shape batch=1 --shape seq=2 -o " + d + "/out");
  EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.output;
  EXPECT_NE(r.output.find("error: 1 input of the model is not given:\n  input_ids: int64[batch,seq]\ngive each with "
                          "--input NAME=FILE.npy (e.g. --input input_ids=input_ids.npy), or run on random values with "
                          "--synthesize-missing"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("synthesized input"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(d + "/out")) << "nothing is written";
  // One of two inputs given: the other is named, with its declared type.
  ir::Graph g;
  g.name = "add";
  g.ir_version = 10;
  g.opsets = {{"", 18}};
  g.inputs.push_back({"a", DType::Float32, true, {{2, ""}}});
  g.inputs.push_back({"mask", DType::Int64, true, {{-1, "n"}, {2, ""}}});
  g.outputs.push_back({"y", DType::Float32, false, {}});
  ir::Node cast = unary("Cast", "mask", "m");
  cast.attrs["to"] = ir::int_attr("to", 1);  // ONNX FLOAT
  g.nodes.push_back(cast);
  ir::Node add;
  add.name = "add";
  add.op_type = "Add";
  add.opset = 18;
  add.inputs = {"a", "m"};
  add.outputs = {"y"};
  g.nodes.push_back(add);
  const std::string model = d + "/add.onnx";
  onnx::write_model_file(g, model);
  auto none = run_cli("run " + model);
  EXPECT_EQ(WEXITSTATUS(none.status), 1) << none.output;
  EXPECT_NE(none.output.find("2 inputs of the model are not given:\n  a: float32[2]\n  mask: int64[n,2]\n"),
            std::string::npos)
      << none.output;
  write_npy(d + "/a.npy", test_support::make<float>({2}, {1.5f, -2.0f}));
  auto one = run_cli("run " + model + " --input a=" + d + "/a.npy");
  EXPECT_EQ(WEXITSTATUS(one.status), 1) << one.output;
  EXPECT_NE(one.output.find("1 input of the model is not given:\n  mask: int64[n,2]\n"), std::string::npos)
      << one.output;
  EXPECT_NE(one.output.find("(e.g. --input mask=mask.npy)"), std::string::npos) << one.output;
  // Asked for: made, listed on stderr and in the JSON.
  auto made = run_cli("run " + model + " --input a=" + d +
                      "/a.npy --synthesize-missing --shape n=3 --int-range 1:2 -o " + d + "/out");
  ASSERT_EQ(made.status, 0) << made.output;
  EXPECT_NE(made.output.find("synthesized input 'mask': int64[3,2] uniform in [1, 2)"), std::string::npos)
      << made.output;
  Tensor y = read_npy(d + "/out/y.npy");
  ASSERT_EQ(y.shape(), (Shape{3, 2}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(y.as_double(i), (i % 2 ? -2.0 : 1.5) + 1.0);
  auto j = nlohmann::json::parse(
      run_stdout("run " + model + " --input a=" + d + "/a.npy --synthesize-missing --shape n=1 --json").output);
  EXPECT_EQ(j["inputs"][0]["synthesized"], false);
  EXPECT_EQ(j["inputs"][1]["synthesized"], true);
}

// `bench` synthesizes what it is not given, and says so: on stderr and in its JSON line.
TEST(CliInputs, BenchListsTheInputsItSynthesized) {
  const std::string args = " --shape batch=1 --shape seq=3 --iterations 1 --warmup 0";
  auto text = run_cli("bench " + kGpt2 + args);
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("synthesized input 'input_ids': int64[1,3] uniform in [0, 100)"), std::string::npos)
      << text.output;
  auto j = nlohmann::json::parse(run_stdout("bench " + kGpt2 + args).output);
  EXPECT_EQ(j["synthesized_inputs"], nlohmann::json::array({"input_ids"}));
  std::string d = fresh_dir("bench_inputs");
  write_npy(d + "/ids.npy", test_support::make<int64_t>({1, 3}, {1, 2, 3}));
  auto given =
      nlohmann::json::parse(run_stdout("bench " + kGpt2 + " --input input_ids=" + d + "/ids.npy" + args).output);
  EXPECT_EQ(given["synthesized_inputs"], nlohmann::json::array());
}

// Every numeric option of every command is range-checked as it is parsed (issue 31, item 5): a
// usage error (exit 2) naming the option and the range, before any work.
TEST(CliRanges, EveryNumericOptionNamesItsRange) {
  std::string d = fresh_dir("ranges");
  const std::string plan = d + "/x.plan", build = "build " + kGpt2 + " -o " + plan;
  const std::string run = "run " + kGpt2 + " --synthesize-missing --shape batch=1 --shape seq=2";
  const std::string bench = "bench " + kGpt2 + " --shape batch=1 --shape seq=2";
  const std::string ort = run + " --compare-onnxrt";
  const std::string threads = "must be an integer from 0 to 1024 (0: all cores), got '";
  const std::string block = "must be a power of two from 16 to 1048576 (the int4 layout's block sizes), got '";
  const std::string tolerance = "must be a finite number, 0 or more, got '";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {build + " --threads -1", "--threads: " + threads + "-1'"},
      {build + " --threads 1025", "--threads: " + threads + "1025'"},
      {build + " --precision int4 --block-size 0", "--block-size: " + block + "0'"},
      {build + " --precision int4 --block-size 48", "--block-size: " + block + "48'"},
      {build + " --precision int4 --block-size 2097152", "--block-size: " + block + "2097152'"},
      {run + " --threads -1", "--threads: " + threads + "-1'"},
      {bench + " --threads 99999999999999999999", "--threads: " + threads + "99999999999999999999'"},
      {bench + " --duration -1", "--duration: must be a number from 0 to 86400 seconds, got '-1'"},
      {bench + " --duration nan", "--duration: must be a number from 0 to 86400 seconds, got 'nan'"},
      {bench + " --iterations -5",
       "--iterations: must be an integer from 1 to 10000000 (it counts timed runs), got '-5'"},
      {bench + " --warmup -1", "--warmup: must be an integer from 0 to 10000000 (untimed runs), got '-1'"},
      {run + " --seed -1", "--seed: must be an integer from 0 to 18446744073709551615, got '-1'"},
      {run + " --seed 18446744073709551616",
       "--seed: must be an integer from 0 to 18446744073709551615, got '18446744073709551616'"},
      {run + " --int-range 0:99999999999999999999",
       "--int-range: '0:99999999999999999999' is not LOW:HIGH with integers from -9223372036854775808 to "
       "9223372036854775807"},
      {run + " --int-range 5:5", "--int-range: '5:5' is empty: HIGH must exceed LOW"},
      {run + " --shape batch=-1",
       "--shape: 'batch=-1': '-1' is not a dimension size (an integer from 0 to 2147483647)"},
      {run + " --shape seq=2147483648", "'2147483648' is not a dimension size (an integer from 0 to 2147483647)"},
      {run + " --tolerance -1", "--tolerance: " + tolerance + "-1'"},
      {run + " --tolerance nan", "--tolerance: " + tolerance + "nan'"},
      {ort + " --atol inf", "--atol: " + tolerance + "inf'"},
      {ort + " --rtol -0.5", "--rtol: " + tolerance + "-0.5'"},
      {ort + " --atol logits=nan", "--atol: " + tolerance + "nan' (in 'logits=nan')"},
      {"conformance " + d + " --timeout 0", "--timeout: must be an integer from 1 to 86400 seconds, got '0'"},
  };
  const std::regex long_number("[0-9]{30}");
  for (const auto& [args, want] : cases) {
    auto r = run_cli(args);
    EXPECT_EQ(WEXITSTATUS(r.status), 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << args << "\nwant: " << want << "\n" << r.output;
    EXPECT_FALSE(std::regex_search(r.output, long_number)) << "a range printed in full digits:\n" << r.output;
    EXPECT_EQ(r.output.find("synthesized input"), std::string::npos) << "no work before the check: " << r.output;
  }
  EXPECT_FALSE(fs::exists(plan));
  // The ends of each range are accepted.
  auto ok = run_cli(build + " --precision int4 --block-size 16 --threads 1");
  EXPECT_EQ(ok.status, 0) << ok.output;
  ok = run_cli(run + " --seed 18446744073709551615 --threads 0 --tolerance 0");
  EXPECT_EQ(ok.status, 0) << ok.output;
}

// Two outputs whose names make one file (`a/b` and `a_b` -> a_b.npy) would overwrite each other:
// refused before the run, naming both and the file (issue 31, item 9); --save-inputs likewise.
TEST(CliOutputs, CollidingFileNamesRefusedBeforeTheRun) {
  std::string d = fresh_dir("collide");
  const std::string model = two_output_model(d, "a/b", "a_b");
  write_npy(d + "/x.npy", test_support::make<float>({2}, {-1.0f, 2.0f}));
  auto r = run_cli("run " + model + " --input x=" + d + "/x.npy -o " + d + "/out");
  EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.output;
  EXPECT_NE(r.output.find("error: --output-dir '" + d + "/out': outputs 'a/b' and 'a_b' would both be written to '" +
                          d + "/out/a_b.npy'"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(d + "/out")) << "nothing is written";
  // Apart, each output has its file and its values.
  const std::string apart = two_output_model(d, "a/b", "a.b");
  auto ok = run_cli("run " + apart + " --input x=" + d + "/x.npy -o " + d + "/apart");
  ASSERT_EQ(ok.status, 0) << ok.output;
  EXPECT_EQ(read_npy(d + "/apart/a_b.npy").as_double(0), 1.0);  // Neg
  EXPECT_EQ(read_npy(d + "/apart/a.b.npy").as_double(0), 1.0);  // Abs
  EXPECT_EQ(read_npy(d + "/apart/a_b.npy").as_double(1), -2.0);
  EXPECT_EQ(read_npy(d + "/apart/a.b.npy").as_double(1), 2.0);
  // Inputs saved with --save-inputs: the same rule.
  ir::Graph g;
  g.name = "inputs";
  g.ir_version = 10;
  g.opsets = {{"", 18}};
  g.inputs.push_back({"p/q", DType::Float32, true, {{2, ""}}});
  g.inputs.push_back({"p_q", DType::Float32, true, {{2, ""}}});
  g.outputs.push_back({"y", DType::Float32, false, {}});
  ir::Node add;
  add.name = "add";
  add.op_type = "Add";
  add.opset = 18;
  add.inputs = {"p/q", "p_q"};
  add.outputs = {"y"};
  g.nodes.push_back(add);
  onnx::write_model_file(g, d + "/inputs.onnx");
  auto in = run_cli("run " + d + "/inputs.onnx --synthesize-missing --save-inputs " + d + "/saved");
  EXPECT_EQ(WEXITSTATUS(in.status), 1) << in.output;
  EXPECT_NE(in.output.find("--save-inputs '" + d + "/saved': inputs 'p/q' and 'p_q' would both be written to '" + d +
                           "/saved/p_q.npy'"),
            std::string::npos)
      << in.output;
  EXPECT_FALSE(fs::exists(d + "/saved"));
  // One folder for inputs and outputs: an input and an output may not share a file either.
  const std::string shared = two_output_model(d, "in_x", "y", "in/x");
  const std::string io = " --input in/x=" + d + "/x.npy --save-inputs " + d + "/io -o ";
  auto both = run_cli("run " + shared + io + d + "/io/");
  EXPECT_EQ(WEXITSTATUS(both.status), 1) << both.output;
  EXPECT_NE(both.output.find("input 'in/x' and output 'in_x' would both be written to '" + d + "/io/in_x.npy'"),
            std::string::npos)
      << both.output;
  EXPECT_FALSE(fs::exists(d + "/io"));
  auto apart_dirs = run_cli("run " + shared + io + d + "/out2");
  EXPECT_EQ(apart_dirs.status, 0) << apart_dirs.output;
  EXPECT_EQ(read_npy(d + "/io/in_x.npy").as_double(0), -1.0);   // the input
  EXPECT_EQ(read_npy(d + "/out2/in_x.npy").as_double(0), 1.0);  // the output, its negation
}

}  // namespace
}  // namespace reforge
