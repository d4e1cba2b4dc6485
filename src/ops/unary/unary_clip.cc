// The reference kernel of Clip (unary_clip.h) on ReferenceMap.
#include "ops/unary/unary_clip.h"

namespace reforge::ops {

void register_clip_op(OpRegistry& r) {
  unary::clip_kernels<unary::ReferenceMap>([&r](const char* op, int since, KernelFn kernel, CheckFn check, bool) {
    r.add({"", op, since, INT_MAX, std::move(kernel), std::move(check)});
  });
}

}  // namespace reforge::ops
