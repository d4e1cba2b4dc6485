// Op roles live on the registry entry (ops::OpDef::input_roles, ::draws_random) and every
// decision that depends on them asks the registry: binding (weight inputs), literal
// classification and the structural fingerprint (shape-like inputs), constant folding and the
// engine (determinism).
// - the roles answer as the side tables they replaced did, for every op those tables listed,
//   and no registered op has a weight or shape-like role those tables did not give it, except
//   the ops registered later with their roles (listed below the old tables) and the structure
//   inputs of the reforge domain's fused ops;
// - Dropout, on which the two non-deterministic lists disagreed (folding folded it, the engine
//   never memoized it), is non-deterministic exactly when it can draw: opset >= 12, a
//   training_mode input, no seed;
// - constant folding never folds a node the registry calls non-deterministic, literal
//   classification and the fingerprint follow the shape-like role, binding the weight role.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "builder/binding.h"
#include "builder/fingerprint.h"
#include "ops/registry.h"
#include "passes/build_state.h"
#include "runtime/engine.h"
#include "support/engine_for.h"
#include "support/make_tensor.h"
#include "support/synthetic_checkpoint.h"

using namespace reforge;
using ops::InputRole;

namespace {

struct OldRow {
  const char* op;
  int opset;          // an opset at which every slot below exists
  size_t num_inputs;  // the op's inputs at that opset
  std::set<size_t> slots;
};

// is_weight_slot (src/builder/binding.cc) as it read before the roles moved onto the registry.
// It also listed GroupNormalization, registered later (below) from opset 18 (see UnregisteredOps).
const std::vector<OldRow> kOldWeightSlots = {
    {"Conv", 18, 3, {1, 2}},
    {"ConvTranspose", 18, 3, {1, 2}},
    {"Gemm", 18, 3, {1, 2}},
    {"MatMul", 18, 2, {1}},
    {"BatchNormalization", 15, 5, {1, 2, 3, 4}},
    {"InstanceNormalization", 18, 3, {1, 2}},
    {"LayerNormalization", 18, 3, {1, 2}},
    {"RMSNormalization", 23, 2, {1}},
    {"PRelu", 18, 2, {1}},
};

// is_shape_like_input (src/builder/fingerprint.cc), same. It also listed Upsample, registered later (below).
const std::vector<OldRow> kOldShapeSlots = {
    {"Reshape", 18, 2, {1}},         {"Expand", 18, 2, {1}},
    {"ConstantOfShape", 18, 1, {0}}, {"Tile", 18, 2, {1}},
    {"Slice", 18, 5, {1, 2, 3, 4}},  {"Unsqueeze", 18, 2, {1}},
    {"Squeeze", 18, 2, {1}},         {"Split", 18, 2, {1}},
    {"Pad", 18, 4, {1, 3}},          {"Resize", 18, 4, {1, 2, 3}},
    {"Range", 18, 3, {0, 1, 2}},     {"TopK", 18, 2, {1}},
    {"OneHot", 18, 3, {1}},          {"CumSum", 18, 2, {1}},
    {"ReduceMean", 18, 2, {1}},      {"ReduceSum", 18, 2, {1}},
    {"ReduceMax", 18, 2, {1}},       {"ReduceMin", 18, 2, {1}},
    {"ReduceProd", 18, 2, {1}},      {"ReduceL1", 18, 2, {1}},
    {"ReduceL2", 18, 2, {1}},        {"ReduceSumSquare", 18, 2, {1}},
    {"ReduceLogSum", 18, 2, {1}},    {"ReduceLogSumExp", 18, 2, {1}},
    {"Trilu", 18, 2, {1}},           {"RotaryEmbedding", 23, 4, {3}},
};

// Roles of ops registered after the tables were replaced, each set with its registration.
const std::vector<OldRow> kLaterWeightSlots = {
    {"RNN", 14, 6, {1, 2, 3}},
    {"GRU", 14, 6, {1, 2, 3}},
    {"LSTM", 14, 8, {1, 2, 3, 7}},
    {"CausalConvWithState", 27, 4, {1, 2}},
    {"GroupNormalization", 21, 3, {1, 2}},
    {"DeformConv", 19, 5, {1, 3}},
    {"MatMulInteger", 10, 4, {1}},
    {"QLinearMatMul", 10, 8, {3}},
    {"ConvInteger", 10, 4, {1}},
    {"QLinearConv", 10, 9, {3, 8}},
    {"SimplifiedLayerNormalization", 1, 2, {1}},
};
const std::vector<OldRow> kLaterShapeSlots = {
    {"CumProd", 26, 2, {1}},
    {"CenterCropPad", 18, 2, {1}},
    {"Col2Im", 18, 3, {1, 2}},
    {"AffineGrid", 20, 2, {1}},
    {"NonMaxSuppression", 11, 5, {2, 3, 4}},
    {"HannWindow", 17, 1, {0}},
    {"HammingWindow", 17, 1, {0}},
    {"BlackmanWindow", 17, 1, {0}},
    {"MaxUnpool", 11, 3, {2}},
    {"Upsample", 9, 2, {1}},
    {"DFT", 20, 3, {1, 2}},
    {"STFT", 17, 4, {1, 3}},
    {"MelWeightMatrix", 17, 5, {0, 1, 2, 3, 4}},
    {"Loop", 11, 3, {0}},
};

// Shape-like inputs of the fused ops of the reforge domain: the structure inputs of the patterns
// they replace (fuse-attention: the Expand/Reshape shapes of the grouped-query repeat; fuse-rotary:
// the Slice bounds).
// ONNX Runtime's com.microsoft ops: MatMulNBits' B, scales, zero_points, g_idx and bias.
const std::vector<OldRow> kMicrosoftWeightSlots = {
    {"MatMulNBits", 1, 6, {1, 2, 3, 4, 5}},
    {"QGemm", 1, 9, {3, 6}},  // B and the int32 bias C, as QLinearConv's W and B
    {"SkipSimplifiedLayerNormalization", 1, 4, {2, 3}},  // gamma and bias
};
// GroupQueryAttention's total_sequence_length sizes its present outputs.
const std::vector<OldRow> kMicrosoftShapeSlots = {
    {"GroupQueryAttention", 1, 9, {6}},
};
const std::vector<OldRow> kReforgeShapeSlots = {
    {"Attention", 1, 10, {6, 7, 8, 9}},
    {"Rotary", 1, 7, {3, 4, 5, 6}},
};

void expect_rows(const std::vector<OldRow>& rows, InputRole role) {
  for (const auto& row : rows)
    for (size_t s = 0; s < row.num_inputs; ++s)
      EXPECT_EQ(ops::input_role("", row.op, row.opset, s), row.slots.count(s) ? role : InputRole::kData)
          << row.op << " opset " << row.opset << " input " << s;
}

ir::Node node(const std::string& op, int opset, std::vector<std::string> ins, std::vector<std::string> outs = {"y"}) {
  ir::Node n;
  n.name = op + "_0";
  n.op_type = op;
  n.opset = opset;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  return n;
}

ir::Node dropout(int opset, std::vector<std::string> ins, bool seeded = false) {
  ir::Node n = node("Dropout", opset, std::move(ins));
  if (seeded) n.attrs["seed"] = ir::int_attr("seed", 7);
  return n;
}

passes::ConstValue literal(Tensor t) {
  passes::ConstValue c;
  c.value = std::move(t);
  c.kind = plan::WeightKind::Literal;
  return c;
}

}  // namespace

TEST(OpRoles, WeightAndShapeRolesAnswerAsTheOldTables) {
  expect_rows(kOldWeightSlots, InputRole::kWeight);
  expect_rows(kOldShapeSlots, InputRole::kShape);
  // Inputs past the listed roles (variadic tails) are data.
  EXPECT_EQ(ops::input_role("", "Concat", 18, 5), InputRole::kData);
  EXPECT_EQ(ops::input_role("", "Reshape", 18, 7), InputRole::kData);
}

// No registered op gained a weight or shape-like role the old tables did not give it; ops
// registered later have exactly the roles listed for them.
TEST(OpRoles, EveryRoleInTheRegistryWasInTheOldTables) {
  auto listed = [](const std::vector<OldRow>& rows, const std::string& op, size_t slot) {
    for (const auto& r : rows)
      if (op == r.op) return r.slots.count(slot) != 0;
    return false;
  };
  size_t weight = 0, shape = 0, reforge_shape = 0, microsoft_weight = 0, microsoft_shape = 0;
  for (const ops::OpDef* d : ops::OpRegistry::global().entries())
    for (size_t s = 0; s < d->input_roles.size(); ++s) {
      if (d->input_roles[s] == InputRole::kData) continue;
      if (d->domain == "reforge") {
        EXPECT_EQ(d->input_roles[s], InputRole::kShape) << "reforge::" << d->op_type << " input " << s;
        EXPECT_TRUE(listed(kReforgeShapeSlots, d->op_type, s)) << "reforge::" << d->op_type << " input " << s;
        ++reforge_shape;
        continue;
      }
      if (d->domain == "com.microsoft") {
        const bool weight_slot = d->input_roles[s] == InputRole::kWeight;
        EXPECT_TRUE(listed(weight_slot ? kMicrosoftWeightSlots : kMicrosoftShapeSlots, d->op_type, s))
            << "com.microsoft::" << d->op_type << " input " << s;
        ++(weight_slot ? microsoft_weight : microsoft_shape);
        continue;
      }
      EXPECT_TRUE(d->domain.empty()) << d->domain << "::" << d->op_type;
      if (d->input_roles[s] == InputRole::kWeight) {
        ++weight;
        EXPECT_TRUE(listed(kOldWeightSlots, d->op_type, s) || listed(kLaterWeightSlots, d->op_type, s))
            << d->op_type << " input " << s;
      } else {
        ++shape;
        EXPECT_TRUE(listed(kOldShapeSlots, d->op_type, s) || listed(kLaterShapeSlots, d->op_type, s))
            << d->op_type << " input " << s;
      }
    }
  EXPECT_EQ(weight, 17u + 17u + 5u);  // old tables + the later weight slots
  EXPECT_EQ(shape, 34u + 23u);        // old tables + the later shape slots
  expect_rows(kLaterWeightSlots, InputRole::kWeight);
  expect_rows(kLaterShapeSlots, InputRole::kShape);
  EXPECT_EQ(reforge_shape, 8u);
  EXPECT_EQ(microsoft_weight, 9u);
  EXPECT_EQ(microsoft_shape, 1u);
  for (const auto& row : kMicrosoftWeightSlots)
    for (size_t s = 0; s < row.num_inputs; ++s)
      EXPECT_EQ(ops::input_role("com.microsoft", row.op, row.opset, s),
                row.slots.count(s) ? InputRole::kWeight : InputRole::kData)
          << "com.microsoft::" << row.op << " input " << s;
  for (const auto& row : kMicrosoftShapeSlots)
    for (size_t s = 0; s < row.num_inputs; ++s)
      EXPECT_EQ(ops::input_role("com.microsoft", row.op, row.opset, s),
                row.slots.count(s) ? InputRole::kShape : InputRole::kData)
          << "com.microsoft::" << row.op << " input " << s;
  for (const auto& row : kReforgeShapeSlots)
    for (size_t s = 0; s < row.num_inputs; ++s)
      EXPECT_EQ(ops::input_role("reforge", row.op, row.opset, s),
                row.slots.count(s) ? InputRole::kShape : InputRole::kData)
          << "reforge::" << row.op << " input " << s;
}

// Behaviour change: an op the registry does not cover (unknown, custom domain, opset outside
// every range) has only data inputs. The old tables answered by name alone, so they also named
// GroupNormalization's and Upsample's inputs at any opset and any custom-domain "Conv"; none of
// these can be built, so no plan changes.
TEST(OpRoles, UnregisteredOpsHaveOnlyDataInputs) {
  EXPECT_EQ(ops::input_role("", "GroupNormalization", 17, 1), InputRole::kData);  // registered from 18
  EXPECT_EQ(ops::input_role("", "Upsample", 10, 1), InputRole::kData);            // registered up to 9
  EXPECT_EQ(ops::input_role("com.example", "Conv", 1, 1), InputRole::kData);
  EXPECT_EQ(ops::input_role("", "Resize", 9, 1), InputRole::kData);  // Resize is registered from 10
}

// The engine's list called Dropout non-deterministic, constant folding's list did not. Resolved:
// Dropout draws only from opset 12, when its training_mode input is present, and without a seed.
TEST(OpRoles, DropoutIsNonDeterministicOnlyWhenItCanDraw) {
  EXPECT_TRUE(ops::is_deterministic(dropout(13, {"x"})));
  EXPECT_TRUE(ops::is_deterministic(dropout(13, {"x", "ratio"})));
  EXPECT_TRUE(ops::is_deterministic(dropout(13, {"x", "ratio", ""})));
  EXPECT_FALSE(ops::is_deterministic(dropout(13, {"x", "ratio", "training"})));
  EXPECT_FALSE(ops::is_deterministic(dropout(12, {"x", "", "training"})));
  EXPECT_TRUE(ops::is_deterministic(dropout(13, {"x", "ratio", "training"}, /*seeded=*/true)));
  EXPECT_TRUE(ops::is_deterministic(dropout(10, {"x"})));
}

// Both old lists named the random generators; none is registered, and an op the registry does
// not know is never deterministic. Every registered op but Dropout always is.
TEST(OpRoles, RandomOpsAreNotDeterministicAndDropoutIsTheOnlyRegisteredDraw) {
  for (const char* op :
       {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"})
    EXPECT_FALSE(ops::is_deterministic(node(op, 18, {"x"}))) << op;
  EXPECT_TRUE(ops::is_deterministic(node("Add", 18, {"a", "b"})));
  // Dropout draws by itself; the control-flow ops draw exactly when a node of their subgraphs may.
  const std::set<std::string> drawing = {"Dropout", "If", "Loop", "Scan"};
  for (const ops::OpDef* d : ops::OpRegistry::global().entries())
    EXPECT_EQ(d->draws_random != nullptr, d->domain.empty() && drawing.count(d->op_type)) << d->op_type;
  for (const char* inner : {"RandomNormalLike", "Neg"}) {
    auto body = std::make_shared<ir::Graph>();
    body->nodes.push_back(node(inner, 18, {"x"}, {"r"}));
    body->outputs.push_back(ir::ValueInfo{"r", DType::Float32, false, {}});
    ir::Node loop = node("Loop", 18, {"m", "", "x"}, {"y"});
    ir::Attribute a;
    a.name = "body";
    a.type = ir::AttrType::Graph;
    a.g = body;
    loop.attrs["body"] = a;
    EXPECT_EQ(ops::is_deterministic(loop), std::string(inner) == "Neg") << inner;
  }
}

// Constant folding asks the registry: a Dropout that may draw is kept even on constant inputs
// (folding used to bake one random sample into the plan); a seeded or inference one folds.
TEST(OpRoles, ConstantFoldingNeverFoldsANonDeterministicNode) {
  auto fold = [](ir::Node n) {
    passes::BuildState s;
    s.consts["x"] = literal(test_support::make<float>({4}, {1, 2, 3, 4}));
    s.consts["ratio"] = literal(test_support::make<float>({}, {0.5f}));
    s.consts["training"] = literal(test_support::make<bool>({}, {true}));
    s.graph.nodes.push_back(std::move(n));
    passes::constant_folding(s);
    return s.graph.nodes.size();
  };
  EXPECT_EQ(fold(dropout(13, {"x", "ratio", "training"})), 1u);
  EXPECT_EQ(fold(dropout(13, {"x", "ratio", "training"}, /*seeded=*/true)), 0u);
  EXPECT_EQ(fold(dropout(13, {"x", "ratio"})), 0u);
  EXPECT_EQ(fold(node("Neg", 13, {"x"})), 0u);
}

// Literal classification follows the registry: a float initializer that feeds only shape-like
// inputs is a literal, one that feeds a weight or data input is not. Checked for every slot of
// every registered entry that has a role list.
TEST(OpRoles, LiteralClassificationFollowsTheRegistry) {
  for (const ops::OpDef* d : ops::OpRegistry::global().entries()) {
    if (d->input_roles.empty()) continue;
    for (size_t s = 0; s < d->input_roles.size(); ++s) {
      ir::Graph g;
      std::vector<std::string> ins;
      for (size_t i = 0; i < d->input_roles.size(); ++i) ins.push_back(i == s ? "c" : "x");
      ir::Node n = node(d->op_type, std::max(d->since_version, 18), ins);
      n.domain = d->domain;
      if (n.opset > d->end_version) n.opset = d->end_version;
      g.nodes.push_back(n);
      g.initializers["c"] = test_support::make<float>({1}, {2.0f});
      bool lit = build::literal_initializers(g, {}).count("c") != 0;
      EXPECT_EQ(lit, d->input_roles[s] == InputRole::kShape) << d->op_type << " input " << s;
    }
  }
}

// The fingerprint covers literal values, so it follows the shape-like role: changing a float
// Resize scale changes it, changing a Conv weight does not.
TEST(OpRoles, FingerprintFollowsTheShapeLikeRole) {
  auto fp = [](float scale, float weight) {
    ir::Graph g;
    g.inputs.push_back({"x", DType::Float32, false, {}});
    g.outputs.push_back({"y", DType::Float32, false, {}});
    g.nodes.push_back(node("Conv", 18, {"x", "w"}, {"h"}));
    g.nodes.push_back(node("Resize", 18, {"h", "", "scales"}, {"y"}));
    g.initializers["w"] = test_support::make<float>({1, 1, 1, 1}, {weight});
    g.initializers["scales"] = test_support::make<float>({4}, {1, 1, scale, scale});
    g = build::canonicalize(std::move(g));
    return build::structural_fingerprint(g, build::literal_initializers(g, {}));
  };
  EXPECT_EQ(fp(2, 1), fp(2, 5));
  EXPECT_NE(fp(2, 1), fp(3, 1));
}

// Binding: an all-equal float initializer is a proven constant unless it is a weight input (an
// untrained weight may well be all ones); the registry's weight role decides.
TEST(OpRoles, BindingNeverProvesAWeightInputConstant) {
  ir::Graph g;
  g.nodes.push_back(node("MatMul", 18, {"x", "ones_w"}, {"h"}));
  g.nodes.push_back(node("Add", 18, {"h", "ones_b"}, {"y"}));
  g.initializers["ones_w"] = test_support::make<float>({2, 2}, {1, 1, 1, 1});
  g.initializers["ones_b"] = test_support::make<float>({2}, {1, 1});
  build::BindOptions partial;
  partial.allow_partial = true;
  auto r = build::bind_checkpoint(g, {}, test_support::checkpoint_of({{"other", test_support::random_f32({3}, 1)}}),
                                  partial);
  const auto& w = r.bindings.at({0, 1});
  EXPECT_EQ(w.status, plan::Binding::Status::Unbound) << w.note;
  EXPECT_NE(w.note.find("weight input of"), std::string::npos) << w.note;
  EXPECT_EQ(r.bindings.at({1, 1}).status, plan::Binding::Status::Constant) << r.bindings.at({1, 1}).note;
}

// The engine evaluates shape subgraphs once per input signature, except nodes the registry calls
// non-deterministic: an unseeded training-mode Dropout over ConstantOfShape(Shape(x)) draws a
// new mask on every run, a seeded one gives the same values every run.
TEST(OpRoles, EngineNeverMemoizesANonDeterministicNode) {
  auto outputs_of_two_runs = [](bool seeded) {
    ir::Graph g;
    g.opsets[""] = 13;
    g.inputs.push_back({"x", DType::Float32, true, {ir::Dim{-1, "n"}, ir::Dim{64}}});
    g.initializers["ratio"] = test_support::make<float>({}, {0.5f});
    g.initializers["training"] = test_support::make<bool>({}, {true});
    g.nodes.push_back(node("Shape", 13, {"x"}, {"s"}));
    ir::Node fill = node("ConstantOfShape", 13, {"s"}, {"ones"});
    fill.attrs["value"] = ir::tensor_attr("value", test_support::make<float>({1}, {1.0f}));
    g.nodes.push_back(fill);
    g.nodes.push_back(dropout(13, {"ones", "ratio", "training"}, seeded));
    g.outputs.push_back({"y", DType::Float32, false, {}});
    runtime::Engine e = test_support::engine_for(g);
    Tensor x = Tensor::empty(DType::Float32, {4, 64});
    Tensor a = e.run({{"x", x}})[0], b = e.run({{"x", x}})[0];
    return std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
  };
  EXPECT_FALSE(outputs_of_two_runs(/*seeded=*/false));  // 256 fresh draws: equal with odds 2^-256
  EXPECT_TRUE(outputs_of_two_runs(/*seeded=*/true));
}
