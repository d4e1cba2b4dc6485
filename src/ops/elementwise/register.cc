// The elementwise op family: binary arithmetic (binary_arith.cc), comparisons, logic and Where
// (compare_logic.cc), integer bitwise ops (bitwise.cc), variadic Min/Max/Sum/Mean (variadic.cc) and
// Cast/CastLike/BitCast
// (cast.cc). All broadcasting goes through ops/broadcast.h.
#include "ops/registry.h"

namespace reforge::ops {

void register_binary_arith_ops(OpRegistry& r);
void register_compare_logic_ops(OpRegistry& r);
void register_bitwise_ops(OpRegistry& r);
void register_variadic_ops(OpRegistry& r);
void register_cast_ops(OpRegistry& r);

void register_elementwise_ops(OpRegistry& r) {
  register_binary_arith_ops(r);
  register_compare_logic_ops(r);
  register_bitwise_ops(r);
  register_variadic_ops(r);
  register_cast_ops(r);
}

}  // namespace reforge::ops
