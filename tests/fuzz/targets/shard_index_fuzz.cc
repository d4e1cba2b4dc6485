// Shard index reader: refit::parse_shard_index on a model.safetensors.index.json's bytes. An
// index the reader accepts must keep the rules transformers reads it by, checked here on the raw
// text apart from the reader's code: a JSON object whose "weight_map" is a non-empty object
// naming each tensor once, each mapped to a plain file name, and the file list exactly the
// distinct names the map uses.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "fuzz_target.h"
#include "json_keys.h"
#include "refit/safetensors.h"

REFORGE_FUZZ_TARGET(shard_index) {
  reforge::refit::ShardIndex index;
  try {
    index = reforge::refit::parse_shard_index(data, size, "fuzz index");
  } catch (const reforge::Error&) {
    return 0;
  }
  using reforge::fuzz::require;
  const char* text = reinterpret_cast<const char*>(data);
  auto keys = reforge::fuzz::json_keys(text, text + size, {"weight_map"});
  require(keys.parsed, "the index is JSON");
  require(!keys.any_repeat, "no key repeated in any object");
  require(!keys.at_path.empty(), "weight_map names at least one tensor");
  require(keys.at_path.size() == index.weight_map.size(), "every tensor of weight_map read, each once");
  auto j = nlohmann::json::parse(text, text + size);
  std::set<std::string> files;
  for (const auto& [name, f] : j.at("weight_map").items()) {
    require(f.is_string(), "file names are strings");
    const std::string file = f.get<std::string>();
    require(!file.empty() && file != "." && file != ".." && file.find('/') == std::string::npos &&
                file.find('\0') == std::string::npos,
            "file names are plain file names");
    require(index.weight_map.count(name) && index.weight_map.at(name) == file, "each tensor's file read as written");
    files.insert(file);
  }
  require(std::vector<std::string>(files.begin(), files.end()) == index.files, "the files are the map's, once each");
  return 0;
}
