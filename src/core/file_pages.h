// Dropping the resident pages of memory-mapped file bytes, knowing only where the bytes are.
//
// Weights read from ONNX external data or a safetensors checkpoint are tensors that wrap a
// read-only MappedFile. Every page a reader touches stays in the process's resident set (clean
// page cache, reclaimable, but counted) for as long as the mapping lives, and a caller that keeps
// the imported model (a refit comparing with a rebuild, a build binding a checkpoint) keeps them
// all. A stage that is done with a tensor hands its bytes here: when they lie in a live mapping,
// its whole pages are dropped (madvise MADV_DONTNEED); the bytes stay readable and unchanged, and
// a later read pages them in again from the file. Bytes that are not in a mapping (a tensor the
// process made, an initializer inline in the model) are never touched.
#pragma once

#include <cstddef>

namespace reforge {

// Drops the whole pages inside [p, p + n) when that range lies inside the mapping of a live
// MappedFile; false, doing nothing, otherwise. Thread-safe.
bool release_file_pages(const void* p, size_t n);

}  // namespace reforge
