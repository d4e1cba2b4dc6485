// The --bind-file reader (build/binding.h). Its own file so that the bind-file fuzz target links
// it without the builder.
#include <nlohmann/json.hpp>
#include <string>

#include "builder/binding.h"
#include "core/error.h"
#include "core/regular_file.h"
#include "core/strict_json.h"

namespace reforge::build {

namespace {
// A bind file names initializers; even a model of 100,000 of them needs a few MiB.
constexpr size_t kMaxBindFileBytes = size_t(64) << 20;
}  // namespace

BindFile read_bind_file(const std::string& path) {
  // A regular file of bounded size: /dev/zero or a FIFO is refused before a byte is read.
  return parse_bind_file(read_regular_file(path, kMaxBindFileBytes, "bind file"), "bind file '" + path + "'");
}

BindFile parse_bind_file(const std::string& text, const std::string& what) {
  std::string duplicate;
  nlohmann::json j = parse_json_unique_keys(text.data(), text.data() + text.size(), duplicate);
  const char* form =
      " is not a JSON object {\"ONNX_NAME\": \"CHECKPOINT_NAME\", ..., \"literals\": [\"ONNX_NAME\", ...]}";
  if (j.is_discarded() || !j.is_object()) fail(what, form);
  // nlohmann::json would keep the last of two binds of one name, silently.
  if (!duplicate.empty()) fail(what, " names ", duplicate, " twice");
  BindFile out;
  for (const auto& [k, v] : j.items()) {
    if (k == "literals") {
      if (!v.is_array()) fail(what, ": \"literals\" is not a list of initializer names");
      for (const auto& n : v) {
        if (!n.is_string()) fail(what, ": \"literals\" holds a non-string ", n.dump());
        out.literals.push_back(n.get<std::string>());
      }
      continue;
    }
    if (!v.is_string()) fail(what, ": value of '", k, "' is not a string");
    out.binds[k] = v.get<std::string>();
  }
  return out;
}

}  // namespace reforge::build
