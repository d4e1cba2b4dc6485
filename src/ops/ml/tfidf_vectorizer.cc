// TfIdfVectorizer (default domain, opset 9+): counts the n-grams of a pool in each row of an
// int32/int64 tensor ([C] or [N, C]) and writes them, weighted by the mode, to a float tensor
// ([size] or [N, size], size = max(ngram_indexes) + 1).
//
// The pool (pool_int64s) holds the 1-grams, then the 2-grams, ..., starting where ngram_counts
// says; n-gram i of the pool is written to coordinate ngram_indexes[i]. Only n-grams whose length
// is in [min_gram_length, max_gram_length] are counted. An n-gram of length n >= 2 is counted for
// every skip s in [0, max_skip_count] (its items at positions p, p+s+1, ..., p+(n-1)(s+1)); a
// 1-gram is counted once per position. A pool that lists an n-gram twice counts it at the last
// listing's coordinate. Counts are per output coordinate; TF writes them, IDF writes weight (or
// 1) where the count is positive and 0 elsewhere, TFIDF writes weight * count.
//
// The weights: the spec calls weights[i] the weight of pool n-gram i; ONNX Runtime and the ONNX
// reference read weights[k] for output coordinate k. The two agree when weights[i] equals
// weights[ngram_indexes[i]] for every n-gram i (ngram_indexes the identity, the usual case);
// a node whose weights do not agree is refused rather than given one reading's values.
//
// String pools (pool_strings) are refused: reforge has no string tensors.
#include <climits>
#include <map>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "ops/ml/ml_common.h"
#include "ops/registry.h"

namespace reforge::ops::ml {

TfIdfConfig parse_tfidf(const ir::Node& node) {
  const std::string label = node.label();
  REFORGE_CHECK(!node.has_attr("pool_strings"), label,
                ": pool_strings (string n-grams) is not supported: reforge has no string tensors");
  for (const char* a :
       {"mode", "min_gram_length", "max_gram_length", "max_skip_count", "ngram_counts", "ngram_indexes", "pool_int64s"})
    REFORGE_CHECK(node.has_attr(a), label, ": attribute '", a, "' is required");
  TfIdfConfig c;
  const std::string mode = node.attr_string("mode", "");
  if (mode == "TF")
    c.mode = TfIdfConfig::Mode::kTF;
  else if (mode == "IDF")
    c.mode = TfIdfConfig::Mode::kIDF;
  else if (mode == "TFIDF")
    c.mode = TfIdfConfig::Mode::kTFIDF;
  else
    fail(label, ": mode '", mode, "' is not one of TF, IDF, TFIDF");
  c.min_gram = node.attr_int("min_gram_length");
  c.max_gram = node.attr_int("max_gram_length");
  c.max_skip = node.attr_int("max_skip_count");
  REFORGE_CHECK(c.min_gram >= 1 && c.max_gram >= c.min_gram, label, ": min_gram_length ", c.min_gram,
                " and max_gram_length ", c.max_gram, " must satisfy 1 <= min <= max");
  REFORGE_CHECK(c.max_skip >= 0, label, ": max_skip_count ", c.max_skip, " is negative");

  const std::vector<int64_t> pool = node.attr_ints("pool_int64s");
  const std::vector<int64_t> counts = node.attr_ints("ngram_counts");
  const int64_t total = static_cast<int64_t>(pool.size());
  REFORGE_CHECK(counts.empty() || counts[0] == 0, label, ": ngram_counts ", shape_str(counts),
                " must start at 0 (pool items before it belong to no n-gram length)");
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t begin = counts[i];
    const int64_t end = i + 1 < counts.size() ? counts[i + 1] : total;
    const int64_t n = static_cast<int64_t>(i) + 1;
    REFORGE_CHECK(begin >= 0 && begin <= end && end <= total, label, ": ngram_counts ", shape_str(counts),
                  " does not split a pool of ", total, " items into consecutive ranges");
    REFORGE_CHECK((end - begin) % n == 0, label, ": the ", n, "-grams of the pool (items ", begin, " to ", end,
                  ") are not a whole number of ", n, "-grams");
    for (int64_t p = begin; p < end; p += n) c.ngrams.emplace_back(pool.begin() + p, pool.begin() + p + n);
  }

  c.indexes = node.attr_ints("ngram_indexes");
  REFORGE_CHECK(c.indexes.size() == c.ngrams.size(), label, ": ngram_indexes has ", c.indexes.size(),
                " entries, the pool holds ", c.ngrams.size(), " n-grams");
  REFORGE_CHECK(!c.indexes.empty(), label, ": ngram_indexes is empty (the output size is max(ngram_indexes) + 1)");
  for (int64_t k : c.indexes) {
    REFORGE_CHECK(k >= 0 && k < INT32_MAX, label, ": ngram_indexes entry ", k, " is not a valid output coordinate");
    c.output_size = std::max(c.output_size, k + 1);
  }
  c.weights = node.attr_floats("weights");
  if (!c.weights.empty()) {
    REFORGE_CHECK(c.weights.size() == c.indexes.size(), label, ": weights has ", c.weights.size(),
                  " entries, ngram_indexes ", c.indexes.size());
    if (c.mode != TfIdfConfig::Mode::kTF)
      for (size_t i = 0; i < c.indexes.size(); ++i) {
        const auto k = static_cast<size_t>(c.indexes[i]);
        REFORGE_CHECK(k < c.weights.size() && c.weights[k] == c.weights[i], label, ": n-gram ", i, " has weight ",
                      c.weights[i], " and output coordinate ", k, ", whose weight is ",
                      k < c.weights.size() ? std::to_string(c.weights[k]) : std::string("absent"),
                      ": the spec weights pool n-grams, ONNX Runtime and the ONNX reference weight output "
                      "coordinates, and here the two differ");
      }
  }
  return c;
}

namespace {

std::string check_tfidf(const ir::Node& node) {
  return reason_of(node, [&] { parse_tfidf(node); });
}

template <typename T>
void count_rows(const TfIdfConfig& c, const T* x, int64_t rows, int64_t cols, std::vector<int64_t>& freq) {
  // Every counted n-gram maps to its pool index; its proper prefixes map to -1, so a walk stops as
  // soon as its items are a prefix of no counted n-gram.
  std::map<std::vector<int64_t>, int64_t> grams;
  for (size_t i = 0; i < c.ngrams.size(); ++i) {
    const auto& g = c.ngrams[i];
    const auto n = static_cast<int64_t>(g.size());
    if (n < c.min_gram || n > c.max_gram) continue;
    for (size_t len = 1; len < g.size(); ++len) grams.emplace(std::vector<int64_t>(g.begin(), g.begin() + len), -1);
    grams[g] = static_cast<int64_t>(i);
  }
  std::vector<int64_t> key;
  for (int64_t row = 0; row < rows; ++row) {
    const T* r = x + row * cols;
    int64_t* out = freq.data() + row * c.output_size;
    for (int64_t step = 1; step <= c.max_skip + 1; ++step) {
      for (int64_t start = 0; start < cols; ++start) {
        key.clear();
        for (int64_t n = 1; n <= c.max_gram; ++n) {
          const int64_t pos = start + (n - 1) * step;
          if (pos >= cols) break;
          key.push_back(static_cast<int64_t>(r[pos]));
          auto it = grams.find(key);
          if (it == grams.end()) break;
          // A 1-gram does not depend on the skip: counted on the first pass only.
          if (it->second >= 0 && n >= c.min_gram && (n > 1 || step == 1))
            ++out[c.indexes[static_cast<size_t>(it->second)]];
        }
      }
    }
  }
}

void tfidf_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const TfIdfConfig c = parse_tfidf(node);
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(x.dtype() == DType::Int32 || x.dtype() == DType::Int64, label, ": X must be int32 or int64, got ",
                x.describe());
  REFORGE_CHECK(x.rank() == 1 || x.rank() == 2, label, ": X must be [C] or [N, C], got ", x.describe());
  const int64_t rows = x.rank() == 2 ? x.dim(0) : 1;
  const int64_t cols = x.dim(x.rank() - 1);
  std::vector<int64_t> freq(static_cast<size_t>(rows * c.output_size), 0);
  if (x.dtype() == DType::Int32)
    count_rows(c, x.data<int32_t>(), rows, cols, freq);
  else
    count_rows(c, x.data<int64_t>(), rows, cols, freq);

  const Shape shape = x.rank() == 2 ? Shape{rows, c.output_size} : Shape{c.output_size};
  float* y = ctx.allocate_output_uninit(0, DType::Float32, shape).mutable_data<float>();
  const bool weighted = !c.weights.empty();
  for (size_t p = 0; p < freq.size(); ++p) {
    const auto k = static_cast<size_t>(static_cast<int64_t>(p) % c.output_size);
    const double f = static_cast<double>(freq[p]);
    const double w = weighted && freq[p] > 0 ? static_cast<double>(c.weights[k]) : 1.0;
    switch (c.mode) {
      case TfIdfConfig::Mode::kTF:
        y[p] = static_cast<float>(f);
        break;
      case TfIdfConfig::Mode::kIDF:
        y[p] = freq[p] > 0 ? static_cast<float>(w) : 0.0f;
        break;
      case TfIdfConfig::Mode::kTFIDF:
        y[p] = static_cast<float>(w * f);
        break;
    }
  }
}

}  // namespace

void register_tfidf_ops(OpRegistry& r) { r.add({"", "TfIdfVectorizer", 9, INT_MAX, tfidf_kernel, check_tfidf}); }

}  // namespace reforge::ops::ml
