// Shared pieces of the reforge command-line tool: subcommand registration and small helpers
// for parsing NAME=FILE arguments and printing tensors.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "plan/plan.h"

namespace reforge::cli {

// Each subcommand file defines one of these; main() wires them into CLI11. The returned
// function runs after parsing and returns the process exit code.
using Runner = std::function<int()>;
Runner add_check(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_conformance(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_build(CLI::App& app);
Runner add_refit(CLI::App& app);
Runner add_inspect(CLI::App& app);

// Adds `--precision fp32|bf16|fp16` (storage type of the MatMul/Gemm weights of a build) and
// `--activations fp32|bf16` (what bf16 Linear layers multiply them with) to `app`.
void add_precision_options(CLI::App& app, std::string& precision, std::string& activations);
// Adds `--no-verify` (load a plan file without hashing its weights; `run` and `bench`).
void add_no_verify_option(CLI::App& app, bool& no_verify);
// "fp32" or "" -> Fp32, "bf16" -> Bf16, "fp16" -> Fp16; anything else is an error.
plan::Precision parse_precision(const std::string& value);
// For a build with bf16 activations on a CPU without bfloat16 arithmetic (no oneDNN bf16 product),
// prints a note to stderr: there the option changes the numbers but not the speed.
void note_bf16_activations(plan::Precision activations);

// Parses "NAME=FILE.npy" pairs into tensors; errors name the argument.
std::map<std::string, Tensor> load_inputs(const std::vector<std::string>& specs);
// Output file name for a tensor name: characters outside [A-Za-z0-9._-] become '_'.
std::string safe_file_name(const std::string& name);

// Largest |a - b| over all elements (NaN where exactly one side is NaN); shapes must match.
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace reforge::cli
