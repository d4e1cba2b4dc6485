// For the fuzz targets' own checks of what a reader accepted: the keys of JSON text as written,
// repeats included, read with nlohmann's SAX interface (the readers parse to a DOM, which keeps
// only the last of a repeated key).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace reforge::fuzz {

struct JsonKeys {
  // Every key of the object at `path` (keys from the top object down, e.g. {} for the top
  // object, {"weight_map"} for the one under it), in order, with repeats.
  std::vector<std::string> at_path;
  // True when some object anywhere in the text repeats a key.
  bool any_repeat = false;
  bool parsed = false;
};

inline JsonKeys json_keys(const char* begin, const char* end, const std::vector<std::string>& path) {
  struct Sax : nlohmann::json_sax<nlohmann::json> {
    const std::vector<std::string>& path;
    JsonKeys& out;
    struct Frame {
      bool object;
      std::vector<std::string> keys;
      std::string last;
    };
    std::vector<Frame> stack;
    Sax(const std::vector<std::string>& p, JsonKeys& o) : path(p), out(o) {}
    bool value() { return true; }
    bool null() override { return value(); }
    bool boolean(bool) override { return value(); }
    bool number_integer(number_integer_t) override { return value(); }
    bool number_unsigned(number_unsigned_t) override { return value(); }
    bool number_float(number_float_t, const string_t&) override { return value(); }
    bool string(string_t&) override { return value(); }
    bool binary(binary_t&) override { return value(); }
    bool start_object(std::size_t) override {
      stack.push_back({true, {}, ""});
      return true;
    }
    bool key(string_t& k) override {
      Frame& f = stack.back();
      for (const auto& seen : f.keys)
        if (seen == k) out.any_repeat = true;
      f.keys.push_back(k);
      f.last = k;
      return true;
    }
    bool end_object() override {
      // The path of this object: the last keys of the objects enclosing it, if all are objects.
      std::vector<std::string> p;
      bool plain = true;
      for (size_t i = 0; i + 1 < stack.size(); ++i) {
        if (!stack[i].object) plain = false;
        p.push_back(stack[i].last);
      }
      if (plain && p == path) out.at_path = stack.back().keys;
      stack.pop_back();
      return true;
    }
    bool start_array(std::size_t) override {
      stack.push_back({false, {}, ""});
      return true;
    }
    bool end_array() override {
      stack.pop_back();
      return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
  };
  JsonKeys out;
  Sax sax(path, out);
  out.parsed = nlohmann::json::sax_parse(begin, end, &sax, nlohmann::json::input_format_t::json, /*strict=*/true);
  return out;
}

}  // namespace reforge::fuzz
