// Transforms: the one implementation of every weight transform.
//
// The builder folds constants by calling evaluate_op(), and records the same call as a recipe
// step; the refitter replays the recipe through evaluate_op() again. Checkpoint bindings
// (plan::Binding) are proved exact at build time and replayed at refit by apply_binding(), on
// the same kernels. Both paths therefore run the very same registry kernel, so a refit cannot
// drift from a fresh build.
//
// This module sits below the builder, the passes, the runtime and the refitter, next to the
// plan whose recipes it replays: it depends only on core, ops and the plan's records, never on
// the importer, the passes or the runtime.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "plan/plan.h"

namespace reforge::transforms {

// Runs one registry operator on constant inputs (null = absent optional input) and returns its
// outputs. Throws an Error naming the operator when it cannot run. `threads` > 1 only for
// operators whose result does not depend on it (data movement, elementwise casts).
std::vector<Tensor> evaluate_op(const std::string& domain, const std::string& op_type, int opset,
                                const std::map<std::string, ir::Attribute>& attrs,
                                const std::vector<const Tensor*>& inputs, size_t num_outputs, int threads = 1);

// The node evaluate_op runs for an operator (inputs "in<i>", "" for an absent one; outputs
// "out<i>"), for a kernel other than the host's to run the same step (transforms/device_recipe.h).
ir::Node recipe_node(const std::string& domain, const std::string& op_type, int opset,
                     const std::map<std::string, ir::Attribute>& attrs, const std::vector<bool>& present,
                     size_t num_outputs);

// The outputs a recipe step is evaluated with: the node's own count, at least up to the one taken.
inline size_t step_outputs(const plan::RecipeStep& st) {
  return st.num_outputs > st.output + 1 ? st.num_outputs : st.output + 1;
}

// Steps that copy or convert elements (Transpose, Slice, Concat, Cast, Gather, Expand) or pack the
// CPU's panels (reforge::PackPanels): their bytes depend neither on the thread count nor on
// whose kernel computes them, unlike arithmetic steps (BatchNorm folding, quantization, folded
// expressions).
bool moves_data(const plan::RecipeStep& st);

// Replays `recipe`: `sources` is indexed by source id (only the ones the recipe reads need to
// be defined), `literals` by literal index. Data-movement steps (Transpose, Slice, Concat,
// Gather, Expand, Cast, PackPanels) run on `threads` threads (0 = all), as apply_binding's do:
// their bytes do not depend on it; every other step runs on one thread.
//
// A 2-D Transpose whose one reader is a PackPanels step is not made: PackPanels reads the
// Transpose's input with its `transposed` attribute flipped, which gives the same bytes in one
// pass over the weight instead of two.
//
// `transposed_sources`, when given, is indexed by source id like `sources`: a defined entry
// gives that source as the 2-D transpose of the entry (a checkpoint tensor an exporter stored
// transposed, refit/checkpoint_refit.h), and the source's entry in `sources` may be undefined.
// A PackPanels step that reads such a source packs the entry directly, as above; a 2-D Transpose
// of such a source is the entry itself (no step runs: the result shares the entry's bytes); any
// other read makes the transpose first.
Tensor replay_recipe(const plan::Recipe& recipe, const std::vector<Tensor>& sources,
                     const std::vector<Tensor>& literals, int threads = 0,
                     const std::vector<Tensor>* transposed_sources = nullptr);

// True when `recipe` reads source `source`, and only as the packed weight of PackPanels steps or
// the input of 2-D Transpose steps: replay_recipe then reads a transposed entry of it without
// making the transpose (a checkpoint's [out, in] matrix that a plan stores [out, in] again, as a
// CUDA plan's transpose-linear-weights does, costs no pass over the weight).
bool reads_source_transposable(const plan::Recipe& recipe, uint32_t source);

// True when binding `b` is exactly one 2-D Transpose of one checkpoint tensor, whose result has
// `shape`: the source is that tensor transposed, and nothing else.
bool is_transpose_binding(const plan::Binding& b, const Shape& shape);

// The 2-D transpose of `t`, on `threads` threads (0 = all), by the registry's Transpose kernel.
Tensor transpose_2d(const Tensor& t, int threads = 0);

// XXH3-64 of a tensor's bytes (dtype and shape not included).
uint64_t hash_tensor(const Tensor& t);

// True when both tensors have the same dtype, shape and bytes.
bool bit_equal(const Tensor& a, const Tensor& b);

// Applies checkpoint binding `b` to `inputs` (one tensor per b.checkpoint entry; none for a
// Constant binding, which gives its value) and reshapes the result to `shape`. Throws an Error
// when a step fails or the result has another dtype or element count. Data-movement steps run
// on `threads` threads (0 = all), as in replay_recipe: their bytes do not depend on it.
Tensor apply_binding(const plan::Binding& b, const std::vector<Tensor>& inputs, DType dtype, const Shape& shape,
                     int threads = 0);

}  // namespace reforge::transforms
