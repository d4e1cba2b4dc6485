// Compiled with -ffp-contract=off (CMakeLists.txt): the merge's products and sums are each
// rounded to float32, never fused, so that its bytes are the same wherever it is built.
#include "refit/lora.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/nearest_names.h"
#include "core/regular_file.h"
#include "core/strict_json.h"

namespace reforge::refit {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxConfigBytes = size_t(1) << 20;
constexpr const char* kPeftPrefix = "base_model.model.";

// Whether a config value turns a feature on: anything but null, false, 0, "" and empty
// containers.
bool set(const nlohmann::json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string() || v.is_array() || v.is_object()) return !v.empty();
  return true;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Why an adapter tensor that is not `<module>.lora_A.weight` / `.lora_B.weight` is refused.
std::string not_a_pair_reason(const std::string& key) {
  if (key.find("lora_magnitude_vector") != std::string::npos)
    return "a DoRA magnitude vector (use_dora), which a merge of W + scale·B·A does not express";
  if (key.find("lora_embedding_") != std::string::npos) return "the adapter of an embedding, which is not supported";
  if (key.find("modules_to_save") != std::string::npos)
    return "a whole-module copy (modules_to_save), which is not supported";
  if (ends_with(key, ".bias")) return "a bias (bias or lora_bias in the config), which is not supported";
  const size_t at = std::max(key.rfind(".lora_A."), key.rfind(".lora_B."));
  if (at != std::string::npos && ends_with(key, ".weight"))
    return "named with an adapter name ('" + key.substr(at + 8, key.size() - at - 8 - 7) +
           "'); give the tensors as PEFT saves them (save_pretrained, get_peft_model_state_dict), "
           "'<module>.lora_A.weight' and '<module>.lora_B.weight'";
  return "not a LoRA matrix ('<module>.lora_A.weight' or '<module>.lora_B.weight')";
}

bool float_type(DType t) { return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16; }

template <typename Storage>
struct Convert;
template <>
struct Convert<float> {
  static float in(float v) { return v; }
  static float out(float v) { return v; }
};
struct F16Storage {
  uint16_t bits;
};
struct BF16Storage {
  uint16_t bits;
};
template <>
struct Convert<F16Storage> {
  static float in(F16Storage v) { return float16::to_float(v.bits); }
  static F16Storage out(float v) { return {float16::from_float(v)}; }
};
template <>
struct Convert<BF16Storage> {
  static float in(BF16Storage v) { return bfloat16::to_float(v.bits); }
  static BF16Storage out(float v) { return {bfloat16::from_float(v)}; }
};

// out[o, i] = W's type of fl32(w[o, i] + fl32(scale * sum_k fl32(b[o, k] * a[k, i]))), the sum
// in k order from +0 (lora.h).
template <typename W>
void merge_rows(const W* w, W* out, const float* a, const float* b, int64_t rows, int64_t in, int64_t r, float scale) {
  const bool parallel = rows > 1 && rows * in * r >= (int64_t(1) << 20);
#pragma omp parallel if (parallel)
  {
    std::vector<float> acc(static_cast<size_t>(in));
#pragma omp for schedule(static)
    for (int64_t o = 0; o < rows; ++o) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t k = 0; k < r; ++k) {
        const float bk = b[o * r + k];
        const float* ak = a + k * in;
        for (int64_t i = 0; i < in; ++i) acc[i] += bk * ak[i];
      }
      const W* wr = w + o * in;
      W* outr = out + o * in;
      for (int64_t i = 0; i < in; ++i) {
        const float d = acc[i] * scale;
        outr[i] = Convert<W>::out(Convert<W>::in(wr[i]) + d);
      }
    }
  }
}

// The adapter's tensors and config, from where `source` says.
std::map<std::string, Tensor> adapter_tensors(const LoraSource& source, std::string& config_json,
                                              std::string& description, Checkpoint& file) {
  if (!source.path.empty()) {
    if (!source.tensors.empty()) fail("LoRA adapter: give a path or tensors, not both");
    const fs::path p(source.path);
    std::error_code ec;
    fs::path weights = p, config = p.parent_path() / "adapter_config.json";
    description = "LoRA adapter '" + source.path + "'";
    if (fs::is_directory(p, ec)) {
      weights = p / "adapter_model.safetensors";
      config = p / "adapter_config.json";
      if (!fs::exists(weights, ec)) {
        if (fs::exists(p / "adapter_model.bin", ec))
          fail(description,
               " holds adapter_model.bin, PyTorch's pickle format, which reforge does not read: save the "
               "adapter with save_pretrained(..., safe_serialization=True) (PEFT's default) to get "
               "adapter_model.safetensors");
        fail(description, " is a folder without adapter_model.safetensors (PEFT's save_pretrained writes it)");
      }
    }
    if (!fs::exists(config, ec))
      fail(description, ": no adapter_config.json beside '", weights.string(),
           "' (PEFT's save_pretrained writes it; it gives the adapter's r and lora_alpha)");
    config_json = read_regular_file(config.string(), kMaxConfigBytes, "adapter config");
    file = Checkpoint::open(weights.string());
    return file.tensors();
  }
  if (source.tensors.empty()) fail("LoRA adapter: no tensors given");
  if (source.config_json.empty()) fail("LoRA adapter tensors given without their config (r, lora_alpha)");
  config_json = source.config_json;
  description = "LoRA adapter (tensors in memory)";
  return source.tensors;
}

}  // namespace

LoraConfig parse_lora_config(const std::string& text, const std::string& what) {
  std::string duplicate;
  const nlohmann::json j = parse_json_unique_keys(text.data(), text.data() + text.size(), duplicate);
  if (j.is_discarded() || !j.is_object()) fail(what, " is not a JSON object");
  if (!duplicate.empty()) fail(what, " names ", duplicate, " twice");
  if (j.contains("peft_type") && !(j["peft_type"].is_string() && j["peft_type"].get<std::string>() == "LORA"))
    fail(what, ": peft_type is ", j["peft_type"].dump(), ", not \"LORA\"; only LoRA adapters merge here");
  // Features that change what the adapter computes beyond W + scale·B·A.
  static const std::vector<std::pair<const char*, const char*>> kUnsupported = {
      {"use_dora", "DoRA (weight-decomposed LoRA)"},
      {"fan_in_fan_out", "weights stored [in, out] (fan_in_fan_out, GPT-2's Conv1D)"},
      {"modules_to_save", "whole modules saved beside the adapter (modules_to_save)"},
      {"lora_bias", "a bias on LoRA's B (lora_bias)"},
      {"rank_pattern", "ranks per module (rank_pattern)"},
      {"alpha_pattern", "alphas per module (alpha_pattern)"},
      {"layer_replication", "replicated layers (layer_replication)"},
      {"use_qalora", "QALoRA (use_qalora)"},
      {"target_parameters", "LoRA on parameters rather than modules (target_parameters)"},
      {"trainable_token_indices", "trainable tokens (trainable_token_indices)"},
      {"alora_invocation_tokens", "activated LoRA (alora_invocation_tokens)"},
      {"arrow_config", "Arrow routing (arrow_config)"},
      {"use_bdlora", "block-diagonal LoRA (use_bdlora)"},
      {"kasa_config", "KaSA (kasa_config)"},
      {"velora_config", "a LoRA variant (velora_config)"},
      {"monteclora_config", "a LoRA variant (monteclora_config)"},
      {"astra_config", "a LoRA variant (astra_config)"},
  };
  for (const auto& [key, feature] : kUnsupported)
    if (j.contains(key) && set(j[key]))
      fail(what, " uses ", feature, ", which reforge does not merge (", key, ": ", j[key].dump(), ")");
  if (j.contains("bias") && !(j["bias"].is_string() && j["bias"].get<std::string>() == "none"))
    fail(what, " trains biases (bias: ", j["bias"].dump(), "), which reforge does not merge; only bias \"none\"");
  LoraConfig c;
  if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() <= 0)
    fail(what, ": 'r' (the rank) must be a positive integer", j.contains("r") ? ", got " + j["r"].dump() : "");
  c.r = j["r"].get<int64_t>();
  if (!j.contains("lora_alpha") || !j["lora_alpha"].is_number() || !std::isfinite(j["lora_alpha"].get<double>()))
    fail(what, ": 'lora_alpha' must be a finite number",
         j.contains("lora_alpha") ? ", got " + j["lora_alpha"].dump() : "");
  c.alpha = j["lora_alpha"].get<double>();
  if (j.contains("use_rslora")) {
    if (!j["use_rslora"].is_boolean()) fail(what, ": 'use_rslora' must be true or false");
    c.rslora = j["use_rslora"].get<bool>();
  }
  return c;
}

float LoraAdapter::scale() const {
  const double s = config.rslora ? config.alpha / std::sqrt(static_cast<double>(config.r))
                                 : config.alpha / static_cast<double>(config.r);
  return static_cast<float>(s * multiplier);
}

LoraAdapter read_lora_adapter(const LoraSource& source) {
  LoraAdapter ad;
  std::string config_json;
  Checkpoint file;
  const std::map<std::string, Tensor> tensors = adapter_tensors(source, config_json, ad.description, file);
  if (!std::isfinite(source.multiplier)) fail(ad.description, ": the scale multiplier must be finite");
  ad.multiplier = source.multiplier;
  ad.config = parse_lora_config(config_json, "the config of " + ad.description);
  // module -> (A, B), from the keys.
  std::map<std::string, LoraPair> pairs;
  for (const auto& [key, t] : tensors) {
    std::string k = key.rfind(kPeftPrefix, 0) == 0 ? key.substr(std::string(kPeftPrefix).size()) : key;
    const bool is_a = ends_with(k, ".lora_A.weight"), is_b = ends_with(k, ".lora_B.weight");
    if (!is_a && !is_b) fail(ad.description, ": tensor '", key, "' is ", not_a_pair_reason(key));
    const std::string module = k.substr(0, k.size() - std::string(".lora_A.weight").size());
    if (module.empty()) fail(ad.description, ": tensor '", key, "' names no module");
    LoraPair& p = pairs[module];
    p.target = module + ".weight";
    (is_a ? p.a_key : p.b_key) = key;
    (is_a ? p.a : p.b) = t;
  }
  if (pairs.empty()) fail(ad.description, " holds no tensors");
  const int64_t r = ad.config.r;
  for (auto& [module, p] : pairs) {
    if (!p.a.defined() || !p.b.defined())
      fail(ad.description, ": tensor '", p.a.defined() ? p.a_key : p.b_key, "' has no ",
           p.a.defined() ? "lora_B" : "lora_A", " partner ('", module,
           p.a.defined() ? ".lora_B.weight'" : ".lora_A.weight'", ")");
    for (const auto* t : {&p.a, &p.b}) {
      const std::string& key = t == &p.a ? p.a_key : p.b_key;
      if (!t->on_host()) fail(ad.description, ": tensor '", key, "' is in device memory; give host tensors");
      if (!float_type(t->dtype()))
        fail(ad.description, ": tensor '", key, "' is ", t->describe(),
             "; LoRA matrices are float32, float16 or bfloat16");
      if (t->rank() == 4)
        fail(ad.description, ": tensor '", key, "' is ", t->describe(),
             ", the adapter of a convolution, which is not supported (only Linear layers: A [r, in], B [out, r])");
      if (t->rank() != 2)
        fail(ad.description, ": tensor '", key, "' is ", t->describe(), "; LoRA matrices have rank 2");
    }
    if (p.a.dim(0) != r || p.b.dim(1) != r)
      fail(ad.description, ": '", p.a_key, "' is ", p.a.describe(), " and '", p.b_key, "' is ", p.b.describe(),
           "; with r = ", r, " (adapter_config.json) they must be [", r, ", in] and [out, ", r, "]");
    ad.pairs.push_back(std::move(p));
  }
  return ad;
}

Tensor merge_lora_weight(const Tensor& w, const Tensor& a, const Tensor& b, float scale, const std::string& what) {
  if (!w.on_host()) fail(what, ": the weight is in device memory");
  if (!float_type(w.dtype()))
    fail(what, ": the weight is ", w.describe(), "; a LoRA merge needs float32, float16 or bfloat16");
  if (w.rank() != 2 || a.rank() != 2 || b.rank() != 2 || b.dim(0) != w.dim(0) || a.dim(1) != w.dim(1) ||
      a.dim(0) != b.dim(1))
    fail(what, ": the weight is ", w.describe(), ", lora_A ", a.describe(), " and lora_B ", b.describe(),
         "; B @ A must have the weight's shape [out, in] (A [r, in], B [out, r])");
  const Tensor a32 = a.dtype() == DType::Float32 ? a : cast_tensor(a, DType::Float32);
  const Tensor b32 = b.dtype() == DType::Float32 ? b : cast_tensor(b, DType::Float32);
  Tensor out = Tensor::uninitialized(w.dtype(), w.shape());
  const int64_t rows = w.dim(0), in = w.dim(1), r = a.dim(0);
  const float* pa = a32.data<float>();
  const float* pb = b32.data<float>();
  switch (w.dtype()) {
    case DType::Float32:
      merge_rows(w.data<float>(), out.mutable_data<float>(), pa, pb, rows, in, r, scale);
      break;
    case DType::Float16:
      merge_rows(static_cast<const F16Storage*>(w.raw()), static_cast<F16Storage*>(out.mutable_raw()), pa, pb, rows, in,
                 r, scale);
      break;
    default:
      merge_rows(static_cast<const BF16Storage*>(w.raw()), static_cast<BF16Storage*>(out.mutable_raw()), pa, pb, rows,
                 in, r, scale);
  }
  return out;
}

Checkpoint merge_lora(const Checkpoint& base, const LoraAdapter& adapter) {
  std::map<std::string, Tensor> merged;
  const float scale = adapter.scale();
  for (const LoraPair& p : adapter.pairs) {
    const Tensor* w = base.find(p.target);
    if (!w) {
      std::vector<std::string> names;
      for (const auto& [n, _] : base.tensors()) names.push_back(n);
      const auto near = nearest_names(p.target, names);
      fail(adapter.description, ": tensor '", p.a_key, "' adapts '", p.target, "', which ", base.description(),
           " does not hold", near.empty() ? std::string() : " (nearest: " + quoted_list(near) + ")",
           "; is this the adapter of another model?");
    }
    merged[p.target] = merge_lora_weight(*w, p.a, p.b, scale, adapter.description + ": '" + p.target + "'");
    base.release_pages_of(*w);
  }
  return base.with_replaced(merged, adapter.description);
}

}  // namespace reforge::refit
