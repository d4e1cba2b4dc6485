#include "common.h"

#include <cmath>
#include <iostream>

#include "backends/cpu/dnnl_matmul.h"
#include "core/dispatch.h"
#include "core/npy.h"

namespace reforge::cli {

void add_precision_options(CLI::App& app, std::string& precision, std::string& activations) {
  app.add_option("--precision", precision,
                 "storage type of MatMul/Gemm weights when building: fp32 (default), bf16 or fp16 "
                 "(float32 activations and accumulation; a refit re-applies the cast)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--activations", activations,
                 "with --precision bf16: fp32 (default: exact activations) or bf16 (round them to bfloat16 before each "
                 "MatMul/Gemm: faster on CPUs with bfloat16 arithmetic, less accurate)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
}

void add_no_verify_option(CLI::App& app, bool& no_verify) {
  app.add_flag("--no-verify", no_verify,
               "do not hash a plan file's weights against the hashes it records before running it "
               "(corrupted weight bytes then run silently)");
}

plan::Precision parse_precision(const std::string& value) {
  if (value.empty() || value == "fp32") return plan::Precision::Fp32;
  if (value == "bf16") return plan::Precision::Bf16;
  if (value == "fp16") return plan::Precision::Fp16;
  fail("--precision must be fp32, bf16 or fp16, got '", value, "'");
}

void note_bf16_activations(plan::Precision activations) {
  if (activations == plan::Precision::Bf16 && !cpu::has_bf16_matmul())
    std::cerr << "note: this CPU has no bfloat16 arithmetic: --activations bf16 rounds the activations here "
                 "(more error) without making the products faster; it pays on CPUs with AVX512-BF16 or AMX\n";
}

std::map<std::string, Tensor> load_inputs(const std::vector<std::string>& specs) {
  std::map<std::string, Tensor> inputs;
  for (const auto& spec : specs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) fail("--input '", spec, "' is not NAME=FILE.npy");
    std::string name = spec.substr(0, eq);
    if (inputs.count(name)) fail("input '", name, "' is given twice");
    inputs[name] = read_npy(spec.substr(eq + 1));
  }
  return inputs;
}

std::string safe_file_name(const std::string& name) {
  std::string s = name;
  for (char& c : s)
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == '-'))
      c = '_';
  if (s.empty() || s == "." || s == "..") s = "_" + s;
  return s;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REFORGE_CHECK(a.shape() == b.shape(), "shapes differ: ", a.describe(), " vs ", b.describe());
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.as_double(i), y = b.as_double(i);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (std::isnan(x) != std::isnan(y)) return NAN;
    if (x == y) continue;  // equal infinities
    worst = std::max(worst, std::fabs(x - y));
  }
  return worst;
}

}  // namespace reforge::cli
