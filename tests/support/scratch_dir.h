// A scratch folder for one test, under the system's temporary folder, named after the test's tag
// and this process (tests of one binary may run in parallel processes), removed at the end.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace reforge::test_support {

struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / ("reforge_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace reforge::test_support
