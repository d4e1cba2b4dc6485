// Weight source readers (refit/source_readers.h): a file's reader is chosen by what it holds, never
// by its name. A checkpoint named .onnx refits as the checkpoint it is, an ONNX model named
// .safetensors as the model it is, an index under any name opens its shards; a file no reader
// recognizes is refused naming it and what it holds.
#include "refit/source_readers.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "builder/binding.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "onnx/importer.h"
#include "refit/refit_from.h"
#include "refit/safetensors.h"
#include "runtime/plan_engine.h"
#include "support/engine_checks.h"
#include "support/scratch_dir.h"

using namespace reforge;
using test_support::error_of;
using test_support::ScratchDir;
namespace fs = std::filesystem;

namespace {

const fs::path kLlama = fs::path(REFORGE_SOURCE_DIR) / "models" / "llama";

std::string onnx_of(const char* weights) { return (kLlama / "dynamo" / weights / "model.onnx").string(); }

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string reader_name(const std::string& path) {
  return refit::reader_of(refit::probe_path(path), "test").name;
}

std::map<std::string, Tensor> two_tensors() {
  return {{"a", Tensor::scalar(DType::Float32, 1.5f)}, {"b", Tensor::scalar(DType::Int64, int64_t{7})}};
}

}  // namespace

TEST(SourceReaders, NamesDoNotDecideWhatAFileIs) {
  ScratchDir dir("readers_names");
  const std::string ckpt_as_onnx = dir.file("weights.onnx");
  const std::string model_as_ckpt = dir.file("model.safetensors");
  const std::string ckpt_plain = dir.file("noext");
  refit::write_safetensors(ckpt_as_onnx, two_tensors());
  refit::write_safetensors(ckpt_plain, two_tensors());
  write_bytes(model_as_ckpt, bytes_of(onnx_of("B")));
  EXPECT_EQ(reader_name(ckpt_as_onnx), "safetensors");
  EXPECT_EQ(reader_name(ckpt_plain), "safetensors");
  EXPECT_EQ(reader_name(model_as_ckpt), "onnx");
  EXPECT_EQ(reader_name(onnx_of("A")), "onnx");
  EXPECT_EQ(reader_name((kLlama / "checkpoint_A.safetensors").string()), "safetensors");

  const refit::Checkpoint c = refit::open_checkpoint({ckpt_as_onnx}, "test");
  ASSERT_EQ(c.tensors().size(), 2u);
  EXPECT_EQ(c.find("a")->as_double(0), 1.5);
  EXPECT_EQ(c.find("b")->as_int64(0), 7);
  // An ONNX model is not a checkpoint, whatever it is called.
  const std::string err = error_of([&] { refit::open_checkpoint({model_as_ckpt}, "checkpoint"); });
  EXPECT_NE(err.find("'" + model_as_ckpt + "' is an ONNX model"), std::string::npos) << err;
}

// A sharded checkpoint's index is recognized by its "weight_map", under any name, and as the
// folder holding model.safetensors.index.json; both open the shards it names, checked against it.
TEST(SourceReaders, ShardIndexOpensItsShards) {
  ScratchDir dir("readers_shards");
  refit::write_safetensors(dir.file("part-1.bin"), {{"a", Tensor::scalar(DType::Float32, 2.0f)}});
  refit::write_safetensors(dir.file("part-2.bin"), {{"b", Tensor::scalar(DType::Float32, 3.0f)}});
  write_bytes(dir.file("shards.json"),
              R"({"metadata": {"total_size": 8}, "weight_map": {"a": "part-1.bin", "b": "part-2.bin"}})");
  EXPECT_EQ(reader_name(dir.file("shards.json")), "safetensors-index");
  const refit::Checkpoint by_file = refit::open_checkpoint({dir.file("shards.json")}, "test");
  ASSERT_EQ(by_file.tensors().size(), 2u);
  EXPECT_EQ(by_file.find("a")->as_double(0), 2.0);
  EXPECT_EQ(by_file.find("b")->as_double(0), 3.0);
  EXPECT_EQ(by_file.file_of("b"), dir.file("part-2.bin"));

  fs::copy_file(dir.file("shards.json"), dir.file("model.safetensors.index.json"));
  EXPECT_EQ(reader_name(dir.path.string()), "safetensors-index");
  const refit::Checkpoint by_folder = refit::open_checkpoint({dir.path.string()}, "test");
  EXPECT_EQ(by_folder.find("b")->as_double(0), 3.0);

  // The index is checked against its shards: a shard holding a tensor it does not name.
  write_bytes(dir.file("wrong.json"), R"({"weight_map": {"a": "part-2.bin"}})");
  const std::string err = error_of([&] { refit::open_checkpoint({dir.file("wrong.json")}, "test"); });
  EXPECT_NE(err.find("does not name tensor 'b', which '" + dir.file("part-2.bin") + "' holds"), std::string::npos)
      << err;
}

TEST(SourceReaders, UnrecognizedFilesAreRefusedNamingWhatTheyHold) {
  ScratchDir dir("readers_garbage");
  struct Case {
    std::string name, bytes, found;
  };
  const std::vector<Case> cases = {
      {"garbage.safetensors", "GARBAGE! not weights at all",
       "a file of 27 bytes beginning \"GARBAGE! not wei\"... (47 41 52 42 41 47 45 21 20 6e 6f 74 20 77 65 69)"},
      {"empty.onnx", "", "an empty file"},
      {"config.json", R"({"hidden_size": 64, "layers": 2})",
       "a JSON object without \"weight_map\" (its keys: \"hidden_size\", \"layers\")"},
      {"model.plan", std::string("\x89RFPLAN\n", 8) + std::string(32, '\0'), "a reforge plan"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.file(c.name);
    write_bytes(path, c.bytes);
    const std::string err = error_of([&] { refit::read_weight_files({path}, "refit"); });
    EXPECT_NE(err.find("refit: '" + path + "' holds no weights reforge reads: it is " + c.found + ";"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("a safetensors checkpoint"), std::string::npos) << err;
  }
  fs::create_directories(dir.path / "empty_folder");
  EXPECT_NE(error_of([&] { refit::read_weight_files({(dir.path / "empty_folder").string()}, "refit"); })
                .find("a folder without model.safetensors.index.json"),
            std::string::npos);
  const std::string missing = error_of([&] { refit::read_weight_files({dir.file("absent")}, "refit"); });
  EXPECT_NE(missing.find("refit: cannot open '" + dir.file("absent") + "': No such file"), std::string::npos)
      << missing;
}

// A damaged file of a known kind reaches its reader, which names what is wrong, rather than being
// called unrecognized: a safetensors file cut inside its header, an ONNX model cut inside its graph.
TEST(SourceReaders, TruncatedFilesReachTheirReader) {
  ScratchDir dir("readers_truncated");
  const std::string ckpt = bytes_of((kLlama / "checkpoint_A.safetensors").string());
  write_bytes(dir.file("cut.safetensors"), ckpt.substr(0, 40));
  EXPECT_EQ(reader_name(dir.file("cut.safetensors")), "safetensors");
  EXPECT_NE(error_of([&] { refit::open_checkpoint({dir.file("cut.safetensors")}, "test"); })
                .find("runs past the end of the file"),
            std::string::npos);
  const std::string model = bytes_of(onnx_of("A"));
  write_bytes(dir.file("cut.onnx"), model.substr(0, model.size() / 2));
  EXPECT_EQ(reader_name(dir.file("cut.onnx")), "onnx");
  // Bytes that walk as protobuf fields, but not ModelProto's (field 12), are no model.
  write_bytes(dir.file("proto.bin"), std::string("\x60\x01", 2));
  EXPECT_NE(error_of([&] { reader_name(dir.file("proto.bin")); }).find("holds no weights reforge reads"),
            std::string::npos);
}

TEST(SourceReaders, AModelComesAlone) {
  const std::vector<std::string> files = {(kLlama / "checkpoint_B.safetensors").string(), onnx_of("B")};
  const std::string err = error_of([&] { refit::read_weight_files(files, "refit"); });
  EXPECT_NE(err.find("an ONNX model gives every weight and comes alone"), std::string::npos) << err;
  EXPECT_NE(err.find("'" + onnx_of("B") + "' (onnx)"), std::string::npos) << err;
  EXPECT_NE(err.find("(safetensors)"), std::string::npos) << err;
}

// Through the refit entry points: the renamed files refit as what they hold, and the report names
// the reader that read them.
TEST(SourceReaders, RefitsReadRenamedFilesByContent) {
  ScratchDir dir("readers_refit");
  const std::string ckpt_b = dir.file("b.onnx");
  fs::copy_file(kLlama / "checkpoint_B.safetensors", ckpt_b);
  const std::string model_b = dir.file("b.safetensors");
  fs::copy_file(onnx_of("B"), model_b);

  build::BuildOptions o;
  o.mode = plan::BuildMode::Refit;
  runtime::PlanEngine bound(build::build_plan_with_checkpoint(
      onnx::import_model_file(onnx_of("A")), o, refit::Checkpoint::open((kLlama / "checkpoint_A.safetensors").string()),
      {}));
  refit::RefitRequest from_ckpt;
  from_ckpt.files = {ckpt_b};
  const refit::RefitReport a = build::refit_from(bound, from_ckpt);
  EXPECT_EQ(a.from, "checkpoint");
  EXPECT_EQ(a.reader, "safetensors");
  EXPECT_GT(a.commit.sources_set, 0u);

  runtime::PlanEngine by_model(build::build_plan(onnx::import_model_file(onnx_of("A")), o));
  runtime::PlanEngine reference(build::build_plan(onnx::import_model_file(onnx_of("B")), o));
  refit::RefitRequest from_model;
  from_model.files = {model_b};
  const refit::RefitReport b = build::refit_from(by_model, from_model);
  EXPECT_EQ(b.from, "onnx");
  EXPECT_EQ(b.reader, "onnx");
  EXPECT_EQ(test_support::derived_weight_hashes(by_model), test_support::derived_weight_hashes(reference));
  // The runtime entry point knows the model for what it is and names the build side.
  EXPECT_NE(error_of([&] { refit::refit_from(by_model, from_model); }).find("an ONNX model, which is read on the build side"),
            std::string::npos);
}
