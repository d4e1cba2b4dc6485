// Refit straight from framework checkpoints: build from A's ONNX bound to checkpoint A, refit
// with checkpoint B, compare with PyTorch's outputs for B (also after save/load of the refit
// plan); the BatchNorm-folded CNN is refused with the reason; negative cases leave the engine
// unchanged.
#include "refit/checkpoint_refit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "builder/binding.h"
#include "builder/onnx_refit.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "plan/plan_io.h"
#include "refit/refitter.h"
#include "runtime/plan_engine.h"
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
  return build::build_plan_with_checkpoint(reforge::onnx::import_model_file(c.onnx_a), o,
                                           refit::Checkpoint::open(c.ckpt_a), {});
}

void refit_from(runtime::PlanEngine& e, const refit::Checkpoint& ck) {
  refit::Refitter r(e);
  auto cs = refit::sources_from_checkpoint(e.plan(), ck);
  refit::set_sources(r, cs);
  r.commit();
}

}  // namespace

class CheckpointRefit : public ::testing::TestWithParam<Case> {};

TEST_P(CheckpointRefit, BuildFromABoundToCheckpointRefitWithBMatchesFramework) {
  const Case& c = GetParam();
  for (bool strip : {true, false}) {
    SCOPED_TRACE(strip ? "stripped" : "full");
    plan::Plan p = round_trip(build_bound(c, strip));
    for (const auto& s : p.sources)
      EXPECT_NE(s.binding.status, plan::Binding::Status::Unbound) << s.key << ": " << s.binding.note;
    runtime::PlanEngine e(std::move(p));
    refit_from(e, refit::Checkpoint::open(c.ckpt_b));
    EXPECT_LE(max_diff_to_reference(c, e), 1e-4) << c.id;
    runtime::PlanEngine again(round_trip(e.current_plan(false)));
    EXPECT_LE(max_diff_to_reference(c, again), 1e-4) << c.id << " after save/load";
  }
}

// An fp16 plan bound to checkpoint A and refit from checkpoint B re-applies the float16 cast to
// B's float32 tensors: its outputs match PyTorch's for B within the fp16 model tolerance
// (max |out - ref| <= 2.5e-3 max |ref|: fp16_test.cc), and far better than before the refit.
TEST_P(CheckpointRefit, Fp16PlanRefitFromCheckpointMatchesFramework) {
  const Case& c = GetParam();
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  o.precision = plan::Precision::Fp16;
  plan::Plan p = round_trip(build::build_plan_with_checkpoint(reforge::onnx::import_model_file(c.onnx_a), o,
                                                              refit::Checkpoint::open(c.ckpt_a), {}));
  ASSERT_EQ(p.precision, plan::Precision::Fp16);
  size_t halves = 0;
  for (const auto& w : p.weights) halves += w.dtype == DType::Float16;
  EXPECT_GT(halves, 0u) << c.id;
  double mag = 0;
  for (const auto& [name, path] : c.reference) {
    Tensor ref = read_npy(path);
    for (int64_t k = 0; k < ref.numel(); ++k) mag = std::max(mag, std::fabs(ref.as_double(k)));
  }
  runtime::PlanEngine e(std::move(p));
  const double before = max_diff_to_reference(c, e);
  refit_from(e, refit::Checkpoint::open(c.ckpt_b));
  const double after = max_diff_to_reference(c, e);
  EXPECT_LE(after, 2.5e-3 * mag) << c.id;
  EXPECT_LT(after * 10, before) << c.id << ": the refit did not take B's weights";
}

// Quantized plans (--precision int8 / int4) bound to checkpoint A and refit from checkpoint B
// re-quantize B's tensors: every engine weight equals a fresh quantized build of B's ONNX export,
// bit for bit, and the refit reports changed quantized values.
TEST_P(CheckpointRefit, QuantizedPlanRefitFromCheckpointEqualsFreshBuild) {
  const Case& c = GetParam();
  if (c.model != "llama" && c.model != "bert") GTEST_SKIP() << "quantized rows cover llama and bert";
  for (plan::Precision prec : {plan::Precision::Int8, plan::Precision::Int4}) {
    SCOPED_TRACE(plan::precision_name(prec));
    build::BuildOptions o;
    o.mode = plan::BuildMode::Refit;
    o.precision = prec;
    plan::Plan fresh_b = build::build_plan(reforge::onnx::import_model_file(c.onnx_b), o);
    for (bool strip : {false, true}) {
      o.strip_weights = strip;
      runtime::PlanEngine e(round_trip(build::build_plan_with_checkpoint(reforge::onnx::import_model_file(c.onnx_a), o,
                                                                         refit::Checkpoint::open(c.ckpt_a), {})));
      refit::Refitter r(e);
      auto cs = refit::sources_from_checkpoint(e.plan(), refit::Checkpoint::open(c.ckpt_b));
      refit::set_sources(r, cs);
      const refit::CommitReport rep = r.commit();
      ASSERT_FALSE(rep.quantized.empty());
      size_t changed = 0;
      for (const auto& q : rep.quantized) {
        changed += q.changed;
        EXPECT_EQ(q.compared, !strip) << q.weight;
      }
      EXPECT_GT(changed, 0u);
      for (const auto& w : fresh_b.weights) {
        Tensor mine = e.weight(w.name);
        ASSERT_TRUE(mine.defined()) << w.name;
        EXPECT_TRUE(transforms::bit_equal(mine, w.data))
            << c.id << (strip ? " stripped" : " full") << ": engine weight " << w.name
            << " differs from a fresh build of B";
      }
    }
  }
}

// Checkpoint tensors an exporter stored transposed (torch 1.13's constant folding keeps each
// Linear weight as W^T for MatMul) are given to the refit as they are
// (Refitter::set_source_transposed) and packed into panels in one pass. The engine weights equal,
// bit for bit, those of a refit given every source made first (the transposes done by
// apply_binding); a NaN is reported at the same place of the same source either way; and a
// refit-identical plan, which hashes every source, makes the transposes first and accepts A.
TEST_P(CheckpointRefit, TransposedCheckpointTensorsArePackedInOnePass) {
  const Case& c = GetParam();
  const refit::Checkpoint b = refit::Checkpoint::open(c.ckpt_b);
  runtime::PlanEngine direct(round_trip(build_bound(c, true)));
  const auto cs = refit::sources_from_checkpoint(direct.plan(), b);
  if (c.id.find("torch113_fold") != std::string::npos) {
    EXPECT_FALSE(cs.transposed.empty()) << c.id;
  }
  refit::Refitter r(direct);
  refit::set_sources(r, cs);
  const refit::CommitReport rep = r.commit();
  EXPECT_EQ(rep.packed_from_transposed + rep.transposed_first, cs.transposed.size());
  if (!cs.transposed.empty()) {
    EXPECT_GT(rep.packed_from_transposed, 0u) << c.id;
  }

  // Every source made first, as the refit did before: the same engine weights.
  auto made_first = [&](const refit::Checkpoint& ck, runtime::PlanEngine& e) {
    refit::Refitter m(e);
    auto all = refit::sources_from_checkpoint(e.plan(), ck);
    for (const auto& [id, t] : all.sources) m.set_source(id, t);
    for (const auto& [id, t] : all.transposed) m.set_source(id, transforms::transpose_2d(t));
    return m.commit();
  };
  runtime::PlanEngine made(round_trip(build_bound(c, true)));
  EXPECT_EQ(made_first(b, made).packed_from_transposed, 0u);
  EXPECT_EQ(derived_weight_hashes(direct), derived_weight_hashes(made)) << c.id;
  EXPECT_LE(max_diff_to_reference(c, direct), 1e-4) << c.id;
  if (cs.transposed.empty()) return;

  // A NaN in a transposed tensor that no other source reads (GPT-2's tied embedding is also the
  // Gather's table): the same message, naming the source's index, either way.
  std::map<std::string, int> readers;
  for (const auto& s : direct.plan().sources)
    for (const auto& in : s.binding.checkpoint) ++readers[in.name];
  uint32_t id = 0;
  Tensor matrix;
  for (const auto& [i, t] : cs.transposed)
    if (readers[direct.plan().sources[i].binding.checkpoint[0].name] == 1) id = i, matrix = t;
  // GPT-2's only transposed tensor is its tied embedding (its Conv1D weights are stored [in, out]).
  if (!matrix.defined()) {
    EXPECT_EQ(c.model, "gpt2") << c.id << ": no transposed checkpoint tensor read by one source only";
  } else {
    const std::string name = direct.plan().sources[id].binding.checkpoint[0].name;
    std::map<std::string, Tensor> tensors = b.tensors();
    Tensor bad = Tensor::empty(matrix.dtype(), matrix.shape());
    std::memcpy(bad.mutable_raw(), matrix.raw(), matrix.nbytes());
    bad.mutable_data<float>()[1] = NAN;                        // matrix [0, 1] = source [1, 0]
    bad.mutable_data<float>()[matrix.dim(1) + 0] = -INFINITY;  // matrix [1, 0] = source [0, 1], first in the source
    tensors[name] = bad;
    const refit::Checkpoint nan_ckpt = refit::Checkpoint::from_tensors(tensors, "state dict");
    const auto hashes = derived_weight_hashes(direct);
    const std::string direct_err = error_of([&] {
      refit::Refitter n(direct);
      refit::set_sources(n, refit::sources_from_checkpoint(direct.plan(), nan_ckpt));
      n.commit();
    });
    EXPECT_NE(direct_err.find("-inf at index [0, 1]"), std::string::npos) << direct_err;
    EXPECT_EQ(direct_err, error_of([&] { made_first(nan_ckpt, made); }));
    EXPECT_EQ(derived_weight_hashes(direct), hashes) << "a refused refit changed the engine";
  }

  // Refit-identical: every source hashed, so each transpose is made first; A is accepted.
  build::BuildOptions o;
  o.mode = plan::BuildMode::RefitIdentical;
  runtime::PlanEngine identical(round_trip(build::build_plan_with_checkpoint(
      reforge::onnx::import_model_file(c.onnx_a), o, refit::Checkpoint::open(c.ckpt_a), {})));
  refit::Refitter ri(identical);
  const auto ca = refit::sources_from_checkpoint(identical.plan(), refit::Checkpoint::open(c.ckpt_a));
  refit::set_sources(ri, ca);
  const refit::CommitReport irep = ri.commit();
  EXPECT_EQ(irep.packed_from_transposed, 0u);
  EXPECT_EQ(irep.transposed_first, ca.transposed.size());
}

INSTANTIATE_TEST_SUITE_P(Models, CheckpointRefit, ::testing::ValuesIn(cases_of(false)),
                         [](const auto& info) { return info.param.id; });

class CheckpointRefitFolded : public ::testing::TestWithParam<Case> {};

TEST_P(CheckpointRefitFolded, BatchNormFoldedRefusedFromCheckpointButOnnxWorks) {
  const Case& c = GetParam();
  build::BindOptions partial;
  partial.allow_partial = true;
  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  auto ckpt_a = refit::Checkpoint::open(c.ckpt_a);
  auto graph_a = reforge::onnx::import_model_file(c.onnx_a);
  // Under half of the sources bind (every conv weight is folded): refused unless partial binding
  // is allowed explicitly.
  if (c.id != "cnn_dynamo") {  // dynamo keeps the conv names: the folded weights are evidence of the right checkpoint
    EXPECT_NE(
        error_of([&] { build::build_plan_with_checkpoint(graph_a, o, ckpt_a, {}); }).find("--allow-partial-binding"),
        std::string::npos);
  }
  plan::Plan p = round_trip(build::build_plan_with_checkpoint(graph_a, o, ckpt_a, partial));
  size_t unbound = 0;
  for (const auto& s : p.sources) unbound += s.binding.status == plan::Binding::Status::Unbound;
  // Every exporter folds the CNN's BatchNorm (dynamo under the conv's name, PyTorch 1.13 under
  // new names): those weights cannot be derived from the checkpoint and must stay unbound.
  ASSERT_GT(unbound, 0u) << c.id << ": the folded conv weights must be unbound";
  runtime::PlanEngine e(std::move(p));
  auto before = derived_weight_hashes(e);
  std::string err = error_of([&] { refit_from(e, refit::Checkpoint::open(c.ckpt_b)); });
  EXPECT_NE(err.find("not bound"), std::string::npos) << err;
  EXPECT_NE(err.find("BatchNorm"), std::string::npos) << err;
  EXPECT_NE(err.find("re-exported ONNX"), std::string::npos) << err;
  EXPECT_NE(err.find("--bind"), std::string::npos) << err;
  EXPECT_NE(err.find("--literal"), std::string::npos) << err;
  EXPECT_EQ(derived_weight_hashes(e), before);
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
  auto before = derived_weight_hashes(e);
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
  err = variant("shape.safetensors", [&](auto& t) {
    t[victim] = t[victim].reshaped({t[victim].dim(1), t[victim].dim(0)});
  });
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
  EXPECT_EQ(derived_weight_hashes(e), before) << "a failed refit changed the engine";
  // Tensors the plan does not use are reported, not an error.
  std::map<std::string, Tensor> extra = b.tensors();
  extra["optimizer.step"] = Tensor::scalar<int64_t>(DType::Int64, 3);
  refit::write_safetensors((dir / "extra.safetensors").string(), extra);
  auto cs = refit::sources_from_checkpoint(e.plan(), refit::Checkpoint::open((dir / "extra.safetensors").string()));
  EXPECT_NE(refit::unused_summary(cs.unused).find("optimizer.step"), std::string::npos);
  fs::remove_all(dir);
}

namespace {

ir::Node node(const std::string& name, const std::string& op, std::vector<std::string> ins,
              const std::string& scope = "") {
  ir::Node n;
  n.name = name;
  n.op_type = op;
  n.opset = 18;
  n.inputs = std::move(ins);
  n.outputs = {name + "_out"};
  if (!scope.empty()) n.metadata.push_back({"pkg.torch.onnx.name_scopes", scope});
  return n;
}

}  // namespace

// The transforms the models above do not exercise: a leading slice (position table folded to its
// first rows), a cast to float16, a transpose; plus ambiguity, --bind, name-match-differs, literals.
TEST(CheckpointBinding, SliceCastTransposeAmbiguityAndLiterals) {
  std::map<std::string, Tensor> ck = {{"wpe.weight", random_f32({16, 8}, 1)},
                                      {"proj.weight", random_f32({4, 8}, 2)},
                                      {"scale.weight", random_f32({8}, 3)},
                                      {"a.norm.weight", Tensor::empty(DType::Float32, {8})},
                                      {"b.norm.weight", Tensor::empty(DType::Float32, {8})},
                                      {"conv.weight", random_f32({8}, 4)},
                                      {"q.weight", random_f32({4, 8}, 5)},
                                      {"k.weight", random_f32({2, 8}, 6)},
                                      {"v.weight", random_f32({2, 8}, 8)},
                                      {"gate.weight", random_f32({3, 8}, 9)},
                                      {"up.weight", random_f32({3, 8}, 10)}};
  refit::Checkpoint c = checkpoint_of(ck);
  ir::Graph g;
  auto slice = [&](const Tensor& t, int64_t n) {
    plan::Binding b;
    b.checkpoint.push_back({"t", t.dtype(), t.shape()});
    ir::Attribute s, e, a;
    s.type = e.type = a.type = ir::AttrType::Ints;
    s.name = "starts", e.name = "ends", a.name = "axes";
    s.ints = {0}, e.ints = {n}, a.ints = {0};
    b.steps.push_back(
        {"", "Slice", 1, {{"starts", s}, {"ends", e}, {"axes", a}}, {{plan::Operand::Kind::Source, 0}}, 0});
    return transforms::apply_binding(b, {t}, t.dtype(), {n, t.dim(1)}).clone();
  };
  g.initializers["pos"] = slice(ck["wpe.weight"], 5);
  g.initializers["val_7"] = transforms::evaluate_op("", "Transpose", 13, {}, {&ck["proj.weight"]}, 1)[0];
  g.initializers["scale16"] = cast_tensor(ck["scale.weight"], DType::Float16);
  g.initializers["zeros"] = Tensor::empty(DType::Float32, {8});
  g.initializers["conv.weight"] = random_f32({8}, 99);  // same name, other values
  g.initializers["rope_cache"] = random_f32({3, 8}, 7);
  g.initializers["mask"] = Tensor::empty(DType::Float32, {5, 5});
  auto transposed = [&](const char* n) { return transforms::evaluate_op("", "Transpose", 13, {}, {&ck[n]}, 1)[0]; };
  ir::Attribute ax1, ax0;
  ax1.name = ax0.name = "axis";
  ax1.type = ax0.type = ir::AttrType::Int;
  ax1.i = 1;
  Tensor qt = transposed("q.weight"), kt = transposed("k.weight"), vt = transposed("v.weight");
  g.initializers["qkv"] = transforms::evaluate_op("", "Concat", 13, {{"axis", ax1}}, {&qt, &kt, &vt}, 1)[0];
  g.initializers["gate_up"] =
      transforms::evaluate_op("", "Concat", 13, {{"axis", ax0}}, {&ck["gate.weight"], &ck["up.weight"]}, 1)[0];
  g.nodes = {node("n0", "Add", {"x", "pos"}),
             node("n1", "MatMul", {"n0_out", "val_7"}),
             node("n2", "Mul", {"x16", "scale16"}),
             node("n3", "Add", {"n0_out", "zeros"}, "['', 'a', 'a.norm', 'add']"),
             node("n4", "Add", {"n0_out", "zeros"}, "['', 'b', 'b.norm', 'add_1']"),
             node("n5", "Mul", {"n0_out", "conv.weight"}),
             node("n6", "Add", {"n0_out", "rope_cache"}),
             node("n7", "Add", {"n0_out", "mask"}),
             node("n8", "MatMul", {"n0_out", "qkv"}),
             node("n9", "Mul", {"y", "gate_up"})};
  auto r = build::bind_checkpoint(g, {}, c, {});
  auto at = [&](uint32_t p, uint32_t s) { return r.bindings.at({p, s}); };
  EXPECT_EQ(at(0, 1).status, plan::Binding::Status::Bound);
  EXPECT_EQ(at(0, 1).checkpoint.at(0).name, "wpe.weight");
  ASSERT_EQ(at(0, 1).steps.size(), 1u);
  EXPECT_EQ(at(0, 1).steps[0].op_type, "Slice");
  EXPECT_EQ(at(1, 1).checkpoint.at(0).name, "proj.weight");
  EXPECT_EQ(at(1, 1).steps.at(0).op_type, "Transpose");
  EXPECT_EQ(at(2, 1).checkpoint.at(0).name, "scale.weight");
  EXPECT_EQ(at(2, 1).steps.at(0).op_type, "Cast");
  EXPECT_EQ(at(3, 1).checkpoint.at(0).name, "a.norm.weight");  // merged zeros split by scope
  EXPECT_EQ(at(4, 1).checkpoint.at(0).name, "b.norm.weight");
  EXPECT_EQ(at(5, 1).status, plan::Binding::Status::Unbound);
  EXPECT_NE(at(5, 1).note.find("values differ from checkpoint tensor 'conv.weight'"), std::string::npos)
      << at(5, 1).note;
  // A table of no provable structure is unbound, never a literal by guess; the all-zero mask is
  // a structural constant.
  EXPECT_EQ(at(6, 1).status, plan::Binding::Status::Unbound);
  EXPECT_NE(at(6, 1).note.find("not provably a function of the configuration"), std::string::npos) << at(6, 1).note;
  EXPECT_EQ(at(7, 1).status, plan::Binding::Status::Constant);
  EXPECT_EQ(at(7, 1).reason, plan::Binding::Reason::Structural);
  // Fused projections: a concatenation of (transposed) checkpoint tensors.
  EXPECT_EQ(at(8, 1).status, plan::Binding::Status::Bound) << at(8, 1).note;
  ASSERT_EQ(at(8, 1).checkpoint.size(), 3u);
  EXPECT_EQ(at(8, 1).checkpoint[0].name, "q.weight");
  EXPECT_EQ(at(8, 1).checkpoint[2].name, "v.weight");
  EXPECT_EQ(at(8, 1).steps.back().op_type, "Concat");
  ASSERT_EQ(at(9, 1).checkpoint.size(), 2u);
  EXPECT_EQ(at(9, 1).checkpoint[1].name, "up.weight");
  {
    std::vector<Tensor> ins;
    for (const auto& in : at(8, 1).checkpoint) ins.push_back(ck[in.name]);
    EXPECT_TRUE(
        transforms::bit_equal(transforms::apply_binding(at(8, 1), ins, DType::Float32, {8, 8}), g.initializers["qkv"]));
  }
  // The binding replays on new values: the slice of a new table is the new source.
  Tensor wpe_b = random_f32({16, 8}, 11);
  EXPECT_TRUE(
      transforms::bit_equal(transforms::apply_binding(at(0, 1), {wpe_b}, DType::Float32, {5, 8}), slice(wpe_b, 5)));
  // --strict-binding: a literal the user declared must be structural or proven.
  build::BindOptions strict;
  strict.strict = true;
  strict.user_literals = {"rope_cache"};
  EXPECT_NE(error_of([&] { build::bind_checkpoint(g, {"rope_cache"}, c, strict); }).find("rope_cache"),
            std::string::npos);
  strict.user_literals = {"mask"};
  EXPECT_EQ(error_of([&] { build::bind_checkpoint(g, {"mask"}, c, strict); }), "");
  // Scopes from old-style node names decide too.
  g.nodes[3].metadata.clear();
  g.nodes[3].name = "/a/norm/Add";
  EXPECT_EQ(build::bind_checkpoint(g, {}, c, {}).bindings.at({3, 1}).checkpoint.at(0).name, "a.norm.weight");
  // Two equal candidates in the consumer's scope: the build fails listing them...
  std::map<std::string, Tensor> ck2 = ck;
  ck2["a.norm.bias"] = Tensor::empty(DType::Float32, {8});
  refit::Checkpoint c2 = checkpoint_of(ck2);
  std::string err = error_of([&] { build::bind_checkpoint(g, {}, c2, {}); });
  EXPECT_NE(err.find("a.norm.bias a.norm.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("--bind"), std::string::npos) << err;
  // No scope at all: no candidate is in scope -> unbound with the candidates, never a guess.
  g.nodes[3].name = "n3";
  EXPECT_EQ(build::bind_checkpoint(g, {}, c, {}).bindings.at({3, 1}).status, plan::Binding::Status::Unbound);
  // ... and --bind settles it.
  build::BindOptions bo;
  bo.binds["zeros@3:1"] = "a.norm.bias";
  EXPECT_EQ(build::bind_checkpoint(g, {}, c2, bo).bindings.at({3, 1}).checkpoint.at(0).name, "a.norm.bias");
  // A bare name of an initializer two sources read is refused, asking for a source key (or
  // NAME@* for every use); a tensor of other values is refused naming both.
  bo.binds = {{"zeros", "a.norm.weight"}};
  err = error_of([&] { build::bind_checkpoint(g, {}, c, bo); });
  EXPECT_NE(err.find("zeros@3:1"), std::string::npos) << err;
  EXPECT_NE(err.find("zeros@4:1"), std::string::npos) << err;
  EXPECT_NE(err.find("--bind zeros@*=a.norm.weight"), std::string::npos) << err;
  bo.binds = {{"zeros@3:1", "proj.weight"}};
  err = error_of([&] { build::bind_checkpoint(g, {}, c, bo); });
  EXPECT_NE(err.find("'proj.weight' (float32[4,8]) does not equal initializer 'zeros'"), std::string::npos) << err;
}
