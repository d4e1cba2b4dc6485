#include "hints.h"

#include <map>

#include "core/nearest_names.h"

namespace reforge::cli {

namespace {

// trtexec and Polygraphy flags (lower-cased, without the value) and what reforge offers instead.
const std::map<std::string, std::string>& foreign_flags() {
  static const std::map<std::string, std::string> m = {
      {"--fp16", "reforge takes '--precision fp16' (fp16 weights, float32 activations)"},
      {"--bf16", "reforge takes '--precision bf16' (and '--activations bf16' for bfloat16 activations)"},
      {"--fp32", "reforge takes '--precision fp32' (the default)"},
      {"--int8", "reforge has no int8 build: '--precision' is fp32, bf16 or fp16"},
      {"--best", "reforge has no '--best': choose '--precision fp32|bf16|fp16'"},
      {"--saveengine", "reforge writes the plan with '-o FILE' ('reforge build MODEL.onnx -o FILE.plan')"},
      {"--loadengine", "reforge takes the plan file as the model argument ('reforge run FILE.plan')"},
      {"--onnx", "reforge takes the ONNX file as the model argument ('reforge build MODEL.onnx')"},
      {"--shapes", "reforge takes '--shape INPUT=1x128' or '--shape SYMBOL=N' (one per input or symbol)"},
      {"--optshapes", "reforge takes '--shape INPUT=1x128' or '--shape SYMBOL=N'"},
      {"--minshapes", "reforge builds for every shape: give the run's shape with '--shape INPUT=1x128'"},
      {"--maxshapes", "reforge builds for every shape: give the run's shape with '--shape INPUT=1x128'"},
      {"--loadinputs", "reforge takes '--input NAME=FILE.npy' (one per input)"},
      {"--avgruns", "reforge takes '--iterations N' (timed runs; 'bench')"},
      {"--warmup", "reforge's '--warmup N' counts untimed runs (not milliseconds)"},
      {"--exportprofile", "reforge writes a Chrome trace with 'bench --profile-json FILE'"},
      {"--exporttimes", "reforge's 'bench --json' reports the timing statistics"},
      {"--dumpprofile", "reforge prints the per-op profile with 'bench --profile'"},
      {"--workspace", "reforge plans its own memory: no workspace size to give"},
      {"--mempoolsize", "reforge plans its own memory: no pool size to give"},
      {"--onnxrt", "reforge compares with ONNX Runtime through 'run --compare-onnxrt'"},
      {"--save-engine", "reforge writes the plan with '-o FILE' ('reforge build MODEL.onnx -o FILE.plan')"},
  };
  return m;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string parse_error_hints(const CLI::App& app, const std::vector<std::string>& args) {
  std::string out;
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    commands.push_back(sub->get_name());
  // The command: the first argument that is not an option.
  const CLI::App* cmd = nullptr;
  size_t first = 0;
  while (first < args.size() && !args[first].empty() && args[first][0] == '-') ++first;
  if (first < args.size()) {
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      if (sub->get_name() == args[first]) cmd = sub;
    if (!cmd) {
      auto near = nearest_names(args[first], commands);
      out += "hint: '" + args[first] + "' is not a reforge command" +
             (near.empty() ? "; the commands: " + quoted_list(commands) : "; did you mean " + quoted_list(near) + "?") +
             "\n";
    }
  }
  std::vector<std::string> known;  // the options of the command (or of the tool)
  const CLI::App& scope = cmd ? *cmd : app;
  for (const CLI::Option* o : scope.get_options()) {
    for (const auto& n : o->get_lnames()) known.push_back("--" + n);
    for (const auto& n : o->get_snames()) known.push_back("-" + n);
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    std::string flag = arg.substr(0, arg.find('='));
    std::string value = arg.find('=') != std::string::npos ? arg.substr(arg.find('=') + 1)
                        : i + 1 < args.size()              ? args[i + 1]
                                                           : "";
    if (flag == "--iterations" && value == "0") {
      out += "hint: --iterations counts timed runs and must be 1 or more";
      out += cmd && cmd->get_name() == "bench" ? "; to time for a while instead, give '--duration SECONDS'\n" : "\n";
      continue;
    }
    if (std::find(known.begin(), known.end(), flag) != known.end()) continue;
    auto f = foreign_flags().find(lower(flag));
    if (f != foreign_flags().end()) {
      out += "hint: '" + flag + "' is a trtexec/Polygraphy flag: " + f->second + "\n";
      continue;
    }
    if (flag.size() > 2 && flag[1] == '-') {
      auto near = nearest_names(flag, known);
      if (!near.empty())
        out += "hint: '" + flag + "' is not an option of '" + (cmd ? cmd->get_name() : "reforge") + "'; did you mean " +
               quoted_list(near) + "?\n";
    }
  }
  return out;
}

}  // namespace reforge::cli
