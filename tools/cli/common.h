// Shared pieces of the reforge command-line tool: subcommand registration and small helpers
// for parsing NAME=FILE arguments and printing tensors.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/timing.h"  // percentile: bench's p50/p90/p99, generate's step times
#include "ir/graph.h"
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
Runner add_generate(CLI::App& app);

// Range checks of numeric options, as CLI11 validators: a value out of range is a usage error
// (exit 2) before any work, whose message names the option (CLI11 puts it first) and the range:
// "--threads: must be an integer from 0 to 1024 (0: all cores), got '-1'". `note` follows the range.
CLI::Validator integer_in(int64_t low, int64_t high, const std::string& note = "");
// 0 to 18446744073709551615 (a seed).
CLI::Validator unsigned_integer(const std::string& note = "");
// A finite number in [low, high] (high = infinity: no upper bound).
CLI::Validator number_in(double low, double high, const std::string& note = "");
// --threads of every command: 0 (all cores) to kMaxThreads.
inline constexpr int64_t kMaxThreads = 1024;
CLI::Validator threads_check();

// Adds `--precision fp32|bf16|fp16|int8|int4` (storage type of the MatMul/Gemm weights of a build) and
// `--activations fp32|bf16` (what bf16 Linear layers multiply them with) to `app`.
// `--block-size N` (int4 quantization blocks) too.
void add_precision_options(CLI::App& app, std::string& precision, std::string& activations, int64_t& block_size);
// --strip-prefix P / --add-prefix P: a checkpoint's tensor names renamed before they are read
// (refit::Checkpoint::with_key_prefix), for a checkpoint saved under another module name.
struct KeyPrefixes {
  std::string strip, add;
};
void add_key_prefix_options(CLI::App& app, KeyPrefixes& o);
// --lora PATH / --lora-scale S: a PEFT LoRA adapter merged into the checkpoint given with --weights
// (refit::LoraSource, refit/lora.h), its alpha / r multiplied by S.
struct LoraOptions {
  std::string path;
  double scale = 1;
};
void add_lora_options(CLI::App& app, LoraOptions& o);

// Adds `--no-verify` (load a plan file without hashing its weights; `run` and `bench`).
void add_no_verify_option(CLI::App& app, bool& no_verify);

// --device (the backend nodes run on: cpu, or cuda where reforge is built with it) and
// --allow-cpu-fallback (device builds: nodes without a device kernel run on the CPU, with
// explicit copies, instead of failing the build).
struct DeviceOptions {
  std::string device;  // "" = cpu for ONNX models, the plan's own for plans
  bool cpu_fallback = false;
};
void add_device_options(CLI::App& app, DeviceOptions& o);

// --timing-cache FILE (run, bench): the device backend's timing cache, read from FILE when it
// exists before the first run and written back after the last (backends::load_timing_cache_file,
// save_timing_cache_file). Processes given one file run the same algorithms.
void add_timing_cache_option(CLI::App& app, std::string& path);
// Throws "the CUDA backend cannot run here: REASON (CONTEXT)" when `backend` is a registered
// backend that cannot run on this machine (no GPU, no driver); an unknown backend is left to the
// builder, which names it.
void require_backend_here(const std::string& backend, const std::string& context);

// Where a plan's nodes run (backends/placement.h): on its device, shape computation and fallback
// on the CPU, and the transfers between them. Zero but on_host for a CPU plan.
struct PlacementSummary {
  bool device_memory = false;  // the plan's backend computes in device memory
  size_t on_device = 0, shape_on_host = 0, fallback = 0, transfers = 0, on_host = 0;
};
PlacementSummary summarize_placement(const plan::Plan& p);
// "fp32" or "" -> Fp32, "bf16" -> Bf16, "fp16" -> Fp16; anything else is an error.
plan::Precision parse_precision(const std::string& value);
// For a build with bf16 activations on a CPU without bfloat16 arithmetic (no oneDNN bf16 product),
// prints a note to stderr: there the option changes the numbers but not the speed.
void note_bf16_activations(plan::Precision activations);

// Parses "NAME=FILE.npy" pairs into tensors; errors name the argument.
std::map<std::string, Tensor> load_inputs(const std::vector<std::string>& specs);
// Synthetic inputs for graph inputs given no --input (as trtexec and Polygraphy make them):
// floating-point inputs uniform in [-1, 1), integer inputs uniform in [int_low, int_high), bool
// inputs 0 or 1, all from one generator seeded with `seed`, drawn input by input in declaration
// order, so the same seed gives the same bytes on every machine.
struct SynthOptions {
  uint64_t seed = 0;
  std::vector<std::string> shapes;  // "INPUT=1x128" (a whole shape) or "SYMBOL=4" (a symbolic dim)
  std::string int_range;            // "LOW:HIGH" (HIGH excluded); "" is [0, 100)
};
// An integer input's provable upper bound: the rows of a table it indexes directly (an ONNX Gather
// of an initializer along `axis`, its indices the graph input itself); synthetic values of the
// input without --int-range stay below the smallest such bound.
struct IndexBound {
  int64_t rows = 0;
  std::string table, node;  // the initializer and the Gather's label
};
// Of an ONNX model's graph (tables are its initializers) or of a plan's optimized graph (tables
// are its weights, whose shapes a weight-stripped plan records too).
std::map<std::string, IndexBound> index_bounds(const ir::Graph& g);
std::map<std::string, IndexBound> index_bounds(const plan::Plan& p);

// Adds `--seed`, `--shape` and `--int-range` to `app`; their values are checked as they are parsed
// (an integer seed, sizes from 0 to kMaxDim, LOW < HIGH within int64).
void add_synthetic_options(CLI::App& app, SynthOptions& options);
inline constexpr int64_t kMaxDim = 2147483647;
// The declared inputs missing from `inputs`, in declared order; none when a given input is not
// declared (the engine's input check names that one).
std::vector<const ir::ValueInfo*> missing_inputs(const std::map<std::string, Tensor>& inputs,
                                                 const std::vector<ir::ValueInfo>& declared);
// Fails unless `missing` is empty, naming each input with its declared type and shape, and how
// to give it (--input NAME=FILE.npy) or have it made (`synthesize_flag`).
void require_inputs(const std::vector<const ir::ValueInfo*>& missing, const std::string& synthesize_flag);
// "int64[batch,seq]": a declared type and shape ("?" for an unknown size or rank).
std::string declared_type(const ir::ValueInfo& v);
// Fills in every declared input missing from `inputs` with synthetic data shaped as declared:
// fixed dims as they are, a symbolic dim from `--shape SYMBOL=N`, or the whole shape from
// `--shape INPUT=AxB`. A dim neither fixed nor given is an error naming the input, the dim and its
// symbol (a size is never guessed); so is a --shape naming neither an input nor a symbol. When an
// input given is not declared, nothing is synthesized (running then reports it). Returns the
// names synthesized, in declared order.
std::vector<std::string> complete_inputs(std::map<std::string, Tensor>& inputs,
                                         const std::vector<ir::ValueInfo>& declared, const SynthOptions& options,
                                         const std::map<std::string, IndexBound>& bounds = {});
// One line per synthesized input for stderr: "synthesized input 'x': float32[1,3] uniform in [-1, 1) (seed 0)".
std::string describe_synthesized(const std::map<std::string, Tensor>& inputs, const std::vector<std::string>& names,
                                 const SynthOptions& options, const std::map<std::string, IndexBound>& bounds = {});

// Before long work that ends in writing `path` (named by option `flag`): fails, naming the file
// and the reason, when its folder does not exist or is not a folder, or `path` is a folder.
void check_output_file(const std::string& path, const char* flag);

// Before long work that ends in writing files into folder `dir` (named by option `flag`): fails,
// naming the folder and the reason, when `dir` or its nearest existing ancestor is not a folder
// or cannot be written. Creates nothing (create_output_folder does, when there is something to write).
void check_output_folder(const std::string& dir, const char* flag);
void create_output_folder(const std::string& dir, const char* flag);

// Output file name for a tensor name: characters outside [A-Za-z0-9._-] become '_'.
std::string safe_file_name(const std::string& name);
// DIR/safe_file_name(NAME).npy for each of `names`, in order. Fails before anything is written,
// naming both tensors (`what`: "outputs", "inputs") and the file, when two names map to one file
// (`a/b` and `a_b`); `flag` names the option that gave `dir`.
std::vector<std::string> npy_files(const std::string& dir, const std::vector<std::string>& names, const char* flag,
                                   const char* what);

// Largest |a - b| over all elements (NaN where exactly one side is NaN); shapes must match.
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace reforge::cli
