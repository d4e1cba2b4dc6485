// NumPy .npy files (format versions 1.0, 2.0 and 3.0; C order; little-endian), every reforge dtype.
// Reading validates the file fully and never reads past its end. It is stricter than np.load,
// so that reforge never reads an array numpy would read differently:
//  - the header is a Python dict literal with the keys 'descr', 'fortran_order' and 'shape',
//    each exactly once (numpy keeps the last of a duplicated key; reforge refuses), no other key;
//  - after the dict come only spaces and one '\n', which is the last byte of the declared
//    header length (numpy trusts the length field and would read the data from the wrong offset);
//  - the data starts at a multiple of 16 (numpy writes 64; 16 covers older numpy and cnpy);
//  - the data is exactly shape x itemsize bytes (np.load ignores trailing bytes; reforge refuses);
//  - fortran_order True, big-endian and structured dtypes are refused.
// Every error names the file (or `what`) and what is wrong.
#pragma once

#include <string>

#include "core/tensor.h"

namespace reforge {

Tensor read_npy(const std::string& path);
Tensor parse_npy(const void* data, size_t size, const std::string& what = "npy data");
// Writes atomically (temporary file in the same folder, then rename).
void write_npy(const std::string& path, const Tensor& t);

}  // namespace reforge
