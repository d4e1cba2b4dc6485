// `reforge inspect PLAN [--json] [--verify] [--values]`: producer, build mode and options, target,
// the plan's inputs and outputs, sizes, the weight table with provenance, and the sources with
// their hashes; with --values, the inferred type and symbolic shape of every value of the
// optimized graph (Plan::values). Reads metadata only (no weight data is loaded),
// unless --verify: then every stored weight is hashed against the plan's hashes, as `run` does,
// and a corrupted one is an error naming it (exit 1).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common.h"
#include "plan/plan_io.h"

namespace reforge::cli {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// "transpose(val_85)", "bnfoldweight(conv.weight, bn.weight, bn.running_var)".
std::string recipe_summary(const plan::Plan& p, const plan::WeightEntry& w) {
  if (w.kind != plan::WeightKind::Derived) return "";
  std::function<std::string(const plan::Operand&)> render = [&](const plan::Operand& o) -> std::string {
    switch (o.kind) {
      case plan::Operand::Kind::Source:
        return p.sources.at(o.index).names.at(0);
      case plan::Operand::Kind::Literal:
        return "literal";
      case plan::Operand::Kind::Step: {
        const auto& st = w.recipe.steps.at(o.index);
        std::string s = lower(st.op_type) + "(";
        for (size_t i = 0; i < st.inputs.size(); ++i) s += (i ? ", " : "") + render(st.inputs[i]);
        return s + ")";
      }
    }
    return "?";
  };
  return render(w.recipe.result);
}

// A value info as JSON: name, dtype, and shape (each dim a size, a symbol, or null when unknown;
// the shape null when unknown).
nlohmann::json value_json(const ir::ValueInfo& v) {
  nlohmann::json e;
  e["name"] = v.name;
  e["dtype"] = dtype_name(v.dtype);
  if (!v.has_shape) {
    e["shape"] = nullptr;
    return e;
  }
  e["shape"] = nlohmann::json::array();
  for (const auto& d : v.shape) {
    if (d.fixed())
      e["shape"].push_back(d.value);
    else if (!d.symbol.empty())
      e["shape"].push_back(d.symbol);
    else
      e["shape"].push_back(nullptr);
  }
  return e;
}

// "float32[batch,seq,768]", "?" for an unknown dim, "[?]" for an unknown rank.
std::string value_text(const nlohmann::json& e) {
  std::string s = e["dtype"].get<std::string>();
  if (e["shape"].is_null()) return s + "[?]";
  s += "[";
  for (size_t i = 0; i < e["shape"].size(); ++i) {
    const auto& d = e["shape"][i];
    s += (i ? "," : "") + (d.is_null() ? std::string("?") : d.is_string() ? d.get<std::string>() : d.dump());
  }
  return s + "]";
}

std::string hex(uint64_t h) {
  std::ostringstream os;
  os << std::hex << std::setw(16) << std::setfill('0') << h;
  return os.str();
}

}  // namespace

Runner add_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto verify = std::make_shared<bool>(false);
  auto values = std::make_shared<bool>(false);
  app.add_option("plan", *path, "plan file")->required();
  app.add_flag("--json", *json, "machine-readable output");
  app.add_flag("--verify", *verify,
               "hash every stored weight against the plan's hashes (exit 1 naming a corrupted one)");
  app.add_flag("--values", *values,
               "list the inferred element type and symbolic shape of every graph input and node output");
  return [path, json, verify, values]() {
    plan::ReadOptions ro;
    ro.load_weights = *verify;
    ro.verify_weight_hashes = *verify;
    plan::Plan p = plan::read_plan(*path, ro);
    size_t file_bytes = std::filesystem::file_size(*path);
    size_t weight_bytes = 0, present_bytes = 0;
    for (const auto& w : p.weights) weight_bytes += static_cast<size_t>(shape_numel(w.shape)) * dtype_size(w.dtype);
    // A stripped plan stores literal and baked weights only.
    for (const auto& w : p.weights)
      if (!p.stripped || w.kind != plan::WeightKind::Derived)
        present_bytes += static_cast<size_t>(shape_numel(w.shape)) * dtype_size(w.dtype);
    nlohmann::json j;
    j["producer"] = p.producer;
    j["model_name"] = p.model_name;
    j["mode"] = plan::build_mode_name(p.mode);
    j["precision"] = plan::precision_name(p.precision);
    j["activations"] = plan::precision_name(p.activations);
    j["stripped"] = p.stripped;
    j["file_bytes"] = file_bytes;
    j["weight_bytes"] = weight_bytes;
    j["weight_bytes_present"] = present_bytes;
    j["nodes"] = p.graph.nodes.size();
    // The rest of the build options and the target (absent in plans an older reforge wrote).
    if (p.build) {
      const plan::BuildRecord& r = *p.build;
      j["build"] = {{"backend", r.backend},
                    {"isa", r.isa},
                    {"weight_packing", plan::weight_packing_name(r.weight_packing)},
                    {"layouts", {{"linear_panels", r.layouts.linear_panels}, {"half_panels", r.layouts.half_panels}}},
                    {"skip_passes", r.skip_passes},
                    {"verify_recipes", r.verify_recipes},
                    {"individual_patterns", p.individual_patterns},
                    {"literal_names", p.literal_names}};
    } else {
      j["build"] = nullptr;
    }
    j["inputs"] = nlohmann::json::array();
    for (const auto& v : p.graph.inputs) j["inputs"].push_back(value_json(v));
    j["outputs"] = nlohmann::json::array();
    for (const auto& v : p.graph.outputs) j["outputs"].push_back(value_json(v));
    if (*values) {
      j["values"] = nlohmann::json::array();
      for (const auto& v : p.values) j["values"].push_back(value_json(v));
    }
    if (*verify) {
      // read_plan has hashed every stored weight by now; reaching here means all matched.
      size_t n = 0, bytes = 0;
      for (const auto& w : p.weights)
        if (w.data.defined()) ++n, bytes += w.data.nbytes();
      j["verified"] = {{"weights", n}, {"bytes", bytes}};
    }
    for (const auto& w : p.weights) {
      nlohmann::json e;
      e["name"] = w.name;
      e["shape"] = w.shape;
      e["dtype"] = dtype_name(w.dtype);
      e["kind"] = plan::weight_kind_name(w.kind);
      std::vector<std::string> srcs;
      for (uint32_t s : w.sources) srcs.push_back(p.sources[s].key);
      e["sources"] = srcs;
      e["recipe"] = recipe_summary(p, w);
      e["present"] = !(p.stripped && w.kind == plan::WeightKind::Derived);
      j["weights"].push_back(e);
    }
    for (const auto& s : p.sources) {
      nlohmann::json e;
      e["key"] = s.key;
      e["names"] = s.names;
      e["consumer"] = s.consumer;
      e["op_type"] = s.op_type;
      e["shape"] = s.shape;
      e["dtype"] = dtype_name(s.dtype);
      e["refittable"] = s.refittable;
      e["hash"] = hex(s.hash);
      if (s.binding.status != plan::Binding::Status::None) {
        std::vector<std::string> names;
        for (const auto& in : s.binding.checkpoint) names.push_back(in.name);
        e["binding"] = {
            {"status", plan::binding_status_name(s.binding.status)}, {"checkpoint", names}, {"note", s.binding.note}};
        if (s.binding.status == plan::Binding::Status::Constant) {
          e["binding"]["reason"] = plan::binding_reason_name(s.binding.reason);
          e["binding"]["rule"] = s.binding.rule;
        }
      }
      j["sources"].push_back(e);
    }
    // Every literal with why it is one; every source a checkpoint refit cannot derive.
    j["literals"] = nlohmann::json::array();
    for (const auto& n : p.literal_names)
      j["literals"].push_back({{"name", n}, {"reason", "user"}, {"rule", "--literal"}});
    for (const auto& w : p.weights)
      if (w.kind == plan::WeightKind::Literal)
        j["literals"].push_back(
            {{"name", w.name},
             {"reason", "structural"},
             {"rule", "integer or bool tensor, Constant node, shape/axes/index input, or folded from these"}});
    for (const auto& s : p.sources)
      if (s.binding.status == plan::Binding::Status::Constant)
        j["literals"].push_back({{"name", s.names.empty() ? s.key : s.names[0]},
                                 {"source", s.key},
                                 {"consumer", s.consumer},
                                 {"reason", plan::binding_reason_name(s.binding.reason)},
                                 {"rule", s.binding.rule},
                                 {"scope", "checkpoint refit (an ONNX refit takes it from the new model)"}});
    j["unbound"] = nlohmann::json::array();
    for (const auto& s : p.sources)
      if (s.refittable && s.binding.status == plan::Binding::Status::Unbound)
        j["unbound"].push_back({{"name", s.names.empty() ? s.key : s.names[0]},
                                {"source", s.key},
                                {"consumer", s.consumer},
                                {"op_type", s.op_type},
                                {"why", s.binding.note}});
    if (*json) {
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    std::cout << "plan " << *path << ": " << j["mode"].get<std::string>() << ", " << plan::precision_name(p.precision)
              << (p.activations != plan::Precision::Fp32
                      ? std::string(" (") + plan::precision_name(p.activations) + " activations)"
                      : "")
              << (p.stripped ? ", stripped" : ", with weights") << "; " << file_bytes << " bytes on disk, "
              << weight_bytes << " bytes of engine weights (" << present_bytes << " stored); " << p.graph.nodes.size()
              << " nodes\n";
    std::cout << "producer: " << (p.producer.empty() ? std::string("(not recorded)") : p.producer) << "\n";
    if (p.build) {
      const auto& b = j["build"];
      auto list = [](const nlohmann::json& a) {
        std::string s;
        for (const auto& x : a) s += (s.empty() ? "" : ", ") + x.get<std::string>();
        return s.empty() ? std::string("none") : s;
      };
      std::cout << "target: " << b["backend"].get<std::string>() << " (built on a CPU with " << list(b["isa"]) << ")\n";
      std::cout << "build options: weight packing " << b["weight_packing"].get<std::string>() << " -> "
                << (p.build->layouts.linear_panels ? "float32 panels" : "plain float32")
                << (p.precision != plan::Precision::Fp32
                        ? std::string(p.build->layouts.half_panels ? ", 16-bit panels" : ", plain 16-bit")
                        : std::string())
                << "; skipped passes: " << list(b["skip_passes"]) << "; recipes "
                << (p.build->verify_recipes ? "verified" : "not verified") << " at build";
      if (!p.individual_patterns.empty()) std::cout << "; refit-individual: " << list(b["individual_patterns"]);
      if (!p.literal_names.empty()) std::cout << "; literals: " << list(b["literal_names"]);
      std::cout << "\n";
    } else {
      std::cout << "build record: none (written by an older reforge; slow refit infers the options)\n";
    }
    for (const char* side : {"inputs", "outputs"}) {
      std::cout << side << ":\n";
      for (const auto& e : j[side]) std::cout << "  " << e["name"].get<std::string>() << "  " << value_text(e) << "\n";
    }
    if (*values) {
      std::cout << "values:" << (p.values.empty() ? " none recorded (written by an older reforge)" : "") << "\n";
      for (const auto& e : j["values"])
        std::cout << "  " << e["name"].get<std::string>() << "  " << value_text(e) << "\n";
    }
    if (*verify)
      std::cout << "verified: " << j["verified"]["weights"].get<size_t>() << " stored engine weights ("
                << j["verified"]["bytes"].get<size_t>() << " bytes) match their recorded hashes\n";
    std::cout << "\nengine weights:\n";
    for (const auto& e : j["weights"])
      std::cout << "  " << std::left << std::setw(8) << e["name"].get<std::string>() << " " << std::setw(10)
                << e["dtype"].get<std::string>() << std::setw(18) << e["shape"].dump() << std::setw(8)
                << e["kind"].get<std::string>() << (e["present"].get<bool>() ? "present  " : "stripped ")
                << e["recipe"].get<std::string>() << "\n";
    std::cout << "\nsources:\n";
    for (const auto& e : j["sources"])
      std::cout << "  " << e["key"].get<std::string>() << "  " << e["dtype"].get<std::string>() << e["shape"].dump()
                << "  " << (e["refittable"].get<bool>() ? "refittable" : "baked")
                << "  xxh3:" << e["hash"].get<std::string>()
                << (e.contains("binding")
                        ? "\n      binding: " + e["binding"]["status"].get<std::string>() + " " +
                              e["binding"]["checkpoint"].dump() + " " + e["binding"]["note"].get<std::string>()
                        : std::string())
                << "\n";
    bool constants = false;
    for (const auto& e : j["literals"])
      if (e.contains("source")) {
        if (!constants) std::cout << "\nconstants for a checkpoint refit (not derived from the checkpoint):\n";
        constants = true;
        std::cout << "  " << e["source"].get<std::string>() << "  " << e["reason"].get<std::string>() << ": "
                  << e["rule"].get<std::string>() << "\n";
      }
    if (!j["unbound"].empty()) {
      std::cout << "\nunbound (a checkpoint refit is refused until each is bound: --bind, --literal):\n";
      for (const auto& e : j["unbound"])
        std::cout << "  " << e["source"].get<std::string>() << " (read by " << e["op_type"].get<std::string>() << " '"
                  << e["consumer"].get<std::string>() << "'): " << e["why"].get<std::string>() << "\n";
    }
    return 0;
  };
}

}  // namespace reforge::cli
