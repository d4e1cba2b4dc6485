// Weight source readers: what the files of new weights are is decided by what they hold, never by
// their names. A refit's --weights and a build's --checkpoint go through here.
//
// A path is probed once (what it is, its size, its first bytes) and handed to each reader in
// registration order; the first that recognizes it reads it. The readers:
//   safetensors        an 8-byte little-endian header length N, 0 < N <= kMaxHeaderBytes, then
//                      '{' (a truncated file still counts: the checkpoint reader names what is cut)
//   safetensors-index  a model.safetensors.index.json under any name (a JSON object with a
//                      "weight_map"), or a folder holding model.safetensors.index.json
//   onnx               a protobuf ModelProto: its top-level fields carry ModelProto's numbers
//                      and wire types, one is ir_version or the graph, and none runs past the end
//                      of the file unless it is the last (a truncated model is the importer's to
//                      name)
// The first two are read here (Checkpoint::open, on the runtime side); an ONNX model is
// recognized here and read on the build side (build::refit_from: import, sources by graph
// position), so a runtime-only deployment links no importer and still tells an ONNX model from
// garbage. A path no reader recognizes is refused naming it, what it holds ("a file of 12 bytes
// beginning \"GARBAGE!\"..."), and the kinds that are read.
//
// New weights in memory need no sniffing: the caller's type says what they are. Tensors are taken
// as they are (RefitRequest::tensors, ::checkpoint_tensors); DLPack tensors of any framework go
// through refit/dlpack.h first.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "refit/safetensors.h"

namespace reforge {
class RegularFile;
}

namespace reforge::refit {

// What a path is, as far as the readers need to know.
struct FileProbe {
  enum class Type { Missing, File, Folder, Other };
  std::string path;
  Type type = Type::Missing;
  std::string problem;   // Missing: why it cannot be looked at; Other: what it is ("a FIFO")
  uint64_t size = 0;     // File
  std::string head;      // File: its first bytes (at most kProbeBytes)
  bool has_index = false;  // Folder: holds model.safetensors.index.json
  std::shared_ptr<const RegularFile> file;  // File: open for the readers' reads

  static constexpr size_t kProbeBytes = 64;
  // Reads `n` bytes at `offset` of the file into `out`; false when the file is shorter.
  bool read_at(uint64_t offset, void* out, size_t n) const;
};

FileProbe probe_path(const std::string& path);

// How the weights a reader recognizes are read.
enum class WeightForm {
  Checkpoint,  // tensors by framework name, bound to sources through the plan's checkpoint bindings
  Model,       // an ONNX model: sources by graph position (read on the build side)
};

struct FileReader {
  const char* name;  // "safetensors", "safetensors-index", "onnx"
  const char* what;  // "a safetensors checkpoint"
  WeightForm form;
  bool (*recognizes)(const FileProbe&);
  // Checkpoint form: opens the part of a checkpoint this path is.
  CheckpointPart (*part)(const FileProbe&);
};

// Every reader, in the order they are tried.
const std::vector<FileReader>& file_readers();

// The reader that recognizes `probe`; throws naming the path, what it holds and what is read
// when none does. `role` names the path's use in that error ("--weights", "checkpoint").
const FileReader& reader_of(const FileProbe& probe, const std::string& role);

// What is found at a path no reader recognizes, for errors: "a file of 12 bytes beginning
// \"GARBAGE!\" (47 41 52 ...)", "a reforge plan", "a JSON object without \"weight_map\"", ...
std::string describe_unrecognized(const FileProbe& probe);

// The files of one request, each with its reader: all of checkpoint form (the parts of one
// checkpoint), or one model alone; anything else is refused naming the files and their kinds.
struct WeightFiles {
  WeightForm form = WeightForm::Checkpoint;
  std::vector<FileProbe> probes;
  std::vector<const FileReader*> readers;  // one per probe
  // The readers' names, once each, in order, joined by '+' ("safetensors", "onnx").
  std::string reader_names() const;
};
WeightFiles read_weight_files(const std::vector<std::string>& paths, const std::string& role);

// The checkpoint of `files` (read_weight_files; each part as its reader says). Throws for an ONNX
// model among them, naming it.
Checkpoint open_checkpoint(const WeightFiles& files);
Checkpoint open_checkpoint(const std::vector<std::string>& paths, const std::string& role);

}  // namespace reforge::refit
