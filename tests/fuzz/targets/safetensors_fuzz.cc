// Safetensors reader: refit::Checkpoint::parse on the bytes; every parsed tensor's bytes are read.
// A file the reader accepts must keep the format's rules (those of the reference reader,
// huggingface/safetensors), checked here on the raw bytes, apart from the reader's code: header
// length at most 100,000,000 and inside the file, header beginning with '{', no key repeated,
// each tensor's byte count = dtype bits x elements / 8, the tensors' ranges sorted by offset
// contiguous from 0 to the end of the file, and each tensor's bytes those at its offsets.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_target.h"
#include "json_keys.h"
#include "refit/safetensors.h"

namespace {

using reforge::fuzz::require;

// The format's dtype names, with their width in bits and the reforge dtype each reads as (""
// where reforge refuses it).
const std::map<std::string, std::pair<unsigned, std::string>> kBits = {
    {"BOOL", {8, "bool"}},   {"F4", {4, ""}},          {"F6_E2M3", {6, ""}},       {"F6_E3M2", {6, ""}},
    {"U8", {8, "uint8"}},    {"I8", {8, "int8"}},      {"F8_E5M2", {8, ""}},       {"F8_E4M3", {8, ""}},
    {"F8_E8M0", {8, ""}},    {"F8_E4M3FNUZ", {8, ""}}, {"F8_E5M2FNUZ", {8, ""}},   {"I16", {16, "int16"}},
    {"U16", {16, "uint16"}}, {"F16", {16, "float16"}}, {"BF16", {16, "bfloat16"}}, {"I32", {32, "int32"}},
    {"U32", {32, "uint32"}}, {"F32", {32, "float32"}}, {"C64", {64, ""}},          {"F64", {64, "float64"}},
    {"I64", {64, "int64"}},  {"U64", {64, "uint64"}}};

void check_accepted(const uint8_t* data, size_t size, const reforge::refit::Checkpoint& c) {
  require(size >= 8, "at least the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  require(n <= 100000000, "header length at most 100,000,000 (MAX_HEADER_SIZE)");
  require(n <= size - 8, "header inside the file");
  const char* h = reinterpret_cast<const char*>(data + 8);
  require(n > 0 && h[0] == '{', "header begins with '{'");
  auto keys = reforge::fuzz::json_keys(h, h + n, {});
  require(keys.parsed, "header is JSON");
  require(!keys.any_repeat, "no key repeated in any object of the header");
  auto header = nlohmann::json::parse(h, h + n);
  const uint64_t data_size = size - 8 - n;
  size_t tensors = 0;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      for (const auto& [k, v] : e.items()) {
        require(v.is_string(), "__metadata__ values are strings");
        require(c.metadata().count(k) && c.metadata().at(k) == v.get<std::string>(), "metadata read as written");
      }
      continue;
    }
    ++tensors;
    const reforge::Tensor* t = c.find(name);
    require(t != nullptr, "every tensor of the header is read");
    auto bits = kBits.find(e.at("dtype").get<std::string>());
    require(bits != kBits.end() && !bits->second.second.empty(), "a dtype the format knows and reforge reads");
    require(reforge::dtype_name(t->dtype()) == bits->second.second, "the tensor's dtype is the header's");
    uint64_t numel = 1;
    std::vector<int64_t> shape;
    for (const auto& d : e.at("shape")) {
      require(d.is_number_unsigned(), "dimensions are non-negative integers");
      const uint64_t v = d.get<uint64_t>();
      require(v == 0 || numel <= UINT64_MAX / v, "element count without overflow");
      numel *= v;
      shape.push_back(static_cast<int64_t>(v));
    }
    require(shape == t->shape(), "the tensor's shape is the header's");
    require(numel <= UINT64_MAX / bits->second.first && numel * bits->second.first % 8 == 0, "a whole number of bytes");
    require(e.at("data_offsets").size() == 2 && e.at("data_offsets")[0].is_number_unsigned() &&
                e.at("data_offsets")[1].is_number_unsigned(),
            "two non-negative offsets");
    const uint64_t b = e.at("data_offsets").at(0).get<uint64_t>(), en = e.at("data_offsets").at(1).get<uint64_t>();
    require(b <= en && en <= data_size, "offsets inside the data section");
    require(en - b == numel * bits->second.first / 8, "byte count = dtype bits x elements / 8");
    require(t->nbytes() == en - b && (en == b || std::memcmp(t->raw(), data + 8 + n + b, en - b) == 0),
            "the tensor's bytes are those at its offsets");
    ranges.emplace_back(b, en);
  }
  require(tensors == c.tensors().size(), "no tensor read that the header does not name");
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [b, en] : ranges) {
    require(b == covered, "each tensor begins where the previous ends, the first at 0");
    covered = en;
  }
  require(covered == data_size, "the last tensor ends at the end of the file");
}

}  // namespace

REFORGE_FUZZ_TARGET(safetensors) {
  auto owner = std::make_shared<std::string>(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<reforge::refit::Checkpoint> c;
  try {
    c = std::make_unique<reforge::refit::Checkpoint>(
        reforge::refit::Checkpoint::parse(owner, owner->data(), owner->size(), "fuzz input"));
  } catch (const reforge::Error&) {
    return 0;
  }
  for (const auto& [name, t] : c->tensors()) reforge::fuzz::touch(t.raw(), t.nbytes());
  check_accepted(data, size, *c);
  return 0;
}
