// What the kernels and the inference of the ml family both read from a node's attributes: each
// op's attributes parsed and checked once, failing with an Error that names the node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ir/graph.h"

namespace reforge::ops::ml {

// TfIdfVectorizer's n-gram pool (pool_int64s), grouped as ngram_counts says, and the output
// coordinate and weight of each n-gram.
struct TfIdfConfig {
  enum class Mode { kTF, kIDF, kTFIDF };
  Mode mode = Mode::kTF;
  int64_t min_gram = 1, max_gram = 1, max_skip = 0;
  std::vector<std::vector<int64_t>> ngrams;  // every n-gram of the pool, in pool order
  std::vector<int64_t> indexes;              // ngram_indexes: output coordinate of ngrams[i]
  std::vector<float> weights;                // empty: all ones
  int64_t output_size = 0;                   // max(ngram_indexes) + 1
};
TfIdfConfig parse_tfidf(const ir::Node& node);

// LabelEncoder's value type (the type of values_*), or fails naming the node.
DType label_encoder_value_type(const ir::Node& node);
// LabelEncoder's key type (the type of keys_*), which the input must have.
DType label_encoder_key_type(const ir::Node& node);

// TreeEnsemble's n_targets, checked to be positive.
int64_t tree_ensemble_targets(const ir::Node& node);

// A checker's answer (registry.h: "" or the reason) from a parse whose errors start with the
// node's label, which the registry's callers add themselves.
template <typename Parse>
std::string reason_of(const ir::Node& node, Parse&& parse) {
  try {
    parse();
  } catch (const Error& e) {
    std::string message = e.what();
    const std::string prefix = node.label() + ": ";
    if (message.compare(0, prefix.size(), prefix) == 0) message.erase(0, prefix.size());
    return message;
  }
  return "";
}

}  // namespace reforge::ops::ml
