// Every file a path names (from the user or from another file) is read only if it is a regular
// file, and whole-file reads are bounded: a FIFO, a device or a directory is refused by name,
// never opened in a way that blocks, never read without end (core/regular_file.h). The tests
// that hand a FIFO to a reader cannot hang if that regresses: a watchdog opens the FIFO's write
// end once the call has run long, which ends a blocked open or read, and the test then fails.
#include "core/regular_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "builder/binding.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/npy.h"
#include "onnx/importer.h"
#include "onnx/proto/onnx.pb.h"
#include "plan/plan_io.h"
#include "refit/safetensors.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("reforge_regular_file_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

fs::path make_fifo(const fs::path& p) {
  EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0) << p;
  return p;
}

// The message of the Error `f` throws ("" if it returns). With a FIFO given, a call still running
// after 20 s has its blocked open or read ended by opening and closing the FIFO's write end
// (repeatedly, for a reader that opens again); `rescued` then says so and the test fails on it.
std::string error_of(const std::function<void()>& f, const fs::path& fifo = {}) {
  std::atomic<bool> done{false}, rescued{false};
  std::thread watchdog;
  if (!fifo.empty())
    watchdog = std::thread([&] {
      for (int i = 0; i < 200 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      while (!done) {
        rescued = true;
        int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
        if (fd >= 0) ::close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  std::string message;
  try {
    f();
  } catch (const Error& e) {
    message = e.what();
  }
  done = true;
  if (watchdog.joinable()) watchdog.join();
  EXPECT_FALSE(rescued) << "the call blocked on the FIFO " << fifo << " until its write end was opened";
  return message;
}

#define EXPECT_CONTAINS(haystack, needle)                          \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) \
      << "'" << (haystack) << "' lacks '" << (needle) << "'"

::onnx::ModelProto add_model_with_external_weight(const std::string& location) {
  ::onnx::ModelProto m;
  m.set_ir_version(10);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(18);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(::onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(2);
  g->add_output()->set_name("y");
  auto* n = g->add_node();
  n->set_op_type("Add");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  auto* t = g->add_initializer();
  t->set_name("w");
  t->set_data_type(::onnx::TensorProto::FLOAT);
  t->add_dims(2);
  t->set_data_location(::onnx::TensorProto::EXTERNAL);
  auto* e = t->add_external_data();
  e->set_key("location");
  e->set_value(location);
  return m;
}

void write_model(const ::onnx::ModelProto& m, const fs::path& p) {
  std::ofstream f(p, std::ios::binary);
  ASSERT_TRUE(m.SerializeToOstream(&f));
}

// Runs the CLI under `timeout` (a regression that blocks ends as status 124 instead of hanging).
struct Cli {
  int exit_code;
  std::string output;
};
Cli run_cli(const std::string& args) {
  Cli r{-1, ""};
  FILE* f = ::popen(("timeout 120 " + std::string(REFORGE_CLI_PATH) + " " + args + " 2>&1").c_str(), "r");
  if (!f) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) r.output.append(buf.data(), n);
  int status = ::pclose(f);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace

TEST(RegularFile, RefusesWhatIsNotARegularFileByName) {
  fs::path dir = temp_dir("kinds");
  fs::path fifo = make_fifo(dir / "fifo");
  EXPECT_CONTAINS(error_of([&] { RegularFile::open(fifo.string(), "bind file"); }, fifo),
                  "bind file '" + fifo.string() + "' is a FIFO, not a regular file");
  EXPECT_CONTAINS(error_of([&] { RegularFile::open(dir.string()); }), "'" + dir.string() + "' is a directory");
  EXPECT_CONTAINS(error_of([&] { RegularFile::open("/dev/zero", "npy file"); }),
                  "npy file '/dev/zero' is a character device, not a regular file");
  EXPECT_CONTAINS(error_of([&] { RegularFile::open((dir / "missing").string()); }), "No such file");
  EXPECT_CONTAINS(error_of([&] { MappedFile::open(fifo.string(), "checkpoint"); }, fifo), "is a FIFO");
  EXPECT_CONTAINS(error_of([&] { MappedFile::open("/dev/zero"); }), "is a character device");
  fs::remove_all(dir);
}

TEST(RegularFile, ReadsAreBounded) {
  fs::path dir = temp_dir("bounded");
  std::string text(1000, 'x');
  std::ofstream(dir / "f") << text;
  EXPECT_EQ(read_regular_file((dir / "f").string(), 1000, "list"), text);  // exactly the bound
  std::string e = error_of([&] { read_regular_file((dir / "f").string(), 999, "list"); });
  EXPECT_CONTAINS(e, "list '" + (dir / "f").string() + "' is 1000 bytes, larger than the 999 bytes a list may be");
  // A file of /proc reports size 0 and has content: read up to the bound, no further.
  EXPECT_FALSE(read_regular_file("/proc/self/status", 1 << 20, "status").empty());
  EXPECT_CONTAINS(error_of([&] { read_regular_file("/proc/self/status", 16, "status"); }),
                  "is more than 16 bytes, larger than the 16 bytes a status may be");
  EXPECT_EQ(read_regular_file((dir / "f").string(), 1 << 20, "list").size(), 1000u);
  std::ofstream(dir / "empty").close();
  EXPECT_EQ(read_regular_file((dir / "empty").string(), 0, "list"), "");
  EXPECT_EQ(byte_size_str(1), "1 byte");
  EXPECT_EQ(byte_size_str(512), "512 bytes");
  EXPECT_EQ(byte_size_str(uint64_t(64) << 20), "64 MiB");
  EXPECT_EQ(byte_size_str(uint64_t(3) << 30), "3 GiB");
  EXPECT_EQ(byte_size_str((uint64_t(3) << 30) + (uint64_t(1) << 29)), "3.5 GiB");
  fs::remove_all(dir);
}

// Regressions: --bind-file /dev/zero grew memory until bad_alloc; a FIFO blocked; a directory
// read as an empty text ("is not a JSON object").
TEST(RegularFile, BindFileMustBeABoundedRegularFile) {
  fs::path dir = temp_dir("bind");
  fs::path fifo = make_fifo(dir / "binds.json");
  EXPECT_CONTAINS(error_of([] { build::read_bind_file("/dev/zero"); }),
                  "bind file '/dev/zero' is a character device, not a regular file");
  EXPECT_CONTAINS(error_of([&] { build::read_bind_file(fifo.string()); }, fifo), "is a FIFO, not a regular file");
  EXPECT_CONTAINS(error_of([&] { build::read_bind_file(dir.string()); }), "is a directory, not a regular file");
  // Larger than the bound: refused from its size, before a byte is read.
  fs::path big = dir / "big.json";
  { std::ofstream(big) << "{}"; }
  fs::resize_file(big, (uint64_t(64) << 20) + 1);
  EXPECT_CONTAINS(error_of([&] { build::read_bind_file(big.string()); }), "larger than the 64 MiB a bind file may be");
  // Two binds of one name: nlohmann::json kept the last.
  { std::ofstream(dir / "dup.json") << R"({"w": "a", "w": "b"})"; }
  EXPECT_CONTAINS(error_of([&] { build::read_bind_file((dir / "dup.json").string()); }), "names 'w' twice");
  { std::ofstream(dir / "ok.json") << R"({"w": "a", "literals": ["v"]})"; }
  auto bf = build::read_bind_file((dir / "ok.json").string());
  EXPECT_EQ(bf.binds.at("w"), "a");
  fs::remove_all(dir);
}

// Regression: an external-data location naming a FIFO in the model's folder blocked `run`.
TEST(RegularFile, ImporterRefusesAFifoAsModelOrExternalData) {
  fs::path dir = temp_dir("onnx");
  fs::path fifo = make_fifo(dir / "weights.bin");
  write_model(add_model_with_external_weight("weights.bin"), dir / "model.onnx");
  std::string e = error_of([&] { reforge::onnx::import_model_file((dir / "model.onnx").string()); }, fifo);
  EXPECT_CONTAINS(e, "tensor 'w': external data '" + fifo.string() + "' is a FIFO, not a regular file");
  fs::path model_fifo = make_fifo(dir / "fifo.onnx");
  EXPECT_CONTAINS(error_of([&] { reforge::onnx::import_model_file(model_fifo.string()); }, model_fifo),
                  "model '" + model_fifo.string() + "' is a FIFO, not a regular file");
  EXPECT_CONTAINS(error_of([&] { reforge::onnx::import_model_file(dir.string()); }), "is a directory, not a regular file");
  EXPECT_CONTAINS(error_of([&] { reforge::onnx::import_model_file("/dev/zero"); }), "is a character device");
  // An external-data location that is a folder.
  fs::create_directory(dir / "sub");
  write_model(add_model_with_external_weight("sub"), dir / "model2.onnx");
  EXPECT_CONTAINS(error_of([&] { reforge::onnx::import_model_file((dir / "model2.onnx").string()); }),
                  "is a directory, not a regular file");
  fs::remove_all(dir);
}

TEST(RegularFile, PlanNpyAndCheckpointRefuseAFifo) {
  fs::path dir = temp_dir("readers");
  fs::path fifo = make_fifo(dir / "x");
  EXPECT_CONTAINS(error_of([&] { plan::read_plan(fifo.string()); }, fifo), "plan '" + fifo.string() + "' is a FIFO");
  EXPECT_CONTAINS(error_of([&] { read_npy(fifo.string()); }, fifo), "npy file '" + fifo.string() + "' is a FIFO");
  EXPECT_CONTAINS(error_of([&] { refit::Checkpoint::open(fifo.string()); }, fifo),
                  "checkpoint '" + fifo.string() + "' is a FIFO");
  EXPECT_CONTAINS(error_of([&] { plan::read_plan(dir.string()); }), "is a directory, not a regular file");
  EXPECT_CONTAINS(error_of([&] { read_npy("/dev/zero"); }), "is a character device");
  // A sharded checkpoint folder whose index is a FIFO, and one whose shard is.
  fs::path shard_dir = dir / "sharded";
  fs::create_directory(shard_dir);
  fs::path index = make_fifo(shard_dir / "model.safetensors.index.json");
  EXPECT_CONTAINS(error_of([&] { refit::Checkpoint::open(shard_dir.string()); }, index),
                  "checkpoint index '" + index.string() + "' is a FIFO");
  fs::remove(index);
  std::ofstream(index) << R"({"weight_map": {"w": "w.safetensors"}})";
  fs::path shard = make_fifo(shard_dir / "w.safetensors");
  EXPECT_CONTAINS(error_of([&] { refit::Checkpoint::open(shard_dir.string()); }, shard), "is a FIFO");
  fs::remove_all(dir);
}

// The same through the command line: a non-zero exit with the reason, no hang, no output file.
TEST(RegularFile, CliRefusesNonRegularFiles) {
  fs::path dir = temp_dir("cli");
  fs::path fifo = make_fifo(dir / "weights.bin");
  write_model(add_model_with_external_weight("weights.bin"), dir / "model.onnx");
  Cli r = run_cli("run " + (dir / "model.onnx").string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "timed out: " << r.output;
  EXPECT_CONTAINS(r.output, "is a FIFO, not a regular file");

  r = run_cli("run " + fifo.string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "timed out: " << r.output;
  EXPECT_CONTAINS(r.output, "is a FIFO, not a regular file");

  fs::path out = dir / "out.plan";
  r = run_cli("build " + (dir / "model.onnx").string() + " --checkpoint " + (dir / "c.safetensors").string() +
              " --bind-file /dev/zero -o " + out.string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "bind file '/dev/zero' is a character device, not a regular file");
  EXPECT_FALSE(fs::exists(out));

  // Regression: an index with an empty weight_map was SIGSEGV.
  fs::path ckpt = dir / "ckpt";
  fs::create_directory(ckpt);
  std::ofstream(ckpt / "model.safetensors.index.json") << R"({"metadata": {}, "weight_map": {}})";
  r = run_cli("build " + (dir / "model.onnx").string() + " --checkpoint " + ckpt.string() + " -o " + out.string());
  EXPECT_TRUE(r.exit_code > 0 && r.exit_code < 124) << r.exit_code << ": " << r.output;
  EXPECT_CONTAINS(r.output, "'weight_map' names no tensors");
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(dir);
}
