// Runs the `reforge` command-line tool built with the tests (REFORGE_CLI_PATH), for tests of
// what a user sees: exit status and the combined stdout/stderr.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace reforge::test_support {

struct CliResult {
  int status = -1;     // as returned by pclose (0 on success)
  std::string output;  // stdout and stderr
};

inline CliResult run_cli(const std::string& args) {
  CliResult r;
  FILE* f = ::popen((std::string(REFORGE_CLI_PATH) + " " + args + " 2>&1").c_str(), "r");
  if (!f) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) r.output.append(buf.data(), n);
  r.status = ::pclose(f);
  return r;
}

}  // namespace reforge::test_support
