// The --bind-file reader (build/binding.h). Its own file so that the bind-file fuzz target links
// it without the builder.
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "builder/binding.h"
#include "core/error.h"

namespace reforge::build {

BindFile read_bind_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open bind file '", path, "'");
  std::string text((std::istreambuf_iterator<char>(f)), {});
  return parse_bind_file(text, "bind file '" + path + "'");
}

BindFile parse_bind_file(const std::string& text, const std::string& what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  const char* form =
      " is not a JSON object {\"ONNX_NAME\": \"CHECKPOINT_NAME\", ..., \"literals\": [\"ONNX_NAME\", ...]}";
  if (j.is_discarded() || !j.is_object()) fail(what, form);
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
