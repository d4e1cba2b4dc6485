// Recipes: the one implementation of every weight transform.
//
// The builder folds constants by calling evaluate_op(), and records the same call as a recipe
// step; the refitter replays the recipe through evaluate_op() again. Both paths therefore run
// the very same registry kernel, so a refit cannot drift from a fresh build.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "plan/plan.h"

namespace reforge::refit {

// Runs one registry operator on constant inputs (null = absent optional input) and returns its
// outputs. Throws an Error naming the operator when it cannot run. `threads` > 1 only for
// operators whose result does not depend on it (data movement, elementwise casts).
std::vector<Tensor> evaluate_op(const std::string& domain, const std::string& op_type, int opset,
                                const std::map<std::string, ir::Attribute>& attrs,
                                const std::vector<const Tensor*>& inputs, size_t num_outputs, int threads = 1);

// Replays `recipe`: `sources` is indexed by source id (only the ones the recipe reads need to
// be defined), `literals` by literal index.
Tensor replay_recipe(const plan::Recipe& recipe, const std::vector<Tensor>& sources, const std::vector<Tensor>& literals);

// XXH3-64 of a tensor's bytes (dtype and shape not included).
uint64_t hash_tensor(const Tensor& t);

// True when both tensors have the same dtype, shape and bytes.
bool bit_equal(const Tensor& a, const Tensor& b);

}  // namespace reforge::refit
