// Dependencies point down the pipeline: each module of src/ may include only the modules below
// it. The op set (ops: schemas, inference, reference kernels) never includes a backend; backends
// (backends/<name>: kernels and their registrations) build on the ops. The runtime library
// (core, ir, ops, backends, plan, transforms, runtime, refit) never
// includes the importer, the passes or the builder, so a deployment that loads and refits plans
// needs neither protobuf nor the build side; the transforms sit below both the runtime and the
// refitter (no runtime <-> refit cycle).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

namespace fs = std::filesystem;

TEST(Layering, ModulesIncludeOnlyModulesBelowThem) {
  const fs::path src = fs::path(REFORGE_SOURCE_DIR) / "src";
  // What each module must not include.
  const std::set<std::string> build_side = {"onnx", "passes", "builder"};
  std::map<std::string, std::set<std::string>> forbidden = {
      {"core", {"ir", "ops", "backends", "plan", "transforms", "runtime", "refit"}},
      {"ir", {"ops", "backends", "plan", "transforms", "runtime", "refit"}},
      {"ops", {"backends", "plan", "transforms", "runtime", "refit"}},
      {"backends", {"plan", "transforms", "runtime", "refit"}},
      {"plan", {"ops", "backends", "transforms", "runtime", "refit"}},
      {"transforms", {"runtime", "refit"}},
      {"runtime", {"refit"}},
      {"refit", {}},
  };
  for (auto& [module, deny] : forbidden) deny.insert(build_side.begin(), build_side.end());
  const std::regex include(R"re(^\s*#\s*include\s*"([a-z_]+)/)re");
  int checked = 0;
  for (const auto& [module, deny] : forbidden) {
    if (!fs::exists(src / module)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(src / module)) {
      if (!entry.is_regular_file()) continue;
      std::ifstream f(entry.path());
      std::string line;
      for (int n = 1; std::getline(f, line); ++n) {
        std::smatch m;
        if (std::regex_search(line, m, include) && deny.count(m[1]))
          ADD_FAILURE() << entry.path().lexically_relative(src).string() << ":" << n << " includes " << m[1]
                        << "/ (a module above " << module << "/)";
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}
