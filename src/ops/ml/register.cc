// The classic machine-learning op family: the ai.onnx.ml domain's Binarizer,
// ArrayFeatureExtractor and LabelEncoder (ml_ops.cc) and TreeEnsemble (tree_ensemble.cc), and the
// default domain's TfIdfVectorizer (tfidf_vectorizer.cc), the n-gram featurizer of the same
// pipelines. None of them reads or writes strings: string keys, values and pools are refused by
// each op's checker (reforge has no string tensors).
#include "ops/registry.h"

namespace reforge::ops {

namespace ml {
void register_ml_basic_ops(OpRegistry& r);       // ml_ops.cc
void register_tfidf_ops(OpRegistry& r);          // tfidf_vectorizer.cc
void register_tree_ensemble_ops(OpRegistry& r);  // tree_ensemble.cc
}  // namespace ml

void register_ml_ops(OpRegistry& r) {
  ml::register_ml_basic_ops(r);
  ml::register_tfidf_ops(r);
  ml::register_tree_ensemble_ops(r);
}

}  // namespace reforge::ops
