// Dependencies point down the pipeline: each module of src/ may include only the modules below
// it. The op set (ops: schemas, inference, reference kernels) never includes a backend; backends
// (backends/<name>: kernels and their registrations) build on the ops. The runtime library
// (core, ir, ops, backends, plan, transforms, runtime, refit) never
// includes the importer, the passes or the builder, so a deployment that loads and refits plans
// needs neither protobuf nor the build side; the transforms sit below both the runtime and the
// refitter (no runtime <-> refit cycle). The reference kernels are portable: no per-instruction-set
// code in src/ops (that lives in the backends).
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

// The op set's reference kernels are portable C++: no instruction-set selection (core/simd.h),
// target attributes, intrinsics or the CPU backend's vector headers in src/ops. Vector-extension
// types (ops/vector_ext.h) are allowed: they name no instruction set.
TEST(Layering, OpsHaveNoPerInstructionSetCode) {
  const fs::path ops = fs::path(REFORGE_SOURCE_DIR) / "src" / "ops";
  const std::regex banned(
      R"re(#\s*include\s*[<"](core/simd\.h|[a-z0-9_]*intrin\.h|arm_neon\.h|arm_sve\.h|cpuid\.h)[>"]|)re"
      R"re(REFORGE_TARGET_|REFORGE_SIMD_VARIANTS|__attribute__\s*\(\(\s*target|\bsimd_level\s*\(|SimdOverride|)re"
      R"re(__builtin_ia32_|__builtin_cpu_|\b_mm(256|512)?_|\b__m(128|256|512)|\bv[a-z]+q_f32\b)re");
  const std::regex comment(R"re(^\s*//)re");
  int checked = 0;
  for (const auto& entry : fs::recursive_directory_iterator(ops)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream f(entry.path());
    std::string line;
    for (int n = 1; std::getline(f, line); ++n) {
      if (std::regex_search(line, comment)) continue;
      std::smatch m;
      if (std::regex_search(line, m, banned))
        ADD_FAILURE() << "src/" << entry.path().lexically_relative(ops.parent_path()).string() << ":" << n
                      << " has per-instruction-set code ('" << m[0] << "'): it belongs in a backend";
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}
