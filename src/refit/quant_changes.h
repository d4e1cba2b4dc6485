// What a refit changed in a quantized plan (--precision int8 / int4, or Linear layers of a quantized
// ONNX model on their codes): per engine weight made by reforge::QuantizeWeight or
// reforge::QdqWeight, how many of its quantized values differ from the engine's previous
// ones. Small fine-tuning updates often change none (the update is below the quantization step),
// and a refit says so (RefitReport::summary, `reforge refit --json`).
//
// A value is one element of the weight as the kernels read it: a quantized weight (an int8 byte, or
// one int4 nibble for k < K: block padding is not a value), a float32 scale, or an int4 zero point
// (one nibble per block). Scales and zero points are reported separately from the quantized
// weights, as parts "q", "scales" and "zero_points".
#pragma once

#include <optional>
#include <string>

#include "core/tensor.h"
#include "plan/plan.h"

namespace reforge::refit {

struct QuantizedChange {
  std::string weight;    // engine weight name
  std::string part;      // "q", "scales" or "zero_points"
  size_t values = 0;     // values the weight holds
  size_t changed = 0;    // values that differ from the previous engine weight (all when there was none)
  bool compared = true;  // false: the engine held no previous value (a stripped plan's first refit)
};

// Whether engine weight `w` is made by reforge::QuantizeWeight or reforge::QdqWeight (the weights
// quantized_change reports; ask first, so as not to read the previous value of other weights).
bool quantized_weight(const plan::WeightEntry& w);

// The change record of engine weight `w` of plan `p` going from `before` (undefined: none) to
// `after`, or nullopt when `w` is not made by reforge::QuantizeWeight or reforge::QdqWeight.
std::optional<QuantizedChange> quantized_change(const plan::Plan& p, const plan::WeightEntry& w, const Tensor& before,
                                                const Tensor& after);

}  // namespace reforge::refit
