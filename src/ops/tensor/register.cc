// The tensor op family: shape and layout ops, gather/scatter, Pad, Range, Constant and friends,
// Compress/Unique, CenterCropPad/Col2Im/Upsample, EyeLike, the window functions and ReverseSequence.
// Each file registers its own ops; this file only calls them.
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::ops {

void register_tensor_ops(OpRegistry& r) {
  register_shape_ops(r);
  register_layout_ops(r);
  register_pad_ops(r);
  register_gather_scatter_ops(r);
  register_tensor_misc_ops(r);
  register_select_ops(r);
  register_image_ops(r);
  register_generator_ops(r);
}

}  // namespace reforge::ops
