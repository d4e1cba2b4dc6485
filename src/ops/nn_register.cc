// Placeholder: the nn op family registers its kernels here.
#include "ops/registry.h"

namespace reforge::ops {
void register_nn_ops(OpRegistry& r) { (void)r; }
}  // namespace reforge::ops
