// An Engine for a graph as it is, without build passes: the graph lowered with every node on one
// backend (runtime::lower_without_passes), for tests of single ops, passes against their unfused
// graph, and the executor itself.
#pragma once

#include <string>

#include "runtime/engine.h"

namespace reforge::test_support {

inline runtime::Engine engine_for(ir::Graph graph, runtime::EngineOptions options = {},
                                  const std::string& backend = "cpu") {
  return runtime::Engine(runtime::lower_without_passes(std::move(graph), backend), options);
}

}  // namespace reforge::test_support
