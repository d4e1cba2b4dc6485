// The control-flow op family: If and Loop (if_loop.cc), Scan (scan.cc); their subgraphs run
// through body.h. Each file registers its own ops; register.cc only calls them.
#pragma once

#include "ops/registry.h"

namespace reforge::ops::control {

void register_if_loop(OpRegistry& r);  // if_loop.cc
void register_scan(OpRegistry& r);     // scan.cc

}  // namespace reforge::ops::control
