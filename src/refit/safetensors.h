// Safetensors checkpoints: reading (memory-mapped, validated) and writing (atomic).
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of JSON mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data
// section that follows the header; an optional "__metadata__" object of strings), then the data.
// This module is on the runtime side (no protobuf): a deployment refits from checkpoints without
// the importer.
//
// Invariants the reader enforces on untrusted files, the rules of the reference implementation
// (huggingface/safetensors, SafeTensors::deserialize) and of the format's spec; each violation is
// an Error naming the file and, where there is one, the tensor; never a crash, never a read
// outside the file, never a file opened that is not a regular file (core/regular_file.h):
//  * the header length is at most kMaxHeaderBytes and lies inside the file; the header is UTF-8,
//    begins with '{' and is a JSON object of the shape above, no key repeated in any object
//    (nlohmann::json would keep the last silently);
//  * every dtype of the reference is known by name: BOOL U8 I8 I16 U16 F16 BF16 I32 U32 F32 F64
//    I64 U64 are read, the others (F4 F6_* F8_* C64) refused by name once the layout is valid;
//  * every tensor has exactly dtype bits x element count / 8 bytes (a whole number of bytes, no
//    overflow on the way);
//  * the tensors cover the data section exactly: sorted by offsets the first begins at 0, each
//    begins where the previous ended (no gap, no overlap), the last ends at the end of the file;
//  * tensors wrap the mapping (no copy) and keep it alive.
// A sharded checkpoint is a folder holding model.safetensors.index.json ({"weight_map": {tensor:
// file}}, at most kMaxShardIndexBytes, a non-empty map of names to plain file names, no key
// repeated) or several files given explicitly; each shard holds exactly the tensors the index
// puts in it, and a tensor name present in two files is an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/tensor.h"

namespace reforge::refit {

// One part of a checkpoint: a safetensors file, or a shard index (a model.safetensors.index.json,
// under any name) whose shards lie in its folder.
struct CheckpointPart {
  std::string path;
  bool index = false;
};

class Checkpoint {
 public:
  // Opens one .safetensors file, a folder with model.safetensors.index.json, or (several paths)
  // a list of files and folders whose tensors are united.
  static Checkpoint open(const std::vector<std::string>& paths);
  static Checkpoint open(const std::string& path) { return open(std::vector<std::string>{path}); }
  // The parts given, their kinds decided by the caller (refit/source_readers.h reads them from
  // the content), their tensors united.
  static Checkpoint open_parts(const std::vector<CheckpointPart>& parts);
  // Parses safetensors bytes held by `owner`; `what` names the input in errors.
  static Checkpoint parse(std::shared_ptr<const void> owner, const void* data, size_t size, const std::string& what);

  // Tensors held in memory (a framework's state dict), by their framework names; no copy.
  // `description` names them in errors ("state dict").
  static Checkpoint from_tensors(std::map<std::string, Tensor> tensors, const std::string& description);

  // The same tensors (no copy) under other names: `strip` removed from the front of every name
  // that begins with it, then `add` put in front of every name (both may be ""), as a checkpoint
  // saved under another module name needs ("m." -> "model."). Throws, naming them, when no name
  // begins with `strip` or when two names become one.
  Checkpoint with_key_prefix(const std::string& strip, const std::string& add) const;
  // The same tensors with each of `replaced` taking the place of the tensor of its name, which
  // must exist (a LoRA merge, refit/lora.h); `what` is added to the description ("checkpoint
  // 'a.safetensors' with LoRA adapter 'x' merged").
  Checkpoint with_replaced(const std::map<std::string, Tensor>& replaced, const std::string& what) const;

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

// The reference reader's header length limit (MAX_HEADER_SIZE).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// The largest model.safetensors.index.json read (a model of 10,000 tensors needs about 1 MiB).
inline constexpr size_t kMaxShardIndexBytes = size_t(64) << 20;

// A model.safetensors.index.json: which file holds each tensor.
struct ShardIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> plain file name
  std::vector<std::string> files;                 // the file names weight_map uses, sorted, once each
};

// Parses the index held in [data, data+size): a JSON object with a non-empty "weight_map" object
// of tensor names to plain file names (not empty, no '/', not "." or ".."), no key repeated.
// `what` names the index in errors.
ShardIndex parse_shard_index(const void* data, size_t size, const std::string& what);

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
