// `reforge conformance DIR [--list FILE] [--mode baked|refit] [--initializers none|weights|all]
// [--strip] [--raw]`: runs ONNX backend node tests (DIR/test_*/model.onnx with
// test_data_set_*/input_N.pb and output_N.pb) and compares with the suite's tolerances (rtol 1e-3,
// atol 1e-7, NaN equals NaN).
//
// By default every test goes the way a user's model goes: import -> build_plan (all default
// passes) -> serialize -> parse -> PlanEngine -> run, so a pass or plan-format bug fails the
// test that exposes it. `--mode refit` builds refittable plans instead. `--initializers weights`
// turns every test input but the first into an ONNX initializer holding the data set's value,
// `all` every input (the build folds the whole graph; in a refit plan every output is a derived
// weight whose recipe the build replays bit for bit); one plan per data set. So passes, literal
// classification and recipes see weights, not only runtime inputs. `--strip` (refit plans with
// initializers) then strips each plan, reloads it, refits it from the test's values through
// refit::Refitter and runs it again. `--raw` runs the imported graph directly through
// runtime::Engine (no passes, no plan), for telling an op bug from a pipeline bug. Each test
// runs in a forked child so that one crashing kernel is reported as a failure instead of ending
// the run.
//
// Every data set also checks shape and type inference against the truth: the imported graph is
// inferred with the data set's input shapes and the values of its small integer inputs
// (ops::infer_graph with InferOptions::input_shapes and input_values), and every graph output's inferred dtype and
// shape must be those of the tensor the run produced and of the expected output; a dimension that stays symbolic is not
// compared (its rank is). An inference that throws where the run succeeds fails the test too.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>

#include "builder/builder.h"
#include "builder/fingerprint.h"
#include "common.h"
#include "core/narrow.h"
#include "core/regular_file.h"
#include "onnx/importer.h"
#include "ops/infer_graph.h"
#include "ops/numerics.h"
#include "plan/plan_io.h"
#include "refit/refitter.h"
#include "runtime/engine.h"
#include "runtime/plan_engine.h"

namespace reforge::cli {

namespace fs = std::filesystem;

namespace {

struct ConfArgs {
  std::string dir;
  std::string list;
  bool no_fork = false;
  int timeout_s = 120;
  bool verbose = false;
  bool raw = false;                    // imported graph straight into runtime::Engine: no passes, no plan
  bool no_reference_rounding = false;  // build with the default 16-bit sums (ops/numerics.h)
  std::string mode = "baked";          // build mode of the plan: baked | refit
  std::string initializers = "none";   // none | weights (test inputs after the first) | all
  bool strip = false;                  // refit plans: also strip, reload and refit with the same values
  DeviceOptions device;                // where the tests run
};

// How one test is run (ConfArgs without the driver's options).
struct Way {
  bool raw = false;
  plan::BuildMode mode = plan::BuildMode::Baked;
  // How many leading test inputs stay graph inputs; the rest become initializers holding the
  // data set's values. SIZE_MAX: all stay inputs.
  size_t fed_inputs = SIZE_MAX;
  bool strip = false;
  std::string backend = "cpu";     // --device
  bool host_fallback = false;      // --allow-cpu-fallback
  bool reference_rounding = true;  // 16-bit Softmax/Attention sums as the reference rounds them
};

enum class Outcome { Pass, Fail, Skip };

std::string compare(const Tensor& got, const Tensor& want, const std::string& name) {
  if (got.dtype() != want.dtype())
    return "output '" + name + "' has type " + dtype_name(got.dtype()) + ", expected " + dtype_name(want.dtype());
  if (got.shape() != want.shape())
    return "output '" + name + "' has shape " + shape_str(got.shape()) + ", expected " + shape_str(want.shape());
  bool fp = is_float(want.dtype()) || (is_narrow(want.dtype()) && !is_narrow_integer(want.dtype()));
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (fp) {
      double g = got.as_double(i), w = want.as_double(i);
      if (std::isnan(g) && std::isnan(w)) continue;
      if (g == w) continue;
      if (std::isnan(g) || std::isnan(w) || !(std::fabs(g - w) <= 1e-7 + 1e-3 * std::fabs(w)))
        return "output '" + name + "' element " + std::to_string(i) + " is " + std::to_string(g) + ", expected " +
               std::to_string(w);
    } else if (got.as_int64(i) != want.as_int64(i)) {
      return "output '" + name + "' element " + std::to_string(i) + " is " + std::to_string(got.as_int64(i)) +
             ", expected " + std::to_string(want.as_int64(i));
    }
  }
  return "";
}

// Something that runs a graph: runtime::Engine (raw) or a PlanEngine made from the plan the
// graph builds into, after a round trip through the plan file format.
class TestEngine {
 public:
  TestEngine(ir::Graph graph, const Way& way) {
    if (way.raw) {
      if (way.reference_rounding) ops::mark_reference_rounding(graph);
      raw_ = std::make_unique<runtime::Engine>(
          runtime::lower_without_passes(std::move(graph), way.backend, way.host_fallback));
      return;
    }
    build::BuildOptions o;
    o.mode = way.mode;
    o.backend = way.backend;
    o.host_fallback = way.host_fallback;
    o.reference_rounding = way.reference_rounding;
    o.check_finite = false;  // test data holds NaN and Inf on purpose
    plan_ = reload(build::build_plan(std::move(graph), o));
  }
  // The same plan stripped of its refittable weights, reloaded, and refit (recipes replayed by
  // the Refitter) from the values it was built with.
  TestEngine stripped_and_refit(const std::map<std::string, Tensor>& initializers) const {
    TestEngine t;
    t.plan_ = reload(plan_->current_plan(/*strip=*/true));
    refit::Refitter r(*t.plan_);
    for (const auto& s : r.all_sources())
      if (s.refittable) {
        auto it = s.names.empty() ? initializers.end() : initializers.find(s.names[0]);
        if (it == initializers.end()) fail("source '", s.key, "' names no initializer of the test");
        r.set_source(s.id, it->second);
      }
    refit::CommitOptions co;
    co.check_finite = false;  // test data holds NaN and Inf on purpose
    r.commit(co);
    return t;
  }
  const std::vector<ir::ValueInfo>& inputs() const { return raw_ ? raw_->inputs() : plan_->inputs(); }
  const std::vector<ir::ValueInfo>& outputs() const { return raw_ ? raw_->outputs() : plan_->outputs(); }
  std::vector<Tensor> run(const std::map<std::string, Tensor>& in) const {
    return raw_ ? raw_->run(in) : plan_->run(in);
  }

 private:
  TestEngine() = default;
  static std::unique_ptr<runtime::PlanEngine> reload(const plan::Plan& p) {
    auto owner = std::make_shared<const std::string>(plan::serialize_plan(p));
    return std::make_unique<runtime::PlanEngine>(
        plan::parse_plan(owner, owner->data(), owner->size(), {}, "conformance plan"));
  }
  std::unique_ptr<runtime::Engine> raw_;
  std::unique_ptr<runtime::PlanEngine> plan_;
};

// The data set's input_N.pb files, in order.
std::vector<Tensor> read_inputs(const fs::path& set) {
  std::vector<Tensor> v;
  for (size_t i = 0;; ++i) {
    fs::path p = set / ("input_" + std::to_string(i) + ".pb");
    if (!fs::exists(p)) break;
    v.push_back(onnx::read_tensor_file(p.string()));
  }
  return v;
}

// Whether the concrete `t` is one of the values `v` describes; "" or the disagreement.
std::string type_disagreement(const ops::ValueType& v, const Tensor& t) {
  bool ok = v.dtype == t.dtype();
  if (ok && v.rank_known) {
    ok = static_cast<int64_t>(v.shape.size()) == t.rank();
    for (size_t d = 0; ok && d < v.shape.size(); ++d) ok = !v.shape[d].known() || v.shape[d].value() == t.shape()[d];
  }
  return ok ? "" : v.str() + ", but " + dtype_name(t.dtype()) + shape_str(t.shape());
}

// Infers `graph` with the shapes of the first `fed` values as its inputs' shapes (and the values
// of small integer ones, which shape-like inputs are, so that sizes computed from them are
// checked as numbers) and compares
// each graph output's inferred type with `outs` (what the run produced, in the runner's output
// order) and the data set's expected outputs. Returns "" or why they disagree.
std::string check_inference(const ir::Graph& graph, const std::vector<Tensor>& values, size_t fed,
                            const std::vector<ir::ValueInfo>& out_infos, const std::vector<Tensor>& outs,
                            const fs::path& set) {
  std::map<std::string, Shape> shapes;
  std::map<std::string, Tensor> shape_values;  // small integer inputs: shapes, axes, bounds, counts
  for (size_t i = 0; i < fed && i < graph.inputs.size(); ++i) {
    shapes[graph.inputs[i].name] = values[i].shape();
    if (is_integer(values[i].dtype()) && values[i].rank() <= 1 && values[i].numel() <= 64)
      shape_values[graph.inputs[i].name] = values[i];
  }
  ops::InferOptions o;
  o.input_shapes = &shapes;
  o.input_values = &shape_values;
  o.require_all = ops::kEveryOpInferred;
  ops::GraphTypes types;
  try {
    types = ops::infer_graph(graph, o);
  } catch (const Error& e) {
    return std::string("shape inference fails where the run succeeds: ") + e.what();
  }
  for (size_t i = 0; i < out_infos.size() && i < outs.size(); ++i) {
    const std::string& name = out_infos[i].name;
    const ops::ValueType* t = types.find(name);
    if (!t) return "shape inference gives output '" + name + "' no type";
    // Without every op inferred, an output behind an op without inference has no type to check.
    if (!ops::kEveryOpInferred && t->dtype == DType::Undefined && !t->rank_known) continue;
    std::string why = type_disagreement(*t, outs[i]);
    if (!why.empty()) return "shape inference: output '" + name + "' is inferred " + why + " in the run";
    fs::path p = set / ("output_" + std::to_string(i) + ".pb");
    if (!fs::exists(p)) continue;
    why = type_disagreement(*t, onnx::read_tensor_file(p.string()));
    if (!why.empty()) return "shape inference: output '" + name + "' is inferred " + why + " expected";
  }
  return "";
}

// Runs `runner` on one data set twice (the first run from the activation arena planned from
// inferred shapes, the second also from the shape-subgraph memo and with the aliases the first
// found; both must match). Only the first
// `fed` values are fed (the rest were made initializers). Returns "" or why it failed.
std::string run_set(const TestEngine& runner, const fs::path& set, const std::vector<Tensor>& values, size_t fed,
                    std::vector<Tensor>* first_outputs = nullptr) {
  std::map<std::string, Tensor> inputs;
  for (size_t i = 0; i < fed; ++i) {
    if (i >= runner.inputs().size()) return "more input files than graph inputs";
    inputs[runner.inputs()[i].name] = values[i];
  }
  for (const char* pass : {"", " (second run, from the memo)"}) {
    auto outs = runner.run(inputs);
    if (first_outputs && first_outputs->empty()) *first_outputs = outs;
    for (size_t i = 0;; ++i) {
      fs::path p = set / ("output_" + std::to_string(i) + ".pb");
      if (!fs::exists(p)) break;
      if (i >= outs.size()) return "more output files than graph outputs";
      std::string why = compare(outs[i], onnx::read_tensor_file(p.string()), runner.outputs()[i].name);
      if (!why.empty()) return set.filename().string() + pass + ": " + why;
    }
  }
  return "";
}

// Runs one test folder; returns (outcome, reason).
std::pair<Outcome, std::string> run_test(const fs::path& dir, const Way& way) {
  if (!fs::exists(dir / "model.onnx")) return {Outcome::Fail, "no model.onnx"};
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  for (const auto& s : sets)
    for (const auto& e : fs::directory_iterator(s))
      if (e.path().extension() == ".unsupported") return {Outcome::Skip, "uses sequence, map or optional values"};
  try {
    std::string model = (dir / "model.onnx").string();
    if (way.fed_inputs == SIZE_MAX) {
      ir::Graph imported = onnx::import_model_file(model);
      TestEngine runner(imported, way);
      for (const auto& s : sets) {
        std::vector<Tensor> values = read_inputs(s);
        std::vector<Tensor> outs;
        std::string why = run_set(runner, s, values, values.size(), &outs);
        if (why.empty()) why = check_inference(imported, values, values.size(), runner.outputs(), outs, s);
        if (!why.empty()) return {Outcome::Fail, why};
      }
    } else {
      // One graph per data set: inputs from fed_inputs on become initializers holding this set's values.
      for (const auto& s : sets) {
        ir::Graph g = onnx::import_model_file(model);
        std::vector<Tensor> values = read_inputs(s);
        if (values.size() > g.inputs.size()) return {Outcome::Fail, "more input files than graph inputs"};
        size_t first = std::min(way.fed_inputs, values.size());
        for (size_t i = first; i < values.size(); ++i) g.initializers[g.inputs[i].name] = values[i];
        g.inputs.erase(g.inputs.begin() + static_cast<std::ptrdiff_t>(first),
                       g.inputs.begin() + static_cast<std::ptrdiff_t>(values.size()));
        // The sources' values as a refit from this model would find them: the canonical graph's
        // initializers (with the zero biases canonicalize() makes explicit).
        std::map<std::string, Tensor> initializers;
        if (way.strip) initializers = build::canonicalize(g).initializers;
        TestEngine runner(g, way);
        std::vector<Tensor> outs;
        std::string why = run_set(runner, s, values, first, &outs);
        if (why.empty()) why = check_inference(g, values, first, runner.outputs(), outs, s);
        if (!why.empty()) return {Outcome::Fail, why};
        if (way.strip) {
          why = run_set(runner.stripped_and_refit(initializers), s, values, first);
          if (!why.empty()) return {Outcome::Fail, "stripped and refit: " + why};
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

// Runs `work` in a forked child (which gets alarm(timeout_s) when timeout_s > 0) and returns the
// text it returned, read back through a pipe, and the child's wait status; nullopt when no child
// could be started.
std::optional<std::pair<std::string, int>> in_child(const std::function<std::string()>& work, int timeout_s) {
  int fds[2];
  if (pipe(fds) != 0) return std::nullopt;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    close(fds[0]);
    if (timeout_s > 0) alarm(static_cast<unsigned>(timeout_s));
    const std::string msg = work();
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
  return std::make_pair(std::move(msg), status);
}

// Runs the test in a forked child, which reports "P|F|S reason".
std::pair<Outcome, std::string> run_isolated(const fs::path& dir, const Way& way, int timeout_s) {
  auto child = in_child(
      [&] {
        auto [o, why] = run_test(dir, way);
        return std::string(o == Outcome::Pass ? "P" : o == Outcome::Skip ? "S" : "F") + why;
      },
      timeout_s);
  if (!child) return run_test(dir, way);
  const auto& [msg, status] = *child;
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return {Outcome::Fail, sig == SIGALRM ? "timed out after " + std::to_string(timeout_s) + " s"
                                          : "crashed with signal " + std::to_string(sig)};
  }
  if (msg.empty()) return {Outcome::Fail, "test process ended without a result"};
  Outcome o = msg[0] == 'P' ? Outcome::Pass : msg[0] == 'S' ? Outcome::Skip : Outcome::Fail;
  return {o, msg.substr(1)};
}

// require_backend_here() asked in a forked child: a device runtime initialized in this process
// (CUDA's) cannot be used by the children forked after it, so the process that forks the tests
// must not touch the device itself.
void require_backend_here_isolated(const std::string& backend, const std::string& context) {
  auto child = in_child(
      [&] {
        try {
          require_backend_here(backend, context);
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      },
      0);
  if (!child) return require_backend_here(backend, context);
  const auto& [msg, status] = *child;
  if (!msg.empty()) fail(msg);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail("the ", backend, " backend could not be checked (", context, "): the checking process crashed");
}

}  // namespace

Runner add_conformance(CLI::App& app) {
  auto a = std::make_shared<ConfArgs>();
  app.add_option("dir", a->dir,
                 "the ONNX node suite's folder of test_* folders (onnx/backend/test/data/node, or "
                 "build/onnx-node-suite/node as scripts/test.sh unpacks it from $REFORGE_ONNX_SUITE)");
  app.add_option("--list", a->list,
                 "file naming the tests to run, one per line; a listed test that fails fails the command");
  app.add_flag("--no-fork", a->no_fork, "run tests in this process (faster, but a crash ends the run)");
  app.add_option("--timeout", a->timeout_s, "seconds per test (default 120)")->check(integer_in(1, 86400, " seconds"));
  app.add_flag("--verbose,-v", a->verbose, "also print passing tests");
  auto* mode = app.add_option("--mode", a->mode, "build mode of each test's plan: baked (default) or refit")
                   ->check(CLI::IsMember({"baked", "refit"}));
  app.add_option("--initializers", a->initializers,
                 "none (default); weights: every test input but the first becomes an initializer holding its "
                 "value; all: every test input does (the build folds the whole graph); one plan per data set")
      ->check(CLI::IsMember({"none", "weights", "all"}));
  app.add_flag("--strip", a->strip,
               "with --mode refit and --initializers: also strip each plan, reload it, refit it from the test's values "
               "and run it again")
      ->needs(mode);
  add_device_options(app, a->device);
  app.add_flag("--raw", a->raw, "run the imported graph directly (no passes, no plan), for debugging")->excludes(mode);
  app.add_flag("--no-reference-rounding", a->no_reference_rounding,
               "build with reforge's default 16-bit Softmax/Attention sums (accumulated in float32, rounded once) "
               "instead of the ONNX reference's (rounded after each addition), which the suite's 16-bit expected "
               "outputs carry");
  return [a]() {
    Way way;
    way.raw = a->raw;
    way.mode = a->mode == "refit" ? plan::BuildMode::Refit : plan::BuildMode::Baked;
    if (a->initializers == "weights") way.fed_inputs = 1;
    if (a->initializers == "all") way.fed_inputs = 0;
    way.strip = a->strip;
    way.backend = a->device.device.empty() ? std::string("cpu") : a->device.device;
    way.host_fallback = a->device.cpu_fallback;
    way.reference_rounding = !a->no_reference_rounding;
    if (a->no_fork)
      require_backend_here(way.backend, "conformance --device " + way.backend);
    else
      require_backend_here_isolated(way.backend, "conformance --device " + way.backend);
    if (a->strip && (a->mode != "refit" || a->initializers == "none"))
      fail("--strip needs --mode refit and --initializers weights or all (otherwise the plan has nothing to strip)");
    const char* where =
        "the 'node' folder of the ONNX backend node suite (test_*/ folders with model.onnx): "
        "onnx/backend/test/data/node in an ONNX source checkout, or build/onnx-node-suite/node once scripts/test.sh "
        "has unpacked the suite's node*.tar.xz archives from the folder $REFORGE_ONNX_SUITE names";
    if (a->dir.empty()) fail("conformance needs the node test folder (reforge conformance DIR): DIR is ", where);
    if (!fs::is_directory(a->dir))
      fail("conformance: the node test folder '", a->dir, "' does not exist or is not a folder; it must be ", where);
    std::vector<std::string> names;
    bool listed = !a->list.empty();
    if (listed) {
      std::istringstream in(read_regular_file(a->list, size_t(16) << 20, "test list"));
      std::string line;
      while (std::getline(in, line)) {
        line.erase(line.find_last_not_of(" \t\r") + 1);
        if (!line.empty() && line[0] != '#') names.push_back(line);
      }
    } else {
      for (const auto& e : fs::directory_iterator(a->dir))
        if (e.is_directory()) names.push_back(e.path().filename().string());
      std::sort(names.begin(), names.end());
    }
    int passed = 0, failed = 0, skipped = 0;
    for (const auto& name : names) {
      fs::path dir = fs::path(a->dir) / name;
      std::pair<Outcome, std::string> r;
      if (!fs::is_directory(dir))
        r = {Outcome::Fail, "test folder not found"};
      else
        r = a->no_fork ? run_test(dir, way) : run_isolated(dir, way, a->timeout_s);
      switch (r.first) {
        case Outcome::Pass:
          ++passed;
          if (a->verbose) std::cout << "PASS " << name << "\n";
          break;
        case Outcome::Fail:
          ++failed;
          std::cout << "FAIL " << name << ": " << r.second << "\n";
          break;
        case Outcome::Skip:
          ++skipped;
          std::cout << "SKIP " << name << ": " << r.second << "\n";
          break;
      }
      std::cout.flush();
    }
    std::string how = a->raw ? "raw graph, no plan" : a->mode + " plan";
    if (a->initializers != "none") how += ", initializers: " + a->initializers;
    if (a->strip) how += ", stripped and refit";
    std::cout << "conformance: " << passed << " passed, " << failed << " failed, " << skipped << " skipped (" << how
              << ")" << std::endl;
    return (listed && failed > 0) ? 1 : 0;
  };
}

}  // namespace reforge::cli
