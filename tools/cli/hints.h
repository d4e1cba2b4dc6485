// What the reforge tool adds to a command-line parse error: the nearest command or option names
// for a misspelt one ("did you mean"), and, for flags of trtexec and Polygraphy, the reforge
// option that does the same thing (`--fp16` -> `--precision fp16`, `--saveEngine` -> `-o`).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace reforge::cli {

// `args` are the command-line arguments after the program name; `app` the parsed (failed)
// application. Returns "hint: ..." lines, one per finding, each ending in a newline; empty when
// there is nothing to add.
std::string parse_error_hints(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace reforge::cli
