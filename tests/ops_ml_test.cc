// The training optimizers (ai.onnx.preview.training), the ai.onnx.ml ops and TfIdfVectorizer on
// cases the ONNX node suite leaves out: one optimizer step of each method computed by hand, the
// tuple layout of several tensors of different types, TfIdfVectorizer's skips, IDF/TFIDF weights
// and the refusal of weights whose two readings differ, numeric LabelEncoder maps (the suite's
// are all string maps), TreeEnsemble's aggregations and NaN tracking, and the errors that name
// the node. Expected values are derived by hand in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/infer_graph.h"
#include "ops/registry.h"
#include "support/make_tensor.h"
#include "support/run_op.h"

using namespace reforge;
using test_support::make;

namespace {

const char* const kTraining = "ai.onnx.preview.training";
const char* const kMl = "ai.onnx.ml";
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

ir::Attribute floats_attr(const std::string& name, std::vector<float> v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::Floats;
  a.floats = std::move(v);
  return a;
}

ir::Attribute strings_attr(const std::string& name, std::vector<std::string> v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::Strings;
  a.strings = std::move(v);
  return a;
}

ir::Node node(const std::string& domain, const std::string& op, int opset, size_t inputs, size_t outputs,
              const std::vector<ir::Attribute>& attrs) {
  ir::Node n;
  n.name = "n";
  n.domain = domain;
  n.op_type = op;
  n.opset = opset;
  for (size_t i = 0; i < inputs; ++i) n.inputs.push_back(str_cat("x", i));
  for (size_t i = 0; i < outputs; ++i) n.outputs.push_back(str_cat("y", i));
  for (const auto& a : attrs) n.attrs[a.name] = a;
  return n;
}

std::vector<Tensor> run(const ir::Node& n, const std::vector<Tensor>& ins) {
  std::vector<const Tensor*> ptrs;
  for (const auto& t : ins) ptrs.push_back(&t);
  return test_support::run_node(n, ptrs);
}

std::vector<double> doubles(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.as_double(i));
  return v;
}

void expect_near(const Tensor& t, const std::vector<double>& want, double tol = 1e-6) {
  const std::vector<double> got = doubles(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// The reason the registry gives for not running `n` ("" when it can run).
std::string why(const ir::Node& n) { return ops::OpRegistry::global().why_unsupported(n); }

// What running `n` throws ("" when it does not).
std::string error_of(const ir::Node& n, const std::vector<Tensor>& ins) {
  try {
    run(n, ins);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Tensor f32(Shape s, std::vector<float> v) { return make<float>(std::move(s), std::move(v)); }
Tensor scalar_f(float v) { return make<float>({}, {v}); }
Tensor scalar_t(int64_t v) { return make<int64_t>({}, {v}); }

}  // namespace

// ---- optimizers ------------------------------------------------------------------------------

// R = 0.1, alpha = 0.9, beta = 0.999, epsilon = 0; X = 1, G = 0.5, V = H = 0.
// V' = 0.1 * 0.5 = 0.05; H' = 0.001 * 0.25 = 0.00025, sqrt(H') = 0.0158113883;
// T = 1: r = 0.1 * sqrt(0.001) / 0.1 = 0.0316227766, X' = 1 - r * 0.05 / 0.0158113883 = 0.9;
// with norm_coefficient_post 0.5, X_final = 0.45.
// Tuple 2 (double): X = 2, G = -1, V = 1, H = 4: V' = 0.9 - 0.1 = 0.8; H' = 3.996 + 0.001 = 3.997;
// X' = 2 - 0.0316227766 * 0.8 / 1.99924986 = 1.98734625; X_final = 0.993673125.
TEST(Optimizers, AdamStepByHandOverTwoTuples) {
  const ir::Node n = node(kTraining, "Adam", 1, 10, 6,
                          {ir::float_attr("alpha", 0.9f), ir::float_attr("beta", 0.999f),
                           ir::float_attr("epsilon", 0.0f), ir::float_attr("norm_coefficient_post", 0.5f)});
  const std::vector<Tensor> in = {
      scalar_f(0.1f),          scalar_t(1),   f32({1}, {1}),          make<double>({1}, {2}), f32({1}, {0.5f}),
      make<double>({1}, {-1}), f32({1}, {0}), make<double>({1}, {1}), f32({1}, {0}),          make<double>({1}, {4})};
  const std::vector<Tensor> out = run(n, in);
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[0].dtype(), DType::Float32);
  EXPECT_EQ(out[1].dtype(), DType::Float64);
  expect_near(out[0], {0.45});
  expect_near(out[1], {0.993673125});
  expect_near(out[2], {0.05});
  expect_near(out[3], {0.8});
  expect_near(out[4], {0.00025}, 1e-8);
  expect_near(out[5], {3.997});
}

// T = 0: no bias correction, r = R = 0.1: X' = 1 - 0.1 * 0.05 / 0.0158113883 = 0.683772234.
TEST(Optimizers, AdamWithoutBiasCorrectionAtStepZero) {
  const ir::Node n = node(kTraining, "Adam", 1, 6, 3, {ir::float_attr("epsilon", 0.0f)});
  const auto out = run(n, {scalar_f(0.1f), scalar_t(0), f32({1}, {1}), f32({1}, {0.5f}), f32({1}, {0}), f32({1}, {0})});
  expect_near(out[0], {0.683772234}, 1e-5);  // beta is the float32 0.999000012: 0.68377019
}

// R = 0.5, T = 1, decay_factor 1: r = 0.25. X = 2, G = 1, norm_coefficient 0.5: g = 2;
// H = 5: H' = 9; X' = 2 - 0.25 * 2 / (3 + 1) = 1.875 (epsilon 1).
TEST(Optimizers, AdagradStepByHand) {
  const ir::Node n = node(kTraining, "Adagrad", 1, 5, 2,
                          {ir::float_attr("decay_factor", 1.0f), ir::float_attr("norm_coefficient", 0.5f),
                           ir::float_attr("epsilon", 1.0f)});
  const auto out = run(n, {scalar_f(0.5f), scalar_t(1), f32({2}, {2, 2}), f32({2}, {1, 1}), f32({2}, {5, 5})});
  expect_near(out[0], {1.875, 1.875});
  expect_near(out[1], {9, 9});
}

// R = 0.1, alpha 0.5, beta 0.2, X = 1, G = 2, V = 4.
// T = 0 (beta taken as 1): V' = 2 + 2 = 4, X' = 1 - 0.4 = 0.6.
// T = 3: V' = 2 + 0.4 = 2.4; standard X' = 1 - 0.24 = 0.76; nesterov X' = 1 - 0.1 * (2 + 1.2) = 0.68.
TEST(Optimizers, MomentumStandardAndNesterovByHand) {
  auto momentum = [](const char* mode) {
    return node(kTraining, "Momentum", 1, 5, 2,
                {ir::float_attr("alpha", 0.5f), ir::float_attr("beta", 0.2f), ir::string_attr("mode", mode),
                 ir::float_attr("norm_coefficient", 0.0f)});
  };
  auto inputs = [](int64_t t) {
    return std::vector<Tensor>{scalar_f(0.1f), scalar_t(t), f32({1}, {1}), f32({1}, {2}), f32({1}, {4})};
  };
  auto first = run(momentum("standard"), inputs(0));
  expect_near(first[0], {0.6});
  expect_near(first[1], {4});
  auto later = run(momentum("standard"), inputs(3));
  expect_near(later[0], {0.76});
  expect_near(later[1], {2.4});
  auto nesterov = run(momentum("nesterov"), inputs(3));
  expect_near(nesterov[0], {0.68});
  expect_near(nesterov[1], {2.4});
}

TEST(Optimizers, RefusalsNameTheNodeAndTheTensor) {
  // Momentum's attributes are all required; the mode must be one of two.
  EXPECT_NE(why(node(kTraining, "Momentum", 1, 5, 2, {ir::float_attr("alpha", 0.5f)})).find("'beta' is required"),
            std::string::npos);
  EXPECT_NE(why(node(kTraining, "Momentum", 1, 5, 2,
                     {ir::float_attr("alpha", 0.5f), ir::float_attr("beta", 0.2f), ir::string_attr("mode", "heavy"),
                      ir::float_attr("norm_coefficient", 0.0f)}))
                .find("mode 'heavy'"),
            std::string::npos);
  // Adam takes groups of four tensors; seven inputs are not R, T and whole groups.
  EXPECT_NE(why(node(kTraining, "Adam", 1, 7, 3, {})).find("groups of 4"), std::string::npos);
  // A gradient whose shape is not X's.
  const std::string e = error_of(node(kTraining, "Adagrad", 1, 5, 2, {}),
                                 {scalar_f(0.1f), scalar_t(0), f32({2}, {1, 2}), f32({1}, {1}), f32({2}, {0, 0})});
  EXPECT_NE(e.find("node 'n' (ai.onnx.preview.training::Adagrad)"), std::string::npos) << e;
  EXPECT_NE(e.find("G of tensor 0 (input 3)"), std::string::npos) << e;
  // T must be an int64 scalar.
  EXPECT_NE(error_of(node(kTraining, "Adagrad", 1, 5, 2, {}),
                     {scalar_f(0.1f), scalar_f(0), f32({1}, {1}), f32({1}, {1}), f32({1}, {0})})
                .find("T (the update count) must be int64"),
            std::string::npos);
}

// ---- TfIdfVectorizer --------------------------------------------------------------------------

namespace {

ir::Node tfidf(const char* mode, int64_t min_gram, int64_t max_gram, int64_t skip, std::vector<int64_t> counts,
               std::vector<int64_t> indexes, std::vector<int64_t> pool, std::vector<float> weights = {}) {
  std::vector<ir::Attribute> a = {ir::string_attr("mode", mode),
                                  ir::int_attr("min_gram_length", min_gram),
                                  ir::int_attr("max_gram_length", max_gram),
                                  ir::int_attr("max_skip_count", skip),
                                  ir::ints_attr("ngram_counts", std::move(counts)),
                                  ir::ints_attr("ngram_indexes", std::move(indexes)),
                                  ir::ints_attr("pool_int64s", std::move(pool))};
  if (!weights.empty()) a.push_back(floats_attr("weights", std::move(weights)));
  return node("", "TfIdfVectorizer", 9, 1, 1, a);
}

}  // namespace

// The spec's example: in [94, 17, 36, 12, 28] the 2-grams with 2 skips are [94, 12] and [17, 28];
// with at most 1 skip neither is found.
TEST(TfIdfVectorizer, SkipsReachTheSpecExample) {
  const Tensor x = make<int64_t>({5}, {94, 17, 36, 12, 28});
  auto with_skip = [&](int64_t skip) { return run(tfidf("TF", 2, 2, skip, {0, 0}, {0, 1}, {94, 12, 17, 28}), {x})[0]; };
  expect_near(with_skip(2), {1, 1});
  expect_near(with_skip(1), {0, 0});
}

// Pool: 1-grams [1], [2]; 2-gram [1, 2]. Row [1, 1, 2] with up to 1 skip: 1-gram 1 twice, 1-gram 2
// once (1-grams are counted once whatever the skip), [1, 2] at positions (1, 2) and (0, 2): twice.
// Row [3, 3, 3]: nothing. TF: [2, 1, 2]; TFIDF with weights [0.5, 2, 3]: [1, 2, 6]; IDF: [0.5, 2, 3].
TEST(TfIdfVectorizer, ModesAndWeightsOverRowsOfInt32) {
  const Tensor x = make<int32_t>({2, 3}, {1, 1, 2, 3, 3, 3});
  const auto tf = run(tfidf("TF", 1, 2, 1, {0, 2}, {0, 1, 2}, {1, 2, 1, 2}), {x})[0];
  ASSERT_EQ(tf.shape(), (Shape{2, 3}));
  EXPECT_EQ(tf.dtype(), DType::Float32);
  expect_near(tf, {2, 1, 2, 0, 0, 0});
  expect_near(run(tfidf("TFIDF", 1, 2, 1, {0, 2}, {0, 1, 2}, {1, 2, 1, 2}, {0.5f, 2, 3}), {x})[0], {1, 2, 6, 0, 0, 0});
  expect_near(run(tfidf("IDF", 1, 2, 1, {0, 2}, {0, 1, 2}, {1, 2, 1, 2}, {0.5f, 2, 3}), {x})[0], {0.5, 2, 3, 0, 0, 0});
  // min_gram_length 2: the 1-grams are not counted.
  expect_near(run(tfidf("TF", 2, 2, 1, {0, 2}, {0, 1, 2}, {1, 2, 1, 2}), {x})[0], {0, 0, 2, 0, 0, 0});
}

TEST(TfIdfVectorizer, RefusesWhatItCannotRunExactly) {
  // Permuted coordinates with per-n-gram weights: the spec's reading (weights[0] for n-gram 0, at
  // coordinate 1) and ONNX Runtime's (weights[1] at coordinate 1) differ.
  EXPECT_NE(why(tfidf("IDF", 1, 2, 1, {0, 2}, {1, 0, 2}, {1, 2, 1, 2}, {0.5f, 2, 3})).find("n-gram 0 has weight"),
            std::string::npos);
  // The same layout in TF mode ignores the weights.
  EXPECT_EQ(why(tfidf("TF", 1, 2, 1, {0, 2}, {1, 0, 2}, {1, 2, 1, 2}, {0.5f, 2, 3})), "");
  ir::Node strings = tfidf("TF", 1, 1, 0, {0}, {0}, {1});
  strings.attrs.erase("pool_int64s");
  strings.attrs["pool_strings"] = strings_attr("pool_strings", {"a"});
  EXPECT_NE(why(strings).find("pool_strings"), std::string::npos);
  // Three items cannot be 2-grams.
  EXPECT_NE(why(tfidf("TF", 2, 2, 0, {0, 0}, {0, 1}, {1, 2, 3})).find("not a whole number of 2-grams"),
            std::string::npos);
  EXPECT_NE(why(tfidf("TF", 1, 2, 0, {0, 2}, {0, 1}, {1, 2, 1, 2})).find("ngram_indexes has 2 entries"),
            std::string::npos);
}

// ---- ai.onnx.ml -------------------------------------------------------------------------------

TEST(MlOps, BinarizerComparesInTheInputType) {
  const ir::Node n = node(kMl, "Binarizer", 1, 1, 1, {ir::float_attr("threshold", 1.5f)});
  const Tensor yi = run(n, {make<int64_t>({4}, {1, 2, 3, -1})})[0];
  EXPECT_EQ(yi.dtype(), DType::Int64);
  EXPECT_EQ(doubles(yi), (std::vector<double>{0, 1, 1, 0}));
  const Tensor yf = run(n, {f32({3}, {1.5f, 1.5000001f, kNaN})})[0];
  EXPECT_EQ(doubles(yf), (std::vector<double>{0, 1, 0}));
}

TEST(MlOps, ArrayFeatureExtractorOnAVectorGivesOneRow) {
  const ir::Node n = node(kMl, "ArrayFeatureExtractor", 1, 2, 1, {});
  const Tensor z = run(n, {make<int32_t>({3}, {10, 20, 30}), make<int64_t>({2}, {2, 0})})[0];
  EXPECT_EQ(z.shape(), (Shape{1, 2}));
  EXPECT_EQ(doubles(z), (std::vector<double>{30, 10}));
  // [2, 2, 3] with indices [[1], [1]] (two of them): [2, 2, 2].
  std::vector<double> vals(12);
  for (int i = 0; i < 12; ++i) vals[i] = i;
  const Tensor z3 = run(n, {make<double>({2, 2, 3}, vals), make<int64_t>({2, 1}, {1, 1})})[0];
  EXPECT_EQ(z3.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(doubles(z3), (std::vector<double>{1, 1, 4, 4, 7, 7, 10, 10}));
  const std::string e = error_of(n, {make<int32_t>({3}, {10, 20, 30}), make<int64_t>({1}, {3})});
  EXPECT_NE(e.find("index 3 (element 0 of Y) is outside the last axis"), std::string::npos) << e;
}

// keys_int64s [1, 2, 1] -> values_floats [0.5, 1.5, 2.5], default 7: the repeated key 1 maps to
// its last value; 3 gets the default.
TEST(MlOps, LabelEncoderIntToFloatLastKeyWins) {
  const ir::Node n = node(kMl, "LabelEncoder", 2, 1, 1,
                          {ir::ints_attr("keys_int64s", {1, 2, 1}), floats_attr("values_floats", {0.5f, 1.5f, 2.5f}),
                           ir::float_attr("default_float", 7.0f)});
  const Tensor y = run(n, {make<int64_t>({3}, {1, 2, 3})})[0];
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_EQ(doubles(y), (std::vector<double>{2.5, 1.5, 7}));
}

// keys_floats [NaN, 0] -> values_int64s [10, 20]: every NaN finds the NaN key, -0.0 finds 0; 1 gets
// the default default_int64, -1.
TEST(MlOps, LabelEncoderFloatKeysMatchNaNAndSignedZero) {
  const ir::Node n = node(kMl, "LabelEncoder", 2, 1, 1,
                          {floats_attr("keys_floats", {kNaN, 0.0f}), ir::ints_attr("values_int64s", {10, 20})});
  const Tensor y = run(n, {f32({3}, {-kNaN, -0.0f, 1.0f})})[0];
  EXPECT_EQ(y.dtype(), DType::Int64);
  EXPECT_EQ(doubles(y), (std::vector<double>{10, 20, -1}));
}

// Opset 4's tensor attributes: int32 keys [5, 6] -> int16 values [-5, -6], no default: -1.
TEST(MlOps, LabelEncoderTensorAttributes) {
  const ir::Node n = node(kMl, "LabelEncoder", 4, 1, 1,
                          {ir::tensor_attr("keys_tensor", make<int32_t>({2}, {5, 6})),
                           ir::tensor_attr("values_tensor", make<int16_t>({2}, {-5, -6}))});
  const Tensor y = run(n, {make<int32_t>({2, 1}, {6, 7})})[0];
  EXPECT_EQ(y.dtype(), DType::Int16);
  EXPECT_EQ(y.shape(), (Shape{2, 1}));
  EXPECT_EQ(doubles(y), (std::vector<double>{-6, -1}));
  // An int64 input does not have the keys' type.
  EXPECT_NE(error_of(n, {make<int64_t>({1}, {5})}).find("the keys are int32"), std::string::npos);
  // String keys are refused up front.
  const ir::Node s =
      node(kMl, "LabelEncoder", 2, 1, 1, {strings_attr("keys_strings", {"a"}), ir::ints_attr("values_int64s", {1})});
  EXPECT_NE(why(s).find("keys_strings (string labels) is not supported"), std::string::npos);
}

namespace {

// Two one-node trees over X [N, 2], one target:
//   tree A (node 0): x0 <= 1 ? leaf 0 (10) : leaf 1 (20)
//   tree B (node 1): x1 < 0.5 (NaN goes true when `track`) ? leaf 2 (4) : leaf 3 (6)
ir::Node forest(int64_t aggregate, bool track, int64_t targets = 1, std::vector<int64_t> leaf_targets = {0, 0, 0, 0}) {
  return node(kMl, "TreeEnsemble", 5, 1, 1,
              {ir::int_attr("n_targets", targets), ir::int_attr("aggregate_function", aggregate),
               ir::ints_attr("tree_roots", {0, 1}), ir::tensor_attr("nodes_modes", make<uint8_t>({2}, {0, 1})),
               ir::ints_attr("nodes_featureids", {0, 1}), ir::tensor_attr("nodes_splits", f32({2}, {1, 0.5f})),
               ir::ints_attr("nodes_truenodeids", {0, 2}), ir::ints_attr("nodes_trueleafs", {1, 1}),
               ir::ints_attr("nodes_falsenodeids", {1, 3}), ir::ints_attr("nodes_falseleafs", {1, 1}),
               ir::ints_attr("nodes_missing_value_tracks_true", {0, track ? 1 : 0}),
               ir::ints_attr("leaf_targetids", std::move(leaf_targets)),
               ir::tensor_attr("leaf_weights", f32({4}, {10, 20, 4, 6}))});
}

}  // namespace

// Row [0.5, NaN]: A gives 10; B gives 4 when NaN tracks true, else 6 (NaN < 0.5 is false).
// Row [2, 1]: A gives 20, B gives 6.
TEST(MlOps, TreeEnsembleAggregatesAndTracksNaN) {
  const Tensor x = f32({2, 2}, {0.5f, kNaN, 2, 1});
  expect_near(run(forest(1, true), {x})[0], {14, 26});  // SUM
  expect_near(run(forest(0, true), {x})[0], {7, 13});   // AVERAGE over 2 trees
  expect_near(run(forest(2, true), {x})[0], {4, 6});    // MIN
  expect_near(run(forest(3, true), {x})[0], {10, 20});  // MAX
  expect_near(run(forest(1, false), {x})[0], {16, 26});
  const Tensor y = run(forest(1, true), {make<double>({1, 2}, {1, 0.25})})[0];
  EXPECT_EQ(y.dtype(), DType::Float64);
  EXPECT_EQ(y.shape(), (Shape{1, 1}));
  expect_near(y, {14});
}

TEST(MlOps, TreeEnsembleRefusals) {
  // MIN over two targets where row 0 reaches no leaf of target 1 (leaf 3, target 1's only leaf,
  // is tree B's false side, and 0 < 0.5 goes true).
  const std::string e = error_of(forest(2, true, 2, {0, 0, 0, 1}), {f32({1, 2}, {0.5f, 0})});
  EXPECT_NE(e.find("row 0 reaches no leaf of target 1"), std::string::npos) << e;
  EXPECT_EQ(error_of(forest(1, true, 2, {0, 0, 0, 1}), {f32({1, 2}, {0.5f, 0})}), "");  // SUM: target 1 is 0
  // A false branch from node 0 to node 1 and back is a cycle.
  ir::Node cyclic = forest(1, true);
  cyclic.attrs["nodes_falseleafs"] = ir::ints_attr("nodes_falseleafs", {0, 0});
  cyclic.attrs["nodes_falsenodeids"] = ir::ints_attr("nodes_falsenodeids", {1, 0});
  EXPECT_NE(why(cyclic).find("has a cycle"), std::string::npos) << why(cyclic);
  ir::Node softmax = forest(1, true);
  softmax.attrs["post_transform"] = ir::int_attr("post_transform", 1);
  EXPECT_NE(why(softmax).find("post_transform 1 is not supported"), std::string::npos);
  EXPECT_NE(why(forest(1, true, 1, {0, 0, 0, 1})).find("leaf 3 has target 1, outside [0, n_targets = 1)"),
            std::string::npos);
  // A feature index past X's width is found at run time.
  EXPECT_NE(error_of(forest(1, true), {f32({1, 1}, {0})}).find("node 1 reads feature 1"), std::string::npos);
}

// ---- inference ----------------------------------------------------------------------------------

namespace {

// A one-node graph over declared inputs (name, type, dims; a dim of -1 is the symbol "n"), whose
// node's outputs are inferred; returns each output's type as text, or the inference's error.
struct Declared {
  std::string name;
  DType dtype;
  std::vector<int64_t> dims;
};

std::vector<std::string> infer_node(ir::Node n, const std::vector<Declared>& inputs) {
  ir::Graph g;
  g.opsets[""] = 21;
  g.opsets[n.domain] = n.opset;
  n.inputs.clear();
  for (const auto& d : inputs) {
    ir::ValueInfo v;
    v.name = d.name;
    v.dtype = d.dtype;
    v.has_shape = true;
    for (int64_t x : d.dims) v.shape.push_back(x < 0 ? ir::Dim{-1, "n"} : ir::Dim{x, ""});
    g.inputs.push_back(v);
    n.inputs.push_back(d.name);
  }
  for (const auto& o : n.outputs) g.outputs.push_back(ir::ValueInfo{o, DType::Undefined, false, {}});
  g.nodes.push_back(n);
  std::vector<std::string> out;
  try {
    const ops::GraphTypes t = ops::infer_graph(g);
    for (const auto& o : n.outputs) out.push_back(t.find(o) ? t.find(o)->str() : "(none)");
  } catch (const Error& e) {
    out.push_back(e.what());
  }
  return out;
}

}  // namespace

TEST(MlOps, InferenceStatesTypesAndShapes) {
  // Adam over a float [n, 3] and a double [2]: X', V', H' follow X, V, H.
  const ir::Node adam = node(kTraining, "Adam", 1, 10, 6, {});
  EXPECT_EQ(infer_node(adam, {{"r", DType::Float32, {}},
                              {"t", DType::Int64, {}},
                              {"x1", DType::Float32, {-1, 3}},
                              {"x2", DType::Float64, {2}},
                              {"g1", DType::Float32, {-1, 3}},
                              {"g2", DType::Float64, {2}},
                              {"v1", DType::Float32, {-1, 3}},
                              {"v2", DType::Float64, {2}},
                              {"h1", DType::Float32, {-1, 3}},
                              {"h2", DType::Float64, {2}}}),
            (std::vector<std::string>{"float32[n,3]", "float64[2]", "float32[n,3]", "float64[2]", "float32[n,3]",
                                      "float64[2]"}));
  // TfIdfVectorizer: [n, C] -> float [n, max(ngram_indexes) + 1] = [n, 3].
  EXPECT_EQ(infer_node(tfidf("TF", 1, 2, 1, {0, 2}, {0, 1, 2}, {1, 2, 1, 2}), {{"x", DType::Int32, {-1, 6}}}),
            (std::vector<std::string>{"float32[n,3]"}));
  // LabelEncoder: X's shape, the values' type.
  const ir::Node enc = node(kMl, "LabelEncoder", 4, 1, 1,
                            {ir::tensor_attr("keys_tensor", make<int32_t>({2}, {5, 6})),
                             ir::tensor_attr("values_tensor", make<int16_t>({2}, {-5, -6}))});
  EXPECT_EQ(infer_node(enc, {{"x", DType::Int32, {-1, 2}}}), (std::vector<std::string>{"int16[n,2]"}));
  const std::string wrong = infer_node(enc, {{"x", DType::Int64, {4}}})[0];
  EXPECT_NE(wrong.find("LabelEncoder"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("the keys are int32"), std::string::npos) << wrong;
  // ArrayFeatureExtractor: the last axis becomes the number of indices; a vector becomes one row.
  const ir::Node afe = node(kMl, "ArrayFeatureExtractor", 1, 2, 1, {});
  EXPECT_EQ(infer_node(afe, {{"x", DType::Float32, {-1, 5}}, {"y", DType::Int64, {3}}}),
            (std::vector<std::string>{"float32[n,3]"}));
  EXPECT_EQ(infer_node(afe, {{"x", DType::Int64, {5}}, {"y", DType::Int64, {1, 2}}}),
            (std::vector<std::string>{"int64[1,2]"}));
  // TreeEnsemble: X's type, [N, n_targets].
  EXPECT_EQ(infer_node(forest(1, true, 2, {0, 0, 0, 1}), {{"x", DType::Float64, {-1, 2}}}),
            (std::vector<std::string>{"float64[n,2]"}));
}
