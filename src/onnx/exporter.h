// Writes an ir::Graph as an ONNX model (build side). Used to save synthetic and transformed
// models; initializers larger than `external_threshold` bytes go to one external data file next
// to the model, as exporters do for large models.
#pragma once

#include <string>

#include "ir/graph.h"

namespace reforge::onnx {

struct ExportOptions {
  size_t external_threshold = 0;  // 0: everything inline (limited to 2 GiB by protobuf)
  std::string external_file;      // default: "<model file name>.data"
};

void write_model_file(const ir::Graph& g, const std::string& path, const ExportOptions& options = {});

}  // namespace reforge::onnx
