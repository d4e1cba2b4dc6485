// `reforge check MODEL.onnx [--shapes]`: import the model, list every node that cannot run, and
// infer every value's type and shape (ops/infer_graph.h) to report a shape error (an
// inconsistent Reshape, Concat of mismatched ranks, an axis out of range) before any build. With
// --shapes (or --verbose) it prints every graph input's type (what `run --input` and `bench
// --shape` take) and every graph output's inferred type, symbolic dimensions by name
// ("float32[batch,seq,768]").
#include <iostream>
#include <nlohmann/json.hpp>

#include "common.h"
#include "onnx/importer.h"
#include "ops/infer_graph.h"
#include "runtime/engine.h"

namespace reforge::cli {

namespace {

// A graph input's declared type, symbolic dimensions by name ("int64[batch,seq]").
std::string input_type(const ir::ValueInfo& v) {
  std::string t = dtype_name(v.dtype);
  if (!v.has_shape) return t + "[unknown rank]";
  t += "[";
  for (size_t d = 0; d < v.shape.size(); ++d) t += (d ? "," : "") + ir::dim_str(v.shape[d]);
  return t + "]";
}

}  // namespace

Runner add_check(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  auto shapes = std::make_shared<bool>(false);
  auto json = std::make_shared<bool>(false);
  app.add_option("model", *model, "ONNX model file")->required();
  app.add_flag("--shapes,--verbose,-v", *shapes, "print every graph input's and output's type and shape");
  app.add_flag("--json", *json,
               "print one JSON document on stdout: unsupported nodes, the shape error, every input's and output's "
               "type");
  return [model, shapes, json]() {
    ir::Graph g = onnx::import_model_file(*model);
    auto bad = runtime::unsupported_nodes(g);
    if (!*json)
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
      if (!*json) std::cout << "shape error: " << shape_error << "\n";
    }
    if (*json) {
      nlohmann::ordered_json doc = {
          {"model", *model},
          {"nodes", g.nodes.size()},
          {"unsupported", bad},
          {"shape_error", shape_error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(shape_error)}};
      doc["inputs"] = nlohmann::ordered_json::array();
      for (const auto& in : g.inputs) doc["inputs"].push_back({{"name", in.name}, {"type", input_type(in)}});
      doc["outputs"] = nlohmann::ordered_json::array();
      for (const auto& out : g.outputs) {
        const ops::ValueType* t = shape_error.empty() ? types.find(out.name) : nullptr;
        doc["outputs"].push_back(
            {{"name", out.name}, {"type", t ? nlohmann::ordered_json(t->str()) : nlohmann::ordered_json(nullptr)}});
      }
      doc["ok"] = bad.empty() && shape_error.empty();
      std::cout << doc.dump(2) << "\n";
      return bad.empty() && shape_error.empty() ? 0 : 1;
    }
    if (*shapes)
      for (const auto& in : g.inputs) std::cout << "input '" << in.name << "': " << input_type(in) << "\n";
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
