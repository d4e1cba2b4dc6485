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
  expect_error(with_header("[1,2]", ""), "not a JSON object");
  expect_error(with_header(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", std::string(8, 'x')),
               "needs 8");
  expect_error(with_header(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}})", std::string(8, 'x')),
               "outside the data section");
  expect_error(with_header(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", std::string(8, 'x')),
               "reversed");
  expect_error(with_header(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", std::string(8, 'x')),
               "not a non-negative integer");
  expect_error(with_header(R"({"w": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}})", std::string(8, 'x')),
               "unsupported dtype");
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
