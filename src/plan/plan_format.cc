#include "plan/plan_format.h"

namespace reforge::plan::format {

bool valid_utf8(const std::string& s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else
      return false;
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong encodings, surrogates and code points past U+10FFFF are invalid.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return false;
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (char ch : bytes) {
    unsigned char c = static_cast<unsigned char>(ch);
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

std::optional<std::string> from_hex(const std::string& hex) {
  if (hex.size() % 2) return std::nullopt;
  auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

namespace {
struct AttrName {
  ir::AttrType type;
  const char* name;
};
constexpr AttrName kAttrNames[] = {
    {ir::AttrType::Undefined, "undefined"}, {ir::AttrType::Float, "float"},   {ir::AttrType::Int, "int"},
    {ir::AttrType::String, "string"},       {ir::AttrType::Tensor, "tensor"}, {ir::AttrType::Graph, "graph"},
    {ir::AttrType::Floats, "floats"},       {ir::AttrType::Ints, "ints"},     {ir::AttrType::Strings, "strings"},
    {ir::AttrType::Tensors, "tensors"},     {ir::AttrType::Graphs, "graphs"},
};
}  // namespace

const char* attr_type_name(ir::AttrType t) {
  for (const auto& a : kAttrNames)
    if (a.type == t) return a.name;
  return "unknown";
}

std::optional<ir::AttrType> attr_type_from_name(const std::string& s) {
  for (const auto& a : kAttrNames)
    if (s == a.name) return a.type;
  return std::nullopt;
}

const char* operand_kind_name(Operand::Kind k) {
  switch (k) {
    case Operand::Kind::Source:
      return "source";
    case Operand::Kind::Literal:
      return "literal";
    case Operand::Kind::Step:
      return "step";
  }
  return "unknown";
}

std::optional<Operand::Kind> operand_kind_from_name(const std::string& s) {
  for (auto k : {Operand::Kind::Source, Operand::Kind::Literal, Operand::Kind::Step})
    if (s == operand_kind_name(k)) return k;
  return std::nullopt;
}

std::optional<BuildMode> build_mode_from_name(const std::string& s) {
  for (auto m : {BuildMode::Baked, BuildMode::Refit, BuildMode::RefitIdentical, BuildMode::RefitIndividual})
    if (s == build_mode_name(m)) return m;
  return std::nullopt;
}

std::optional<Precision> precision_from_name(const std::string& s) {
  for (auto p : {Precision::Fp32, Precision::Bf16, Precision::Fp16, Precision::Int8, Precision::Int4})
    if (s == precision_name(p)) return p;
  return std::nullopt;
}

std::optional<WeightPacking> weight_packing_from_name(const std::string& s) {
  for (auto w : {WeightPacking::Auto, WeightPacking::Panels, WeightPacking::Plain})
    if (s == weight_packing_name(w)) return w;
  return std::nullopt;
}

std::optional<WeightKind> weight_kind_from_name(const std::string& s) {
  for (auto k : {WeightKind::Literal, WeightKind::Derived, WeightKind::Baked})
    if (s == weight_kind_name(k)) return k;
  return std::nullopt;
}

}  // namespace reforge::plan::format
