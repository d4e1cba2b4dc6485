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

namespace reforge::refit {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::pair<const char*, DType> kDtypes[] = {
    {"F32", DType::Float32}, {"F16", DType::Float16}, {"BF16", DType::BFloat16}, {"F64", DType::Float64},
    {"I64", DType::Int64},   {"I32", DType::Int32},   {"I16", DType::Int16},     {"I8", DType::Int8},
    {"U8", DType::UInt8},    {"BOOL", DType::Bool}};

DType dtype_from_name(const std::string& s) {
  for (const auto& [n, t] : kDtypes)
    if (s == n) return t;
  return DType::Undefined;
}

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct Range {
  uint64_t begin, end;
  std::string name;
};

}  // namespace

std::string safetensors_dtype_name(DType t) {
  for (const auto& [n, d] : kDtypes)
    if (d == t) return n;
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
  uint64_t n = read_le64(bytes);
  if (n > size - 8)
    fail(what, ": header length ", n, " runs past the end of the file (", size,
         " bytes): truncated or not a safetensors file");
  const char* hb = reinterpret_cast<const char*>(bytes + 8);
  json header = json::parse(hb, hb + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) fail(what, ": header is not well-formed JSON");
  if (!header.is_object()) fail(what, ": header is not a JSON object");
  const uint64_t data_begin = 8 + n;
  const uint64_t data_size = size - data_begin;
  Checkpoint c;
  c.description_ = what;
  std::vector<Range> ranges;
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
    DType dtype = dtype_from_name(dt->get<std::string>());
    if (dtype == DType::Undefined)
      fail(at, ": unsupported dtype '", dt->get<std::string>(),
           "' (supported: F32 F16 BF16 F64 I64 I32 I16 I8 U8 BOOL)");
    Shape shape;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned())
        fail(at, ": shape ", sh->dump(), " has a dimension that is not a non-negative integer");
      uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t(1) << 62)) fail(at, ": shape ", sh->dump(), " is too large");
      shape.push_back(static_cast<int64_t>(v));
    }
    int64_t numel = 0;
    try {
      numel = shape_numel(shape);
    } catch (Error& err) {
      throw err.with_context("in " + at);
    }
    uint64_t b = (*off)[0].get<uint64_t>(), en = (*off)[1].get<uint64_t>();
    if (b > en) fail(at, ": data_offsets [", b, ",", en, "] are reversed");
    if (en > data_size)
      fail(at, ": data_offsets [", b, ",", en, "] lie outside the data section (", data_size,
           " bytes): file truncated?");
    uint64_t expect = static_cast<uint64_t>(numel) * dtype_size(dtype);
    if (en - b != expect)
      fail(at, ": ", en - b, " bytes of data, but ", dt->get<std::string>(), shape_str(shape), " needs ", expect);
    ranges.push_back({b, en, name});
    const unsigned char* p = bytes + data_begin + b;
    Tensor t;
    if (reinterpret_cast<uintptr_t>(p) % dtype_size(dtype) == 0)
      t = Tensor::wrap(dtype, shape, owner, p);
    else
      t = Tensor::copy_of(dtype, shape, p);  // misaligned data: copy rather than read unaligned
    c.tensors_[name] = std::move(t);
    c.files_[name] = what;
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].begin < ranges[i - 1].end && ranges[i].begin != ranges[i].end &&
        ranges[i - 1].begin != ranges[i - 1].end)
      fail(what, ": tensors '", ranges[i - 1].name, "' [", ranges[i - 1].begin, ",", ranges[i - 1].end, ") and '",
           ranges[i].name, "' [", ranges[i].begin, ",", ranges[i].end, ") overlap");
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

std::vector<std::string> parse_shard_index(const void* data, size_t size, const std::string& what) {
  const char* d = static_cast<const char*>(data);
  json j = json::parse(d, d + size, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail(what, " is not JSON with a 'weight_map' object");
  std::vector<std::string> files;
  for (const auto& [name, f] : j["weight_map"].items()) {
    if (!f.is_string()) fail(what, ": file of '", name, "' is not a string");
    std::string file = f.get<std::string>();
    if (file.find('/') != std::string::npos || file == "..")
      fail(what, ": file '", file, "' of '", name, "' is not a plain file name");
    files.push_back(file);
  }
  return files;
}

Checkpoint Checkpoint::open(const std::vector<std::string>& paths) {
  REFORGE_CHECK(!paths.empty(), "no checkpoint files given");
  std::vector<std::string> files;
  for (const auto& p : paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      files.push_back(p);
      continue;
    }
    fs::path index = fs::path(p) / "model.safetensors.index.json";
    auto m = MappedFile::open(index.string());
    std::vector<std::string> shard;
    for (const auto& file : parse_shard_index(m->data(), m->size(), "checkpoint index '" + index.string() + "'"))
      shard.push_back((fs::path(p) / file).string());
    std::sort(shard.begin(), shard.end());
    shard.erase(std::unique(shard.begin(), shard.end()), shard.end());
    files.insert(files.end(), shard.begin(), shard.end());
  }
  Checkpoint all;
  for (const auto& f : files) {
    auto m = MappedFile::open(f);
    Checkpoint one = parse(m, m->data(), m->size(), "checkpoint '" + f + "'");
    for (auto& [n, file] : one.files_) file = f;
    all.merge(std::move(one));
    all.mappings_.push_back(m);
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
