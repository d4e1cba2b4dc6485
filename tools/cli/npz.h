// NumPy .npz archives (numpy.savez, numpy.savez_compressed): a zip archive of .npy files, each
// array named by its entry's name without ".npy". Read with libzip (stored and deflated entries,
// zip64), each entry then parsed by core/npy.h's strict reader. For `--input FILE.npz`.
#pragma once

#include <map>
#include <string>

#include "core/tensor.h"

namespace reforge::cli {

// Every array of the archive at `path`, by name. Throws an Error naming the file (and the entry)
// for a file that is no zip archive, an entry that is not NAME.npy, two entries of one name, or
// an entry numpy's .npy reader would not read as reforge does.
std::map<std::string, Tensor> read_npz(const std::string& path);

}  // namespace reforge::cli
