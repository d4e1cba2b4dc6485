// NumPy .npy files (format versions 1, 2 and 3; C order; little-endian), every reforge dtype.
// Reading validates the header fully and never reads past the end of the file.
#pragma once

#include <string>

#include "core/tensor.h"

namespace reforge {

Tensor read_npy(const std::string& path);
Tensor parse_npy(const void* data, size_t size, const std::string& what = "npy data");
// Writes atomically (temporary file in the same folder, then rename).
void write_npy(const std::string& path, const Tensor& t);

}  // namespace reforge
