#include "core/strict_json.h"

#include <set>
#include <vector>

namespace reforge {

nlohmann::json parse_json_unique_keys(const char* begin, const char* end, std::string& duplicate) {
  using json = nlohmann::json;
  duplicate.clear();
  struct Object {
    std::set<std::string> keys;
    std::string last;   // the key whose value is being parsed
    std::string owner;  // the key of the value this object is, "" at the top
  };
  std::vector<Object> open;
  // The parser's callback sees each key as it is read; it records the first repeat rather than
  // throwing, so that the parser's own state is never unwound from inside it.
  json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open.push_back({{}, "", open.empty() ? "" : open.back().last});
        break;
      case json::parse_event_t::key:
        if (!open.empty() && parsed.is_string()) {
          Object& o = open.back();
          o.last = parsed.get<std::string>();
          if (!o.keys.insert(o.last).second && duplicate.empty())
            duplicate = "'" + o.last + "'" + (o.owner.empty() ? "" : " in '" + o.owner + "'");
        }
        break;
      case json::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        break;
      default:
        break;
    }
    return true;
  };
  return json::parse(begin, end, cb, /*allow_exceptions=*/false);
}

}  // namespace reforge
