// Safetensors reader/writer: round trip, sharded folders, and every malformed input ends in an
// Error naming the file and (where there is one) the tensor; never a crash.
#include "refit/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "transforms/recipe.h"

using namespace reforge;
using namespace reforge::refit;
namespace fs = std::filesystem;

namespace {

Tensor iota(DType dt, Shape shape) {
  Tensor t = Tensor::empty(dt, shape);
  auto* p = static_cast<unsigned char*>(t.mutable_raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(i * 7 + 1);
  return t;
}

std::map<std::string, Tensor> sample() {
  return {{"a.weight", iota(DType::Float32, {3, 4})},
          {"b", iota(DType::Float16, {5})},
          {"c", iota(DType::BFloat16, {2, 2})},
          {"d", iota(DType::Float64, {1})},
          {"e", iota(DType::Int64, {2})},
          {"f", iota(DType::Int32, {3})},
          {"g", iota(DType::Int16, {3})},
          {"h", iota(DType::Int8, {3})},
          {"i", iota(DType::UInt8, {0})},
          {"j", iota(DType::Bool, {2})}};
}

Checkpoint parse_bytes(const std::string& bytes) {
  auto owner = std::make_shared<std::string>(bytes);
  return Checkpoint::parse(owner, owner->data(), owner->size(), "checkpoint 'test.safetensors'");
}

// Bytes of a file with `header` as its JSON header and `data` after it.
std::string with_header(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

void expect_error(const std::string& bytes, const std::string& needle) {
  try {
    parse_bytes(bytes);
    FAIL() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_NE(what.find("test.safetensors"), std::string::npos) << what;
  }
}

}  // namespace

TEST(Safetensors, RoundTripEveryDtypeAndMetadata) {
  auto t = sample();
  fs::path dir = fs::temp_directory_path() / ("reforge_st_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string path = (dir / "x.safetensors").string();
  write_safetensors(path, t, {{"format", "pt"}});
  auto c = Checkpoint::open(path);
  ASSERT_EQ(c.tensors().size(), t.size());
  for (const auto& [n, v] : t) {
    ASSERT_NE(c.find(n), nullptr) << n;
    EXPECT_TRUE(transforms::bit_equal(*c.find(n), v)) << n;
  }
  EXPECT_EQ(c.metadata().at("format"), "pt");
  EXPECT_TRUE(is_safetensors_path(path));
  fs::remove_all(dir);
}

TEST(Safetensors, ShardedFolderAndFileList) {
  fs::path dir = fs::temp_directory_path() / ("reforge_st_shard_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  write_safetensors((dir / "s1.safetensors").string(), {{"x", iota(DType::Float32, {2})}});
  write_safetensors((dir / "s2.safetensors").string(), {{"y", iota(DType::Float32, {3})}});
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})";
  EXPECT_TRUE(is_safetensors_path(dir.string()));
  auto c = Checkpoint::open(dir.string());
  EXPECT_EQ(c.tensors().size(), 2u);
  EXPECT_NE(c.file_of("y").find("s2.safetensors"), std::string::npos);
  // The same tensor name in two files is an error naming both.
  write_safetensors((dir / "s3.safetensors").string(), {{"x", iota(DType::Float32, {2})}});
  try {
    Checkpoint::open(std::vector<std::string>{(dir / "s1.safetensors").string(), (dir / "s3.safetensors").string()});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x' is in both"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Safetensors, MalformedInputsAreErrors) {
  std::string good = serialize_safetensors({{"w", iota(DType::Float32, {2, 2})}});
  EXPECT_NO_THROW(parse_bytes(good));
  expect_error("", "too short");
  expect_error(good.substr(0, 5), "too short");
  expect_error(good.substr(0, 20), "runs past the end");                      // truncated header
  expect_error(good.substr(0, good.size() - 4), "outside the data section");  // truncated data
  expect_error(with_header("{\"w\": {", ""), "not well-formed JSON");
  expect_error(with_header("[1,2]", ""), "does not begin with '{'");
  expect_error(with_header(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", std::string(8, 'x')),
               "needs 8");
  expect_error(with_header(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}})", std::string(8, 'x')),
               "outside the data section");
  expect_error(with_header(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", std::string(8, 'x')),
               "reversed");
  expect_error(with_header(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", std::string(8, 'x')),
               "not a non-negative integer");
  expect_error(with_header(R"({"w": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}})", std::string(8, 'x')),
               "dtype C64 is not one reforge reads");
  expect_error(with_header(R"({"w": {"dtype": "F32", "shape": [1]}})", std::string(8, 'x')), "data_offsets");
  expect_error(with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                               "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                           std::string(12, 'x')),
               "overlap");
  expect_error(with_header(R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]}})",
                           std::string(8, 'x')),
               "tensor 'w'");
  expect_error(with_header(R"({"__metadata__": {"k": 1}})", ""), "__metadata__");
}

namespace {

// Two F32 tensors "a" [0,8) and "b" [8,16) as the reference writes them, around `data`.
std::string two_tensors(const std::string& data) {
  return with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                     data);
}

}  // namespace

// Regression: 8 bytes inserted inside the data section (the file longer than its offsets say)
// were read with every tensor after the insertion shifted; the reference refuses the file.
TEST(Safetensors, DataSectionMustBeCoveredExactly) {
  std::string data = "AAAAAAAABBBBBBBB";
  Checkpoint c = parse_bytes(two_tensors(data));
  EXPECT_EQ(std::memcmp(c.find("b")->raw(), "BBBBBBBB", 8), 0);
  expect_error(two_tensors("AAAA" + std::string(8, 'z') + "AAAABBBBBBBB"), "8 bytes belong to no tensor");
  expect_error(two_tensors(data + std::string(8, 'z')), "8 bytes belong to no tensor");
  // A gap between tensors, a first tensor that does not begin at 0, overlapping ranges.
  expect_error(with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                               "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                           std::string(12, 'x')),
               "bytes [4,8) of the data section belong to no tensor (between 'a' and 'b')");
  expect_error(with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", std::string(8, 'x')),
               "bytes [0,4) of the data section belong to no tensor (before 'a')");
  expect_error(with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                               "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                           std::string(8, 'x')),
               "overlap");
  // Data but no tensors.
  expect_error(with_header("{}", std::string(8, 'x')), "8 bytes belong to no tensor");
  // Empty tensors take no bytes anywhere in the sequence; an empty file of no tensors is valid.
  EXPECT_NO_THROW(parse_bytes(with_header(R"({"e": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
                                             "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                             "z": {"dtype": "I8", "shape": [2, 0], "data_offsets": [4, 4]}})",
                                          std::string(4, 'x'))));
  EXPECT_NO_THROW(parse_bytes(with_header("{}", "")));
}

// Regression: a header naming one tensor twice was read as naming it once (the JSON parser kept
// the last); repeated keys anywhere in the header are refused, as the format requires.
TEST(Safetensors, RepeatedKeysAreRefused) {
  expect_error(with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                               "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                           std::string(8, 'x')),
               "header names 'a' twice");
  // Even with equal entries (the reference's map would keep one and accept).
  expect_error(with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                               "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                           std::string(4, 'x')),
               "header names 'a' twice");
  expect_error(with_header(R"({"a": {"dtype": "F32", "dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})",
                           std::string(4, 'x')),
               "'dtype' in 'a' twice");
  expect_error(with_header(R"({"__metadata__": {"k": "1", "k": "2"}})", ""), "'k' in '__metadata__' twice");
}

TEST(Safetensors, HeaderLimitsAndEncoding) {
  // The reference's MAX_HEADER_SIZE: a length past it is refused before anything is read.
  std::string big(8, '\0');
  uint64_t n = 100'000'001;
  for (int i = 0; i < 8; ++i) big[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  expect_error(big + "{}", "larger than the 100000000 bytes the format allows");
  expect_error(with_header(" {}", ""), "does not begin with '{'");
  expect_error(with_header("", ""), "does not begin with '{'");
  expect_error(with_header("{\"a\xff\": 1}", ""), "header is not UTF-8 (byte 3");
  expect_error(with_header("{\"\xc0\xaf\": 1}", ""), "not UTF-8");  // an overlong '/'
  // Trailing spaces pad the header to 8 bytes (the format allows them).
  EXPECT_NO_THROW(
      parse_bytes(with_header(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}     )", "x")));
}

TEST(Safetensors, EveryReferenceDtypeIsReadOrRefusedByName) {
  // Unsigned types the reference knows and reforge computes with round-trip.
  std::map<std::string, Tensor> u = {
      {"u16", iota(DType::UInt16, {3})}, {"u32", iota(DType::UInt32, {2})}, {"u64", iota(DType::UInt64, {2})}};
  Checkpoint c = parse_bytes(serialize_safetensors(u));
  for (const auto& [name, t] : u) EXPECT_TRUE(transforms::bit_equal(*c.find(name), t)) << name;
  for (const char* dt : {"F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ"})
    expect_error(
        with_header(std::string(R"({"w": {"dtype": ")") + dt + R"(", "shape": [2], "data_offsets": [0, 2]}})", "xx"),
        std::string("tensor 'w': dtype ") + dt + " is not one reforge reads");
  expect_error(with_header(R"({"w": {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]}})", "xx"),
               "dtype F4 is not one reforge reads");
  expect_error(with_header(R"({"w": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [0, 3]}})", "xxx"),
               "dtype F6_E2M3 is not one reforge reads");
  // Sub-byte types must fill whole bytes; the layout is checked before the dtype is refused.
  expect_error(with_header(R"({"w": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}})", "xx"),
               "F4[3] is 12 bits, not a whole number of bytes");
  expect_error(with_header(R"({"w": {"dtype": "F7", "shape": [1], "data_offsets": [0, 1]}})", "x"),
               "unknown dtype 'F7'");
  expect_error(with_header(R"({"w": {"dtype": "f32", "shape": [1], "data_offsets": [0, 4]}})", "xxxx"),
               "unknown dtype 'f32'");
  // Element counts and byte counts that overflow on the way.
  expect_error(with_header(R"({"w": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", ""),
               "tensor 'w': shape [4294967296,4294967296] has too many elements");
  expect_error(with_header(R"({"w": {"dtype": "F64", "shape": [2305843009213693952], "data_offsets": [0, 0]}})", ""),
               "has too many elements");
  EXPECT_NO_THROW(parse_bytes(
      with_header(R"({"w": {"dtype": "F64", "shape": [0, 4294967296, 4294967296], "data_offsets": [0, 0]}})", "")));
}

// Regression: an index with an empty weight_map was SIGSEGV (the file list indexed at 0).
TEST(Safetensors, ShardIndexIsValidated) {
  fs::path dir = fs::temp_directory_path() / ("reforge_st_index_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_safetensors((dir / "s1.safetensors").string(), {{"x", iota(DType::Float32, {2})}});
  write_safetensors((dir / "s2.safetensors").string(), {{"y", iota(DType::Float32, {3})}});
  auto refusal = [&](const std::string& index) -> std::string {
    std::ofstream(dir / "model.safetensors.index.json") << index;
    try {
      Checkpoint::open(dir.string());
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model.safetensors.index.json"), std::string::npos) << e.what();
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(refusal(R"({"weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})"), "");
  EXPECT_NE(refusal(R"({"metadata": {}, "weight_map": {}})").find("'weight_map' names no tensors"), std::string::npos);
  EXPECT_NE(refusal(R"({"weight_map": []})").find("is not JSON with a 'weight_map' object"), std::string::npos);
  EXPECT_NE(refusal(R"({"metadata": {}})").find("is not JSON with a 'weight_map' object"), std::string::npos);
  EXPECT_NE(refusal(R"({"weight_map": {"x": "s1.safetensors", "x": "s2.safetensors"}})")
                .find("names 'x' in 'weight_map' twice"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"weight_map": {"x": 1}})").find("file of 'x' is not a string"), std::string::npos);
  for (const char* bad : {"../s1.safetensors", "sub/s1.safetensors", "..", ".", ""})
    EXPECT_NE(refusal(std::string(R"({"weight_map": {"x": ")") + bad + R"("}})").find("is not a plain file name"),
              std::string::npos)
        << bad;
  // The index and the shards agree: a tensor it places in the wrong shard, one it names that no
  // shard holds, one a shard holds that it does not name.
  EXPECT_NE(refusal(R"({"weight_map": {"x": "s2.safetensors", "y": "s2.safetensors"}})")
                .find("puts tensor 'x' in 's2.safetensors', which does not hold it"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"weight_map": {"x": "s1.safetensors", "y": "s2.safetensors", "z": "s2.safetensors"}})")
                .find("puts tensor 'z' in 's2.safetensors', which does not hold it"),
            std::string::npos);
  write_safetensors((dir / "both.safetensors").string(),
                    {{"x", iota(DType::Float32, {2})}, {"y", iota(DType::Float32, {3})}});
  EXPECT_NE(refusal(R"({"weight_map": {"x": "both.safetensors"}})").find("does not name tensor 'y'"),
            std::string::npos);
  // A folder may hold files its index does not name (they are not read).
  EXPECT_EQ(refusal(R"({"weight_map": {"x": "s1.safetensors"}})"), "");
  // A missing shard names the shard's path.
  EXPECT_NE(refusal(R"({"weight_map": {"x": "s1.safetensors", "y": "s3.safetensors"}})").find("s3.safetensors"),
            std::string::npos);
  // A folder without an index.
  fs::remove(dir / "model.safetensors.index.json");
  try {
    Checkpoint::open(dir.string());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no model.safetensors.index.json"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// Files the reference implementation (Python safetensors, in the source tree's .venv) writes
// are read here, and files written here pass its reader.
TEST(Safetensors, AgreesWithTheReferenceImplementation) {
  const std::string python = std::string(REFORGE_SOURCE_DIR) + "/.venv/bin/python";
  if (!fs::exists(python) || std::system((python + " -c 'import safetensors, numpy' 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "no Python safetensors in .venv";
  fs::path dir = fs::temp_directory_path() / ("reforge_st_ref_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto ours = sample();
  ours["u16"] = iota(DType::UInt16, {3});
  ours["u32"] = iota(DType::UInt32, {2, 1});
  ours["u64"] = iota(DType::UInt64, {1});
  write_safetensors((dir / "ours.safetensors").string(), ours, {{"format", "pt"}});
  // The reference reads ours (deserialize validates it) and writes the same tensors back in its
  // own layout (sorted by dtype alignment, then name) into theirs.safetensors.
  std::ofstream(dir / "roundtrip.py") << R"(import ctypes, sys
from safetensors import deserialize, serialize, TensorSpec
names = {'BOOL': 'bool', 'U8': 'uint8', 'I8': 'int8', 'I16': 'int16', 'U16': 'uint16', 'I32': 'int32',
         'U32': 'uint32', 'I64': 'int64', 'U64': 'uint64', 'F16': 'float16', 'F32': 'float32',
         'F64': 'float64', 'BF16': 'bfloat16'}
d = sys.argv[1]
keep, spec = [], {}
for n, v in deserialize(open(d + '/ours.safetensors', 'rb').read()):
    buf = ctypes.create_string_buffer(bytes(v['data']), max(1, len(v['data'])))
    keep.append(buf)
    spec[n] = TensorSpec(dtype=names[v['dtype']], shape=v['shape'], data_ptr=ctypes.addressof(buf),
                         data_len=len(v['data']))
open(d + '/theirs.safetensors', 'wb').write(serialize(spec, metadata={'format': 'np'}))
)";
  std::string cmd = python + " " + (dir / "roundtrip.py").string() + " " + dir.string() + " > " +
                    (dir / "out.txt").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << std::ifstream(dir / "out.txt").rdbuf();
  auto c = Checkpoint::open((dir / "theirs.safetensors").string());
  ASSERT_EQ(c.tensors().size(), ours.size());
  for (const auto& [n, v] : ours) {
    ASSERT_NE(c.find(n), nullptr) << n;
    EXPECT_TRUE(transforms::bit_equal(*c.find(n), v)) << n;
  }
  EXPECT_EQ(c.metadata().at("format"), "np");
  fs::remove_all(dir);
}
