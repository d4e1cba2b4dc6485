// A build refuses what it cannot honour (issue 15, item 7): a node reforge cannot run, a
// --literal name that is no initializer, a --skip-pass glob that matches no pass, a
// --refit-individual pattern that matches no source. Each is an error naming what did not match
// and the nearest names that exist, raised by the library (build_plan) so the C++ API is as
// strict as the CLI; through the CLI it exits non-zero and writes no plan file.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

#include "builder/builder.h"
#include "core/nearest_names.h"
#include "core/nonfinite.h"
#include "core/npy.h"
#include "onnx/exporter.h"
#include "plan/plan_io.h"
#include "runtime/plan_engine.h"
#include "support/cli.h"
#include "support/make_tensor.h"

using namespace reforge;
namespace fs = std::filesystem;
using test_support::random_floats;

namespace {

ir::Node make_node(const std::string& name, const std::string& op, std::vector<std::string> ins, std::string out,
                   const std::string& domain = "", int opset = 18) {
  ir::Node n;
  n.name = name;
  n.op_type = op;
  n.domain = domain;
  n.opset = opset;
  n.inputs = std::move(ins);
  n.outputs = {std::move(out)};
  return n;
}

// x[2,4] -> MatMul(fc.weight) -> Add(fc.bias) -> Reshape(out_shape) -> Mul(proj.scale) -> y.
// Sources: fc.weight, fc.bias, proj.scale; literal: out_shape (int64).
ir::Graph small_model() {
  ir::Graph g;
  g.name = "small";
  g.ir_version = 10;
  g.opsets = {{"", 18}};
  g.inputs.push_back({"x", DType::Float32, false, {}});
  g.outputs.push_back({"y", DType::Float32, false, {}});
  g.initializers["fc.weight"] = random_floats({4, 4}, 1);
  g.initializers["fc.bias"] = random_floats({4}, 2);
  g.initializers["proj.scale"] = random_floats({8}, 3);
  g.initializers["out_shape"] = test_support::make<int64_t>({1}, {8});
  g.nodes.push_back(make_node("fc/MatMul", "MatMul", {"x", "fc.weight"}, "h0"));
  g.nodes.push_back(make_node("fc/Add", "Add", {"h0", "fc.bias"}, "h1"));
  g.nodes.push_back(make_node("reshape", "Reshape", {"h1", "out_shape"}, "h2"));
  g.nodes.push_back(make_node("proj/Mul", "Mul", {"h2", "proj.scale"}, "y"));
  return g;
}

// The message of the Error that building `g` with `o` throws ("" if it builds).
std::string build_error(const ir::Graph& g, const build::BuildOptions& o) {
  try {
    build::build_plan(g, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

build::BuildOptions individual(std::vector<std::string> patterns) {
  build::BuildOptions o;
  o.mode = plan::BuildMode::RefitIndividual;
  o.individual_patterns = std::move(patterns);
  return o;
}

}  // namespace

TEST(NearestNames, GlobEditDistance) {
  EXPECT_EQ(glob_edit_distance("fuse-gelu", "fuse-gelu"), 0u);
  EXPECT_EQ(glob_edit_distance("fuse-gleu", "fuse-gelu"), 2u);  // a swap is two edits
  EXPECT_EQ(glob_edit_distance("fc.weigt", "fc.weight"), 1u);
  EXPECT_EQ(glob_edit_distance("abc", ""), 3u);
  EXPECT_EQ(glob_edit_distance("", "abc"), 3u);
  EXPECT_EQ(glob_edit_distance("*", "anything"), 0u);
  EXPECT_EQ(glob_edit_distance("model.layer.*.weight", "model.layers.3.weight"), 1u);
  EXPECT_EQ(glob_edit_distance("fc.?eight", "fc.weight"), 0u);
  EXPECT_EQ(glob_edit_distance("*.wieght", "fc.weight"), 2u);
}

TEST(NearestNames, ClosestFirstAtMostThreeAndOnlyPlausible) {
  std::vector<std::string> names = {"fc.bias", "fc.weight", "fc2.weight", "fc3.weight", "fc.weight", "embed.table"};
  EXPECT_EQ(nearest_names("fc.weigth", names), (std::vector<std::string>{"fc.weight", "fc2.weight", "fc3.weight"}));
  EXPECT_EQ(nearest_names("fc.weigth", names, 1), (std::vector<std::string>{"fc.weight"}));
  EXPECT_TRUE(nearest_names("completely_different", names).empty());
  EXPECT_EQ(quoted_list({"a", "b"}), "'a', 'b'");
}

TEST(BuildRefusal, MatchingOptionsStillBuild) {
  build::BuildOptions o = individual({"fc.*"});
  o.literal_names = {"proj.scale"};
  o.skip_passes = {"fuse-*", "conv-channels-last"};
  plan::Plan p = build::build_plan(small_model(), o);
  size_t refittable = 0;
  for (const auto& s : p.sources) {
    EXPECT_EQ(s.refittable, s.names[0].rfind("fc.", 0) == 0) << s.key;
    refittable += s.refittable;
  }
  EXPECT_EQ(refittable, 2u);
  // A pattern over the source key (initializer@node:slot) also counts as a match.
  EXPECT_EQ(build_error(small_model(), individual({"proj.scale@*"})), "");
  // A literal given by name that is a literal already (int64) is no error either.
  build::BuildOptions lit;
  lit.literal_names = {"out_shape"};
  EXPECT_EQ(build_error(small_model(), lit), "");
}

// A graph output that folds to a constant and that nodes also read (an Identity of a weight, as
// tied weights export; a value --mark-outputs marks) keeps its name, in baked and refit builds,
// and comes out with its value; another constant named "w0" does not collide with the canonical
// names.
TEST(BuildRefusal, ConstantOutputReadByNodesKeepsItsName) {
  ir::Graph g;
  g.name = "constant_output";
  g.ir_version = 10;
  g.opsets = {{"", 18}};
  g.inputs.push_back({"x", DType::Float32, false, {}});
  g.initializers["w"] = random_floats({4}, 1);
  g.initializers["v"] = random_floats({4}, 2);
  g.nodes.push_back(make_node("tie", "Identity", {"w"}, "w0"));
  g.nodes.push_back(make_node("add", "Add", {"x", "w0"}, "h"));
  g.nodes.push_back(make_node("mul", "Mul", {"h", "v"}, "y"));
  g.outputs.push_back({"y", DType::Float32, false, {}});
  g.outputs.push_back({"w0", DType::Float32, false, {}});
  const Tensor x = random_floats({4}, 3);
  for (auto mode : {plan::BuildMode::Baked, plan::BuildMode::Refit}) {
    build::BuildOptions o;
    o.mode = mode;
    runtime::PlanEngine e(build::build_plan(g, o));
    const auto outs = e.run({{"x", x}});
    ASSERT_EQ(outs.size(), 2u);
    for (int64_t i = 0; i < 4; ++i) {
      const float w = g.initializers["w"].data<float>()[i], v = g.initializers["v"].data<float>()[i];
      EXPECT_EQ(outs[1].data<float>()[i], w);
      EXPECT_EQ(outs[0].data<float>()[i], (x.data<float>()[i] + w) * v);
    }
  }
}

TEST(BuildRefusal, UnsupportedNodesListedWithDomainOpsetAndName) {
  ir::Graph g = small_model();
  g.opsets["com.example"] = 3;
  g.nodes.back().outputs = {"y0"};
  g.nodes.push_back(make_node("custom/Fancy", "FancyOp", {"y0"}, "y1", "com.example", 3));
  g.nodes.push_back(make_node("typo/Relu", "Reluu", {"y1"}, "y"));
  for (auto mode : {plan::BuildMode::Baked, plan::BuildMode::Refit}) {
    build::BuildOptions o;
    o.mode = mode;
    std::string msg = build_error(g, o);
    EXPECT_NE(msg.find("2 of 6 node(s) of model 'small' cannot run"), std::string::npos) << msg;
    EXPECT_NE(
        msg.find(
            "node 'custom/Fancy' (com.example::FancyOp), opset 3: operator com.example::FancyOp is not implemented"),
        std::string::npos)
        << msg;
    EXPECT_NE(msg.find("node 'typo/Relu' (Reluu), opset 18: operator Reluu is not implemented"), std::string::npos)
        << msg;
  }
  // An op outside the opset range it is registered for.
  g = small_model();
  g.nodes.back().outputs = {"y0"};
  g.nodes.push_back(make_node("act", "Gelu", {"y0"}, "y", "", 18));  // Gelu exists since opset 20
  std::string msg = build_error(g, {});
  EXPECT_NE(msg.find("1 of 5 node(s)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("node 'act' (Gelu), opset 18: operator Gelu is not implemented for opset 18"), std::string::npos)
      << msg;
  g.nodes.back().opset = 20;
  EXPECT_EQ(build_error(g, {}), "");
}

TEST(BuildRefusal, OpsOfOtherDomainsThatTheRegistryRunsBuild) {
  ir::Graph g = small_model();
  g.opsets["reforge"] = 1;
  g.nodes.back().outputs = {"y0"};
  g.nodes.push_back(make_node("act", "Silu", {"y0"}, "y", "reforge", 1));
  plan::Plan p = build::build_plan(g, {});
  runtime::PlanEngine e(std::move(p));
  auto out = e.run({{"x", random_floats({2, 4}, 9)}});
  EXPECT_EQ(out.at(0).shape(), (Shape{8}));
}

TEST(BuildRefusal, LiteralNameThatIsNoInitializer) {
  build::BuildOptions o;
  o.literal_names = {"proj.scal"};
  std::string msg = build_error(small_model(), o);
  EXPECT_NE(msg.find("--literal 'proj.scal' names no initializer of the model (nearest: 'proj.scale')"),
            std::string::npos)
      << msg;
  o.literal_names = {"x"};
  msg = build_error(small_model(), o);
  EXPECT_NE(msg.find("--literal 'x' is a graph input, not an initializer"), std::string::npos) << msg;
  o.literal_names = {"h1"};
  msg = build_error(small_model(), o);
  EXPECT_NE(msg.find("--literal 'h1' is computed by a node, not an initializer"), std::string::npos) << msg;
  o.literal_names = {"rotary_cos_cache_table"};
  msg = build_error(small_model(), o);
  EXPECT_NE(
      msg.find("--literal 'rotary_cos_cache_table' names no initializer of the model (no initializer has a similar "
               "name; of 4, the first: 'fc.bias', 'fc.weight', 'out_shape')"),
      std::string::npos)
      << msg;
}

TEST(BuildRefusal, SkipPassThatMatchesNoPass) {
  build::BuildOptions o;
  o.skip_passes = {"fuse-gleu"};
  std::string msg = build_error(small_model(), o);
  EXPECT_NE(msg.find("--skip-pass 'fuse-gleu' matches no build pass (nearest: 'fuse-gelu'"), std::string::npos) << msg;
  o.skip_passes = {"*-weights-pack"};  // a glob without the trailing '*'
  msg = build_error(small_model(), o);
  EXPECT_NE(msg.find("--skip-pass '*-weights-pack' matches no build pass (nearest: 'linear-weights-packing'"),
            std::string::npos)
      << msg;
  o.skip_passes = {"quantize"};  // nothing close: every pass is listed
  msg = build_error(small_model(), o);
  EXPECT_NE(msg.find("--skip-pass 'quantize' matches no build pass (the passes: 'fuse-dequantize-matmul', "
                     "'constant-folding', "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("'eliminate-dead-code')"), std::string::npos) << msg;
}

TEST(BuildRefusal, RefitIndividualPatternThatMatchesNoSource) {
  std::string msg = build_error(small_model(), individual({"fc.weigth"}));
  EXPECT_NE(msg.find("--refit-individual 'fc.weigth' matches no source (nearest: 'fc.weight'"), std::string::npos)
      << msg;
  // Globs are compared as globs: "fc.*" is one edit from "fc2.*".
  msg = build_error(small_model(), individual({"fc2.*"}));
  EXPECT_NE(msg.find("--refit-individual 'fc2.*' matches no source (nearest: 'fc.weight', 'fc.bias')"),
            std::string::npos)
      << msg;
  // A pattern that names only literals would leave nothing refittable.
  msg = build_error(small_model(), individual({"out_*"}));
  EXPECT_NE(msg.find("--refit-individual 'out_*' matches only literals ('out_shape'), which are never refittable"),
            std::string::npos)
      << msg;
  build::BuildOptions o = individual({"proj.*"});
  o.literal_names = {"proj.scale"};
  msg = build_error(small_model(), o);
  EXPECT_NE(msg.find("--refit-individual 'proj.*' matches only literals ('proj.scale')"), std::string::npos) << msg;
  // One good pattern does not excuse a bad one.
  msg = build_error(small_model(), individual({"fc.*", "lm_head.weight"}));
  EXPECT_NE(
      msg.find("1 build option(s) match nothing in model 'small':\n  --refit-individual 'lm_head.weight' matches no "
               "source (no source has a similar name; of 3, the first: 'fc.weight', 'fc.bias', 'proj.scale')"),
      std::string::npos)
      << msg;
}

TEST(BuildRefusal, EveryUnmatchedOptionInOneError) {
  build::BuildOptions o = individual({"fc.weigth"});
  o.literal_names = {"proj.scal"};
  o.skip_passes = {"fuse-gleu"};
  std::string msg = build_error(small_model(), o);
  EXPECT_NE(msg.find("3 build option(s) match nothing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--literal 'proj.scal'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--skip-pass 'fuse-gleu'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--refit-individual 'fc.weigth'"), std::string::npos) << msg;
}

TEST(BuildRefusal, PatternsNeedRefitIndividualMode) {
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  o.individual_patterns = {"fc.*"};
  EXPECT_THROW(o.validate(), Error);
  std::string msg = build_error(small_model(), o);
  EXPECT_NE(msg.find("--refit-individual patterns are given, but the build mode is refit"), std::string::npos) << msg;
}

// A source holding NaN or Inf is refused by the build as refit refuses it (issue 31, item 3), in
// every build mode (a baked source too: the plan would compute NaN just the same), named with its
// first non-finite element; check_finite = false (--allow-nonfinite) builds.
namespace {

ir::Graph with_value(ir::Graph g, const std::string& name, int64_t flat, float v) {
  Tensor t = g.initializers.at(name).clone();
  t.mutable_data<float>()[flat] = v;
  g.initializers[name] = t;
  return g;
}

}  // namespace

TEST(NonFinite, FirstIndexOfEveryFloatType) {
  Tensor f32 = test_support::make<float>({5}, {1, 2, 3, 4, 5});
  EXPECT_EQ(first_nonfinite(f32), -1);
  f32.mutable_data<float>()[3] = -std::numeric_limits<float>::infinity();
  f32.mutable_data<float>()[4] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(first_nonfinite(f32), 3);
  EXPECT_EQ(nonfinite_str(f32, 3), "-inf");
  EXPECT_EQ(nonfinite_str(f32, 4), "NaN");
  Tensor f64 = test_support::make<double>({2}, {0.0, std::numeric_limits<double>::infinity()});
  EXPECT_EQ(first_nonfinite(f64), 1);
  EXPECT_EQ(nonfinite_str(f64, 1), "inf");
  // 16-bit types by their bits: exponent all ones is Inf or NaN; the largest finite is not.
  Tensor h = Tensor::empty(DType::Float16, {3}), b = Tensor::empty(DType::BFloat16, {3});
  const uint16_t half_bits[3] = {0x7bff, 0xfc00, 0x7e00}, bf_bits[3] = {0x7f7f, 0x7fc0, 0xff80};
  std::memcpy(h.mutable_raw(), half_bits, sizeof half_bits);
  std::memcpy(b.mutable_raw(), bf_bits, sizeof bf_bits);
  EXPECT_EQ(first_nonfinite(h), 1);
  EXPECT_EQ(nonfinite_str(h, 1), "-inf");
  EXPECT_EQ(first_nonfinite(b), 1);
  EXPECT_EQ(nonfinite_str(b, 1), "NaN");
  EXPECT_EQ(first_nonfinite(test_support::make<int64_t>({2}, {-1, 1})), -1);  // no integer is non-finite
  EXPECT_EQ(multi_index_str({4, 4}, 6), "[1, 2]");
  EXPECT_EQ(multi_index_str({}, 0), "[]");
}

TEST(BuildRefusal, NonFiniteSourceInEveryModeNamedWithIndexAndValue) {
  const ir::Graph g = with_value(small_model(), "fc.weight", 6, std::numeric_limits<float>::quiet_NaN());
  build::BuildOptions refit, identical;
  refit.mode = plan::BuildMode::Refit;
  identical.mode = plan::BuildMode::RefitIdentical;
  // Baked, every source refittable, refit-identical, and refit-individual where fc.weight stays baked.
  for (const build::BuildOptions& o : {build::BuildOptions(), refit, identical, individual({"proj.*"})}) {
    SCOPED_TRACE(plan::build_mode_name(o.mode));
    std::string msg = build_error(g, o);
    EXPECT_EQ(msg.rfind("model 'small': initializer 'fc.weight' holds NaN at index [1, 2] (flat index 6 of "
                        "float32[4,4]), read by node 'fc/MatMul' (MatMul); a build refuses non-finite weight values, "
                        "as refit does (--allow-nonfinite",
                        0),
              0u)
        << msg;
    build::BuildOptions allowed = o;
    allowed.check_finite = false;
    EXPECT_EQ(build_error(g, allowed), "");
  }
}

TEST(BuildRefusal, EveryNonFiniteInitializerListedAndLiteralsNotChecked) {
  const float inf = std::numeric_limits<float>::infinity();
  const ir::Graph g = with_value(with_value(small_model(), "fc.bias", 3, -inf), "proj.scale", 0, inf);
  std::string msg = build_error(g, build::BuildOptions());
  EXPECT_NE(msg.find("2 initializers of model 'small' hold non-finite values; a build refuses"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("\n  initializer 'fc.bias' holds -inf at index [3] (flat index 3 of float32[4]), read by node "
                     "'fc/Add' (Add)\n  initializer 'proj.scale' holds inf at index [0] (flat index 0 of float32[8]), "
                     "read by node 'proj/Mul' (Mul)"),
            std::string::npos)
      << msg;
  // A literal is structure, never a weight a refit sets (nor checks): it builds as refit accepts it.
  build::BuildOptions literal;
  literal.literal_names = {"proj.scale"};
  msg = build_error(g, literal);
  EXPECT_NE(msg.find("model 'small': initializer 'fc.bias' holds -inf"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("proj.scale"), std::string::npos) << msg;
  EXPECT_EQ(build_error(with_value(small_model(), "proj.scale", 0, inf), literal), "");
}

// Through the CLI: exit status non-zero, the error on stderr, and no plan file (not even a
// temporary one) left behind. `run` and `bench`, which build an ONNX model on the fly, refuse too.
namespace {

using test_support::CliResult;
using test_support::run_cli;

class BuildRefusalCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("reforge_build_refusal_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    onnx::write_model_file(small_model(), (dir_ / "small.onnx").string());
    ir::Graph bad = small_model();
    bad.opsets["com.example"] = 3;
    bad.nodes.back().outputs = {"y0"};
    bad.nodes.push_back(make_node("custom/Fancy", "FancyOp", {"y0"}, "y", "com.example", 3));
    onnx::write_model_file(bad, (dir_ / "unsupported.onnx").string());
    onnx::write_model_file(with_value(small_model(), "fc.weight", 6, std::numeric_limits<float>::quiet_NaN()),
                           (dir_ / "nan.onnx").string());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `reforge build MODEL -o OUT ARGS`; expects failure with every one of `want` in the
  // output and nothing in the folder but the models.
  void expect_refused(const std::string& model, const std::string& args, const std::vector<std::string>& want) {
    SCOPED_TRACE(model + " " + args);
    fs::path out = dir_ / "out.plan";
    CliResult r = run_cli("build " + (dir_ / model).string() + " -o " + out.string() + " " + args);
    EXPECT_NE(r.status, 0) << r.output;
    for (const auto& w : want) EXPECT_NE(r.output.find(w), std::string::npos) << "want '" << w << "' in:\n" << r.output;
    for (const auto& e : fs::directory_iterator(dir_))
      EXPECT_EQ(e.path().extension(), ".onnx") << "left behind: " << e.path();
  }

  fs::path dir_;
};

}  // namespace

TEST_F(BuildRefusalCli, RefusesAndWritesNoPlan) {
  expect_refused(
      "unsupported.onnx", "",
      {"error: 1 of 5 node(s) of model 'small' cannot run",
       "node 'custom/Fancy' (com.example::FancyOp), opset 3: operator com.example::FancyOp is not implemented"});
  expect_refused("small.onnx", "--refit --literal proj.scal",
                 {"--literal 'proj.scal' names no initializer", "'proj.scale'"});
  expect_refused("small.onnx", "--skip-pass fuse-gleu",
                 {"--skip-pass 'fuse-gleu' matches no build pass", "'fuse-gelu'"});
  expect_refused("small.onnx", "--refit-individual 'fc.weigth'",
                 {"--refit-individual 'fc.weigth' matches no source (nearest: 'fc.weight'"});
  expect_refused("small.onnx", "--refit-individual 'out_*' --strip-weights", {"matches only literals ('out_shape')"});
}

TEST_F(BuildRefusalCli, CorrectOptionsBuild) {
  fs::path out = dir_ / "out.plan";
  CliResult r = run_cli("build " + (dir_ / "small.onnx").string() + " -o " + out.string() +
                        " --refit-individual 'fc.*' --literal out_shape --skip-pass 'fuse-*'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("2/3 sources refittable"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(out));
}

TEST_F(BuildRefusalCli, RunAndBenchRefuseToo) {
  for (const char* cmd : {"run ", "bench "}) {
    CliResult r = run_cli(cmd + (dir_ / "unsupported.onnx").string());
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("node 'custom/Fancy' (com.example::FancyOp)"), std::string::npos) << r.output;
  }
  CliResult r = run_cli("bench " + (dir_ / "small.onnx").string() + " --iterations 1 --skip-pass fuse-gleu");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--skip-pass 'fuse-gleu' matches no build pass"), std::string::npos) << r.output;
  // A plan is built already: --skip-pass has nothing to apply to.
  fs::path plan = dir_ / "small.plan";
  ASSERT_EQ(run_cli("build " + (dir_ / "small.onnx").string() + " -o " + plan.string()).status, 0);
  r = run_cli("bench " + plan.string() + " --iterations 1 --skip-pass fuse-gelu");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--skip-pass applies when building an ONNX model"), std::string::npos) << r.output;
}

// A NaN initializer: `build` refuses it as `refit` does, naming it and writing no plan;
// --allow-nonfinite builds, and `run` and `bench`, building the model on the fly, take the same flag.
TEST_F(BuildRefusalCli, NonFiniteInitializerRefusedUnlessAllowed) {
  const std::string named =
      "error: model 'small': initializer 'fc.weight' holds NaN at index [1, 2] (flat index 6 of float32[4,4])";
  for (const char* mode : {"", "--refit", "--refit-individual 'proj.*'", "--refit-identical"})
    expect_refused("nan.onnx", mode, {named, "--allow-nonfinite"});
  fs::path out = dir_ / "out.plan";
  CliResult r = run_cli("build " + (dir_ / "nan.onnx").string() + " -o " + out.string() + " --allow-nonfinite");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(out));
  const std::string x = (dir_ / "x.npy").string();
  write_npy(x, random_floats({2, 4}, 9));
  for (const std::string cmd : {"run", "bench"}) {
    const std::string args = cmd + " " + (dir_ / "nan.onnx").string() + " --input x=" + x +
                             (cmd == "bench" ? " --iterations 1 --warmup 0" : "");
    r = run_cli(args);
    EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.output;
    EXPECT_NE(r.output.find(named), std::string::npos) << r.output;
    r = run_cli(args + " --allow-nonfinite");
    EXPECT_EQ(r.status, 0) << r.output;
  }
  // Row 0 of x times column 2 of the weight holds NaN: the run computes it (the caller's business).
  const fs::path outs = dir_ / "outs";
  r = run_cli("run " + (dir_ / "nan.onnx").string() + " --input x=" + x + " --allow-nonfinite -o " + outs.string());
  ASSERT_EQ(r.status, 0) << r.output;
  Tensor y = read_npy((outs / "y.npy").string());
  ASSERT_EQ(y.numel(), 8);
  EXPECT_TRUE(std::isnan(y.as_double(2)));
  EXPECT_FALSE(std::isnan(y.as_double(0)));
  // A built plan has nothing to build: the flag applies to its --weights only.
  r = run_cli("run " + out.string() + " --input x=" + x + " --allow-nonfinite");
  EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.output;
  EXPECT_NE(r.output.find("--allow-nonfinite applies when building an ONNX model or refitting with --weights"),
            std::string::npos)
      << r.output;
}

// Refit keeps its own rule for the same values: refused by default, accepted with
// --allow-nonfinite in every refit mode, the slow and verifying ones (which rebuild the plan from
// the new model) included.
TEST_F(BuildRefusalCli, RefitFromANonFiniteModelFollowsRefitsFlag) {
  const fs::path plan = dir_ / "small.plan";
  ASSERT_EQ(run_cli("build " + (dir_ / "small.onnx").string() + " --refit -o " + plan.string()).status, 0);
  for (const char* mode : {"", " --slow", " --verify"}) {
    SCOPED_TRACE(mode);
    const std::string args =
        "refit " + plan.string() + " -w " + (dir_ / "nan.onnx").string() + " -o " + (dir_ / "b.plan").string() + mode;
    CliResult r = run_cli(args);
    EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.output;
    EXPECT_NE(r.output.find("holds NaN"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("refit refuses non-finite values"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "b.plan"));
    r = run_cli(args + " --allow-nonfinite");
    EXPECT_EQ(r.status, 0) << r.output;
    fs::remove(dir_ / "b.plan");
  }
}
