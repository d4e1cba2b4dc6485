// ONNX importer from memory: a ModelProto's bytes to an ir::Graph.
#include "fuzz_target.h"
#include "onnx/importer.h"

REFORGE_FUZZ_TARGET(onnx) {
  try {
    // An empty base_dir: external-data locations resolve against the current folder and must
    // stay inside it; the importer refuses anything else.
    reforge::onnx::ImportOptions options;
    options.base_dir = "/nonexistent-reforge-fuzz";
    reforge::ir::Graph g = reforge::onnx::import_model_bytes(data, size, options);
    (void)g;
  } catch (const reforge::Error&) {
  }
  return 0;
}
