// The reference kernels of activations.h's ops: its list on ReferenceMap.
#include "ops/unary/activations.h"

namespace reforge::ops {

void register_activation_ops(OpRegistry& r) {
  unary::activation_kernels<unary::ReferenceMap>([&r](const char* op, int since, KernelFn kernel, CheckFn check, bool) {
    r.add({"", op, since, INT_MAX, std::move(kernel), std::move(check)});
  });
}

}  // namespace reforge::ops
