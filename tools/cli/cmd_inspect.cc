// `reforge inspect PLAN [--json] [--verify] [--values] [--nodes]`: producer, build mode and options,
// target, where the nodes run (with --nodes, every node and its backend), the plan's inputs and
// outputs, sizes, the weight table with provenance, and the sources with their hashes; with --values, the inferred type
// and symbolic shape of every value of the optimized graph (Plan::values). Reads metadata only (no weight data is
// loaded), unless --verify: then every stored weight is hashed against the plan's hashes, as `run` does, and a
// corrupted one is an error naming it (exit 1).
#include <algorithm>
#include <climits>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "common.h"
#include "plan/plan_inspect.h"
#include "plan/plan_io.h"

namespace reforge::cli {

namespace {

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

}  // namespace

Runner add_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto verify = std::make_shared<bool>(false);
  auto values = std::make_shared<bool>(false);
  auto nodes = std::make_shared<bool>(false);
  app.add_option("plan", *path, "plan file")->required();
  app.add_flag("--json", *json, "machine-readable output");
  app.add_flag("--verify", *verify,
               "hash every stored weight against the plan's hashes (exit 1 naming a corrupted one)");
  app.add_flag("--values", *values,
               "list the inferred element type and symbolic shape of every graph input and node output");
  app.add_flag("--nodes", *nodes, "list every node with the backend it runs on (device, or the CPU's host side)");
  return [path, json, verify, values, nodes]() {
    plan::ReadOptions ro;
    ro.load_weights = *verify;
    ro.verify_weight_hashes = *verify;
    plan::Plan p = plan::read_plan(*path, ro);
    size_t file_bytes = std::filesystem::file_size(*path);
    nlohmann::json j = plan::inspect_json(p, file_bytes, *verify);
    if (*values) {
      j["values"] = nlohmann::json::array();
      for (const auto& v : p.values) j["values"].push_back(plan::value_info_json(v));
    }
    const size_t weight_bytes = j["weight_bytes"].get<size_t>(),
                 present_bytes = j["weight_bytes_present"].get<size_t>();
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
    std::map<std::string, size_t> per_backend;
    for (const auto& e : j["placement"]) ++per_backend[e["backend"].get<std::string>()];
    std::cout << "placement:";
    const char* sep = " ";
    for (const auto& [backend, count] : per_backend) {
      std::cout << sep << count << " node(s) on " << backend;
      sep = ", ";
    }
    if (const PlacementSummary ps = summarize_placement(p); ps.device_memory)
      std::cout << " (on the device " << ps.on_device << ", shape computation on the CPU " << ps.shape_on_host
                << ", fallback on the CPU " << ps.fallback << ", transfers " << ps.transfers << ")";
    std::cout << (*nodes ? "\n" : " (--nodes lists every node)\n");
    if (*nodes)
      for (const auto& e : j["placement"])
        std::cout << "  " << std::left << std::setw(8) << e["backend"].get<std::string>() << " " << std::setw(24)
                  << e["op_type"].get<std::string>() << " " << e["node"].get<std::string>() << "\n";
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
    // In the order the graph first reads them (w0, w1, ..., w10: the canonical names' numbers),
    // each with what it is made of.
    std::vector<nlohmann::json> weights(j["weights"].begin(), j["weights"].end());
    auto order = [](const std::string& name) {
      const bool canonical = name.size() > 1 && name[0] == 'w' &&
                             name.find_first_not_of("0123456789", 1) == std::string::npos;
      return std::make_pair(canonical ? std::stoll(name.substr(1)) : INT64_MAX, name);
    };
    std::stable_sort(weights.begin(), weights.end(), [&](const nlohmann::json& a, const nlohmann::json& b) {
      return order(a["name"].get<std::string>()) < order(b["name"].get<std::string>());
    });
    // Each by its name for a reader (the checkpoint tensor or initializer it is made of, else the
    // node input that reads it), then the plan's own name for it (what errors and --json use).
    size_t label_width = 0;
    for (const auto& e : weights) label_width = std::max(label_width, e["label"].get<std::string>().size());
    label_width = std::min<size_t>(label_width, 56);
    std::cout << "\nengine weights (in the order the graph reads them; what each is made of):\n";
    for (const auto& e : weights)
      std::cout << "  " << std::left << std::setw(static_cast<int>(label_width)) << e["label"].get<std::string>()
                << "  " << std::setw(6) << e["name"].get<std::string>() << " " << std::setw(10)
                << e["dtype"].get<std::string>() << std::setw(18) << e["shape"].dump() << std::setw(8)
                << e["kind"].get<std::string>() << (e["present"].get<bool>() ? "present  " : "stripped ")
                << e["recipe"].get<std::string>()
                << (e.contains("read_by") && e["kind"] != "derived"
                        ? "read by " + e["read_by"]["op_type"].get<std::string>()
                        : std::string())
                << "\n";
    std::cout << "\nsources:\n";
    for (const auto& e : j["sources"])
      std::cout << "  " << e["key"].get<std::string>() << "  " << e["dtype"].get<std::string>() << e["shape"].dump()
                << "  " << (e["refittable"].get<bool>() ? "refittable" : "baked")
                << "  xxh3:" << e["hash"].get<std::string>()
                << (e.contains("binding")
                        ? "\n      binding: " + e["binding"]["status"].get<std::string>() + " " +
                              e["binding"]["checkpoint"].dump() + " " + e["binding"]["note"].get<std::string>() +
                              (e["binding"].contains("ties") ? "\n      ties: " + e["binding"]["ties"].dump() : "")
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
