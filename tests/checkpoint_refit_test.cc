// Refit straight from framework checkpoints: build from A's ONNX bound to checkpoint A, refit
// with checkpoint B, compare with PyTorch's outputs for B (also after save/load of the refit
// plan); the BatchNorm-folded CNN is refused with the reason; negative cases leave the engine
// unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "build/binding.h"
#include "build/onnx_refit.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "plan/plan_io.h"
#include "refit/checkpoint_refit.h"
#include "refit/recipe.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

const fs::path kModels = fs::path(REFORGE_SOURCE_DIR) / "models";

struct Case {
  std::string id, model, onnx_a, onnx_b, ckpt_a, ckpt_b;
  std::map<std::string, std::string> inputs, reference;  // first input set; B's references
};

std::vector<Case> load_cases() {
  std::ifstream f(kModels / "manifest.json");
  if (!f) return {};
  nlohmann::json j = nlohmann::json::parse(f);
  std::map<std::string, nlohmann::json> a, b;
  for (const auto& e : j.at("exports")) {
    if (!e.contains("checkpoint")) continue;
    std::string key = e.at("model").get<std::string>() + "_" + e.at("export").get<std::string>();
    (e.at("weights") == "A" ? a : b)[key] = e;
  }
  std::vector<Case> out;
  for (const auto& [key, ea] : a) {
    if (!b.count(key)) continue;
    const auto& eb = b[key];
    Case c;
    c.id = key;
    c.model = ea.at("model").get<std::string>();
    c.onnx_a = (kModels / ea.at("path").get<std::string>()).string();
    c.onnx_b = (kModels / eb.at("path").get<std::string>()).string();
    c.ckpt_a = (kModels / ea.at("checkpoint").get<std::string>()).string();
    c.ckpt_b = (kModels / eb.at("checkpoint").get<std::string>()).string();
    const auto& set = eb.at("input_sets").at(0);
    for (const auto& [n, v] : set.at("inputs").items()) c.inputs[n] = (kModels / v.get<std::string>()).string();
    for (const auto& [n, v] : set.at("reference").items()) c.reference[n] = (kModels / v.get<std::string>()).string();
    out.push_back(c);
  }
  return out;
}

std::vector<Case> cases_of(bool cnn) {
  std::vector<Case> out;
  for (auto& c : load_cases())
    if ((c.model == "cnn") == cnn) out.push_back(c);
  return out;
}

plan::Plan round_trip(const plan::Plan& p) {
  auto owner = std::make_shared<std::string>(plan::serialize_plan(p));
  return plan::parse_plan(owner, owner->data(), owner->size());
}

double max_diff_to_reference(const Case& c, const runtime::PlanEngine& e) {
  std::map<std::string, Tensor> in;
  for (const auto& [n, path] : c.inputs) in[n] = read_npy(path);
  auto outs = e.run(in);
  double m = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    Tensor ref = read_npy(c.reference.at(e.outputs()[i].name));
    EXPECT_EQ(ref.shape(), outs[i].shape());
    for (int64_t k = 0; k < ref.numel() && k < outs[i].numel(); ++k)
      m = std::max(m, std::fabs(ref.as_double(k) - outs[i].as_double(k)));
  }
  return m;
}

plan::Plan build_bound(const Case& c, bool strip) {
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  o.strip_weights = strip;
  return build::build_plan_with_checkpoint(reforge::onnx::import_model_file(c.onnx_a), o, refit::Checkpoint::open(c.ckpt_a), {});
}

void refit_from(runtime::PlanEngine& e, const refit::Checkpoint& ck) {
  refit::Refitter r(e);
  auto cs = refit::sources_from_checkpoint(e.plan(), ck);
  for (const auto& [id, t] : cs.sources) r.set_source(id, t);
  r.commit();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Engine weights as a name -> hash map, to prove a failed refit changed nothing.
std::map<std::string, uint64_t> weight_hashes(const runtime::PlanEngine& e) {
  std::map<std::string, uint64_t> h;
  for (const auto& w : e.plan().weights)
    if (w.kind == plan::WeightKind::Derived) h[w.name] = refit::hash_tensor(e.weight(w.name));
  return h;
}

}  // namespace

class CheckpointRefit : public ::testing::TestWithParam<Case> {};

TEST_P(CheckpointRefit, BuildFromABoundToCheckpointRefitWithBMatchesFramework) {
  const Case& c = GetParam();
  for (bool strip : {true, false}) {
    SCOPED_TRACE(strip ? "stripped" : "full");
    plan::Plan p = round_trip(build_bound(c, strip));
    for (const auto& s : p.sources)
      EXPECT_EQ(s.binding.status, plan::Binding::Status::Bound) << s.key << ": " << s.binding.note;
    runtime::PlanEngine e(std::move(p));
    refit_from(e, refit::Checkpoint::open(c.ckpt_b));
    EXPECT_LE(max_diff_to_reference(c, e), 1e-4) << c.id;
    runtime::PlanEngine again(round_trip(e.current_plan(false)));
    EXPECT_LE(max_diff_to_reference(c, again), 1e-4) << c.id << " after save/load";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CheckpointRefit, ::testing::ValuesIn(cases_of(false)),
                         [](const auto& info) { return info.param.id; });

class CheckpointRefitFolded : public ::testing::TestWithParam<Case> {};

TEST_P(CheckpointRefitFolded, BatchNormFoldedRefusedFromCheckpointButOnnxWorks) {
  const Case& c = GetParam();
  plan::Plan p = round_trip(build_bound(c, false));
  size_t unbound = 0;
  for (const auto& s : p.sources) unbound += s.binding.status == plan::Binding::Status::Unbound;
  if (unbound == 0) GTEST_SKIP() << c.id << ": this export did not fold BatchNorm";
  runtime::PlanEngine e(std::move(p));
  auto before = weight_hashes(e);
  std::string err = error_of([&] { refit_from(e, refit::Checkpoint::open(c.ckpt_b)); });
  EXPECT_NE(err.find("not bound"), std::string::npos) << err;
  EXPECT_NE(err.find("BatchNorm"), std::string::npos) << err;
  EXPECT_NE(err.find("re-exported ONNX"), std::string::npos) << err;
  EXPECT_EQ(weight_hashes(e), before);
  refit::Refitter r(e);
  for (const auto& [id, t] : build::read_sources_from_onnx(e.plan(), c.onnx_b)) r.set_source(id, t);
  r.commit();
  EXPECT_LE(max_diff_to_reference(c, e), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Models, CheckpointRefitFolded, ::testing::ValuesIn(cases_of(true)),
                         [](const auto& info) { return info.param.id; });

TEST(CheckpointRefitNegative, MissingWrongShapeWrongDtypeRenamedMalformed) {
  std::vector<Case> all = cases_of(false);
  const Case* llama = nullptr;
  for (const auto& c : all)
    if (c.id == "llama_dynamo") llama = &c;
  if (!llama) GTEST_SKIP() << "models/llama not present";
  runtime::PlanEngine e(build_bound(*llama, false));
  auto before = weight_hashes(e);
  auto b = refit::Checkpoint::open(llama->ckpt_b);
  fs::path dir = fs::temp_directory_path() / ("reforge_ckneg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto variant = [&](const std::string& file, auto edit) {
    std::map<std::string, Tensor> t = b.tensors();
    edit(t);
    std::string path = (dir / file).string();
    refit::write_safetensors(path, t);
    return error_of([&] { refit_from(e, refit::Checkpoint::open(path)); });
  };
  const std::string victim = "layers.1.mlp.up_proj.weight";
  std::string err = variant("missing.safetensors", [&](auto& t) { t.erase(victim); });
  EXPECT_NE(err.find("'" + victim + "'"), std::string::npos) << err;
  EXPECT_NE(err.find("missing"), std::string::npos) << err;
  err = variant("renamed.safetensors", [&](auto& t) {
    t["layers.1.mlp.up.weight"] = t[victim];
    t.erase(victim);
  });
  EXPECT_NE(err.find("'" + victim + "'"), std::string::npos) << err;
  err = variant("shape.safetensors", [&](auto& t) { t[victim] = t[victim].reshaped({t[victim].dim(1), t[victim].dim(0)}); });
  EXPECT_NE(err.find("'" + victim + "'"), std::string::npos) << err;
  EXPECT_NE(err.find("expects"), std::string::npos) << err;
  err = variant("dtype.safetensors", [&](auto& t) { t[victim] = cast_tensor(t[victim], DType::Float16); });
  EXPECT_NE(err.find("'" + victim + "'"), std::string::npos) << err;
  EXPECT_NE(err.find("float16"), std::string::npos) << err;
  {
    std::ifstream in(llama->ckpt_b, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream((dir / "trunc.safetensors").string(), std::ios::binary) << bytes.substr(0, 100);
    err = error_of([&] { refit_from(e, refit::Checkpoint::open((dir / "trunc.safetensors").string())); });
    EXPECT_NE(err.find("trunc.safetensors"), std::string::npos) << err;
    bytes[12] = '!';
    std::ofstream((dir / "bad.safetensors").string(), std::ios::binary) << bytes;
    err = error_of([&] { refit_from(e, refit::Checkpoint::open((dir / "bad.safetensors").string())); });
    EXPECT_NE(err.find("bad.safetensors"), std::string::npos) << err;
  }
  EXPECT_EQ(weight_hashes(e), before) << "a failed refit changed the engine";
  // Tensors the plan does not use are reported, not an error.
  std::map<std::string, Tensor> extra = b.tensors();
  extra["optimizer.step"] = Tensor::scalar<int64_t>(DType::Int64, 3);
  refit::write_safetensors((dir / "extra.safetensors").string(), extra);
  auto cs = refit::sources_from_checkpoint(e.plan(), refit::Checkpoint::open((dir / "extra.safetensors").string()));
  EXPECT_NE(refit::unused_summary(cs.unused).find("optimizer.step"), std::string::npos);
  fs::remove_all(dir);
}
