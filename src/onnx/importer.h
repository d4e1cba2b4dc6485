// ONNX importer: reads a ModelProto (IR versions 3-14, any opset) into an ir::Graph.
//
// Initializers with raw_data are wrapped, not copied, where alignment allows; external data is
// memory-mapped. Every failure is an Error naming the file, and where it applies the tensor or
// node. Paths of external data must stay inside the model's folder.
#pragma once

#include <string>

#include "core/tensor.h"
#include "ir/graph.h"

namespace reforge::onnx {

struct ImportOptions {
  // Folder that external-data locations are relative to; defaults to the model file's folder.
  std::string base_dir;
};

ir::Graph import_model_file(const std::string& path, const ImportOptions& options = {});
ir::Graph import_model_bytes(const void* data, size_t size, const ImportOptions& options = {});

// Reads one serialized TensorProto (the ONNX test suite's input_N.pb / output_N.pb files).
Tensor read_tensor_file(const std::string& path);

}  // namespace reforge::onnx
