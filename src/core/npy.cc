#include "core/npy.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/mapped_file.h"

namespace reforge {

namespace {

struct DescrEntry {
  const char* descr;
  DType dtype;
};
const DescrEntry kDescrs[] = {
    {"<f4", DType::Float32}, {"<f8", DType::Float64}, {"<f2", DType::Float16}, {"<i1", DType::Int8},
    {"|i1", DType::Int8},    {"<i2", DType::Int16},   {"<i4", DType::Int32},   {"<i8", DType::Int64},
    {"<u1", DType::UInt8},   {"|u1", DType::UInt8},   {"<u2", DType::UInt16},  {"<u4", DType::UInt32},
    {"<u8", DType::UInt64},  {"|b1", DType::Bool},    {"<b1", DType::Bool},    {"<V2", DType::BFloat16},
    {"|V2", DType::BFloat16},
};

std::string descr_of(DType t) {
  switch (t) {
    case DType::Float32: return "<f4";
    case DType::Float64: return "<f8";
    case DType::Float16: return "<f2";
    case DType::Int8: return "|i1";
    case DType::Int16: return "<i2";
    case DType::Int32: return "<i4";
    case DType::Int64: return "<i8";
    case DType::UInt8: return "|u1";
    case DType::UInt16: return "<u2";
    case DType::UInt32: return "<u4";
    case DType::UInt64: return "<u8";
    case DType::Bool: return "|b1";
    case DType::BFloat16: return "<V2";  // numpy has no bfloat16; ml_dtypes writes void2
    default: fail("cannot write ", dtype_name(t), " to .npy");
  }
}

// Finds the value text of 'key' in a Python dict literal header.
std::string dict_value(const std::string& h, const std::string& key, const std::string& what) {
  auto k = h.find("'" + key + "'");
  if (k == std::string::npos) fail(what, ": npy header has no '", key, "' field");
  auto colon = h.find(':', k);
  if (colon == std::string::npos) fail(what, ": malformed npy header");
  size_t i = colon + 1;
  while (i < h.size() && h[i] == ' ') ++i;
  if (i >= h.size()) fail(what, ": malformed npy header");
  if (h[i] == '\'') {
    auto e = h.find('\'', i + 1);
    if (e == std::string::npos) fail(what, ": malformed npy header");
    return h.substr(i + 1, e - i - 1);
  }
  if (h[i] == '(') {
    auto e = h.find(')', i);
    if (e == std::string::npos) fail(what, ": malformed npy header");
    return h.substr(i + 1, e - i - 1);
  }
  size_t e = i;
  while (e < h.size() && h[e] != ',' && h[e] != '}') ++e;
  return h.substr(i, e - i);
}

}  // namespace

Tensor parse_npy(const void* data, size_t size, const std::string& what) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  if (size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) fail(what, ": not a .npy file (bad magic)");
  int major = p[6];
  size_t header_len, header_start;
  if (major == 1) {
    header_len = p[8] | (p[9] << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) fail(what, ": truncated npy header");
    header_len = static_cast<size_t>(p[8]) | (static_cast<size_t>(p[9]) << 8) | (static_cast<size_t>(p[10]) << 16) |
                 (static_cast<size_t>(p[11]) << 24);
    header_start = 12;
  } else {
    fail(what, ": unsupported npy format version ", major);
  }
  if (header_len > size - header_start) fail(what, ": npy header runs past the end of the file");
  std::string h(reinterpret_cast<const char*>(p + header_start), header_len);
  std::string descr = dict_value(h, "descr", what);
  std::string fortran = dict_value(h, "fortran_order", what);
  std::string shape_text = dict_value(h, "shape", what);
  if (fortran.find("True") != std::string::npos) fail(what, ": Fortran-order arrays are not supported; save with C order");
  DType dtype = DType::Undefined;
  for (const auto& d : kDescrs)
    if (descr == d.descr) dtype = d.dtype;
  if (dtype == DType::Undefined) {
    if (!descr.empty() && descr[0] == '>') fail(what, ": big-endian arrays ('", descr, "') are not supported");
    fail(what, ": unsupported npy dtype '", descr, "'");
  }
  Shape shape;
  size_t i = 0;
  while (i < shape_text.size()) {
    while (i < shape_text.size() && (shape_text[i] == ' ' || shape_text[i] == ',')) ++i;
    if (i >= shape_text.size()) break;
    size_t j = i;
    while (j < shape_text.size() && shape_text[j] >= '0' && shape_text[j] <= '9') ++j;
    if (j == i || j - i > 18) fail(what, ": malformed shape '(", shape_text, ")' in npy header");
    shape.push_back(std::stoll(shape_text.substr(i, j - i)));
    while (j < shape_text.size() && (shape_text[j] == 'L' || shape_text[j] == ' ')) ++j;
    i = j;
  }
  int64_t n = shape_numel(shape);
  size_t data_start = header_start + header_len;
  size_t need = static_cast<size_t>(n) * dtype_size(dtype);
  if (size - data_start < need)
    fail(what, ": data is ", size - data_start, " bytes, ", dtype_name(dtype), shape_str(shape), " needs ", need);
  return Tensor::copy_of(dtype, shape, p + data_start);
}

Tensor read_npy(const std::string& path) {
  auto f = MappedFile::open(path);
  return parse_npy(f->data(), f->size(), "'" + path + "'");
}

void write_npy(const std::string& path, const Tensor& t) {
  std::string dict = "{'descr': '" + descr_of(t.dtype()) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < t.shape().size(); ++i) dict += std::to_string(t.shape()[i]) + (t.shape().size() == 1 ? "," : (i + 1 < t.shape().size() ? ", " : ""));
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
