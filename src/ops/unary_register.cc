// Placeholder: the unary op family registers its kernels here.
#include "ops/registry.h"

namespace reforge::ops {
void register_unary_ops(OpRegistry& r) { (void)r; }
}  // namespace reforge::ops
