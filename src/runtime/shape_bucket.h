// Shape buckets: what the activation arena is planned per.
//
// An engine whose inputs have symbolic dimensions sees a new input signature whenever a size
// changes (text generation: every token). Planning per signature would infer the graph and lay
// out the arena at every new size. Instead, every dimension the model does not fix is rounded up
// to its bucket (the next power of two; 0 and 1 stay as they are), and the arena is planned once
// per bucket from the sizes inferred at the bucket's bound. A run inside the bucket then costs no
// inference and no planning: its allocations are served from the slots planned for the bound
// whenever they fit (runtime/arena.h checks every request), and those that do not (a size that
// shrinks as a dimension grows) go to the heap and are counted as unplanned. Exactness never
// depends on the bucket: only where allocations come from does.
//
// Inference at the bound can fail where the exact shapes would not (two inputs whose symbols
// are related, such as past and total lengths, rounded apart): the executor then plans that
// signature exactly, as before buckets.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace reforge::runtime {

// The bucket of dimension size `v`: v for 0 and 1, else the smallest power of two >= v.
int64_t dimension_bucket(int64_t v);

struct ShapeBucket {
  std::string key;                      // dtypes and bucketed shapes of the inputs, with a "bucket:" prefix
  std::map<std::string, Shape> bounds;  // per input: its shape at the bucket's bound
  bool exact = false;                   // every dimension equals its bound: the bucket is the signature
};

// Dimensions whose bound is known without rounding: per input name, (axis, bound). A State's
// growing inputs have their max_length there (runtime/state.h), so that every step of a sequence
// falls in one bucket.
using KnownBounds = std::map<std::string, std::pair<size_t, int64_t>>;

// The bucket of `inputs` (checked against `declared`): fixed dimensions as declared, every other
// dimension at its bucket, or at its bound in `known`.
ShapeBucket shape_bucket(const std::vector<ir::ValueInfo>& declared, const std::map<std::string, Tensor>& inputs,
                         const KnownBounds* known = nullptr);

}  // namespace reforge::runtime
