// Replays every committed fuzz input through its target (tests/fuzz/targets/, built here without
// libFuzzer): the seed corpora (tests/fuzz/corpus/NAME/) and every input that ever made a target
// fail (tests/fuzz/regressions/NAME/). A reforge::Error is the expected answer to a malformed
// input and is caught inside the target; any other exception fails the test, and a crash or
// sanitizer report ends the run.
#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>

namespace fs = std::filesystem;

int reforge_fuzz_onnx(const uint8_t* data, size_t size);
int reforge_fuzz_plan(const uint8_t* data, size_t size);
int reforge_fuzz_safetensors(const uint8_t* data, size_t size);
int reforge_fuzz_shard_index(const uint8_t* data, size_t size);
int reforge_fuzz_npy(const uint8_t* data, size_t size);
int reforge_fuzz_bind_file(const uint8_t* data, size_t size);

namespace {

using Target = int (*)(const uint8_t*, size_t);
const std::map<std::string, Target>& targets() {
  static const std::map<std::string, Target> t = {{"onnx", reforge_fuzz_onnx},
                                                  {"plan", reforge_fuzz_plan},
                                                  {"safetensors", reforge_fuzz_safetensors},
                                                  {"shard_index", reforge_fuzz_shard_index},
                                                  {"npy", reforge_fuzz_npy},
                                                  {"bind_file", reforge_fuzz_bind_file}};
  return t;
}

// Runs every file under tests/fuzz/KIND/NAME/; returns how many ran.
size_t replay(const std::string& kind) {
  size_t n = 0;
  fs::path root = fs::path(REFORGE_SOURCE_DIR) / "tests" / "fuzz" / kind;
  if (!fs::exists(root)) return 0;
  for (const auto& dir : fs::directory_iterator(root)) {
    if (!dir.is_directory()) continue;
    std::string name = dir.path().filename().string();
    auto it = targets().find(name);
    EXPECT_NE(it, targets().end()) << root / name << " names no fuzz target";
    if (it == targets().end()) continue;
    for (const auto& f : fs::directory_iterator(dir.path())) {
      if (!f.is_regular_file() || f.path().filename().string().starts_with(".")) continue;
      std::ifstream in(f.path(), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), {});
      try {
        it->second(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      } catch (const std::exception& e) {
        ADD_FAILURE() << f.path() << ": exception other than reforge::Error: " << e.what();
      } catch (...) {
        ADD_FAILURE() << f.path() << ": non-standard exception";
      }
      ++n;
    }
  }
  return n;
}

TEST(FuzzReplay, Corpus) {
  size_t n = replay("corpus");
  EXPECT_GE(n, targets().size()) << "every target has seed inputs";
}

TEST(FuzzReplay, Regressions) { replay("regressions"); }

}  // namespace
