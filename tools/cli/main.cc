// reforge command-line tool. Every subcommand turns a reforge::Error into a message on stderr
// and exit code 1; usage errors exit with 2.
#include <iostream>

#include "common.h"
#include "core/error.h"
#include "core/version.h"
#include "hints.h"
#include "progress.h"

int main(int argc, char** argv) {
  CLI::App app{"reforge: an inference-engine compiler for ONNX models with trustworthy refit"};
  // "reforge 0.1.0": the producer string every plan this build writes records.
  app.set_version_flag("--version", std::string(reforge::kProducer), "Print the version and exit");
  app.require_subcommand(1);
  bool quiet = false, verbose = false;
  // Before or after the command: CLI11 hands options a command does not know to the tool.
  app.fallthrough();
  auto* q = app.add_flag("--quiet,-q", quiet, "print no progress and no notes on stderr (errors still)");
  app.add_flag("--verbose", verbose, "print every phase (import, build, refit, write) with its time on stderr")
      ->excludes(q);
  std::vector<std::pair<CLI::App*, reforge::cli::Runner>> cmds;
  auto add = [&](const char* name, const char* help, reforge::cli::Runner (*fn)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    cmds.emplace_back(sub, fn(*sub));
  };
  add("build", "Build a plan from an ONNX model", reforge::cli::add_build);
  add("refit", "Give a plan new weights (fast, slow or verified)", reforge::cli::add_refit);
  add("inspect", "Show a plan's weight table, provenance and sources", reforge::cli::add_inspect);
  add("check", "List every node reforge cannot run (exit 1 if any)", reforge::cli::add_check);
  add("run", "Run a model on .npy inputs and write .npy outputs", reforge::cli::add_run);
  add("conformance", "Run ONNX backend node tests", reforge::cli::add_conformance);
  add("bench", "Time a model in process; last line is JSON", reforge::cli::add_bench);
  add("generate", "Generate tokens with a decoder that carries a KV cache", reforge::cli::add_generate);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    if (rc != 0) std::cerr << reforge::cli::parse_error_hints(app, std::vector<std::string>(argv + 1, argv + argc));
    return rc == 0 ? 0 : 2;
  }
  reforge::cli::set_verbosity(quiet     ? reforge::cli::Verbosity::Quiet
                              : verbose ? reforge::cli::Verbosity::Verbose
                                        : reforge::cli::Verbosity::Normal);
  try {
    for (auto& [sub, runner] : cmds)
      if (sub->parsed()) return runner();
  } catch (const reforge::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 2;
}
