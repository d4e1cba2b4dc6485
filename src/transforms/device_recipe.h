// Recipe steps on a device backend: the weight transforms a refit replays (transforms/recipe.h),
// run by the device's own kernels where they give the host replay's bytes.
//
// Steps that only move or convert data — Transpose, Slice, Concat, Gather, Expand and Cast (each
// output element a copy of one input element, or its correctly rounded conversion) — run on the
// device backend's kernel for the op when it has one that accepts the step; their bytes equal the
// host replay's (tests/cuda_recipe_test.cc compares them step kind by step kind, and every recipe
// of a real plan). Every other step (arithmetic such as BatchNorm folding or quantization, and
// the CPU's panel packing) runs on the host kernel, exactly as replay_recipe runs it, its device
// inputs copied to the host and its result copied back. A step's structure inputs (starts,
// axes, indices of kShape role) stay on the host, as placement keeps them for the device's kernels.
//
// Sources and literals may be in any memory; a source is copied to the device once, where a
// device step first reads it.
#pragma once

#include <functional>
#include <vector>

#include "backends/backend.h"
#include "core/tensor.h"
#include "plan/plan.h"

namespace reforge::transforms {

// Whether recipe step `st` runs on `device` (a device backend): a data-movement step whose op has
// a kernel there that accepts it.
bool runs_on_device(const backends::Backend& device, const plan::RecipeStep& st);

// How replay_recipe_on finds a source in device memory, and whether it waits.
struct DeviceReplayOptions {
  // Set: source `id`'s value in `device`'s memory, for every device step that reads it (the
  // refitter streams each source there once and shares it between recipes). A host step reads
  // sources[id] when it is defined, else this value copied back. Unset: a source is copied to the
  // device where a device step first reads it (to_memory).
  std::function<Tensor(uint32_t id)> device_source;
  // On: waits for the device's work before returning (the result is complete). Off: the result
  // is complete for the calling thread's later device work only (stream order); the caller waits.
  bool wait = true;
};

// replay_recipe with the steps that run_on_device on `device`: the result in `device`'s memory
// (an identity recipe's source copied there), its bytes those of replay_recipe. Waits for the
// device's work before it returns, unless options.wait is off; throws an Error naming the step
// that failed.
Tensor replay_recipe_on(const backends::Backend& device, const plan::Recipe& recipe, const std::vector<Tensor>& sources,
                        const std::vector<Tensor>& literals, const DeviceReplayOptions& options = {});

// Whether replaying `recipe` on `device` runs any step there (runs_on_device).
bool runs_any_on_device(const backends::Backend& device, const plan::Recipe& recipe);

}  // namespace reforge::transforms
