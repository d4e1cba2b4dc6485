// The control-flow op family (control.h): nodes with subgraphs (ir/subgraph.h).
#include "ops/control/control.h"

namespace reforge::ops {

void register_control_ops(OpRegistry& r) {
  control::register_if_loop(r);
  control::register_scan(r);
}

}  // namespace reforge::ops
