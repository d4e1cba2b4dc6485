// The unary op family: elementwise math and activations with one input and one output of the
// same shape. The op structs and their kernel lists live in unary_math.h, activations.h and
// unary_clip.h, built on a map policy; unary_math.cc, activations.cc and unary_clip.cc register them
// on the portable ReferenceMap, backends/cpu/unary.cc registers the CPU's per-instruction-set
// kernels from the same lists. The float32 vector math and the element-map driver they share are
// in unary_common.h.
#include "ops/registry.h"

namespace reforge::ops {

void register_unary_math_ops(OpRegistry& r);  // unary_math.cc
void register_activation_ops(OpRegistry& r);  // activations.cc
void register_clip_op(OpRegistry& r);         // unary_clip.cc

void register_unary_ops(OpRegistry& r) {
  register_unary_math_ops(r);
  register_activation_ops(r);
  register_clip_op(r);
}

}  // namespace reforge::ops
