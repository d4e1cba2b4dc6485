// The .npy reader accepts what numpy writes (tests/data/npy, written by numpy through
// tests/data/npy/make.py) and refuses every header numpy would read differently or not at all:
// a length field that disagrees with the header, a key given twice, unknown keys, padding that
// is not spaces and a newline, data of the wrong length. Every truncation of a header is refused
// without reading outside the buffer (run under build-asan to check the latter).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "core/npy.h"

namespace reforge {
namespace {

const std::string kDir = std::string(REFORGE_SOURCE_DIR) + "/tests/data/npy/";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Tensor parse(const std::string& bytes, const std::string& what = "'x.npy'") {
  return parse_npy(bytes.data(), bytes.size(), what);
}

// The message of the error parse_npy throws for `bytes`, or "" when it accepts them.
std::string refusal(const std::string& bytes) {
  try {
    parse(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A v1.0 file as numpy writes it, with its header length field patched to `declared`.
std::string with_header_len(std::string f, size_t declared) {
  f[8] = static_cast<char>(declared & 0xff);
  f[9] = static_cast<char>((declared >> 8) & 0xff);
  return f;
}

size_t header_len_v1(const std::string& f) {
  return static_cast<unsigned char>(f[8]) | (static_cast<unsigned char>(f[9]) << 8);
}

// Rebuilds a v1.0 file around `dict` (padded as numpy pads) and `data`.
std::string v1_file(const std::string& dict, const std::string& data, size_t align = 64) {
  size_t pad = (align - (10 + dict.size() + 1) % align) % align;
  std::string h = dict + std::string(pad, ' ') + "\n";
  std::string f = std::string("\x93NUMPY\x01\x00", 8);
  f += static_cast<char>(h.size() & 0xff);
  f += static_cast<char>(h.size() >> 8);
  return f + h + data;
}

const std::string kSixFloats(24, '\0');

TEST(NpyStrict, AcceptsNumpyFiles) {
  for (const char* v : {"v1", "v2"}) {
    SCOPED_TRACE(v);
    Tensor a = read_npy(kDir + v + "_float32_2x3.npy");
    ASSERT_EQ(a.dtype(), DType::Float32);
    EXPECT_EQ(a.shape(), (Shape{2, 3}));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(a.data<float>()[i], i / 4.0f);

    Tensor b = read_npy(kDir + v + "_int64_3.npy");
    ASSERT_EQ(b.dtype(), DType::Int64);
    EXPECT_EQ(b.shape(), (Shape{3}));
    EXPECT_EQ(b.data<int64_t>()[0], -1);
    EXPECT_EQ(b.data<int64_t>()[2], int64_t{1} << 40);

    Tensor c = read_npy(kDir + v + "_bool_4.npy");
    ASSERT_EQ(c.dtype(), DType::Bool);
    EXPECT_EQ(c.shape(), (Shape{4}));
    const uint8_t* cb = static_cast<const uint8_t*>(c.raw());
    EXPECT_EQ(cb[0], 1);
    EXPECT_EQ(cb[1], 0);
    EXPECT_EQ(cb[3], 1);

    Tensor d = read_npy(kDir + v + "_float16_2.npy");
    ASSERT_EQ(d.dtype(), DType::Float16);
    EXPECT_EQ(static_cast<float>(d.data<float16>()[0]), 1.5f);
    EXPECT_EQ(static_cast<float>(d.data<float16>()[1]), -2.0f);

    Tensor s = read_npy(kDir + v + "_float32_scalar.npy");
    EXPECT_EQ(s.shape(), Shape{});
    EXPECT_EQ(s.data<float>()[0], 3.25f);

    Tensor e = read_npy(kDir + v + "_int64_empty.npy");
    EXPECT_EQ(e.dtype(), DType::Int64);
    EXPECT_EQ(e.shape(), (Shape{0}));
  }
  EXPECT_EQ(read_npy(kDir + "v3_float32_2x3.npy").shape(), (Shape{2, 3}));
  // Older numpy and cnpy padded to 16; numpy still reads those, so reforge does.
  EXPECT_EQ(read_npy(kDir + "v1_float32_16aligned.npy").shape(), (Shape{2, 3}));
}

TEST(NpyStrict, WriterOutputIsAccepted) {
  const std::string dir = ::testing::TempDir();
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{5}, Shape{2, 3, 4}}) {
    Tensor t = Tensor::empty(DType::Float32, shape);
    const std::string path = dir + "/npy_strict_roundtrip.npy";
    write_npy(path, t);
    Tensor r = read_npy(path);
    EXPECT_EQ(r.shape(), shape);
    std::filesystem::remove(path);
  }
}

TEST(NpyStrict, RefusesShortenedHeaderLength) {
  const std::string f = slurp(kDir + "v1_float32_2x3.npy");
  const size_t n = header_len_v1(f);
  ASSERT_EQ((10 + n) % 64, 0u);
  for (size_t by : {size_t{1}, size_t{16}}) {
    SCOPED_TRACE(by);
    const std::string msg = refusal(with_header_len(f, n - by));
    EXPECT_NE(msg.find("'x.npy'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("declares " + std::to_string(n - by) + " bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("end at byte " + std::to_string(n)), std::string::npos) << msg;
  }
  // Lengthened too: the data would start late.
  EXPECT_NE(refusal(with_header_len(f, n + 16)).find("declares " + std::to_string(n + 16)), std::string::npos);
}

TEST(NpyStrict, RefusesDuplicatedKey) {
  // numpy (a Python dict) keeps the last 'shape'; a reader that kept the first would disagree.
  const std::string msg =
      refusal(v1_file("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'shape': (2, 3), }", kSixFloats));
  EXPECT_NE(msg.find("'x.npy'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("key 'shape' appears twice"), std::string::npos) << msg;
  EXPECT_NE(refusal(v1_file("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", kSixFloats))
                .find("key 'descr' appears twice"),
            std::string::npos);
}

TEST(NpyStrict, RefusesMalformedDicts) {
  struct Case {
    const char* dict;
    const char* expect;
  };
  const Case cases[] = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'extra': 1, }", "unknown key 'extra'"},
      {"{'descr': '<f4', 'fortran_order': False, }", "no 'shape' key"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", "is not a tuple"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (6,), }", "not True or False"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (6,), }", "Fortran-order"},
      {"{'descr': '>f4', 'fortran_order': False, 'shape': (6,), }", "big-endian"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }", "structured"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }", "expected a dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (06,), }", "leading zero"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,), } x", "found 'x'"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (6,), }", "expected ',' or '}'"},
      {"{'descr': '<f4',\n'fortran_order': False, 'shape': (6,), }", "found 0x0a"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dict);
    const std::string msg = refusal(v1_file(c.dict, kSixFloats));
    EXPECT_NE(msg.find("'x.npy'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
  }
  // Python's other spellings of the same dict are fine: any key order, no trailing comma.
  EXPECT_EQ(parse(v1_file("{'shape': (2, 3,), \"descr\": '<f4', 'fortran_order': False}", kSixFloats)).shape(),
            (Shape{2, 3}));
}

TEST(NpyStrict, RefusesBadLayout) {
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }";
  EXPECT_EQ(parse(v1_file(dict, kSixFloats, 16)).shape(), (Shape{6}));
  EXPECT_NE(refusal(v1_file(dict, kSixFloats, 8)).find("not a multiple of 16"), std::string::npos);
  EXPECT_NE(refusal(v1_file(dict, kSixFloats + "xx")).find("trailing bytes"), std::string::npos);
  EXPECT_NE(refusal(v1_file(dict, kSixFloats.substr(1))).find("needs exactly 24"), std::string::npos);
  std::string f = v1_file(dict, kSixFloats);
  f[7] = 1;
  EXPECT_NE(refusal(f).find("version 1.1"), std::string::npos);
  f = v1_file(dict, kSixFloats);
  f[f.find('\n') - 1] = '\t';  // padding must be spaces
  EXPECT_NE(refusal(f).find("0x09"), std::string::npos);
}

// Every prefix of a valid file, and every single-byte change of its header length field and
// header, is either refused with an Error or (for a change numpy would read the same way)
// accepted; never a crash or a read outside the buffer. Each prefix is copied into a buffer of
// exactly its size so that ASan sees an overrun.
TEST(NpyStrict, TruncationsAndMutationsAreRefusedSafely) {
  for (const char* name : {"v1_float32_2x3.npy", "v2_int64_3.npy", "v1_float32_scalar.npy"}) {
    SCOPED_TRACE(name);
    const std::string f = slurp(kDir + name);
    ASSERT_NO_THROW(parse(f));
    for (size_t len = 0; len < f.size(); ++len) {
      std::unique_ptr<char[]> buf(new char[len ? len : 1]);
      std::memcpy(buf.get(), f.data(), len);
      EXPECT_THROW(parse_npy(buf.get(), len, "'x.npy'"), Error) << "prefix of " << len << " bytes";
    }
    const size_t data_start = f.find('\n') + 1;
    for (size_t i = 6; i < data_start; ++i) {
      for (int delta : {1, -1, 16, 0x40}) {
        std::string m = f;
        m[i] = static_cast<char>(static_cast<unsigned char>(m[i]) + delta);
        std::unique_ptr<char[]> buf(new char[m.size()]);
        std::memcpy(buf.get(), m.data(), m.size());
        try {
          parse_npy(buf.get(), m.size(), "'x.npy'");
        } catch (const Error&) {
        }
      }
    }
    // The header length field shortened by every amount is refused.
    const bool v1 = f[6] == 1;
    const size_t n = v1 ? header_len_v1(f) : static_cast<unsigned char>(f[8]) | (static_cast<unsigned char>(f[9]) << 8);
    for (size_t by = 1; by <= n; ++by) {
      std::string m = f;
      m[8] = static_cast<char>((n - by) & 0xff);
      m[9] = static_cast<char>(((n - by) >> 8) & 0xff);
      EXPECT_THROW(parse(m), Error) << "header length shortened by " << by;
    }
  }
}

}  // namespace
}  // namespace reforge
