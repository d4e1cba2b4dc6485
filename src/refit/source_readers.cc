#include "refit/source_readers.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/regular_file.h"
#include "core/strict_json.h"
#include "plan/plan_format.h"

namespace reforge::refit {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";

uint64_t le64(const std::string& b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[i]);
  return v;
}

bool recognizes_safetensors(const FileProbe& p) {
  if (p.type != FileProbe::Type::File || p.head.size() < 8) return false;
  const uint64_t n = le64(p.head);
  if (n == 0 || n > kMaxHeaderBytes) return false;
  return p.head.size() < 9 || p.head[8] == '{';
}

// The whole file as JSON when it is a small file that begins (after blanks) with '{'; discarded
// otherwise.
nlohmann::json json_object_of(const FileProbe& p) {
  if (p.type != FileProbe::Type::File || p.size > kMaxShardIndexBytes) return nlohmann::json::value_t::discarded;
  const size_t first = p.head.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || p.head[first] != '{') return nlohmann::json::value_t::discarded;
  try {
    const std::string text = read_regular_file(p.path, kMaxShardIndexBytes, "checkpoint index");
    std::string duplicate;
    nlohmann::json j = parse_json_unique_keys(text.data(), text.data() + text.size(), duplicate);
    return j.is_object() ? j : nlohmann::json(nlohmann::json::value_t::discarded);
  } catch (const Error&) {
    return nlohmann::json::value_t::discarded;
  }
}

bool recognizes_index(const FileProbe& p) {
  if (p.type == FileProbe::Type::Folder) return p.has_index;
  const nlohmann::json j = json_object_of(p);
  return !j.is_discarded() && j.contains("weight_map");
}

// A protobuf varint at `offset`: false when it does not end within ten bytes or the file.
bool read_varint(const FileProbe& p, uint64_t& offset, uint64_t& value) {
  unsigned char b[10];
  const size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof b, p.size - offset));
  if (n == 0 || !p.read_at(offset, b, n)) return false;
  value = 0;
  for (size_t i = 0; i < n; ++i) {
    value |= static_cast<uint64_t>(b[i] & 0x7f) << (7 * i);
    if (!(b[i] & 0x80)) {
      offset += i + 1;
      return true;
    }
  }
  return false;
}

// ModelProto's fields (onnx.proto) and their wire types: 0 varint, 2 length-delimited.
int model_field_wire_type(uint64_t field) {
  switch (field) {
    case 1:  // ir_version
    case 5:  // model_version
      return 0;
    case 2:   // producer_name
    case 3:   // producer_version
    case 4:   // domain
    case 6:   // doc_string
    case 7:   // graph
    case 8:   // opset_import
    case 14:  // metadata_props
    case 20:  // training_info
    case 25:  // functions
    case 26:  // configuration
      return 2;
    default:
      return -1;
  }
}

// Walks the top-level fields: each of ModelProto's numbers with its wire type, up to the end of
// the file. A length that runs past the end ends the walk (a truncated model, the importer's to
// name) once ir_version or the graph has been seen, or when it is the graph's.
bool recognizes_onnx(const FileProbe& p) {
  if (p.type != FileProbe::Type::File || p.size == 0) return false;
  uint64_t offset = 0;
  bool key = false;
  while (offset < p.size) {
    uint64_t tag = 0, value = 0;
    if (!read_varint(p, offset, tag)) return false;
    const uint64_t field = tag >> 3;
    const int wire = static_cast<int>(tag & 7);
    if (model_field_wire_type(field) != wire) return false;
    if (!read_varint(p, offset, value)) return false;
    if (wire == 2) {
      if (value > p.size - offset) return key || field == 7;
      offset += value;
    }
    key = key || field == 1 || field == 7;
  }
  return key;
}

CheckpointPart safetensors_part(const FileProbe& p) { return {p.path, false}; }

CheckpointPart index_part(const FileProbe& p) {
  if (p.type == FileProbe::Type::Folder) return {(fs::path(p.path) / kIndexName).string(), true};
  return {p.path, true};
}

std::string readable_list() {
  std::string out;
  const auto& readers = file_readers();
  for (size_t i = 0; i < readers.size(); ++i)
    out += (i == 0 ? "" : i + 1 == readers.size() ? " or " : ", ") + std::string(readers[i].what);
  return out;
}

}  // namespace

bool FileProbe::read_at(uint64_t offset, void* out, size_t n) const {
  if (type != Type::File || !file || offset > size || n > size - offset) return false;
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(file->fd(), static_cast<char*>(out) + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

FileProbe probe_path(const std::string& path) {
  FileProbe p;
  p.path = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    p.problem = std::strerror(errno);
    return p;
  }
  if (S_ISDIR(st.st_mode)) {
    std::error_code ec;
    p.type = FileProbe::Type::Folder;
    p.has_index = fs::is_regular_file(fs::path(path) / kIndexName, ec);
    return p;
  }
  if (!S_ISREG(st.st_mode)) {
    p.type = FileProbe::Type::Other;
    p.problem = file_type_name(st.st_mode);
    return p;
  }
  try {
    p.file = std::make_shared<const RegularFile>(RegularFile::open(path));
    p.type = FileProbe::Type::File;
    p.size = p.file->size();
    p.head.resize(static_cast<size_t>(std::min<uint64_t>(FileProbe::kProbeBytes, p.size)));
    if (!p.read_at(0, p.head.data(), p.head.size())) p.head.clear();
  } catch (const Error& e) {
    p.type = FileProbe::Type::Missing;
    p.problem = e.message();
  }
  return p;
}

const std::vector<FileReader>& file_readers() {
  static const std::vector<FileReader> readers = {
      {"safetensors", "a safetensors checkpoint", WeightForm::Checkpoint, recognizes_safetensors, safetensors_part},
      {"safetensors-index", "a sharded checkpoint's index (model.safetensors.index.json, or a folder holding it)",
       WeightForm::Checkpoint, recognizes_index, index_part},
      {"onnx", "an ONNX model (with its external data)", WeightForm::Model, recognizes_onnx, nullptr},
  };
  return readers;
}

std::string describe_unrecognized(const FileProbe& p) {
  switch (p.type) {
    case FileProbe::Type::Missing:
      return "nothing that can be read (" + p.problem + ")";
    case FileProbe::Type::Other:
      return p.problem;
    case FileProbe::Type::Folder:
      return str_cat("a folder without ", kIndexName);
    case FileProbe::Type::File:
      break;
  }
  if (p.size == 0) return "an empty file";
  if (p.head.size() >= sizeof plan::format::kMagic &&
      std::memcmp(p.head.data(), plan::format::kMagic, sizeof plan::format::kMagic) == 0)
    return "a reforge plan";
  if (const nlohmann::json j = json_object_of(p); !j.is_discarded()) {
    std::string keys;
    for (const auto& [k, v] : j.items()) keys += (keys.empty() ? "" : ", ") + ("\"" + k + "\"");
    return "a JSON object without \"weight_map\"" + (keys.empty() ? std::string() : " (its keys: " + keys + ")");
  }
  std::string text, hex;
  const size_t shown = std::min<size_t>(p.head.size(), 16);
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(p.head[i]);
    text += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '.';
    static const char* digits = "0123456789abcdef";
    hex += str_cat(i ? " " : "", digits[c >> 4], digits[c & 15]);
  }
  return str_cat("a file of ", p.size, " bytes beginning \"", text, "\"", shown < p.size ? "..." : "", " (", hex, ")");
}

const FileReader& reader_of(const FileProbe& probe, const std::string& role) {
  if (probe.type == FileProbe::Type::Missing) fail(role, ": cannot open '", probe.path, "': ", probe.problem);
  for (const FileReader& r : file_readers())
    if (r.recognizes(probe)) return r;
  fail(role, ": '", probe.path, "' holds no weights reforge reads: it is ", describe_unrecognized(probe),
       "; reforge reads ", readable_list(), ", each known by its content, not its name");
}

std::string WeightFiles::reader_names() const {
  std::vector<std::string> names;
  for (const FileReader* r : readers)
    if (std::find(names.begin(), names.end(), r->name) == names.end()) names.push_back(r->name);
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : "+") + n;
  return out;
}

WeightFiles read_weight_files(const std::vector<std::string>& paths, const std::string& role) {
  REFORGE_CHECK(!paths.empty(), "no weight files given");
  WeightFiles w;
  for (const auto& path : paths) {
    w.probes.push_back(probe_path(path));
    w.readers.push_back(&reader_of(w.probes.back(), role));
  }
  for (size_t i = 0; i < paths.size(); ++i) {
    if (w.readers[i]->form != WeightForm::Model) continue;
    if (paths.size() > 1) {
      std::string kinds;
      for (size_t k = 0; k < paths.size(); ++k)
        kinds += str_cat(k ? ", " : "", "'", paths[k], "' (", w.readers[k]->name, ")");
      fail(role, ": an ONNX model gives every weight and comes alone, but ", paths.size(), " files were given: ",
           kinds);
    }
    w.form = WeightForm::Model;
  }
  return w;
}

Checkpoint open_checkpoint(const WeightFiles& files) {
  std::vector<CheckpointPart> parts;
  for (size_t i = 0; i < files.probes.size(); ++i) {
    const FileReader& r = *files.readers[i];
    if (r.form != WeightForm::Checkpoint || !r.part)
      fail("'", files.probes[i].path, "' is ", r.what, ", not a checkpoint");
    parts.push_back(r.part(files.probes[i]));
  }
  return Checkpoint::open_parts(parts);
}

Checkpoint open_checkpoint(const std::vector<std::string>& paths, const std::string& role) {
  return open_checkpoint(read_weight_files(paths, role));
}

}  // namespace reforge::refit
