// Placeholder: the elementwise op family registers its kernels here.
#include "ops/registry.h"

namespace reforge::ops {
void register_elementwise_ops(OpRegistry& r) { (void)r; }
}  // namespace reforge::ops
