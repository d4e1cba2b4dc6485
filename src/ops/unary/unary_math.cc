// The reference kernels of unary_math.h's ops: its list on ReferenceMap.
#include "ops/unary/unary_math.h"

namespace reforge::ops {

void register_unary_math_ops(OpRegistry& r) {
  unary::unary_math_kernels<unary::ReferenceMap>([&r](const char* op, int since, KernelFn kernel, CheckFn check, bool) {
    r.add({"", op, since, INT_MAX, std::move(kernel), std::move(check)});
  });
}

}  // namespace reforge::ops
