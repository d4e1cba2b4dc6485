#include "core/npy.h"

#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "core/mapped_file.h"

namespace reforge {

namespace {

struct DescrEntry {
  const char* descr;
  DType dtype;
};
const DescrEntry kDescrs[] = {
    {"<f4", DType::Float32},  {"<f8", DType::Float64}, {"<f2", DType::Float16}, {"<i1", DType::Int8},
    {"|i1", DType::Int8},     {"<i2", DType::Int16},   {"<i4", DType::Int32},   {"<i8", DType::Int64},
    {"<u1", DType::UInt8},    {"|u1", DType::UInt8},   {"<u2", DType::UInt16},  {"<u4", DType::UInt32},
    {"<u8", DType::UInt64},   {"|b1", DType::Bool},    {"<b1", DType::Bool},    {"<V2", DType::BFloat16},
    {"|V2", DType::BFloat16},
};

std::string descr_of(DType t) {
  switch (t) {
    case DType::Float32:
      return "<f4";
    case DType::Float64:
      return "<f8";
    case DType::Float16:
      return "<f2";
    case DType::Int8:
      return "|i1";
    case DType::Int16:
      return "<i2";
    case DType::Int32:
      return "<i4";
    case DType::Int64:
      return "<i8";
    case DType::UInt8:
      return "|u1";
    case DType::UInt16:
      return "<u2";
    case DType::UInt32:
      return "<u4";
    case DType::UInt64:
      return "<u8";
    case DType::Bool:
      return "|b1";
    case DType::BFloat16:
      return "<V2";  // numpy has no bfloat16; ml_dtypes writes void2
    default:
      fail("cannot write ", dtype_name(t), " to .npy");
  }
}

// The header of a .npy file, as numpy's format.py writes it:
//   "\x93NUMPY" major minor HEADER_LEN(u16 for 1.0, u32 for 2.0/3.0) HEADER
// where HEADER is a Python dict literal with exactly the keys 'descr', 'fortran_order' and
// 'shape', then spaces, then one '\n' as its last byte, so that the data starts at a multiple of
// 64 (numpy's writers; 16 for files from numpy before 1.14 and for cnpy, which numpy still
// reads). The parser walks the bytes of the file itself rather than the declared HEADER_LEN
// bytes, so a length field that disagrees with the header is reported as such (numpy trusts the
// field and reads the data from the wrong offset). Everything outside this grammar is refused:
// a key given twice (Python keeps the last, so a reader that takes the first disagrees with
// numpy), an unknown or missing key, anything but spaces between the dict and the newline.
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
  size_t end = 0;  // offset just past the header's final '\n'
};

class HeaderParser {
 public:
  HeaderParser(const unsigned char* p, size_t size, size_t pos, int major, const std::string& what)
      : p_(p), size_(size), pos_(pos), start_(pos), major_(major), what_(what) {}

  NpyHeader parse() {
    NpyHeader h;
    bool seen[3] = {false, false, false};
    expect('{', "the header to open with '{'");
    skip_blanks();
    while (peek() != '}') {
      std::string key = string_literal("a key");
      int k = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
      if (k < 0) error("unknown key '" + key + "' (a .npy header has 'descr', 'fortran_order' and 'shape')");
      if (seen[k]) error("key '" + key + "' appears twice");
      seen[k] = true;
      skip_blanks();
      expect(':', "':' after '" + key + "'");
      skip_blanks();
      if (k == 0) {
        if (peek() != '\'' && peek() != '"') error("'descr' is not a string (structured dtypes are not supported)");
        h.descr = string_literal("the value of 'descr'");
      } else if (k == 1) {
        h.fortran_order = boolean();
      } else {
        h.shape = tuple();
      }
      skip_blanks();
      if (peek() == ',') {
        ++pos_;
        skip_blanks();
      } else if (peek() != '}') {
        error("expected ',' or '}' after the value of '" + key + "', found " + found());
      }
    }
    ++pos_;  // '}'
    static const char* kNames[3] = {"descr", "fortran_order", "shape"};
    for (int k = 0; k < 3; ++k)
      if (!seen[k]) fail(what_, ": npy header has no '", kNames[k], "' key");
    while (pos_ < size_ && p_[pos_] == ' ') ++pos_;
    if (pos_ >= size_) fail(what_, ": npy header does not end with a newline before the end of the file");
    if (p_[pos_] != '\n') error("expected only spaces and a newline after the dict, found " + describe(p_[pos_]));
    h.end = pos_ + 1;
    return h;
  }

 private:
  [[noreturn]] void error(const std::string& msg) const {
    fail(what_, ": malformed npy header at header byte ", pos_ - start_, ": ", msg);
  }
  static std::string describe(unsigned char c) {
    if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
    char buf[8];
    std::snprintf(buf, sizeof buf, "0x%02x", c);
    return buf;
  }
  int peek() const { return pos_ < size_ ? p_[pos_] : -1; }
  std::string found() const { return pos_ < size_ ? describe(p_[pos_]) : "the end of the file"; }
  void expect(char c, const std::string& what) {
    if (peek() != c) error("expected " + what + ", found " + found());
    ++pos_;
  }
  // Blanks Python allows between tokens on one line. A newline inside the dict is refused: the
  // only newline of a header is its last byte.
  void skip_blanks() {
    while (pos_ < size_ && (p_[pos_] == ' ' || p_[pos_] == '\t')) ++pos_;
  }
  // A plain quoted string: the names and dtype codes of a header need no escapes.
  std::string string_literal(const std::string& what) {
    int q = peek();
    if (q != '\'' && q != '"') error("expected " + what + " as a quoted string, found " + found());
    size_t b = ++pos_;
    while (pos_ < size_ && p_[pos_] != q) {
      if (p_[pos_] == '\\' || p_[pos_] == '\n' || p_[pos_] < 0x20 || p_[pos_] >= 0x7f)
        error("unsupported character " + describe(p_[pos_]) + " in " + what);
      ++pos_;
    }
    if (pos_ >= size_) error("unterminated string in " + what);
    std::string s(reinterpret_cast<const char*>(p_ + b), pos_ - b);
    ++pos_;
    return s;
  }
  bool word(const char* w) {
    size_t n = std::strlen(w);
    if (size_ - pos_ < n || std::memcmp(p_ + pos_, w, n) != 0) return false;
    if (pos_ + n < size_ && (std::isalnum(p_[pos_ + n]) || p_[pos_ + n] == '_')) return false;
    pos_ += n;
    return true;
  }
  bool boolean() {
    if (word("False")) return false;
    if (word("True")) return true;
    error("'fortran_order' is not True or False");
  }
  // "()", "(3,)", "(2, 3)" or "(2, 3,)": non-negative decimal integers; the 'L' suffix of
  // Python 2 files only in format 1.0 and 2.0 headers, as numpy's reader allows.
  Shape tuple() {
    expect('(', "'shape' to be a tuple");
    Shape s;
    bool comma = false;
    skip_blanks();
    while (peek() != ')') {
      if (peek() < '0' || peek() > '9') error("expected a dimension in 'shape', found " + found());
      size_t b = pos_;
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (v > (int64_t{1} << 58)) error("dimension in 'shape' is too large");
        v = v * 10 + (p_[pos_++] - '0');
      }
      if (pos_ - b > 1 && p_[b] == '0') error("dimension in 'shape' has a leading zero");
      if (major_ <= 2 && (peek() == 'L' || peek() == 'l')) ++pos_;
      s.push_back(v);
      skip_blanks();
      comma = peek() == ',';
      if (comma) {
        ++pos_;
        skip_blanks();
      } else if (peek() != ')') {
        error("expected ',' or ')' in 'shape', found " + found());
      }
    }
    if (s.size() == 1 && !comma) {
      const std::string d = std::to_string(s[0]);
      error("'shape' (" + d + ") is not a tuple; a 1-d shape is written (" + d + ",)");
    }
    ++pos_;
    return s;
  }

  const unsigned char* p_;
  size_t size_, pos_, start_;
  int major_;
  const std::string& what_;
};

}  // namespace

Tensor parse_npy(const void* data, size_t size, const std::string& what) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  if (size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) fail(what, ": not a .npy file (bad magic)");
  int major = p[6], minor = p[7];
  if ((major < 1 || major > 3) || minor != 0)
    fail(what, ": unsupported npy format version ", major, ".", minor, " (1.0, 2.0 and 3.0 are)");
  size_t header_len, header_start;
  if (major == 1) {
    header_len = p[8] | (p[9] << 8);
    header_start = 10;
  } else {
    if (size < 12) fail(what, ": truncated npy header");
    header_len = static_cast<size_t>(p[8]) | (static_cast<size_t>(p[9]) << 8) | (static_cast<size_t>(p[10]) << 16) |
                 (static_cast<size_t>(p[11]) << 24);
    header_start = 12;
  }
  NpyHeader h = HeaderParser(p, size, header_start, major, what).parse();
  size_t actual = h.end - header_start;
  if (actual != header_len)
    fail(what, ": npy header declares ", header_len, " bytes but its dict and padding end at byte ", actual,
         " (the data would be read ", header_len < actual ? actual - header_len : header_len - actual,
         header_len < actual ? " byte(s) early)" : " byte(s) late)");
  if (h.end % 16 != 0)
    fail(what, ": npy data starts at offset ", h.end, ", not a multiple of 16 (numpy pads the header to 64)");
  if (h.fortran_order) fail(what, ": Fortran-order arrays are not supported; save with C order");
  DType dtype = DType::Undefined;
  for (const auto& d : kDescrs)
    if (h.descr == d.descr) dtype = d.dtype;
  if (dtype == DType::Undefined) {
    if (!h.descr.empty() && h.descr[0] == '>') fail(what, ": big-endian arrays ('", h.descr, "') are not supported");
    fail(what, ": unsupported npy dtype '", h.descr, "'");
  }
  // The file bounds the element count (checked below), so the product only has to not overflow.
  uint64_t need = dtype_size(dtype);
  for (int64_t d : h.shape) {
    if (d != 0 && need > (uint64_t{1} << 62) / static_cast<uint64_t>(d))
      fail(what, ": npy shape ", shape_str(h.shape), " is too large");
    need *= static_cast<uint64_t>(d);
  }
  size_t have = size - h.end;
  // Strict where numpy is lax: np.load reads the count it needs and ignores what follows.
  if (have != need)
    fail(what, ": npy data is ", have, " bytes, ", dtype_name(dtype), shape_str(h.shape), " needs exactly ", need,
         have > need ? " (trailing bytes after the array)" : "");
  return Tensor::copy_of(dtype, h.shape, p + h.end);
}

Tensor read_npy(const std::string& path) {
  auto f = MappedFile::open(path, "npy file");
  return parse_npy(f->data(), f->size(), "'" + path + "'");
}

void write_npy(const std::string& path, const Tensor& t) {
  std::string dict = "{'descr': '" + descr_of(t.dtype()) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < t.shape().size(); ++i)
    dict += std::to_string(t.shape()[i]) + (t.shape().size() == 1 ? "," : (i + 1 < t.shape().size() ? ", " : ""));
  dict += "), }";
  size_t total = 10 + dict.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  dict.append(pad, ' ');
  dict += '\n';
  bool v2 = dict.size() > 65535;
  std::string header = std::string("\x93NUMPY", 6);
  if (!v2) {
    header += '\x01';
    header += '\x00';
    header += static_cast<char>(dict.size() & 0xff);
    header += static_cast<char>((dict.size() >> 8) & 0xff);
  } else {
    header += '\x02';
    header += '\x00';
    for (int k = 0; k < 4; ++k) header += static_cast<char>((dict.size() >> (8 * k)) & 0xff);
  }
  header += dict;
  AtomicFile out(path, "npy file");
  out.write(header.data(), header.size());
  out.write(t.raw(), t.nbytes());
  out.commit();
}

}  // namespace reforge
