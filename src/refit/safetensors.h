// Safetensors checkpoints: reading (memory-mapped, validated) and writing (atomic).
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of JSON mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data
// section that follows the header; an optional "__metadata__" object of strings), then the data.
// This module is on the runtime side (no protobuf): a deployment refits from checkpoints without
// the importer.
//
// Invariants the reader enforces on untrusted files (each violation is an Error naming the file
// and, where there is one, the tensor; never a crash, never an out-of-bounds read):
//  * the header length lies inside the file, the header is well-formed JSON of the shape above;
//  * dtypes are one of F32 F16 BF16 F64 I64 I32 I16 I8 U8 BOOL;
//  * every tensor's byte range lies inside the data section, has exactly dtype size x element
//    count bytes, and no two ranges overlap;
//  * tensors wrap the mapping (no copy) and keep it alive.
// A sharded checkpoint is a folder holding model.safetensors.index.json ({"weight_map": {tensor:
// file}}) or several files given explicitly; a tensor name present in two files is an error.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/tensor.h"

namespace reforge::refit {

class Checkpoint {
 public:
  // Opens one .safetensors file, a folder with model.safetensors.index.json, or (several paths)
  // a list of files and folders whose tensors are united.
  static Checkpoint open(const std::vector<std::string>& paths);
  static Checkpoint open(const std::string& path) { return open(std::vector<std::string>{path}); }
  // Parses safetensors bytes held by `owner`; `what` names the input in errors.
  static Checkpoint parse(std::shared_ptr<const void> owner, const void* data, size_t size, const std::string& what);

  // Tensors held in memory (a framework's state dict), by their framework names; no copy.
  // `description` names them in errors ("state dict").
  static Checkpoint from_tensors(std::map<std::string, Tensor> tensors, const std::string& description);

  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  const Tensor* find(const std::string& name) const;
  // The file a tensor came from ("" if unknown).
  std::string file_of(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t total_bytes() const;
  // "checkpoint 'a.safetensors'" or "checkpoint 'a.safetensors' (+2 more files)".
  std::string description() const { return description_; }
  // Drops the resident pages of the files this checkpoint maps (MappedFile::release_pages); the
  // tensors stay valid and unchanged. No effect on a checkpoint of in-memory tensors.
  void release_pages() const;
  // The same for the pages of one tensor's bytes, when they lie in a file this checkpoint maps
  // (otherwise nothing). Thread-safe.
  void release_pages_of(const Tensor& t) const;

 private:
  void merge(Checkpoint&& other);
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> files_;
  std::map<std::string, std::string> metadata_;
  std::string description_;
  std::vector<std::shared_ptr<const MappedFile>> mappings_;  // the files open() mapped
};

// The shard file names of a model.safetensors.index.json held in [data, data+size), in index
// order (with repeats): each a plain file name (no '/', not ".."). `what` names the index in errors.
std::vector<std::string> parse_shard_index(const void* data, size_t size, const std::string& what);

// True for a path ending in ".safetensors" or a folder holding model.safetensors.index.json.
bool is_safetensors_path(const std::string& path);

// The safetensors name of a dtype ("F32"); throws for dtypes safetensors files here do not use.
std::string safetensors_dtype_name(DType t);

// The bytes of a safetensors file holding `tensors` (sorted by name, packed, 8-byte aligned header).
std::string serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});
// Writes atomically: temporary file next to `path`, fsync, rename.
void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace reforge::refit
