#include "onnxrt_compare.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/nearest_names.h"
#include "core/npy.h"

namespace reforge::cli {

namespace fs = std::filesystem;

std::map<std::string, Tensor> run_onnxrt(const std::string& onnx_model, const std::map<std::string, Tensor>& inputs,
                                         const std::string& python_arg, const std::vector<std::string>& marked) {
  std::string python = python_arg;
  if (python.empty() && std::getenv("REFORGE_PYTHON")) python = std::getenv("REFORGE_PYTHON");
  if (python.empty()) python = std::string(REFORGE_SOURCE_DIR) + "/.venv/bin/python";
  std::string script = std::string(REFORGE_SOURCE_DIR) + "/tools/onnxrt_run.py";
  if (!fs::exists(python))
    fail("--compare-onnxrt: no Python interpreter at '", python,
         "' (run scripts/setup.sh, or give one with --python or $REFORGE_PYTHON)");
  if (!fs::exists(script)) fail("--compare-onnxrt: the ONNX Runtime runner '", script, "' is missing");
  std::string tmpl = (fs::temp_directory_path() / "reforge-onnxrt-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) fail("--compare-onnxrt: cannot make a temporary folder: ", std::strerror(errno));
  struct Remove {
    std::string dir;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove{tmpl};
  nlohmann::json files = nlohmann::json::object();
  int i = 0;
  for (const auto& [name, t] : inputs) {
    std::string file = "in_" + std::to_string(i++) + ".npy";
    write_npy((fs::path(tmpl) / file).string(), t);
    files[name] = file;
  }
  std::ofstream(fs::path(tmpl) / "inputs.json") << files.dump();
  std::ofstream(fs::path(tmpl) / "marked.json") << nlohmann::json(marked).dump();
  pid_t pid = ::fork();
  if (pid < 0) fail("--compare-onnxrt: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    ::dup2(2, 1);  // the runner's messages go to stderr; stdout may be a JSON document
    const char* argv[] = {python.c_str(), script.c_str(), onnx_model.c_str(), tmpl.c_str(), nullptr};
    ::execv(python.c_str(), const_cast<char* const*>(argv));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (rc == 3) fail("--compare-onnxrt: onnxruntime is not installed in '", python, "' (pip install onnxruntime)");
  if (rc != 0) fail("--compare-onnxrt: ONNX Runtime failed on '", onnx_model, "' (exit ", rc, "; its message above)");
  nlohmann::json names;
  std::ifstream(fs::path(tmpl) / "outputs.json") >> names;
  std::map<std::string, Tensor> outs;
  for (size_t k = 0; k < names.size(); ++k)
    outs[names[k].get<std::string>()] = read_npy((fs::path(tmpl) / ("out_" + std::to_string(k) + ".npy")).string());
  return outs;
}

ErrorStats compare_tensors(const Tensor& a, const Tensor& e, double atol, double rtol) {
  REFORGE_CHECK(a.shape() == e.shape(), "shapes differ: ", a.describe(), " vs ", e.describe());
  ErrorStats s;
  double sum = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.as_double(i), y = e.as_double(i);
    bool ok;
    double d = 0;
    if (std::isnan(x) || std::isnan(y)) {
      ok = std::isnan(x) && std::isnan(y);
      d = ok ? 0 : NAN;
    } else if (std::isinf(x) || std::isinf(y)) {
      ok = x == y;
      d = ok ? 0 : INFINITY;
    } else {
      d = std::fabs(x - y);
      ok = d <= atol + rtol * std::fabs(y);
      if (y != 0) s.max_rel = std::max(s.max_rel, d / std::fabs(y));
    }
    if (std::isnan(d))
      s.max_abs = NAN;
    else if (!std::isnan(s.max_abs))
      s.max_abs = std::max(s.max_abs, d);
    sum += d;
    if (!ok) ++s.failing;
  }
  s.mean_abs = a.numel() ? sum / static_cast<double>(a.numel()) : 0.0;
  s.pass = s.failing == 0;
  return s;
}

double tolerance_for(const std::vector<std::string>& specs, const std::string& output, double def,
                     const std::vector<std::string>& outputs, const char* flag) {
  double all = def, mine = NAN;
  for (const auto& spec : specs) {
    auto eq = spec.rfind('=');
    std::string name = eq == std::string::npos ? "" : spec.substr(0, eq);
    std::string value = eq == std::string::npos ? spec : spec.substr(eq + 1);
    double v = 0;
    size_t used = 0;
    try {
      v = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != value.size() || !(v >= 0) || !std::isfinite(v))
      fail(flag, " '", spec, "': '", value, "' is not a tolerance (a finite number, 0 or more)");
    if (!name.empty() && std::find(outputs.begin(), outputs.end(), name) == outputs.end()) {
      auto near = nearest_names(name, outputs);
      fail(flag, " '", spec, "' names '", name, "', which is not an output of the model",
           near.empty() ? "; its outputs: " + quoted_list(outputs) : "; did you mean " + quoted_list(near) + "?");
    }
    if (name.empty()) all = v;
    if (name == output) mine = v;
  }
  return std::isnan(mine) ? all : mine;
}

}  // namespace reforge::cli
