// `reforge check MODEL.onnx`: import the model and list every node that cannot run.
#include <iostream>

#include "common.h"
#include "onnx/importer.h"
#include "runtime/engine.h"

namespace reforge::cli {

Runner add_check(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  app.add_option("model", *model, "ONNX model file")->required();
  return [model]() {
    ir::Graph g = onnx::import_model_file(*model);
    auto bad = runtime::unsupported_nodes(g);
    for (const auto& line : bad) std::cout << line << "\n";
    std::cout << g.nodes.size() << " nodes, " << bad.size() << " unsupported\n";
    return bad.empty() ? 0 : 1;
  };
}

}  // namespace reforge::cli
