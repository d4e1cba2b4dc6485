#include "common.h"
#include "npz.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <random>
#include <set>
#include <sstream>

#include "backends/backend.h"
#include "backends/cpu/dnnl_matmul.h"
#include "backends/placement.h"
#include "core/dispatch.h"
#include "core/nearest_names.h"
#include "core/npy.h"
#include "ops/reforge/quant_weight.h"

namespace reforge::cli {

namespace {

// `text` as CLI11 converts it (strtoll/strtoull with base 0: "0x10" is 16): false when it is not
// an integer, has more characters, or overflows.
bool parse_integer(const std::string& text, int64_t& out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 0);
  if (errno == ERANGE || end != text.c_str() + text.size()) return false;
  out = v;
  return true;
}

bool parse_unsigned(const std::string& text, uint64_t& out) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;  // strtoull wraps "-1"
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 0);
  if (errno == ERANGE || end != text.c_str() + text.size()) return false;
  out = v;
  return true;
}

std::string number_str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

CLI::Validator integer_in(int64_t low, int64_t high, const std::string& note) {
  std::string range = "an integer from " + std::to_string(low) + " to " + std::to_string(high) + note;
  return CLI::Validator(
      [low, high, range](std::string& text) {
        int64_t v = 0;
        return parse_integer(text, v) && v >= low && v <= high ? std::string()
                                                               : "must be " + range + ", got '" + text + "'";
      },
      "INT in [" + std::to_string(low) + ", " + std::to_string(high) + "]");
}

CLI::Validator unsigned_integer(const std::string& note) {
  std::string range = "an integer from 0 to " + std::to_string(std::numeric_limits<uint64_t>::max()) + note;
  return CLI::Validator(
      [range](std::string& text) {
        uint64_t v = 0;
        return parse_unsigned(text, v) ? std::string() : "must be " + range + ", got '" + text + "'";
      },
      "UINT64");
}

CLI::Validator number_in(double low, double high, const std::string& note) {
  std::string range = std::isinf(high) ? "a finite number, " + number_str(low) + " or more" + note
                                       : "a number from " + number_str(low) + " to " + number_str(high) + note;
  return CLI::Validator(
      [low, high, range](std::string& text) {
        char* end = nullptr;
        errno = 0;
        const double v =
            text.empty() || std::isspace(static_cast<unsigned char>(text[0])) ? NAN : std::strtod(text.c_str(), &end);
        const bool ok =
            end == text.c_str() + text.size() && errno != ERANGE && std::isfinite(v) && v >= low && v <= high;
        return ok ? std::string() : "must be " + range + ", got '" + text + "'";
      },
      "NUMBER");
}

CLI::Validator threads_check() { return integer_in(0, kMaxThreads, " (0: all cores)"); }

void add_key_prefix_options(CLI::App& app, KeyPrefixes& o) {
  app.add_option("--strip-prefix", o.strip,
                 "remove P from the front of the checkpoint's tensor names that begin with it (a checkpoint saved "
                 "under another module name: 'model.'); an error when none does");
  app.add_option("--add-prefix", o.add, "put P in front of every checkpoint tensor name (after --strip-prefix)");
}

void add_lora_options(CLI::App& app, LoraOptions& o) {
  auto* lora = app.add_option("--lora", o.path,
                              "a LoRA adapter as PEFT saves it (its folder, or adapter_model.safetensors with "
                              "adapter_config.json beside it), merged into the --weights checkpoint first: "
                              "W + alpha/r * B @ A");
  app.add_option("--lora-scale", o.scale, "multiply the adapter's alpha/r by S (default 1)")->needs(lora);
}

void add_precision_options(CLI::App& app, std::string& precision, std::string& activations, int64_t& block_size) {
  app.add_option("--precision", precision,
                 "storage type of MatMul/Gemm weights when building: fp32 (default), bf16 or fp16 (a cast), int8 "
                 "(symmetric, per output channel) or int4 (asymmetric, blocks of --block-size along K, ONNX Runtime's "
                 "MatMulNBits layout); float32 activations and accumulation; a refit re-applies the cast or "
                 "re-quantizes, CPU only for int8/int4")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "int8", "int4"}));
  app.add_option("--block-size", block_size,
                 "with --precision int4: weights per quantization block along K, a power of two from 16 to 1048576 "
                 "(default 32)")
      ->check(CLI::Validator(
          [](std::string& text) {
            int64_t v = 0;
            return parse_integer(text, v) && v > 0 && ops::quant::valid_block_size(v)
                       ? std::string()
                       : "must be a power of two from 16 to 1048576 (the int4 layout's block sizes), got '" + text +
                             "'";
          },
          "POWER OF 2 in [16, 1048576]"));
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

void add_device_options(CLI::App& app, DeviceOptions& o) {
  std::string names;
  for (const auto& n : backends::backend_names()) names += (names.empty() ? "" : ", ") + n;
  app.add_option("--device", o.device, "where nodes run: " + names + " (default cpu; a plan runs where it was built)")
      ->check(CLI::IsMember(backends::backend_names()));
  app.add_flag("--allow-cpu-fallback", o.cpu_fallback,
               "with --device cuda: run nodes that have no CUDA kernel on the CPU, with explicit copies (shown by "
               "inspect), instead of failing the build");
}

void add_timing_cache_option(CLI::App& app, std::string& path) {
  app.add_option("--timing-cache", path,
                 "with a GPU plan: read the convolution algorithms chosen for each geometry from this file when it "
                 "exists, and write back every choice after the runs (as TensorRT's timing cache): processes given "
                 "one file run the same algorithms");
}

void require_backend_here(const std::string& backend, const std::string& context) {
  const backends::Backend* b = backends::find_backend(backend);
  if (!b || !b->unavailable) return;
  if (std::string why = b->unavailable(); !why.empty())
    fail("the ", backend == "cuda" ? std::string("CUDA") : backend, " backend cannot run here: ", why, " (", context,
         ")");
}

PlacementSummary summarize_placement(const plan::Plan& p) {
  PlacementSummary s;
  const std::string target = plan::backend_of(p);
  const backends::Backend* b = backends::find_backend(target);
  s.device_memory = b && b->memory == Memory::Device;
  const std::vector<std::string> where = plan::node_backends(p);
  const std::vector<bool> shape = backends::shape_computation(p.graph);
  for (size_t i = 0; i < where.size(); ++i) {
    if (backends::is_transfer(p.graph.nodes[i]))
      ++s.transfers;
    else if (where[i] == target && s.device_memory)
      ++s.on_device;
    else if (!s.device_memory)
      ++s.on_host;
    else
      ++(shape[i] ? s.shape_on_host : s.fallback);
  }
  return s;
}

plan::Precision parse_precision(const std::string& value) {
  if (value.empty() || value == "fp32") return plan::Precision::Fp32;
  if (value == "bf16") return plan::Precision::Bf16;
  if (value == "fp16") return plan::Precision::Fp16;
  if (value == "int8") return plan::Precision::Int8;
  if (value == "int4") return plan::Precision::Int4;
  fail("--precision must be fp32, bf16, fp16, int8 or int4, got '", value, "'");
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
    const bool npz = eq == std::string::npos && spec.size() > 4 && spec.compare(spec.size() - 4, 4, ".npz") == 0;
    if (npz) {  // every array of the archive, by its name
      for (auto& [name, t] : read_npz(spec)) {
        if (inputs.count(name)) fail("input '", name, "' is given twice (again in '", spec, "')");
        inputs[name] = std::move(t);
      }
      continue;
    }
    if (eq == std::string::npos || eq == 0) fail("--input '", spec, "' is not NAME=FILE.npy or FILE.npz");
    std::string name = spec.substr(0, eq);
    if (inputs.count(name)) fail("input '", name, "' is given twice");
    inputs[name] = read_npy(spec.substr(eq + 1));
  }
  return inputs;
}

namespace {

int64_t parse_dim(const std::string& text, const std::string& spec) {
  int64_t v = -1;
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) || !parse_integer(text, v) || v < 0 ||
      v > kMaxDim)
    fail("--shape '", spec, "': '", text, "' is not a dimension size (an integer from 0 to ", kMaxDim, ")");
  return v;
}

std::pair<int64_t, int64_t> parse_int_range(const std::string& range) {
  if (range.empty()) return {0, 100};
  auto colon = range.find(':');
  if (colon == std::string::npos) fail("--int-range '", range, "' is not LOW:HIGH");
  int64_t lo = 0, hi = 0;
  if (!parse_integer(range.substr(0, colon), lo) || !parse_integer(range.substr(colon + 1), hi))
    fail("--int-range '", range, "' is not LOW:HIGH with integers from ", std::numeric_limits<int64_t>::min(), " to ",
         std::numeric_limits<int64_t>::max());
  if (hi <= lo) fail("--int-range '", range, "' is empty: HIGH must exceed LOW (HIGH is excluded)");
  return {lo, hi};
}

// The syntax of one --shape value, INPUT=AxB or SYMBOL=N, and its sizes (which name is an input
// or a symbol is known once the model is).
void check_shape_spec(const std::string& spec) {
  auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) fail("--shape '", spec, "' is not INPUT=AxB or SYMBOL=N");
  const std::string value = spec.substr(eq + 1);
  if (value.empty() || value == "scalar") return;
  size_t start = 0;
  while (true) {
    size_t x = value.find_first_of("x,", start);
    parse_dim(value.substr(start, x == std::string::npos ? x : x - start), spec);
    if (x == std::string::npos) break;
    start = x + 1;
  }
}

// A check run as option `flag` is parsed: the Error `check` throws becomes CLI11's message,
// less its leading "FLAG " (CLI11 puts "FLAG: " first).
CLI::Validator parse_check(const std::string& flag, std::function<void(const std::string&)> check,
                           const std::string& desc) {
  return CLI::Validator(
      [flag, check](std::string& text) {
        try {
          check(text);
        } catch (const Error& e) {
          std::string msg = e.what();
          return msg.rfind(flag + " ", 0) == 0 ? msg.substr(flag.size() + 1) : msg;
        }
        return std::string();
      },
      desc);
}

}  // namespace

void add_synthetic_options(CLI::App& app, SynthOptions& o) {
  app.add_option("--seed", o.seed,
                 "seed of the synthetic inputs made for graph inputs given no --input (default 0: the same inputs "
                 "every run)")
      ->check(unsigned_integer());
  app.add_option("--shape", o.shapes,
                 "shape of a synthetic input, INPUT=1x128, or the size of a symbolic dimension, SYMBOL=4 (repeatable)")
      ->check(parse_check("--shape", check_shape_spec, "INPUT=AxB|SYMBOL=N"));
  app.add_option("--int-range", o.int_range,
                 "LOW:HIGH: synthetic integer inputs (token ids, indices) are drawn from [LOW, HIGH) (default 0:100)")
      ->check(parse_check(
          "--int-range", [](const std::string& r) { parse_int_range(r); }, "LOW:HIGH"));
}

namespace {

// [low, high) of a synthetic integer input: --int-range, else [0, 100) cut to a provable bound.
std::pair<int64_t, int64_t> int_range_for(const std::string& input, const SynthOptions& o,
                                          const std::map<std::string, IndexBound>& bounds) {
  auto range = parse_int_range(o.int_range);
  auto b = bounds.find(input);
  if (o.int_range.empty() && b != bounds.end() && b->second.rows < range.second) range.second = b->second.rows;
  return range;
}

}  // namespace

namespace {

// `table_shape(name)`: the shape of constant `name`, or null when it is not a constant.
std::map<std::string, IndexBound> index_bounds_of(const ir::Graph& g,
                                                  const std::function<const Shape*(const std::string&)>& table_shape) {
  std::map<std::string, IndexBound> out;
  std::set<std::string> graph_inputs;
  for (const auto& in : g.inputs) graph_inputs.insert(in.name);
  for (const auto& n : g.nodes) {
    if (n.op_type != "Gather" || !n.domain.empty() || n.inputs.size() < 2 || !graph_inputs.count(n.inputs[1])) continue;
    const Shape* table = table_shape(n.inputs[0]);
    if (!table) continue;
    int64_t rank = static_cast<int64_t>(table->size()), axis = n.attr_int("axis", 0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) continue;  // the build reports it
    int64_t rows = (*table)[static_cast<size_t>(axis)];
    auto it = out.find(n.inputs[1]);
    if (rows > 0 && (it == out.end() || rows < it->second.rows)) out[n.inputs[1]] = {rows, n.inputs[0], n.label()};
  }
  return out;
}

}  // namespace

std::map<std::string, IndexBound> index_bounds(const ir::Graph& g) {
  return index_bounds_of(g, [&](const std::string& name) -> const Shape* {
    auto it = g.initializers.find(name);
    return it == g.initializers.end() ? nullptr : &it->second.shape();
  });
}

std::map<std::string, IndexBound> index_bounds(const plan::Plan& p) {
  std::map<std::string, const plan::WeightEntry*> weights;
  for (const auto& w : p.weights) weights[w.name] = &w;
  auto out = index_bounds_of(p.graph, [&](const std::string& name) -> const Shape* {
    auto it = weights.find(name);
    return it == weights.end() ? nullptr : &it->second->shape;
  });
  // Name the table as the model did: the initializer a weight was made from alone.
  for (auto& [input, bound] : out) {
    const plan::WeightEntry* w = weights.at(bound.table);
    if (w->sources.size() == 1 && w->sources[0] < p.sources.size() && !p.sources[w->sources[0]].names.empty())
      bound.table = p.sources[w->sources[0]].names.front();
  }
  return out;
}

std::vector<std::string> complete_inputs(std::map<std::string, Tensor>& inputs,
                                         const std::vector<ir::ValueInfo>& declared, const SynthOptions& o,
                                         const std::map<std::string, IndexBound>& bounds) {
  std::vector<std::string> input_names, symbols;
  for (const auto& in : declared) {
    input_names.push_back(in.name);
    for (const auto& d : in.shape)
      if (!d.fixed() && !d.symbol.empty()) symbols.push_back(d.symbol);
  }
  // A given input the model does not declare: nothing is synthesized, and the engine's input
  // check reports it (the message the library gives too).
  for (const auto& [name, t] : inputs)
    if (std::find(input_names.begin(), input_names.end(), name) == input_names.end()) return {};
  // --shape: whole shapes by input name, sizes by symbol.
  std::map<std::string, Shape> whole;
  std::map<std::string, int64_t> sym;
  for (const auto& spec : o.shapes) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) fail("--shape '", spec, "' is not INPUT=AxB or SYMBOL=N");
    std::string key = spec.substr(0, eq), value = spec.substr(eq + 1);
    bool is_input = std::find(input_names.begin(), input_names.end(), key) != input_names.end();
    bool is_symbol = std::find(symbols.begin(), symbols.end(), key) != symbols.end();
    if (!is_input && !is_symbol) {
      std::vector<std::string> all = input_names;
      all.insert(all.end(), symbols.begin(), symbols.end());
      auto near = nearest_names(key, all);
      fail("--shape '", spec, "': '", key, "' is neither an input nor a symbolic dimension of the model",
           near.empty() ? "; inputs and symbols: " + quoted_list(all) : "; did you mean " + quoted_list(near) + "?");
    }
    if (is_input) {
      Shape s;
      if (!value.empty() && value != "scalar") {
        size_t start = 0;
        while (true) {
          size_t x = value.find_first_of("x,", start);
          s.push_back(parse_dim(value.substr(start, x == std::string::npos ? x : x - start), spec));
          if (x == std::string::npos) break;
          start = x + 1;
        }
      }
      if (whole.count(key)) fail("--shape gives input '", key, "' twice");
      whole[key] = s;
    } else {
      if (sym.count(key)) fail("--shape gives symbol '", key, "' twice");
      sym[key] = parse_dim(value, spec);
    }
  }
  parse_int_range(o.int_range);  // a bad range fails before any input is made
  std::mt19937_64 rng(o.seed);
  // 53 random bits -> [0, 1): the same on every standard library (the <random> distributions are not).
  auto unit = [&] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  std::vector<std::string> made;
  for (const auto& in : declared) {
    if (inputs.count(in.name)) continue;
    Shape shape;
    if (auto w = whole.find(in.name); w != whole.end()) {
      shape = w->second;
      if (in.has_shape) {
        bool ok = shape.size() == in.shape.size();
        for (size_t i = 0; ok && i < shape.size(); ++i) ok = !in.shape[i].fixed() || in.shape[i].value == shape[i];
        if (!ok)
          fail("--shape gives input '", in.name, "' shape ", shape_str(shape),
               ", which does not fit its declared shape");
      }
    } else {
      if (!in.has_shape)
        fail("input '", in.name, "' has no declared shape: give it with --shape ", in.name, "=AxB or --input ", in.name,
             "=FILE.npy");
      for (size_t i = 0; i < in.shape.size(); ++i) {
        const ir::Dim& d = in.shape[i];
        if (d.fixed()) {
          shape.push_back(d.value);
        } else if (!d.symbol.empty() && sym.count(d.symbol)) {
          shape.push_back(sym.at(d.symbol));
        } else if (!d.symbol.empty()) {
          fail("input '", in.name, "' dimension ", i, " is the symbol '", d.symbol, "': give its size with --shape ",
               d.symbol, "=N (or the whole shape with --shape ", in.name, "=...)");
        } else {
          fail("input '", in.name, "' dimension ", i, " has no declared size: give the shape with --shape ", in.name,
               "=...");
        }
      }
    }
    // Sizes are checked one by one; their product must stay a tensor this process can make.
    constexpr int64_t kMaxElements = int64_t{1} << 32;
    if (std::find(shape.begin(), shape.end(), int64_t{0}) == shape.end()) {
      int64_t elements = 1;
      for (int64_t d : shape) {
        if (elements > kMaxElements / d)
          fail("input '", in.name, "': a synthetic input of shape ", shape_str(shape), " would hold more than ",
               kMaxElements, " elements; give smaller sizes with --shape");
        elements *= d;
      }
    }
    Tensor t;
    if (in.dtype == DType::Bool) {
      t = Tensor::empty(DType::Bool, shape);
      auto* p = t.mutable_data<bool>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = (rng() >> 63) != 0;
    } else if (is_integer(in.dtype)) {
      auto [lo, hi] = int_range_for(in.name, o, bounds);
      if (dtype_size(in.dtype) < 8) {  // the range must fit the input's type (a cast would wrap)
        int bits = static_cast<int>(8 * dtype_size(in.dtype));
        int64_t tmin = is_signed(in.dtype) ? -(int64_t{1} << (bits - 1)) : 0;
        int64_t tmax = is_signed(in.dtype) ? (int64_t{1} << (bits - 1)) - 1 : (int64_t{1} << bits) - 1;
        if (lo < tmin || hi - 1 > tmax)
          fail("input '", in.name, "' is ", dtype_name(in.dtype), ": the integer range [", lo, ", ", hi,
               ") does not fit it; give one within [", tmin, ", ", tmax, "] with --int-range");
      } else if (!is_signed(in.dtype) && lo < 0) {
        fail("input '", in.name, "' is ", dtype_name(in.dtype), ": the integer range [", lo, ", ", hi,
             ") has negative values; give one from 0 with --int-range");
      }
      Tensor v = Tensor::empty(DType::Int64, shape);
      auto* p = v.mutable_data<int64_t>();
      uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
      for (int64_t i = 0; i < v.numel(); ++i) p[i] = static_cast<int64_t>(static_cast<uint64_t>(lo) + rng() % span);
      t = in.dtype == DType::Int64 ? v : cast_tensor(v, in.dtype);
    } else if (is_float(in.dtype)) {
      Tensor v = Tensor::empty(DType::Float64, shape);
      auto* p = v.mutable_data<double>();
      for (int64_t i = 0; i < v.numel(); ++i) p[i] = 2.0 * unit() - 1.0;
      t = in.dtype == DType::Float64 ? v : cast_tensor(v, in.dtype);
    } else {
      fail("input '", in.name, "' is ", dtype_name(in.dtype), ": no synthetic data of that type; give it with --input ",
           in.name, "=FILE.npy");
    }
    inputs[in.name] = std::move(t);
    made.push_back(in.name);
  }
  return made;
}

std::string describe_synthesized(const std::map<std::string, Tensor>& inputs, const std::vector<std::string>& names,
                                 const SynthOptions& o, const std::map<std::string, IndexBound>& bounds) {
  std::ostringstream os;
  for (const auto& n : names) {
    auto [lo, hi] = int_range_for(n, o, bounds);
    auto b = bounds.find(n);
    const Tensor& t = inputs.at(n);
    os << "synthesized input '" << n << "': " << t.describe();
    if (t.dtype() == DType::Bool)
      os << " random 0/1";
    else if (is_integer(t.dtype()))
      os << " uniform in [" << lo << ", " << hi << ")"
         << (!o.int_range.empty() ? ""
             : b != bounds.end() && hi == b->second.rows
                 ? " (below the " + std::to_string(hi) + " rows of '" + b->second.table + "' that " + b->second.node +
                       " indexes; --int-range to choose)"
                 : std::string(" (default range: --int-range to choose)"));
    else
      os << " uniform in [-1, 1)";
    os << " (seed " << o.seed << ")\n";
  }
  return os.str();
}

std::string declared_type(const ir::ValueInfo& v) {
  std::string s = dtype_name(v.dtype);
  if (!v.has_shape) return s + "[?]";
  s += "[";
  for (size_t i = 0; i < v.shape.size(); ++i) {
    const ir::Dim& d = v.shape[i];
    s += (i ? "," : "") + (d.fixed() ? std::to_string(d.value) : d.symbol.empty() ? std::string("?") : d.symbol);
  }
  return s + "]";
}

std::vector<const ir::ValueInfo*> missing_inputs(const std::map<std::string, Tensor>& inputs,
                                                 const std::vector<ir::ValueInfo>& declared) {
  for (const auto& [name, t] : inputs) {
    bool known = false;
    for (const auto& in : declared) known |= in.name == name;
    if (!known) return {};
  }
  std::vector<const ir::ValueInfo*> out;
  for (const auto& in : declared)
    if (!inputs.count(in.name)) out.push_back(&in);
  return out;
}

void require_inputs(const std::vector<const ir::ValueInfo*>& missing, const std::string& synthesize_flag) {
  if (missing.empty()) return;
  std::string list;
  for (const ir::ValueInfo* v : missing) list += "\n  " + v->name + ": " + declared_type(*v);
  const std::string& first = missing.front()->name;
  fail(missing.size() == 1 ? "1 input of the model is not given:"
                           : str_cat(missing.size(), " inputs of the model are not given:"),
       list, "\ngive each with --input NAME=FILE.npy (e.g. --input ", first, "=", safe_file_name(first),
       ".npy), or run on random values with ", synthesize_flag,
       " (uniform in [-1, 1) for floats, [0, 100) or --int-range for integers; --seed, --shape)");
}

std::vector<std::string> npy_files(const std::string& dir, const std::vector<std::string>& names, const char* flag,
                                   const char* what) {
  std::vector<std::string> files;
  std::map<std::string, std::string> owner;  // file -> the first name written to it
  for (const auto& name : names) {
    std::string file = (std::filesystem::path(dir) / (safe_file_name(name) + ".npy")).string();
    auto [it, fresh] = owner.emplace(file, name);
    if (!fresh && it->second != name)
      fail(flag, " '", dir, "': ", what, " '", it->second, "' and '", name, "' would both be written to '", file,
           "' (characters outside [A-Za-z0-9._-] become '_'); nothing was run or written");
    files.push_back(std::move(file));
  }
  return files;
}

void check_output_file(const std::string& path, const char* flag) {
  namespace fs = std::filesystem;
  fs::path p(path);
  fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail(flag, " '", path, "': the folder '", dir.string(), "' does not exist");
  if (!fs::is_directory(dir, ec)) fail(flag, " '", path, "': '", dir.string(), "' is not a folder");
  if (fs::is_directory(p, ec)) fail(flag, " '", path, "' is a folder, not a file");
}

void check_output_folder(const std::string& dir, const char* flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  while (!fs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  if (!fs::is_directory(p, ec))
    fail(flag, " '", dir, "': '", p.string(), "' ", fs::exists(p, ec) ? "is not a folder" : "does not exist");
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    fail(flag, " '", dir, "': cannot write in '", p.string(), "': ", std::strerror(errno));
}

void create_output_folder(const std::string& dir, const char* flag) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(flag, " '", dir, "': cannot create the folder: ", ec.message());
  if (!std::filesystem::is_directory(dir)) fail(flag, " '", dir, "' is not a folder");
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
