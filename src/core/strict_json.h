// JSON from files that name things by key (a safetensors header, a checkpoint index, a bind
// file): a key repeated inside one object is refused rather than resolved. nlohmann::json keeps
// the last of them silently, so a file naming one tensor twice would be read as naming it once.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace reforge {

// Parses [begin, end) as JSON. Returns a discarded value (is_discarded()) for text that is not
// JSON. Otherwise `duplicate` is "" when no object repeats a key, else the first repeat:
// "'k'" at the top level, "'k' in 'owner'" inside the value of key 'owner'.
nlohmann::json parse_json_unique_keys(const char* begin, const char* end, std::string& duplicate);

}  // namespace reforge
