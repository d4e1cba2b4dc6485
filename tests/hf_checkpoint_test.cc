// Checkpoint refit of real Hugging Face `transformers` exports (models/hf, made on the GPU
// machine by scripts/models/export_hf.py): GPT-2, BERT, Llama (grouped-query attention), a T5
// encoder and ViT, exported by PyTorch's dynamo exporter with static shapes. Its optimizer folds
// what look-alike models never fold: position tables cut to the sequence length ([1,16,64]
// slices), T5's relative-position bias (a bucket table gathered through a [16,16] index and
// permuted), ViT's class token expanded over the batch, rotary cos/sin tables and masks.
//
// For each model: build from A's ONNX bound to checkpoint A (stripped and full), refit from
// checkpoint B, and compare with PyTorch's outputs for B (a fresh model after load_state_dict of
// checkpoint B) within 1e-4, also after save/load; the engine weights equal, bit for bit, those
// of a refit from B's re-exported ONNX. Then the refusals: a constant derived from a weight by a
// transform outside the search (b * 0.5 + 1) is unbound and the checkpoint refit is refused,
// naming it and the ways forward, with the engine unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "builder/binding.h"
#include "builder/onnx_refit.h"
#include "core/npy.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "plan/plan_io.h"
#include "refit/checkpoint_refit.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
#include "support/cli.h"
#include "support/engine_checks.h"
#include "support/plan_round_trip.h"
#include "support/synthetic_checkpoint.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::checkpoint_of;
using test_support::derived_weight_hashes;
using test_support::error_of;
using test_support::random_f32;
using test_support::round_trip;
namespace fs = std::filesystem;

namespace {

const fs::path kHf = fs::path(REFORGE_SOURCE_DIR) / "models" / "hf";

struct HfCase {
  std::string name;
  // A derivation the export needs: a source bound through this step op from this checkpoint
  // tensor, or (step "constant") a source that is a proven constant whose rule mentions it.
  std::string step, checkpoint_tensor;
};

std::vector<HfCase> hf_cases() {
  return {{"gpt2", "Slice", "transformer.wpe.weight"},
          {"bert", "Slice", "embeddings.position_embeddings.weight"},
          {"llama", "constant", "rotary cos table"},
          {"t5", "Gather", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"},
          {"vit", "Concat", "embeddings.cls_token"}};  // the class token expanded over the batch of 2
}

std::map<std::string, Tensor> inputs_of(const std::string& model) {
  std::map<std::string, Tensor> in;
  for (const auto& e : fs::directory_iterator(kHf / model / "inputs"))
    in[e.path().stem().string()] = read_npy(e.path().string());
  return in;
}

double max_diff(const std::string& model, const std::string& weights, const runtime::PlanEngine& e) {
  auto outs = e.run(inputs_of(model));
  double m = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    Tensor ref = read_npy((kHf / model / "reference" / weights / (e.outputs()[i].name + ".npy")).string());
    EXPECT_EQ(ref.shape(), outs[i].shape()) << e.outputs()[i].name;
    if (ref.shape() != outs[i].shape()) return INFINITY;
    for (int64_t k = 0; k < ref.numel(); ++k) m = std::max(m, std::fabs(ref.as_double(k) - outs[i].as_double(k)));
  }
  return m;
}

std::string ckpt_path(const std::string& model, const char* w) {
  return (kHf / model / (std::string("checkpoint_") + w + ".safetensors")).string();
}
std::string onnx_path(const std::string& model, const char* w) { return (kHf / model / w / "model.onnx").string(); }

plan::Plan build_bound(const std::string& model, bool strip) {
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  o.strip_weights = strip;
  return build::build_plan_with_checkpoint(reforge::onnx::import_model_file(onnx_path(model, "A")), o,
                                           refit::Checkpoint::open(ckpt_path(model, "A")), {});
}

void refit_from_checkpoint(runtime::PlanEngine& e, const std::string& path) {
  refit::Refitter r(e);
  refit::set_sources(r, refit::sources_from_checkpoint(e.plan(), refit::Checkpoint::open(path)));
  r.commit();
}

}  // namespace

class HfCheckpointRefit : public ::testing::TestWithParam<HfCase> {
 protected:
  void SetUp() override {
    if (!fs::exists(kHf / GetParam().name)) GTEST_SKIP() << "models/hf/" << GetParam().name << " not present";
  }
};

TEST_P(HfCheckpointRefit, BoundToARefitFromBMatchesPyTorch) {
  const HfCase& c = GetParam();
  for (bool strip : {true, false}) {
    SCOPED_TRACE(strip ? "stripped" : "full");
    plan::Plan p = round_trip(build_bound(c.name, strip));
    bool derivation = false;
    for (const auto& s : p.sources) {
      EXPECT_NE(s.binding.status, plan::Binding::Status::Unbound) << s.key << ": " << s.binding.note;
      if (c.step == "constant")
        derivation |= s.binding.status == plan::Binding::Status::Constant &&
                      s.binding.reason == plan::Binding::Reason::Proven &&
                      s.binding.rule.find(c.checkpoint_tensor) != std::string::npos;
      else
        for (const auto& st : s.binding.steps)
          derivation |= st.op_type == c.step && !s.binding.checkpoint.empty() &&
                        s.binding.checkpoint[0].name == c.checkpoint_tensor;
    }
    EXPECT_TRUE(derivation) << c.name << ": no source bound by " << c.step << " of " << c.checkpoint_tensor;
    runtime::PlanEngine e(std::move(p));
    if (!strip) {
      EXPECT_LE(max_diff(c.name, "A", e), 1e-4) << "before the refit";
    }
    refit_from_checkpoint(e, ckpt_path(c.name, "B"));
    EXPECT_LE(max_diff(c.name, "B", e), 1e-4);
    runtime::PlanEngine again(round_trip(e.current_plan(false)));
    EXPECT_LE(max_diff(c.name, "B", again), 1e-4) << "after save/load";
    // A refit from B's re-exported ONNX gives the same engine weights, bit for bit.
    runtime::PlanEngine from_onnx(round_trip(build_bound(c.name, strip)));
    refit::Refitter r(from_onnx);
    for (const auto& [id, t] : build::read_sources_from_onnx(from_onnx.plan(), onnx_path(c.name, "B")))
      r.set_source(id, t);
    r.commit();
    EXPECT_EQ(derived_weight_hashes(from_onnx), derived_weight_hashes(e));
  }
}

// Constants decided by binding stay sources: a plan bound to a checkpoint has the sources and
// the structural fingerprint of the same build without one, so an ONNX refit accepts the same.
TEST_P(HfCheckpointRefit, BindingDoesNotChangeWhatAnOnnxRefitAccepts) {
  const HfCase& c = GetParam();
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  plan::Plan plain = build::build_plan(reforge::onnx::import_model_file(onnx_path(c.name, "A")), o);
  plan::Plan bound = build_bound(c.name, false);
  EXPECT_EQ(plain.fingerprint, bound.fingerprint);
  ASSERT_EQ(plain.sources.size(), bound.sources.size());
  for (size_t i = 0; i < plain.sources.size(); ++i) EXPECT_EQ(plain.sources[i].key, bound.sources[i].key);
  EXPECT_EQ(plain.literal_names, bound.literal_names);
}

INSTANTIATE_TEST_SUITE_P(Transformers, HfCheckpointRefit, ::testing::ValuesIn(hf_cases()),
                         [](const auto& info) { return info.param.name; });

namespace {

ir::Node node(const std::string& name, const std::string& op, std::vector<std::string> ins,
              std::vector<std::string> outs, const std::string& scope) {
  ir::Node n;
  n.name = name;
  n.op_type = op;
  n.opset = 18;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  n.metadata.push_back({"pkg.torch.onnx.name_scopes", scope});
  return n;
}

// x[2,8] -> MatMul(x, W^T) -> Add(., bias * 0.5 + 1) -> y: the added constant is a weight
// transform the search does not know.
ir::Graph affine_of_bias_model(const std::map<std::string, Tensor>& ck) {
  ir::Graph g;
  g.name = "affine_of_bias";
  g.opsets[""] = 18;
  g.inputs.push_back({"x", DType::Float32, true, {{2, ""}, {8, ""}}});
  g.outputs.push_back({"y", DType::Float32, true, {{2, ""}, {8, ""}}});
  g.initializers["val_1"] = transforms::evaluate_op("", "Transpose", 13, {}, {&ck.at("lin.weight")}, 1)[0];
  Tensor c = Tensor::empty(DType::Float32, {8});
  for (int64_t i = 0; i < 8; ++i) c.mutable_data<float>()[i] = ck.at("lin.bias").data<float>()[i] * 0.5f + 1.0f;
  g.initializers["val_2"] = c;
  g.nodes = {node("node_matmul", "MatMul", {"x", "val_1"}, {"h"}, "['', 'lin']"),
             node("node_add", "Add", {"h", "val_2"}, {"y"}, "['', 'lin']")};
  return g;
}

}  // namespace

TEST(HfCheckpointRefusal, WeightTransformOutsideTheSearchIsRefusedNotKept) {
  std::map<std::string, Tensor> a = {{"lin.weight", random_f32({8, 8}, 1)}, {"lin.bias", random_f32({8}, 2)}};
  std::map<std::string, Tensor> b = {{"lin.weight", random_f32({8, 8}, 3)}, {"lin.bias", random_f32({8}, 4)}};
  ir::Graph g = affine_of_bias_model(a);
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  o.strip_weights = true;
  plan::Plan p = round_trip(build::build_plan_with_checkpoint(g, o, checkpoint_of(a), {}));
  size_t unbound = 0;
  for (const auto& s : p.sources)
    if (s.binding.status == plan::Binding::Status::Unbound) {
      ++unbound;
      EXPECT_EQ(s.names.at(0), "val_2");
    }
  ASSERT_EQ(unbound, 1u);
  runtime::PlanEngine e(std::move(p));
  const size_t missing = e.missing_sources().size();
  std::string err = error_of([&] {
    refit::Refitter r(e);
    refit::set_sources(r, refit::sources_from_checkpoint(e.plan(), checkpoint_of(b)));
    r.commit();
  });
  EXPECT_NE(err.find("'val_2'"), std::string::npos) << err;
  EXPECT_NE(err.find("node_add"), std::string::npos) << err;
  EXPECT_NE(err.find("float32[8]"), std::string::npos) << err;
  EXPECT_NE(err.find("--bind"), std::string::npos) << err;
  EXPECT_NE(err.find("--literal"), std::string::npos) << err;
  EXPECT_NE(err.find("re-exported ONNX"), std::string::npos) << err;
  EXPECT_NE(err.find("nothing was changed"), std::string::npos) << err;
  EXPECT_EQ(e.missing_sources().size(), missing) << "a refused refit must leave the stripped engine as it was";
  // The user's word makes it a literal: the refit is then accepted (and keeps its A value).
  o.literal_names = {"val_2"};
  plan::Plan q = round_trip(build::build_plan_with_checkpoint(g, o, checkpoint_of(a), {}));
  for (const auto& s : q.sources) EXPECT_EQ(s.binding.status, plan::Binding::Status::Bound) << s.key;
  runtime::PlanEngine f(std::move(q));
  refit::Refitter r(f);
  refit::set_sources(r, refit::sources_from_checkpoint(f.plan(), checkpoint_of(b)));
  r.commit();
}

// What a user sees: every refusal is a non-zero exit with the names, and no output file.
TEST(HfCheckpointCli, RefusalsEndInAClearErrorAndNoOutputFile) {
  if (!fs::exists(kHf / "gpt2") || !fs::exists(kHf / "bert")) GTEST_SKIP() << "models/hf not present";
  using test_support::run_cli;
  fs::path dir = fs::temp_directory_path() / ("reforge_hf_cli_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto only_inputs_left = [&](size_t n) {
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
    EXPECT_EQ(files, n) << "a refused command left a file behind";
  };
  const std::string gpt2 = onnx_path("gpt2", "A");
  // A wrong checkpoint (BERT's for GPT-2): under half of the sources bind.
  auto r = run_cli("build " + gpt2 + " --refit --checkpoint " + ckpt_path("bert", "A") + " -o " +
                   (dir / "wrong.plan").string());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--allow-partial-binding"), std::string::npos) << r.output;
  only_inputs_left(0);
  // A --bind name that is no initializer: the nearest names.
  r = run_cli("build " + gpt2 + " --refit --checkpoint " + ckpt_path("gpt2", "A") +
              " --bind embeding_1=transformer.wpe.weight -o " + (dir / "typo.plan").string());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("'embedding_1'"), std::string::npos) << r.output;
  only_inputs_left(0);
  // A constant outside the search: the plan builds (refit from ONNX works), a checkpoint refit
  // is refused naming it, and neither -o nor the plan itself is written.
  std::map<std::string, Tensor> a = {{"lin.weight", random_f32({8, 8}, 1)}, {"lin.bias", random_f32({8}, 2)}};
  std::map<std::string, Tensor> b = {{"lin.weight", random_f32({8, 8}, 3)}, {"lin.bias", random_f32({8}, 4)}};
  reforge::onnx::write_model_file(affine_of_bias_model(a), (dir / "affine.onnx").string());
  refit::write_safetensors((dir / "a.safetensors").string(), a);
  refit::write_safetensors((dir / "b.safetensors").string(), b);
  r = run_cli("build " + (dir / "affine.onnx").string() + " --refit --strip-weights --checkpoint " +
              (dir / "a.safetensors").string() + " -o " + (dir / "p.plan").string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("unbound val_2"), std::string::npos) << r.output;
  only_inputs_left(4);
  auto before = std::filesystem::last_write_time(dir / "p.plan");
  r = run_cli("refit " + (dir / "p.plan").string() + " --weights " + (dir / "b.safetensors").string() + " -o " +
              (dir / "out.plan").string());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("'val_2'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--literal"), std::string::npos) << r.output;
  r = run_cli("refit " + (dir / "p.plan").string() + " --weights " + (dir / "b.safetensors").string());
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(std::filesystem::last_write_time(dir / "p.plan"), before);
  only_inputs_left(4);
  // inspect --json lists the unbound source with its consumer.
  r = run_cli("inspect " + (dir / "p.plan").string() + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j.at("unbound").size(), 1u);
  EXPECT_EQ(j["unbound"][0].at("name"), "val_2");
  EXPECT_EQ(j["unbound"][0].at("consumer"), "node_add");
  fs::remove_all(dir);
}

// A checkpoint build names the constants binding proved structural in one line by kind (GPT-2's
// 18: the 0.5, 0, 1, 3 and GELU scalars and two causal masks); --verbose lists each.
TEST(HfCheckpointCli, BuildSummarizesStructuralConstantsUnlessVerbose) {
  if (!fs::exists(kHf / "gpt2")) GTEST_SKIP() << "models/hf not present";
  using test_support::run_cli;
  const fs::path plan = fs::temp_directory_path() / ("reforge_hf_constants_" + std::to_string(::getpid()) + ".plan");
  const std::string args =
      "build " + onnx_path("gpt2", "A") + " --refit --checkpoint " + ckpt_path("gpt2", "A") + " -o " + plan.string();
  auto r = run_cli(args);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("18 constants are functions of the model's configuration, not of the checkpoint "
                          "(all-equal 16, causal mask 2); --verbose lists them"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("  constant "), std::string::npos) << r.output;
  r = run_cli("--verbose " + args);
  ASSERT_EQ(r.status, 0) << r.output;
  size_t listed = 0;
  for (size_t at = r.output.find("  constant "); at != std::string::npos; at = r.output.find("  constant ", at + 1))
    ++listed;
  EXPECT_EQ(listed, 18u) << r.output;
  fs::remove(plan);
}

// A checkpoint saved under another module name ('m.' in front of every key, as a wrapper's state
// dict has it): build and refit bind it with --strip-prefix; without the option the refit is
// refused naming it; the options need a checkpoint. Checkpoint::with_key_prefix's renaming: strip
// then add, a prefix no name has and two names made one refused.
TEST(HfCheckpointCli, KeyPrefixOptionsRenameTheCheckpoint) {
  if (!fs::exists(kHf / "gpt2")) GTEST_SKIP() << "models/hf not present";
  using test_support::run_cli;
  const fs::path dir = fs::temp_directory_path() / ("reforge_hf_prefix_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto wrapped = [&](const char* weights) {
    std::map<std::string, Tensor> t;
    const refit::Checkpoint own = refit::Checkpoint::open(ckpt_path("gpt2", weights));
    for (const auto& [k, v] : own.tensors()) t["m." + k] = v.clone();
    const std::string path = (dir / (std::string(weights) + ".safetensors")).string();
    refit::write_safetensors(path, t);
    return path;
  };
  const std::string a = wrapped("A"), b = wrapped("B"), plan = (dir / "p.plan").string();
  auto r = run_cli("build " + onnx_path("gpt2", "A") + " --refit --checkpoint " + a + " --strip-prefix m. -o " + plan);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_cli("refit " + plan + " --weights " + b + " -o " + (dir / "q.plan").string());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("rename its keys with --strip-prefix 'm.' "), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "q.plan"));
  r = run_cli("refit " + plan + " --weights " + b + " --strip-prefix m. -o " + (dir / "q.plan").string());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string expect = " --expect logits=" + (kHf / "gpt2/reference/B/logits.npy").string();
  r = run_cli("run " + (dir / "q.plan").string() + " --input input_ids=" +
              (kHf / "gpt2/inputs/input_ids.npy").string() + expect);
  EXPECT_EQ(r.status, 0) << r.output;
  r = run_cli("build " + onnx_path("gpt2", "A") + " --refit --strip-prefix m. -o " + (dir / "r.plan").string());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("they need a checkpoint (--checkpoint)"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "r.plan"));

  const Tensor one = Tensor::empty(DType::Float32, {1});
  const auto c = refit::Checkpoint::from_tensors({{"m.x", one}, {"m.y", one}, {"z", one}}, "state dict");
  std::vector<std::string> names;
  const refit::Checkpoint renamed = c.with_key_prefix("m.", "model.");
  for (const auto& [k, _] : renamed.tensors()) names.push_back(k);
  EXPECT_EQ(names, (std::vector<std::string>{"model.x", "model.y", "model.z"}));
  EXPECT_NE(test_support::error_of([&] { c.with_key_prefix("q.", ""); }).find("no tensor name begins with 'q.'"),
            std::string::npos);
  const auto clash = refit::Checkpoint::from_tensors({{"m.z", one}, {"z", one}}, "state dict");
  EXPECT_NE(test_support::error_of([&] { clash.with_key_prefix("m.", ""); }).find("'m.z' and 'z' both become 'z'"),
            std::string::npos);
  fs::remove_all(dir);
}

// inspect --json gives each literal's reason: structural or proven (with the recipe) for the
// constants binding decided, user for --literal.
TEST(HfCheckpointCli, InspectListsLiteralReasons) {
  if (!fs::exists(kHf / "llama")) GTEST_SKIP() << "models/hf not present";
  using test_support::run_cli;
  fs::path plan = fs::temp_directory_path() / ("reforge_hf_inspect_" + std::to_string(::getpid()) + ".plan");
  auto r = run_cli("build " + onnx_path("llama", "A") + " --refit --checkpoint " + ckpt_path("llama", "A") + " -o " +
                   plan.string());
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_cli("inspect " + plan.string() + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  size_t proven = 0, structural = 0;
  for (const auto& l : j.at("literals")) {
    if (!l.contains("source")) continue;
    if (l.at("reason") == "proven") {
      ++proven;
      EXPECT_NE(l.at("rule").get<std::string>().find("recipe:"), std::string::npos) << l.dump();
      EXPECT_NE(l.at("rule").get<std::string>().find("ulp"), std::string::npos) << l.dump();
    }
    structural += l.at("reason") == "structural";
  }
  EXPECT_GE(proven, 2u);      // the rotary cos and sin tables
  EXPECT_GE(structural, 1u);  // the causal mask, eps, exponents
  EXPECT_TRUE(j.at("unbound").empty());
  // Each engine weight has a name for a reader: a derived one the checkpoint tensor its source is
  // bound to, another the node input that reads it (through the device copy on a device plan).
  ASSERT_GE(j.at("weights").size(), 11u);
  std::set<std::string> checkpoint_names;
  const refit::Checkpoint ck = refit::Checkpoint::open(ckpt_path("llama", "A"));
  for (const auto& [name, t] : ck.tensors()) checkpoint_names.insert(name);
  std::map<std::string, std::string> label, unbound;  // unbound: initializer name -> binding status
  for (const auto& src : j.at("sources"))
    if (!src.contains("binding") || src.at("binding").at("status") != "bound")
      for (const auto& n : src.at("names")) unbound[n.get<std::string>()] = src.dump();
  size_t from_checkpoint = 0;
  for (const auto& w : j.at("weights")) {
    const std::string l = w.at("label").get<std::string>(), name = w.at("name").get<std::string>();
    label[name] = l;
    if (w.at("kind") == "derived") {
      const std::string first = l.substr(0, l.find(" (+"));
      from_checkpoint += checkpoint_names.count(first);
      EXPECT_TRUE(checkpoint_names.count(first) || unbound.count(first)) << l;
    } else {
      EXPECT_NE(l.find(':'), std::string::npos) << l;  // node:input
    }
  }
  EXPECT_GE(from_checkpoint, 10u);
  // The text lists them by those names in the order the graph reads them: w9 before w10.
  r = run_cli("inspect " + plan.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const size_t w9 = r.output.find("\n  " + label.at("w9") + " "), w10 = r.output.find("\n  " + label.at("w10") + " ");
  ASSERT_NE(w9, std::string::npos) << r.output;
  ASSERT_NE(w10, std::string::npos) << r.output;
  EXPECT_LT(w9, w10) << r.output;
  EXPECT_NE(r.output.find(" w9 "), std::string::npos) << "the plan's own name follows";
  fs::remove(plan);
}

// The attention of real Hugging Face exports (PyTorch's scaled_dot_product_attention
// decomposition: Q and K^T each scaled by sqrt(scale), Where(IsNaN(P), 0, P) after the softmax)
// is fused into one reforge::Attention per layer, and the plan still matches PyTorch.
TEST(HfFusion, AttentionOfRealExportsIsFusedAndMatchesPyTorch) {
  for (const char* model : {"llama", "gpt2", "bert", "vit"}) {
    SCOPED_TRACE(model);
    if (!fs::exists(kHf / model)) GTEST_SKIP() << "models/hf/" << model << " not present";
    plan::Plan p = build::build_plan(reforge::onnx::import_model_file(onnx_path(model, "A")), {});
    int attention = 0, softmax = 0;
    for (const auto& n : p.graph.nodes) {
      attention += n.domain == "reforge" && n.op_type == "Attention";
      softmax += n.domain.empty() && n.op_type == "Softmax";
    }
    EXPECT_EQ(attention, 2) << "two layers, one fused attention each";
    EXPECT_EQ(softmax, 0);
    runtime::PlanEngine e(round_trip(std::move(p)));
    EXPECT_LE(max_diff(model, "A", e), 1e-4);
  }
}
