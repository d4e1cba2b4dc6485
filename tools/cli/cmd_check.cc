// `reforge check MODEL.onnx [--shapes]`: import the model, list every node that cannot run, and
// infer every value's type and shape (ops/infer_graph.h) to report a shape error (an
// inconsistent Reshape, Concat of mismatched ranks, an axis out of range) before any build. With
// --shapes (or --verbose) it prints every graph output's inferred type, symbolic dimensions by
// name ("float32[batch,seq,768]").
#include <iostream>

#include "common.h"
#include "onnx/importer.h"
#include "ops/infer_graph.h"
#include "runtime/engine.h"

namespace reforge::cli {

Runner add_check(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  auto shapes = std::make_shared<bool>(false);
  app.add_option("model", *model, "ONNX model file")->required();
  app.add_flag("--shapes,--verbose,-v", *shapes, "print every graph output's inferred type and shape");
  return [model, shapes]() {
    ir::Graph g = onnx::import_model_file(*model);
    auto bad = runtime::unsupported_nodes(g);
    for (const auto& line : bad) std::cout << line << "\n";
    // Inference stops at the first inconsistent node; nodes that cannot run are listed above, so
    // they only leave their outputs' types unknown here.
    ops::InferOptions io;
    io.require_all = ops::kEveryOpInferred && bad.empty();
    ops::GraphTypes types;
    std::string shape_error;
    try {
      types = ops::infer_graph(g, io);
    } catch (const Error& e) {
      shape_error = e.what();
      std::cout << "shape error: " << shape_error << "\n";
    }
    if (*shapes && shape_error.empty())
      for (const auto& out : g.outputs) {
        const ops::ValueType* t = types.find(out.name);
        std::cout << "output '" << out.name << "': " << (t ? t->str() : std::string("no type")) << "\n";
      }
    std::cout << g.nodes.size() << " nodes, " << bad.size() << " unsupported, " << (shape_error.empty() ? 0 : 1)
              << " shape error" << (shape_error.empty() ? "s" : "") << "\n";
    return bad.empty() && shape_error.empty() ? 0 : 1;
  };
}

}  // namespace reforge::cli
