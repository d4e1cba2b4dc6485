// LoRA adapters merged into a checkpoint before the recipes replay (refit/lora.h), on the real
// `transformers` Llama of models/hf/llama and the PEFT adapters scripts/models/export_hf_lora.py
// made for it (models/hf/llama/lora: A, r 4 on every Linear; B, r 8 with rsLoRA on three).
//
// The merge's bytes equal, for float32, float16 and bfloat16 weights, an independent reference of
// the stated arithmetic computed here in float64 and rounded step by step; a refit from base +
// adapter equals, bit for bit (engine weights and outputs), a refit from the checkpoint that
// reference merges, and PEFT's own merge (merge_and_unload) within rounding, with outputs equal to
// PEFT's model within 1e-4, also through bfloat16 casts and int8 quantization. Adapters A -> B -> A
// return to A's weights exactly. Refusals name the adapter tensor or config key and leave the
// engine unchanged.
#include "refit/lora.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/half.h"
#include "core/npy.h"
#include "refit/safetensors.h"
#include "session/build.h"
#include "session/session.h"
#include "support/cli.h"
#include "support/engine_checks.h"
#include "support/scratch_dir.h"
#include "transforms/recipe.h"

using namespace reforge;
using test_support::derived_weight_hashes;
using test_support::error_of;
using test_support::ScratchDir;
namespace fs = std::filesystem;

namespace {

const fs::path kHf = fs::path(REFORGE_SOURCE_DIR) / "models" / "hf" / "llama";
const fs::path kLora = kHf / "lora";
const std::string kBase = (kHf / "checkpoint_A.safetensors").string();

// ---- the reference: the arithmetic of refit/lora.h in float64, rounded to float32 at each step ----

float f32(double v) { return static_cast<float>(v); }

double element(const Tensor& t, int64_t i) { return t.as_double(i); }

// W's dtype of x (float32 already rounded).
Tensor store(DType dt, const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::empty(dt, shape);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::Float32) t.mutable_data<float>()[i] = v[i];
    if (dt == DType::Float16) static_cast<uint16_t*>(t.mutable_raw())[i] = float16::from_float(v[i]);
    if (dt == DType::BFloat16) static_cast<uint16_t*>(t.mutable_raw())[i] = bfloat16::from_float(v[i]);
  }
  return t;
}

Tensor reference_merge(const Tensor& w, const Tensor& a, const Tensor& b, double alpha, int64_t r, bool rslora,
                       double multiplier = 1) {
  const double scale = f32((rslora ? alpha / std::sqrt(double(r)) : alpha / double(r)) * multiplier);
  const int64_t rows = w.dim(0), in = w.dim(1);
  std::vector<float> out(static_cast<size_t>(rows * in));
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t i = 0; i < in; ++i) {
      float acc = 0.0f;
      for (int64_t k = 0; k < r; ++k)
        acc = f32(double(acc) + double(f32(element(b, o * r + k) * element(a, k * in + i))));
      const float d = f32(double(acc) * scale);
      out[o * in + i] = f32(element(w, o * in + i) + double(d));
    }
  return store(w.dtype(), out, w.shape());
}

Tensor random_tensor(DType dt, Shape shape, std::mt19937& rng, float std) {
  std::normal_distribution<float> n(0.0f, std);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = n(rng);
  return store(dt, v, shape);
}

// ---- the model ----

session::Session bound_session(plan::Precision precision = plan::Precision::Fp32) {
  session::BuildRequest req;
  req.model = (kHf / "A" / "model.onnx").string();
  req.options.mode = plan::BuildMode::Refit;
  req.options.precision = precision;
  req.checkpoint.files = {kBase};
  runtime::EngineOptions eo;
  eo.threads = 1;
  return session::Session(session::build_plan(req).plan, eo);
}

std::map<std::string, Tensor> inputs() {
  return {{"input_ids", read_npy((kHf / "inputs" / "input_ids.npy").string())}};
}

refit::RefitRequest with_lora(const std::string& adapter, const std::string& base = kBase) {
  refit::RefitRequest req;
  req.files = {base};
  req.lora.path = (kLora / adapter).string();
  return req;
}

double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(a.as_double(i) - b.as_double(i)));
  return m;
}

// The adapter's config as written.
std::string config_of(const std::string& adapter) {
  std::ifstream f(kLora / adapter / "adapter_config.json");
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A copy of adapter `adapter` in `dir`, its config's JSON changed by `edit` and its tensors by
// `edit_tensors`.
std::string adapter_copy(const ScratchDir& dir, const std::string& adapter,
                         const std::function<void(nlohmann::json&)>& edit,
                         const std::function<void(std::map<std::string, Tensor>&)>& edit_tensors = {}) {
  nlohmann::json j = nlohmann::json::parse(config_of(adapter));
  if (edit) edit(j);
  fs::create_directories(dir.path / "adapter");
  std::ofstream(dir.path / "adapter" / "adapter_config.json") << j.dump(2);
  auto tensors = refit::Checkpoint::open((kLora / adapter / "adapter_model.safetensors").string()).tensors();
  if (edit_tensors) edit_tensors(tensors);
  refit::write_safetensors((dir.path / "adapter" / "adapter_model.safetensors").string(), tensors);
  return (dir.path / "adapter").string();
}

}  // namespace

// The merge, for each weight dtype, serial and parallel sizes: bit for bit the reference.
TEST(Lora, MergeIsTheStatedArithmetic) {
  std::mt19937 rng(7);
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16})
    for (auto [rows, in, r] : {std::tuple<int64_t, int64_t, int64_t>{5, 7, 3}, {256, 512, 8}}) {
      const Tensor w = random_tensor(dt, {rows, in}, rng, 0.05f);
      const Tensor a = random_tensor(DType::Float32, {r, in}, rng, 0.3f);
      const Tensor b = random_tensor(dt == DType::Float32 ? DType::Float32 : DType::BFloat16, {rows, r}, rng, 0.3f);
      for (bool rslora : {false, true}) {
        refit::LoraAdapter ad;
        ad.config = {16.0, r, rslora};
        ad.multiplier = 0.75;
        const Tensor got = refit::merge_lora_weight(w, a, b, ad.scale(), "w");
        const Tensor want = reference_merge(w, a, b, 16.0, r, rslora, 0.75);
        EXPECT_TRUE(transforms::bit_equal(got, want)) << dtype_name(dt) << " " << rows << "x" << in << " r " << r;
        EXPECT_FALSE(transforms::bit_equal(got, w));
      }
    }
  EXPECT_NE(error_of([&] {
              refit::merge_lora_weight(Tensor::empty(DType::Float32, {4, 6}), Tensor::empty(DType::Float32, {2, 5}),
                                       Tensor::empty(DType::Float32, {4, 2}), 1.0f, "layer.weight");
            }).find("layer.weight: the weight is float32[4,6], lora_A float32[2,5]"),
            std::string::npos);
}

// Base + adapter equals the checkpoint the reference merges, bit for bit, engine weights and
// outputs; PEFT's merge within rounding, and PEFT's outputs within 1e-4.
TEST(Lora, RefitEqualsTheMergedCheckpoint) {
  const auto base = refit::Checkpoint::open(kBase).tensors();
  for (const std::string adapter : {"A", "B"}) {
    SCOPED_TRACE("adapter " + adapter);
    session::Session s = bound_session();
    const refit::RefitReport rep = s.refit(with_lora(adapter));
    ASSERT_TRUE(rep.lora);
    const auto config = nlohmann::json::parse(config_of(adapter));
    const int64_t r = config["r"];
    const double alpha = config["lora_alpha"];
    const bool rslora = config["use_rslora"];
    EXPECT_EQ(rep.lora->r, r);
    EXPECT_EQ(rep.lora->merged.size(), adapter == "A" ? 14u : 6u);
    EXPECT_NE(rep.summary().find("lora: merged"), std::string::npos) << rep.summary();
    EXPECT_EQ(rep.json()["lora"]["merged"].size(), rep.lora->merged.size());

    // The reference's merged checkpoint.
    std::map<std::string, Tensor> merged = base;
    const auto ad = refit::Checkpoint::open((kLora / adapter / "adapter_model.safetensors").string()).tensors();
    for (const auto& target : rep.lora->merged) {
      const std::string module = "base_model.model." + target.substr(0, target.size() - 7);
      merged[target] = reference_merge(base.at(target), ad.at(module + ".lora_A.weight"),
                                       ad.at(module + ".lora_B.weight"), alpha, r, rslora);
      EXPECT_FALSE(transforms::bit_equal(merged[target], base.at(target))) << target;
    }
    session::Session ref = bound_session();
    refit::RefitRequest req;
    req.checkpoint_tensors = merged;
    ref.refit(req);
    EXPECT_EQ(derived_weight_hashes(s.engine()), derived_weight_hashes(ref.engine()));
    const Tensor out = s.run(inputs())[0];
    EXPECT_TRUE(transforms::bit_equal(out, ref.run(inputs())[0]));

    // PEFT: its merge_and_unload's checkpoint, and its model's outputs.
    session::Session peft = bound_session();
    refit::RefitRequest preq;
    preq.files = {(kLora / ("merged_" + adapter + ".safetensors")).string()};
    peft.refit(preq);
    const auto peft_merged = refit::Checkpoint::open(preq.files[0]).tensors();
    for (const auto& target : rep.lora->merged)
      EXPECT_LE(max_diff(merged.at(target), peft_merged.at(target)), 1e-6) << target;
    EXPECT_LE(max_diff(out, peft.run(inputs())[0]), 1e-5);
    EXPECT_LE(max_diff(out, read_npy((kLora / "reference" / adapter / "logits.npy").string())), 1e-4);
    EXPECT_GE(max_diff(out, read_npy((kHf / "reference" / "A" / "logits.npy").string())), 1e-2);
  }
}

// Plans whose recipes cast the Linear weights to bfloat16 or quantize them to int8: the merged
// matrices go through those recipes, as the reference's merged checkpoint does.
TEST(Lora, CastAndQuantizedWeightsFollowTheirRecipes) {
  const auto base = refit::Checkpoint::open(kBase).tensors();
  const auto ad = refit::Checkpoint::open((kLora / "A" / "adapter_model.safetensors").string()).tensors();
  std::map<std::string, Tensor> merged = base;
  for (const auto& [key, a] : ad) {
    const std::string tail = ".lora_A.weight";
    if (key.size() < tail.size() || key.compare(key.size() - tail.size(), tail.size(), tail) != 0) continue;
    const std::string module = key.substr(0, key.size() - tail.size());
    const std::string target = module.substr(std::string("base_model.model.").size()) + ".weight";
    merged[target] = reference_merge(base.at(target), a, ad.at(module + ".lora_B.weight"), 8.0, 4, false);
  }
  for (plan::Precision precision : {plan::Precision::Bf16, plan::Precision::Int8}) {
    SCOPED_TRACE(plan::precision_name(precision));
    session::Session s = bound_session(precision);
    const auto before = derived_weight_hashes(s.engine());
    s.refit(with_lora("A"));
    EXPECT_NE(derived_weight_hashes(s.engine()), before);
    session::Session ref = bound_session(precision);
    refit::RefitRequest req;
    req.checkpoint_tensors = merged;
    ref.refit(req);
    EXPECT_EQ(derived_weight_hashes(s.engine()), derived_weight_hashes(ref.engine()));
    EXPECT_TRUE(transforms::bit_equal(s.run(inputs())[0], ref.run(inputs())[0]));
  }
}

// A -> B -> A, into the current weights and into named versions: A's weights and outputs again,
// bit for bit; a version switch is a lookup, the other versions untouched.
TEST(Lora, AdaptersABAReturnToAsWeightsBitForBit) {
  session::Session s = bound_session();
  s.refit(with_lora("A"));
  const auto hashes_a = derived_weight_hashes(s.engine());
  const Tensor out_a = s.run(inputs())[0];
  s.refit(with_lora("B"));
  const auto hashes_b = derived_weight_hashes(s.engine());
  const Tensor out_b = s.run(inputs())[0];
  EXPECT_NE(hashes_a, hashes_b);
  EXPECT_FALSE(transforms::bit_equal(out_a, out_b));
  s.refit(with_lora("A"));
  EXPECT_EQ(derived_weight_hashes(s.engine()), hashes_a);
  EXPECT_TRUE(transforms::bit_equal(s.run(inputs())[0], out_a));

  // Named versions beside the current weights (A's), each made from the base again.
  s.refit(with_lora("B"), nullptr, "b");
  s.refit(with_lora("A"), nullptr, "a");
  s.refit(with_lora("B"), nullptr, "a");  // replaced: A -> B
  s.refit(with_lora("A"), nullptr, "a");  // -> A
  EXPECT_EQ(s.versions(), (std::vector<std::string>{"a", "b"}));
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(transforms::bit_equal(s.run(inputs(), {}, "a")[0], out_a));
    EXPECT_TRUE(transforms::bit_equal(s.run(inputs(), {}, "b")[0], out_b));
    EXPECT_TRUE(transforms::bit_equal(s.run(inputs())[0], out_a));
  }
  EXPECT_EQ(derived_weight_hashes(s.engine()), hashes_a);

  // A scale multiplier of 0 is the base itself.
  refit::RefitRequest zero = with_lora("B");
  zero.lora.multiplier = 0;
  s.refit(zero);
  session::Session base = bound_session();
  EXPECT_EQ(derived_weight_hashes(s.engine()), derived_weight_hashes(base.engine()));
}

// The adapter as tensors in memory (Python's lora=(tensors, config)), PEFT's names with or
// without the base_model.model. prefix, equals the adapter read from its folder.
TEST(Lora, TensorsInMemoryEqualTheFolder) {
  session::Session from_dir = bound_session();
  from_dir.refit(with_lora("B"));
  session::Session from_memory = bound_session();
  refit::RefitRequest req;
  req.checkpoint_tensors = refit::Checkpoint::open(kBase).tensors();
  const auto adapter = refit::Checkpoint::open((kLora / "B" / "adapter_model.safetensors").string()).tensors();
  for (const auto& [k, t] : adapter) req.lora.tensors[k.substr(std::string("base_model.model.").size())] = t;
  req.lora.config_json = config_of("B");
  from_memory.refit(req);
  EXPECT_EQ(derived_weight_hashes(from_memory.engine()), derived_weight_hashes(from_dir.engine()));
}

// Refusals, each naming what is wrong, the engine unchanged.
TEST(Lora, RefusalsNameTheTensorOrFeature) {
  session::Session s = bound_session();
  const auto before = derived_weight_hashes(s.engine());
  auto refused = [&](const refit::RefitRequest& req) {
    const std::string err = error_of([&] { s.refit(req); });
    EXPECT_EQ(derived_weight_hashes(s.engine()), before) << err;
    EXPECT_TRUE(s.versions().empty());
    return err;
  };
  ScratchDir dir("lora_refusals");
  const std::string q0 = "base_model.model.model.layers.0.self_attn.q_proj";

  // A module the base lacks: the adapter tensor named, with the nearest names.
  std::string err = refused(with_lora(adapter_copy(dir, "A", {}, [&](auto& t) {
    t["base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight"] = t.at(q0 + ".lora_A.weight");
    t["base_model.model.model.layers.7.self_attn.q_proj.lora_B.weight"] = t.at(q0 + ".lora_B.weight");
  })));
  EXPECT_NE(err.find("tensor 'base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight' adapts "
                     "'model.layers.7.self_attn.q_proj.weight', which checkpoint '" +
                     kBase + "' does not hold (nearest: 'model.layers.0.self_attn.q_proj.weight'"),
            std::string::npos)
      << err;
  fs::remove_all(dir.path / "adapter");

  // A shape that does not fit: the key and the shapes.
  err = refused(with_lora(adapter_copy(dir, "A", {}, [&](auto& t) {
    t[q0 + ".lora_B.weight"] = Tensor::empty(DType::Float32, {32, 4});
  })));
  EXPECT_NE(err.find("'model.layers.0.self_attn.q_proj.weight': the weight is float32[64,64], lora_A float32[4,64] "
                     "and lora_B float32[32,4]"),
            std::string::npos)
      << err;
  fs::remove_all(dir.path / "adapter");

  // A rank other than the config's.
  err = refused(with_lora(adapter_copy(dir, "A", [](auto& j) { j["r"] = 8; })));
  EXPECT_NE(err.find("with r = 8 (adapter_config.json) they must be [8, in] and [out, 8]"), std::string::npos) << err;
  fs::remove_all(dir.path / "adapter");

  // A partner missing.
  err = refused(with_lora(adapter_copy(dir, "A", {}, [&](auto& t) { t.erase(q0 + ".lora_B.weight"); })));
  EXPECT_NE(err.find("tensor '" + q0 + ".lora_A.weight' has no lora_B partner"), std::string::npos) << err;
  fs::remove_all(dir.path / "adapter");

  // Config features a merge cannot express.
  for (auto [key, value, says] :
       {std::tuple<const char*, nlohmann::json, const char*>{"fan_in_fan_out", true, "fan_in_fan_out"},
        {"modules_to_save", nlohmann::json::array({"lm_head"}), "modules_to_save"},
        {"bias", "lora_only", "trains biases"},
        {"rank_pattern", {{"q_proj", 2}}, "ranks per module"},
        {"peft_type", "LOHA", "only LoRA adapters merge here"}}) {
    err = refused(with_lora(adapter_copy(dir, "A", [&](auto& j) { j[key] = value; })));
    EXPECT_NE(err.find(says), std::string::npos) << key << ": " << err;
    fs::remove_all(dir.path / "adapter");
  }

  // PEFT's DoRA adapter: its config says so.
  err = refused(with_lora("dora"));
  EXPECT_NE(err.find("uses DoRA (weight-decomposed LoRA), which reforge does not merge (use_dora: true)"),
            std::string::npos)
      << err;
  // Its magnitude tensors are refused by name too, whatever the config says.
  err = refused(with_lora(adapter_copy(dir, "dora", [](auto& j) { j["use_dora"] = false; })));
  EXPECT_NE(err.find("lora_magnitude_vector"), std::string::npos) << err;
  EXPECT_NE(err.find("a DoRA magnitude vector"), std::string::npos) << err;
  fs::remove_all(dir.path / "adapter");

  // No config beside the tensors; the pickle format.
  fs::create_directories(dir.path / "bare");
  fs::copy_file(kLora / "A" / "adapter_model.safetensors", dir.path / "bare" / "adapter_model.safetensors");
  err = refused(with_lora((dir.path / "bare" / "adapter_model.safetensors").string()));
  EXPECT_NE(err.find("no adapter_config.json beside"), std::string::npos) << err;
  fs::create_directories(dir.path / "pickle");
  std::ofstream(dir.path / "pickle" / "adapter_model.bin") << "x";
  err = refused(with_lora((dir.path / "pickle").string()));
  EXPECT_NE(err.find("adapter_model.bin, PyTorch's pickle format"), std::string::npos) << err;

  // An adapted tensor the checkpoint holds but no source of the plan reads.
  auto with_extra = refit::Checkpoint::open(kBase).tensors();
  with_extra["extra.proj.weight"] = Tensor::empty(DType::Float32, {64, 64});
  refit::write_safetensors(dir.file("base_extra.safetensors"), with_extra);
  err = refused(with_lora(adapter_copy(dir, "A", {},
                                       [&](auto& t) {
                                         t["base_model.model.extra.proj.lora_A.weight"] = t.at(q0 + ".lora_A.weight");
                                         t["base_model.model.extra.proj.lora_B.weight"] = t.at(q0 + ".lora_B.weight");
                                       }),
                          dir.file("base_extra.safetensors")));
  EXPECT_NE(err.find("adapts 'extra.proj.weight' of checkpoint"), std::string::npos) << err;
  EXPECT_NE(err.find("which no source of this plan reads"), std::string::npos) << err;
  fs::remove_all(dir.path / "adapter");

  // NaN in an adapter matrix.
  err = refused(with_lora(adapter_copy(dir, "A", {}, [&](auto& t) {
    Tensor a = t.at(q0 + ".lora_A.weight").clone();
    a.mutable_data<float>()[5] = NAN;
    t[q0 + ".lora_A.weight"] = a;
  })));
  EXPECT_NE(err.find("tensor '" + q0 + ".lora_A.weight' of LoRA adapter"), std::string::npos) << err;
  fs::remove_all(dir.path / "adapter");

  // Bases that are not a checkpoint: an ONNX model, tensors by initializer name.
  err = refused(with_lora("A", (kHf / "B" / "model.onnx").string()));
  EXPECT_NE(err.find("an ONNX model's sources are read by graph position"), std::string::npos) << err;
  refit::RefitRequest by_name;
  by_name.tensors = {{"x", Tensor::empty(DType::Float32, {1})}};
  by_name.lora.path = (kLora / "A").string();
  err = refused(by_name);
  EXPECT_NE(err.find("a LoRA adapter merges into a checkpoint's tensors by module name"), std::string::npos) << err;
  // Nothing was made of any of them.
  EXPECT_TRUE(s.versions().empty());
}

// `reforge refit PLAN --weights BASE --lora DIR`: the written plan holds the weights of the
// session's refit; --lora-scale scales; --lora without --weights is refused.
TEST(Lora, CliRefitWithAnAdapter) {
  ScratchDir dir("lora_cli");
  session::Session s = bound_session();
  s.save(dir.file("base.plan"), true);
  const auto r =
      test_support::run_cli("--quiet refit " + dir.file("base.plan") + " --weights " + kBase + " --lora " +
                            (kLora / "B").string() + " --lora-scale 0.5 --full -o " + dir.file("b.plan") + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["lora"]["merged"].size(), 6u);
  session::Session back(session::read_plan_file(dir.file("b.plan"), true));
  refit::RefitRequest req = with_lora("B");
  req.lora.multiplier = 0.5;
  s.refit(req);
  EXPECT_EQ(derived_weight_hashes(back.engine()), derived_weight_hashes(s.engine()));
  const auto no_weights = test_support::run_cli("run " + dir.file("b.plan") + " --lora " + (kLora / "B").string());
  EXPECT_NE(no_weights.status, 0);
  EXPECT_NE(no_weights.output.find("--lora merges an adapter into the checkpoint given with --weights"),
            std::string::npos)
      << no_weights.output;
}
