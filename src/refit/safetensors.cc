#include "refit/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/mapped_file.h"
#include "core/nearest_names.h"
#include "core/regular_file.h"
#include "core/strict_json.h"

namespace reforge::refit {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The dtypes of the reference implementation (huggingface/safetensors, Dtype), each with its
// width in bits and the DType reforge reads it as (Undefined: known to the format, refused here).
struct DtypeInfo {
  const char* name;
  unsigned bits;
  DType dtype;
};
const DtypeInfo kDtypes[] = {{"BOOL", 8, DType::Bool},
                             {"F4", 4, DType::Undefined},
                             {"F6_E2M3", 6, DType::Undefined},
                             {"F6_E3M2", 6, DType::Undefined},
                             {"U8", 8, DType::UInt8},
                             {"I8", 8, DType::Int8},
                             {"F8_E5M2", 8, DType::Undefined},
                             {"F8_E4M3", 8, DType::Undefined},
                             {"F8_E8M0", 8, DType::Undefined},
                             {"F8_E4M3FNUZ", 8, DType::Undefined},
                             {"F8_E5M2FNUZ", 8, DType::Undefined},
                             {"I16", 16, DType::Int16},
                             {"U16", 16, DType::UInt16},
                             {"F16", 16, DType::Float16},
                             {"BF16", 16, DType::BFloat16},
                             {"I32", 32, DType::Int32},
                             {"U32", 32, DType::UInt32},
                             {"F32", 32, DType::Float32},
                             {"C64", 64, DType::Undefined},
                             {"F64", 64, DType::Float64},
                             {"I64", 64, DType::Int64},
                             {"U64", 64, DType::UInt64}};

const DtypeInfo* find_dtype(const std::string& s) {
  for (const auto& d : kDtypes)
    if (s == d.name) return &d;
  return nullptr;
}

std::string dtype_list(bool readable_only) {
  std::string out;
  for (const auto& d : kDtypes)
    if (!readable_only || d.dtype != DType::Undefined) out += (out.empty() ? "" : " ") + std::string(d.name);
  return out;
}

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The offset of the first byte of [p, p+n) that is not part of well-formed UTF-8, or n.
size_t utf8_error_at(const unsigned char* p, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07;
    } else {
      return i;
    }
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return i;
    i += len;
  }
  return n;
}

struct Entry {
  std::string name;
  const DtypeInfo* dtype;
  Shape shape;
  uint64_t begin, end;
};

}  // namespace

std::string safetensors_dtype_name(DType t) {
  for (const auto& d : kDtypes)
    if (d.dtype == t && t != DType::Undefined) return d.name;
  fail("safetensors: dtype ", dtype_name(t), " cannot be stored");
}

bool is_safetensors_path(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return fs::exists(fs::path(path) / "model.safetensors.index.json", ec);
  return path.size() >= 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
}

Checkpoint Checkpoint::parse(std::shared_ptr<const void> owner, const void* data, size_t size,
                             const std::string& what) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (size < 8) fail(what, ": file is ", size, " bytes, too short for a safetensors header (8-byte length)");
  const uint64_t n = read_le64(bytes);
  if (n > kMaxHeaderBytes)
    fail(what, ": header length ", n, " is larger than the ", kMaxHeaderBytes,
         " bytes the format allows: not a safetensors file");
  if (n > size - 8)
    fail(what, ": header length ", n, " runs past the end of the file (", size,
         " bytes): truncated or not a safetensors file");
  if (size_t bad = utf8_error_at(bytes + 8, n); bad != n)
    fail(what, ": header is not UTF-8 (byte ", bad, " of the header)");
  if (n == 0 || bytes[8] != '{') fail(what, ": header does not begin with '{' (not a safetensors file)");
  const char* hb = reinterpret_cast<const char*>(bytes + 8);
  std::string duplicate;
  json header = parse_json_unique_keys(hb, hb + n, duplicate);
  if (header.is_discarded()) fail(what, ": header is not well-formed JSON");
  if (!header.is_object()) fail(what, ": header is not a JSON object");
  if (!duplicate.empty()) fail(what, ": header names ", duplicate, " twice (the format disallows repeated keys)");
  const uint64_t data_begin = 8 + n;
  const uint64_t data_size = size - data_begin;
  Checkpoint c;
  c.description_ = what;
  std::vector<Entry> entries;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) fail(what, ": __metadata__ is not an object");
      for (const auto& [k, v] : e.items()) {
        if (!v.is_string()) fail(what, ": __metadata__ value of '", k, "' is not a string");
        c.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    std::string at = what + ", tensor '" + name + "'";
    if (!e.is_object()) fail(at, ": entry is not an object");
    auto dt = e.find("dtype"), sh = e.find("shape"), off = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string()) fail(at, ": missing or non-string 'dtype'");
    if (sh == e.end() || !sh->is_array()) fail(at, ": missing or non-array 'shape'");
    if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      fail(at, ": 'data_offsets' must be two non-negative integers");
    const DtypeInfo* dtype = find_dtype(dt->get<std::string>());
    if (!dtype)
      fail(at, ": unknown dtype '", dt->get<std::string>(), "' (the format's dtypes: ", dtype_list(false), ")");
    Shape shape;
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned())
        fail(at, ": shape ", sh->dump(), " has a dimension that is not a non-negative integer");
      const uint64_t v = d.get<uint64_t>();
      if (v > static_cast<uint64_t>(INT64_MAX)) overflow = true;
      if (v != 0 && numel > static_cast<uint64_t>(INT64_MAX) / v) overflow = true;
      numel = overflow ? numel : numel * v;
      shape.push_back(static_cast<int64_t>(v));
    }
    // A zero dimension makes the count 0 whatever the others are; the reference multiplies left
    // to right and refuses any overflow on the way, and so does this.
    if (overflow || numel > UINT64_MAX / dtype->bits) fail(at, ": shape ", sh->dump(), " has too many elements");
    const uint64_t bits = numel * dtype->bits;
    if (bits % 8 != 0)
      fail(at, ": ", dtype->name, shape_str(shape), " is ", bits, " bits, not a whole number of bytes");
    const uint64_t b = (*off)[0].get<uint64_t>(), en = (*off)[1].get<uint64_t>();
    if (b > en) fail(at, ": data_offsets [", b, ",", en, "] are reversed");
    if (en > data_size)
      fail(at, ": data_offsets [", b, ",", en, "] lie outside the data section (", data_size,
           " bytes): file truncated?");
    if (en - b != bits / 8)
      fail(at, ": ", en - b, " bytes of data, but ", dtype->name, shape_str(shape), " needs ", bits / 8);
    entries.push_back({name, dtype, std::move(shape), b, en});
  }
  // The tensors cover the data section exactly, as the reference requires: sorted by offsets,
  // the first begins at 0, each begins where the one before ends, the last ends at the file's
  // end. Bytes outside every tensor (a gap, or data appended or inserted) mean the header does
  // not describe this file.
  std::vector<const Entry*> sorted;
  for (const auto& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(),
            [](const Entry* x, const Entry* y) { return std::pair(x->begin, x->end) < std::pair(y->begin, y->end); });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : sorted) {
    if (e->begin < covered)
      fail(what, ": tensors '", prev->name, "' [", prev->begin, ",", prev->end, ") and '", e->name, "' [", e->begin,
           ",", e->end, ") overlap");
    if (e->begin > covered)
      fail(what, ": bytes [", covered, ",", e->begin, ") of the data section belong to no tensor (",
           prev ? "between '" + prev->name + "' and '" + e->name + "'" : "before '" + e->name + "'",
           "): the header does not describe this file");
    covered = e->end;
    prev = e;
  }
  if (covered != data_size)
    fail(what, ": the data section is ", data_size, " bytes but its tensors end at byte ", covered, ": ",
         data_size - covered,
         " bytes belong to no tensor (data inserted or appended, or the header does not "
         "describe this file)");
  for (const Entry& e : entries) {
    if (e.dtype->dtype == DType::Undefined)
      fail(what, ", tensor '", e.name, "': dtype ", e.dtype->name, " is not one reforge reads (it reads ",
           dtype_list(true), ")");
    const unsigned char* p = bytes + data_begin + e.begin;
    Tensor t;
    if (reinterpret_cast<uintptr_t>(p) % dtype_size(e.dtype->dtype) == 0)
      t = Tensor::wrap(e.dtype->dtype, e.shape, owner, p);
    else
      t = Tensor::copy_of(e.dtype->dtype, e.shape, p);  // misaligned data: copy rather than read unaligned
    c.tensors_[e.name] = std::move(t);
    c.files_[e.name] = what;
  }
  return c;
}

void Checkpoint::merge(Checkpoint&& o) {
  for (auto& [name, t] : o.tensors_) {
    if (tensors_.count(name))
      fail("checkpoint tensor '", name, "' is in both '", files_[name], "' and '", o.files_[name], "'");
    files_[name] = o.files_[name];
    tensors_[name] = std::move(t);
  }
  for (auto& [k, v] : o.metadata_) metadata_.emplace(k, v);
}

ShardIndex parse_shard_index(const void* data, size_t size, const std::string& what) {
  const char* d = static_cast<const char*>(data);
  std::string duplicate;
  json j = parse_json_unique_keys(d, d + size, duplicate);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail(what, " is not JSON with a 'weight_map' object");
  if (!duplicate.empty()) fail(what, " names ", duplicate, " twice");
  const json& map = j["weight_map"];
  if (map.empty()) fail(what, ": 'weight_map' names no tensors");
  ShardIndex index;
  for (const auto& [name, f] : map.items()) {
    if (!f.is_string()) fail(what, ": file of '", name, "' is not a string");
    std::string file = f.get<std::string>();
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos)
      fail(what, ": file '", file, "' of '", name, "' is not a plain file name");
    index.weight_map[name] = file;
    index.files.push_back(file);
  }
  std::sort(index.files.begin(), index.files.end());
  index.files.erase(std::unique(index.files.begin(), index.files.end()), index.files.end());
  return index;
}

Checkpoint Checkpoint::open(const std::vector<std::string>& paths) {
  std::vector<CheckpointPart> parts;
  for (const auto& p : paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      parts.push_back({p, false});
      continue;
    }
    const std::string index_path = (fs::path(p) / "model.safetensors.index.json").string();
    if (!fs::exists(index_path, ec))
      fail("checkpoint folder '", p, "' holds no model.safetensors.index.json (give its .safetensors files instead)");
    parts.push_back({index_path, true});
  }
  return open_parts(parts);
}

Checkpoint Checkpoint::open_parts(const std::vector<CheckpointPart>& parts) {
  REFORGE_CHECK(!parts.empty(), "no checkpoint files given");
  Checkpoint all;
  std::vector<std::string> files;
  // Maps and parses one file; with an index, checks that the file holds exactly the tensors the
  // index puts in it (a tensor placed elsewhere or not named means the folder and its index
  // disagree: a stale or foreign shard).
  auto add = [&](const std::string& path, const ShardIndex* index, const std::string& file, const std::string& what) {
    auto m = MappedFile::open(path, "checkpoint");
    Checkpoint one = parse(m, m->data(), m->size(), "checkpoint '" + path + "'");
    for (auto& [name, f] : one.files_) {
      f = path;
      if (!index) continue;
      auto it = index->weight_map.find(name);
      if (it == index->weight_map.end()) fail(what, " does not name tensor '", name, "', which '", path, "' holds");
      if (it->second != file) fail(what, " puts tensor '", name, "' in '", it->second, "', but '", path, "' holds it");
    }
    all.merge(std::move(one));
    all.mappings_.push_back(m);
    files.push_back(path);
  };
  for (const auto& part : parts) {
    if (!part.index) {
      add(part.path, nullptr, "", "");
      continue;
    }
    const fs::path dir = fs::path(part.path).parent_path();
    const std::string what = "checkpoint index '" + part.path + "'";
    const std::string text = read_regular_file(part.path, kMaxShardIndexBytes, "checkpoint index");
    const ShardIndex index = parse_shard_index(text.data(), text.size(), what);
    for (const auto& file : index.files) {
      try {
        add((dir / file).string(), &index, file, what);
      } catch (Error& e) {
        throw e.with_context("in shard '" + file + "' named by " + what);
      }
    }
    for (const auto& [name, file] : index.weight_map)
      if (all.file_of(name) != (dir / file).string())
        fail(what, " puts tensor '", name, "' in '", file, "', which does not hold it");
  }
  all.description_ =
      "checkpoint '" + files[0] + "'" + (files.size() > 1 ? str_cat(" (+", files.size() - 1, " more files)") : "");
  return all;
}

void Checkpoint::release_pages() const {
  for (const auto& m : mappings_) m->release_pages();
}

void Checkpoint::release_pages_of(const Tensor& t) const {
  if (!t.defined() || !t.nbytes()) return;
  for (const auto& m : mappings_)
    if (m->release_pages(t.raw(), t.nbytes())) return;
}

Checkpoint Checkpoint::from_tensors(std::map<std::string, Tensor> tensors, const std::string& description) {
  Checkpoint c;
  for (const auto& [name, t] : tensors) REFORGE_CHECK(t.defined(), description, ": tensor '", name, "' has no value");
  c.tensors_ = std::move(tensors);
  c.description_ = description;
  return c;
}

Checkpoint Checkpoint::with_key_prefix(const std::string& strip, const std::string& add) const {
  if (strip.empty() && add.empty()) return *this;
  Checkpoint c;
  c.metadata_ = metadata_;
  c.mappings_ = mappings_;
  std::map<std::string, std::string> origin;  // new name -> old name
  size_t stripped = 0;
  for (const auto& [name, t] : tensors_) {
    std::string renamed = name;
    if (!strip.empty() && renamed.rfind(strip, 0) == 0) {
      renamed = renamed.substr(strip.size());
      ++stripped;
    }
    renamed = add + renamed;
    if (renamed.empty()) fail(description_, ": stripping '", strip, "' from tensor '", name, "' leaves no name");
    auto [it, fresh] = origin.emplace(renamed, name);
    if (!fresh)
      fail(description_, ": tensors '", it->second, "' and '", name, "' both become '", renamed, "' with ",
           strip.empty() ? "" : "--strip-prefix '" + strip + "'", !strip.empty() && !add.empty() ? " and " : "",
           add.empty() ? "" : "--add-prefix '" + add + "'");
    c.tensors_[renamed] = t;
    if (auto f = files_.find(name); f != files_.end()) c.files_[renamed] = f->second;
  }
  if (!strip.empty() && stripped == 0) {
    std::vector<std::string> some;
    for (const auto& [name, _] : tensors_) {
      if (some.size() == 3) break;
      some.push_back(name);
    }
    fail(description_, ": no tensor name begins with '", strip, "' (--strip-prefix); its names begin like ",
         quoted_list(some));
  }
  c.description_ = description_ + " (names with " + (strip.empty() ? "" : "'" + strip + "' stripped") +
                   (!strip.empty() && !add.empty() ? ", " : "") + (add.empty() ? "" : "'" + add + "' added") + ")";
  return c;
}

Checkpoint Checkpoint::with_replaced(const std::map<std::string, Tensor>& replaced, const std::string& what) const {
  Checkpoint c = *this;
  for (const auto& [name, t] : replaced) {
    auto it = c.tensors_.find(name);
    REFORGE_ASSERT(it != c.tensors_.end() && t.defined());
    it->second = t;
    c.files_.erase(name);  // in memory now, not in the file
  }
  c.description_ = description_ + " with " + what + " merged";
  return c;
}

const Tensor* Checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::string Checkpoint::file_of(const std::string& name) const {
  auto it = files_.find(name);
  return it == files_.end() ? "" : it->second;
}

size_t Checkpoint::total_bytes() const {
  size_t n = 0;
  for (const auto& [_, t] : tensors_) n += t.nbytes();
  return n;
}

namespace {

// The 8-byte length, the JSON header padded to 8 bytes; the tensors follow in map order.
std::string safetensors_prefix(const std::map<std::string, Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const auto& [name, t] : tensors) {
    REFORGE_CHECK(name != "__metadata__", "safetensors: a tensor cannot be named __metadata__");
    h[name] = {
        {"dtype", safetensors_dtype_name(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {off, off + t.nbytes()}}};
    off += t.nbytes();
  }
  std::string hs = h.dump();
  while ((8 + hs.size()) % 8) hs.push_back(' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((uint64_t(hs.size()) >> (8 * i)) & 0xff);
  out += hs;
  return out;
}

}  // namespace

std::string serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::string out = safetensors_prefix(tensors, metadata);
  size_t total = out.size();
  for (const auto& [_, t] : tensors) total += t.nbytes();
  out.reserve(total);
  for (const auto& [_, t] : tensors) out.append(static_cast<const char*>(t.raw()), t.nbytes());
  return out;
}

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // The header fails on bad names before a file exists; the tensors stream from where they lie.
  std::string prefix = safetensors_prefix(tensors, metadata);
  AtomicFile out(path, "checkpoint");
  out.write(prefix.data(), prefix.size());
  for (const auto& [_, t] : tensors) out.write(t.raw(), t.nbytes());
  out.commit();
}

}  // namespace reforge::refit
