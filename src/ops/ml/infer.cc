// Shape and type inference of the ml family (ops/infer.h). Binarizer keeps X's type and shape;
// ArrayFeatureExtractor gives X's shape with the last axis replaced by the number of indices
// ([1, k] for a 1-D X); LabelEncoder keeps X's shape with the values' type; TfIdfVectorizer gives
// float [size] or [N, size]; TreeEnsemble X's type [N, n_targets].
#include <string>

#include "ops/ml/ml_common.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

void infer_array_feature_extractor(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const ValueType& y = ctx.input_type(1);
  if (!x.rank_known) return ctx.set_output(0, ValueType::unranked(x.dtype));
  if (x.shape.empty()) ctx.fail("X must have rank 1 or more, got " + x.str());
  const SymDim k = y.rank_known ? sym_product(y.shape) : ctx.fresh_dim();
  SymShape out = x.shape;
  out.back() = k;
  if (x.shape.size() == 1) out.insert(out.begin(), SymDim(1));
  ctx.set_output(0, ValueType::of(x.dtype, out));
}

void infer_label_encoder(InferContext& ctx) {
  const ValueType& x = ctx.input_type(0);
  const DType keys = ml::label_encoder_key_type(ctx.node());
  if (x.dtype != keys) ctx.fail("X is " + x.str() + ", the keys are " + dtype_name(keys));
  const DType values = ml::label_encoder_value_type(ctx.node());
  ctx.set_output(0, x.rank_known ? ValueType::of(values, x.shape) : ValueType::unranked(values));
}

void infer_tfidf(InferContext& ctx) {
  const ml::TfIdfConfig c = ml::parse_tfidf(ctx.node());
  const ValueType& x = ctx.input_type(0);
  if (!x.rank_known) return ctx.set_output(0, ValueType::unranked(DType::Float32));
  if (x.shape.size() == 1) return ctx.set_output(0, ValueType::of(DType::Float32, {c.output_size}));
  if (x.shape.size() == 2) return ctx.set_output(0, ValueType::of(DType::Float32, {x.shape[0], c.output_size}));
  ctx.fail("X must be [C] or [N, C], got " + x.str());
}

void infer_tree_ensemble(InferContext& ctx) {
  const int64_t targets = ml::tree_ensemble_targets(ctx.node());
  const ValueType& x = ctx.input_type(0);
  if (!x.rank_known) return ctx.set_output(0, ValueType::of(x.dtype, {ctx.fresh_dim(), targets}));
  if (x.shape.size() != 2) ctx.fail("X must be [N, F], got " + x.str());
  ctx.set_output(0, ValueType::of(x.dtype, {x.shape[0], targets}));
}

}  // namespace

void register_ml_inference(OpRegistry& r) {
  const char* const ml = "ai.onnx.ml";
  r.set_infer(ml, "Binarizer", 1, [](InferContext& ctx) { ctx.set_output(0, ctx.input_type(0)); });
  r.set_infer(ml, "ArrayFeatureExtractor", 1, infer_array_feature_extractor);
  r.set_infer(ml, "LabelEncoder", 2, infer_label_encoder);
  r.set_infer(ml, "TreeEnsemble", 5, infer_tree_ensemble);
  r.set_infer("", "TfIdfVectorizer", 9, infer_tfidf);
}

}  // namespace reforge::ops
