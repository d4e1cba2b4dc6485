// TreeEnsemble (ai.onnx.ml opset 5+): a forest of decision trees over X [N, F] (float, double or
// float16), giving Y [N, n_targets] in X's type.
//
// Interior nodes are the positions of the nodes_* attributes: node i compares feature
// nodes_featureids[i] of a row with nodes_splits[i] by nodes_modes[i] (0 <=, 1 <, 2 >=, 3 >,
// 4 ==, 5 !=, 6 membership in a set) and goes to its true branch when the comparison holds or
// when the feature is NaN and nodes_missing_value_tracks_true[i] is 1. A branch is a leaf
// (nodes_trueleafs / nodes_falseleafs) indexing the leaf_* attributes, else another node. The
// sets of the membership nodes are membership_values cut at its NaNs, in the order those nodes
// appear in nodes_modes. Comparisons are made in double on the values as stored. Each tree
// (tree_roots) gives one leaf per row, which adds leaf_weights[l] to target leaf_targetids[l];
// aggregate_function combines a target's contributions: SUM (1), AVERAGE (0: the sum over the
// number of trees), MIN (2), MAX (3), summed in double and rounded once to X's type.
//
// A target that no tree's leaf reaches for a row under MIN or MAX has no value the implementations
// agree on (the ONNX reference gives the type's extreme, ONNX Runtime 0): such a row is an
// error. post_transform other than NONE (0) is refused: the ONNX reference ignores the
// attribute for TreeEnsemble and implements none for the TreeEnsembleRegressor it replaces, so no
// reference defines those transforms for a regression forest. The trees are checked
// when the node is (indices in range, no cycles), so evaluation always ends at a leaf.
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "ops/ml/ml_common.h"
#include "ops/registry.h"

namespace reforge::ops::ml {

int64_t tree_ensemble_targets(const ir::Node& node) {
  REFORGE_CHECK(node.has_attr("n_targets"), node.label(), ": attribute 'n_targets' is required");
  const int64_t n = node.attr_int("n_targets");
  REFORGE_CHECK(n >= 1 && n < INT32_MAX, node.label(), ": n_targets ", n, " is not a positive count");
  return n;
}

namespace {

enum Mode : int { kLeq, kLt, kGte, kGt, kEq, kNeq, kMember };
enum Aggregate : int { kAverage, kSum, kMin, kMax };

struct Forest {
  int64_t targets = 0;
  int aggregate = kSum;
  std::vector<int64_t> feature, true_id, false_id, roots, leaf_target;
  std::vector<int> mode;
  std::vector<bool> true_leaf, false_leaf, missing_true;
  std::vector<double> split, leaf_weight;
  std::vector<std::vector<double>> members;  // per node; empty unless mode is kMember
};

std::vector<double> tensor_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.as_double(i);
  return v;
}

const Tensor& required_tensor(const ir::Node& node, const char* name) {
  const Tensor* t = node.attr_tensor(name);
  REFORGE_CHECK(t, node.label(), ": attribute '", name, "' (a tensor) is required");
  return *t;
}

std::vector<int64_t> required_ints(const ir::Node& node, const char* name) {
  REFORGE_CHECK(node.has_attr(name), node.label(), ": attribute '", name, "' is required");
  return node.attr_ints(name);
}

Forest parse_forest(const ir::Node& node) {
  const std::string label = node.label();
  Forest f;
  f.targets = tree_ensemble_targets(node);
  f.aggregate = static_cast<int>(node.attr_int("aggregate_function", kSum));
  REFORGE_CHECK(f.aggregate >= kAverage && f.aggregate <= kMax, label, ": aggregate_function ", f.aggregate,
                " is not one of AVERAGE (0), SUM (1), MIN (2), MAX (3)");
  const int64_t post = node.attr_int("post_transform", 0);
  REFORGE_CHECK(post == 0, label, ": post_transform ", post,
                " is not supported (only NONE, 0: the ONNX reference defines no post transform for a "
                "regression forest)");

  f.feature = required_ints(node, "nodes_featureids");
  f.true_id = required_ints(node, "nodes_truenodeids");
  f.false_id = required_ints(node, "nodes_falsenodeids");
  const std::vector<int64_t> tl = required_ints(node, "nodes_trueleafs"), fl = required_ints(node, "nodes_falseleafs");
  const Tensor& modes = required_tensor(node, "nodes_modes");
  REFORGE_CHECK(is_integer(modes.dtype()), label, ": nodes_modes must be an integer (uint8) tensor, got ",
                modes.describe());
  f.split = tensor_doubles(required_tensor(node, "nodes_splits"));
  const size_t n = f.feature.size();
  REFORGE_CHECK(n >= 1, label, ": nodes_featureids is empty (a tree needs at least one node)");
  auto same_length = [&](size_t got, const char* name) {
    REFORGE_CHECK(got == n, label, ": ", name, " has ", got, " entries, nodes_featureids ", n);
  };
  same_length(f.true_id.size(), "nodes_truenodeids");
  same_length(f.false_id.size(), "nodes_falsenodeids");
  same_length(tl.size(), "nodes_trueleafs");
  same_length(fl.size(), "nodes_falseleafs");
  same_length(static_cast<size_t>(modes.numel()), "nodes_modes");
  same_length(f.split.size(), "nodes_splits");
  std::vector<int64_t> missing = node.attr_ints("nodes_missing_value_tracks_true");
  if (missing.empty()) missing.assign(n, 0);
  same_length(missing.size(), "nodes_missing_value_tracks_true");

  f.leaf_target = required_ints(node, "leaf_targetids");
  f.leaf_weight = tensor_doubles(required_tensor(node, "leaf_weights"));
  REFORGE_CHECK(f.leaf_weight.size() == f.leaf_target.size(), label, ": leaf_weights has ", f.leaf_weight.size(),
                " entries, leaf_targetids ", f.leaf_target.size());
  for (size_t l = 0; l < f.leaf_target.size(); ++l)
    REFORGE_CHECK(f.leaf_target[l] >= 0 && f.leaf_target[l] < f.targets, label, ": leaf ", l, " has target ",
                  f.leaf_target[l], ", outside [0, n_targets = ", f.targets, ")");
  const auto leaves = static_cast<int64_t>(f.leaf_target.size());

  std::vector<double> membership;
  if (const Tensor* m = node.attr_tensor("membership_values")) membership = tensor_doubles(*m);
  size_t next_member = 0;
  f.members.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t m = modes.as_int64(static_cast<int64_t>(i));
    REFORGE_CHECK(m >= kLeq && m <= kMember, label, ": nodes_modes[", i, "] = ", m, " is not a mode (0 to 6)");
    f.mode.push_back(static_cast<int>(m));
    REFORGE_CHECK(f.feature[i] >= 0, label, ": node ", i, " reads feature ", f.feature[i]);
    f.true_leaf.push_back(tl[i] != 0);
    f.false_leaf.push_back(fl[i] != 0);
    f.missing_true.push_back(missing[i] != 0);
    for (int branch = 0; branch < 2; ++branch) {
      const int64_t id = branch == 0 ? f.true_id[i] : f.false_id[i];
      const bool leaf = branch == 0 ? f.true_leaf[i] : f.false_leaf[i];
      const int64_t limit = leaf ? leaves : static_cast<int64_t>(n);
      REFORGE_CHECK(id >= 0 && id < limit, label, ": the ", branch == 0 ? "true" : "false", " branch of node ", i,
                    " is ", leaf ? "leaf " : "node ", id, ", outside [0, ", limit, ")");
    }
    if (m != kMember) continue;
    // This node's set: the values up to the next NaN.
    while (true) {
      REFORGE_CHECK(next_member < membership.size(), label,
                    ": membership_values holds fewer NaN-terminated sets "
                    "than there are membership nodes (node ",
                    i, " has none)");
      const double v = membership[next_member++];
      if (std::isnan(v)) break;
      f.members[i].push_back(v);
    }
  }
  REFORGE_CHECK(next_member == membership.size(), label, ": membership_values holds ", membership.size() - next_member,
                " values after the set of the last membership node");

  f.roots = required_ints(node, "tree_roots");
  REFORGE_CHECK(!f.roots.empty(), label, ": tree_roots is empty");
  // Every path from a root must end at a leaf: a depth-first walk that finds a node on its own
  // path has found a cycle. state: 0 unseen, 1 on the path, 2 done.
  std::vector<int> state(n, 0);
  for (int64_t root : f.roots) {
    REFORGE_CHECK(root >= 0 && root < static_cast<int64_t>(n), label, ": tree root ", root, " is outside [0, ", n, ")");
    std::vector<std::pair<int64_t, int>> stack{{root, 0}};  // (node, branches visited)
    if (state[static_cast<size_t>(root)] == 2) continue;
    state[static_cast<size_t>(root)] = 1;
    while (!stack.empty()) {
      auto& [id, visited] = stack.back();
      const auto u = static_cast<size_t>(id);
      if (visited == 2) {
        state[u] = 2;
        stack.pop_back();
        continue;
      }
      const int branch = visited++;
      if (branch == 0 ? f.true_leaf[u] : f.false_leaf[u]) continue;
      const int64_t child = branch == 0 ? f.true_id[u] : f.false_id[u];
      const auto c = static_cast<size_t>(child);
      REFORGE_CHECK(state[c] != 1, label, ": the tree rooted at node ", root, " has a cycle through node ", child);
      if (state[c] == 0) {
        state[c] = 1;
        stack.emplace_back(child, 0);
      }
    }
  }
  return f;
}

std::string check_tree_ensemble(const ir::Node& node) {
  return reason_of(node, [&] { parse_forest(node); });
}

bool goes_true(const Forest& f, size_t i, double x) {
  if (f.missing_true[i] && std::isnan(x)) return true;
  const double s = f.split[i];
  switch (f.mode[i]) {
    case kLeq:
      return x <= s;
    case kLt:
      return x < s;
    case kGte:
      return x >= s;
    case kGt:
      return x > s;
    case kEq:
      return x == s;
    case kNeq:
      return x != s;
    default:
      return std::find(f.members[i].begin(), f.members[i].end(), x) != f.members[i].end();
  }
}

void tree_ensemble_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Forest f = parse_forest(node);
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(x.dtype() == DType::Float32 || x.dtype() == DType::Float64 || x.dtype() == DType::Float16, label,
                ": X must be float, double or float16, got ", x.describe());
  REFORGE_CHECK(x.rank() == 2, label, ": X must be [N, F], got ", x.describe());
  const int64_t rows = x.dim(0), features = x.dim(1);
  for (size_t i = 0; i < f.feature.size(); ++i)
    REFORGE_CHECK(f.feature[i] < features, label, ": node ", i, " reads feature ", f.feature[i], " of X ",
                  x.describe());
  const std::vector<double> xv = tensor_doubles(x);
  const auto targets = static_cast<size_t>(f.targets);
  std::vector<double> acc(targets);
  std::vector<bool> reached(targets);
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), {rows, f.targets});
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = xv.data() + r * features;
    std::fill(acc.begin(), acc.end(), 0.0);
    std::fill(reached.begin(), reached.end(), false);
    for (int64_t root : f.roots) {
      auto id = static_cast<size_t>(root);
      size_t leaf = 0;
      while (true) {
        const bool t = goes_true(f, id, row[f.feature[id]]);
        const int64_t next = t ? f.true_id[id] : f.false_id[id];
        if (t ? f.true_leaf[id] : f.false_leaf[id]) {
          leaf = static_cast<size_t>(next);
          break;
        }
        id = static_cast<size_t>(next);
      }
      const auto tgt = static_cast<size_t>(f.leaf_target[leaf]);
      const double w = f.leaf_weight[leaf];
      if (f.aggregate == kMin)
        acc[tgt] = reached[tgt] ? std::min(acc[tgt], w) : w;
      else if (f.aggregate == kMax)
        acc[tgt] = reached[tgt] ? std::max(acc[tgt], w) : w;
      else
        acc[tgt] += w;
      reached[tgt] = true;
    }
    for (size_t t = 0; t < targets; ++t) {
      if (f.aggregate == kMin || f.aggregate == kMax)
        REFORGE_CHECK(reached[t], label, ": row ", r, " reaches no leaf of target ", t, " and aggregate_function ",
                      f.aggregate == kMin ? "MIN" : "MAX",
                      " gives it no value (ONNX Runtime writes 0, the ONNX reference the type's extreme)");
      const double v = f.aggregate == kAverage ? acc[t] / static_cast<double>(f.roots.size()) : acc[t];
      dispatch_float(x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        y.mutable_data<T>()[r * f.targets + static_cast<int64_t>(t)] = from_compute<T>(v);
      });
    }
  }
}

}  // namespace

void register_tree_ensemble_ops(OpRegistry& r) {
  r.add({"ai.onnx.ml", "TreeEnsemble", 5, INT_MAX, tree_ensemble_kernel, check_tree_ensemble});
}

}  // namespace reforge::ops::ml
