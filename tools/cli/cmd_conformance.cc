// `reforge conformance DIR [--list FILE]`: runs ONNX backend node tests (DIR/test_*/model.onnx
// with test_data_set_*/input_N.pb and output_N.pb) through the public API and compares with the
// suite's tolerances (rtol 1e-3, atol 1e-7, NaN equals NaN). Each test runs in a forked child
// so that one crashing kernel is reported as a failure instead of ending the run.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "common.h"
#include "onnx/importer.h"
#include "runtime/engine.h"

namespace reforge::cli {

namespace fs = std::filesystem;

namespace {

struct ConfArgs {
  std::string dir;
  std::string list;
  bool no_fork = false;
  int timeout_s = 120;
  bool verbose = false;
};

enum class Outcome { Pass, Fail, Skip };

std::string compare(const Tensor& got, const Tensor& want, const std::string& name) {
  if (got.dtype() != want.dtype())
    return "output '" + name + "' has type " + dtype_name(got.dtype()) + ", expected " + dtype_name(want.dtype());
  if (got.shape() != want.shape())
    return "output '" + name + "' has shape " + shape_str(got.shape()) + ", expected " + shape_str(want.shape());
  bool fp = is_float(want.dtype());
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (fp) {
      double g = got.as_double(i), w = want.as_double(i);
      if (std::isnan(g) && std::isnan(w)) continue;
      if (g == w) continue;
      if (std::isnan(g) || std::isnan(w) || !(std::fabs(g - w) <= 1e-7 + 1e-3 * std::fabs(w)))
        return "output '" + name + "' element " + std::to_string(i) + " is " + std::to_string(g) + ", expected " + std::to_string(w);
    } else if (got.as_int64(i) != want.as_int64(i)) {
      return "output '" + name + "' element " + std::to_string(i) + " is " + std::to_string(got.as_int64(i)) + ", expected " +
             std::to_string(want.as_int64(i));
    }
  }
  return "";
}

// Runs one test folder; returns (outcome, reason).
std::pair<Outcome, std::string> run_test(const fs::path& dir) {
  if (!fs::exists(dir / "model.onnx")) return {Outcome::Fail, "no model.onnx"};
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  for (const auto& s : sets)
    for (const auto& e : fs::directory_iterator(s))
      if (e.path().extension() == ".unsupported") return {Outcome::Skip, "uses sequence, map or optional values"};
  try {
    runtime::Engine engine(onnx::import_model_file((dir / "model.onnx").string()));
    for (const auto& s : sets) {
      std::map<std::string, Tensor> inputs;
      for (size_t i = 0;; ++i) {
        fs::path p = s / ("input_" + std::to_string(i) + ".pb");
        if (!fs::exists(p)) break;
        if (i >= engine.inputs().size()) return {Outcome::Fail, "more input files than graph inputs"};
        inputs[engine.inputs()[i].name] = onnx::read_tensor_file(p.string());
      }
      // Twice: the first run records the activation arena's layout, the second runs from it
      // (and from the shape-subgraph memo); both must match.
      for (const char* pass : {"", " (second run, from the arena)"}) {
        auto outs = engine.run(inputs);
        for (size_t i = 0;; ++i) {
          fs::path p = s / ("output_" + std::to_string(i) + ".pb");
          if (!fs::exists(p)) break;
          if (i >= outs.size()) return {Outcome::Fail, "more output files than graph outputs"};
          std::string why = compare(outs[i], onnx::read_tensor_file(p.string()), engine.outputs()[i].name);
          if (!why.empty()) return {Outcome::Fail, s.filename().string() + pass + ": " + why};
        }
      }
    }
  } catch (const std::exception& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    return {Outcome::Fail, msg};
  }
  return {Outcome::Pass, ""};
}

// Forks, runs the test in the child, reads back "P|F|S reason" through a pipe.
std::pair<Outcome, std::string> run_isolated(const fs::path& dir, int timeout_s) {
  int fds[2];
  if (pipe(fds) != 0) return run_test(dir);
  pid_t pid = fork();
  if (pid < 0) return run_test(dir);
  if (pid == 0) {
    close(fds[0]);
    alarm(static_cast<unsigned>(timeout_s));
    auto [o, why] = run_test(dir);
    std::string msg = std::string(o == Outcome::Pass ? "P" : o == Outcome::Skip ? "S" : "F") + why;
    ssize_t w = write(fds[1], msg.data(), msg.size());
    (void)w;
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return {Outcome::Fail, sig == SIGALRM ? "timed out after " + std::to_string(timeout_s) + " s" : "crashed with signal " + std::to_string(sig)};
  }
  if (msg.empty()) return {Outcome::Fail, "test process ended without a result"};
  Outcome o = msg[0] == 'P' ? Outcome::Pass : msg[0] == 'S' ? Outcome::Skip : Outcome::Fail;
  return {o, msg.substr(1)};
}

}  // namespace

Runner add_conformance(CLI::App& app) {
  auto a = std::make_shared<ConfArgs>();
  app.add_option("dir", a->dir, "folder holding test_* folders (e.g. onnx/backend/test/data/node)")->required();
  app.add_option("--list", a->list, "file naming the tests to run, one per line; a listed test that fails fails the command");
  app.add_flag("--no-fork", a->no_fork, "run tests in this process (faster, but a crash ends the run)");
  app.add_option("--timeout", a->timeout_s, "seconds per test (default 120)");
  app.add_flag("--verbose,-v", a->verbose, "also print passing tests");
  return [a]() {
    std::vector<std::string> names;
    bool listed = !a->list.empty();
    if (listed) {
      std::ifstream in(a->list);
      if (!in) fail("cannot read test list '", a->list, "'");
      std::string line;
      while (std::getline(in, line)) {
        line.erase(line.find_last_not_of(" \t\r") + 1);
        if (!line.empty() && line[0] != '#') names.push_back(line);
      }
    } else {
      if (!fs::is_directory(a->dir)) fail("'", a->dir, "' is not a folder");
      for (const auto& e : fs::directory_iterator(a->dir))
        if (e.is_directory()) names.push_back(e.path().filename().string());
      std::sort(names.begin(), names.end());
    }
    int passed = 0, failed = 0, skipped = 0;
    for (const auto& name : names) {
      fs::path dir = fs::path(a->dir) / name;
      std::pair<Outcome, std::string> r;
      if (!fs::is_directory(dir)) r = {Outcome::Fail, "test folder not found"};
      else r = a->no_fork ? run_test(dir) : run_isolated(dir, a->timeout_s);
      switch (r.first) {
        case Outcome::Pass: ++passed; if (a->verbose) std::cout << "PASS " << name << "\n"; break;
        case Outcome::Fail: ++failed; std::cout << "FAIL " << name << ": " << r.second << "\n"; break;
        case Outcome::Skip: ++skipped; std::cout << "SKIP " << name << ": " << r.second << "\n"; break;
      }
      std::cout.flush();
    }
    std::cout << "conformance: " << passed << " passed, " << failed << " failed, " << skipped << " skipped" << std::endl;
    return (listed && failed > 0) ? 1 : 0;
  };
}

}  // namespace reforge::cli
