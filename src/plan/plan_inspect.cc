#include "plan/plan_inspect.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <iomanip>
#include <map>
#include <sstream>

namespace reforge::plan {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string hex(uint64_t h) {
  std::ostringstream os;
  os << std::hex << std::setw(16) << std::setfill('0') << h;
  return os.str();
}

}  // namespace

std::string recipe_summary(const Plan& p, const WeightEntry& w) {
  if (w.kind != WeightKind::Derived) return "";
  std::function<std::string(const Operand&)> render = [&](const Operand& o) -> std::string {
    switch (o.kind) {
      case Operand::Kind::Source:
        return p.sources.at(o.index).names.at(0);
      case Operand::Kind::Literal:
        return "literal";
      case Operand::Kind::Step: {
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

std::string weight_label(const Plan& p, const WeightEntry& w) {
  if (w.sources.empty()) return "";
  const Source& s = p.sources.at(w.sources[0]);
  std::string name = s.key;
  if (s.binding.status == Binding::Status::Bound && !s.binding.checkpoint.empty())
    name = s.binding.checkpoint[0].name;
  else if (!s.names.empty())
    name = s.names[0];
  return w.sources.size() > 1 ? name + " (+" + std::to_string(w.sources.size() - 1) + ")" : name;
}

nlohmann::json value_info_json(const ir::ValueInfo& v) {
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

nlohmann::json inspect_json(const Plan& p, std::optional<size_t> file_bytes, bool verified) {
  size_t weight_bytes = 0, present_bytes = 0;
  for (const auto& w : p.weights) weight_bytes += static_cast<size_t>(shape_numel(w.shape)) * dtype_size(w.dtype);
  // A stripped plan stores literal and baked weights only.
  for (const auto& w : p.weights)
    if (!p.stripped || w.kind != WeightKind::Derived)
      present_bytes += static_cast<size_t>(shape_numel(w.shape)) * dtype_size(w.dtype);
  nlohmann::json j;
  j["producer"] = p.producer;
  j["model_name"] = p.model_name;
  j["mode"] = build_mode_name(p.mode);
  j["precision"] = precision_name(p.precision);
  j["activations"] = precision_name(p.activations);
  if (p.precision == Precision::Int4) j["block_size"] = p.block_size;
  j["stripped"] = p.stripped;
  if (file_bytes)
    j["file_bytes"] = *file_bytes;
  else
    j["file_bytes"] = nullptr;
  j["weight_bytes"] = weight_bytes;
  j["weight_bytes_present"] = present_bytes;
  j["nodes"] = p.graph.nodes.size();
  // Where each node runs (the builder's placement).
  const std::vector<std::string> backends_of = node_backends(p);
  j["placement"] = nlohmann::json::array();
  for (size_t i = 0; i < p.graph.nodes.size(); ++i) {
    const ir::Node& n = p.graph.nodes[i];
    j["placement"].push_back({{"node", n.name},
                              {"op_type", n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type},
                              {"backend", backends_of[i]}});
  }
  // The rest of the build options and the target (absent in plans an older reforge wrote).
  if (p.build) {
    const BuildRecord& r = *p.build;
    j["build"] = {{"backend", r.backend},
                  {"host_fallback", r.host_fallback},
                  {"reference_rounding", r.reference_rounding},
                  {"isa", r.isa},
                  {"weight_packing", weight_packing_name(r.weight_packing)},
                  {"layouts",
                   {{"linear_panels", r.layouts.linear_panels},
                    {"half_panels", r.layouts.half_panels},
                    {"linear_transposed", r.layouts.linear_transposed}}},
                  {"skip_passes", r.skip_passes},
                  {"verify_recipes", r.verify_recipes},
                  {"individual_patterns", p.individual_patterns},
                  {"literal_names", p.literal_names}};
  } else {
    j["build"] = nullptr;
  }
  j["inputs"] = nlohmann::json::array();
  for (const auto& v : p.graph.inputs) j["inputs"].push_back(value_info_json(v));
  j["outputs"] = nlohmann::json::array();
  for (const auto& v : p.graph.outputs) j["outputs"].push_back(value_info_json(v));
  if (verified) {
    // read_plan has hashed every stored weight by now; reaching here means all matched.
    size_t n = 0, bytes = 0;
    for (const auto& w : p.weights)
      if (w.data.defined()) ++n, bytes += w.data.nbytes();
    j["verified"] = {{"weights", n}, {"bytes", bytes}};
  }
  // The first node that reads each weight, through the copy a device plan makes of it (what a
  // literal or a baked weight is, for a reader of the table), and at which input.
  std::map<std::string, std::pair<const ir::Node*, size_t>> reader;
  for (const ir::Node& n : p.graph.nodes)
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty()) reader.emplace(n.inputs[i], std::make_pair(&n, i));
  auto first_reader = [&](const std::string& value) {
    auto it = reader.find(value);
    for (int hops = 0; it != reader.end() && hops < 4; ++hops) {
      const ir::Node& n = *it->second.first;
      if (n.domain != "reforge" || n.op_type != "ToDevice" || n.outputs.empty()) break;
      auto next = reader.find(n.outputs[0]);
      if (next == reader.end()) break;
      it = next;
    }
    return it;
  };
  for (const auto& w : p.weights) {
    nlohmann::json e;
    e["name"] = w.name;
    e["label"] = weight_label(p, w);
    if (auto it = first_reader(w.name); it != reader.end()) {
      const ir::Node& n = *it->second.first;
      e["read_by"] = {{"node", n.name},
                      {"op_type", (n.domain.empty() ? "" : n.domain + "::") + n.op_type},
                      {"input", it->second.second}};
      if (e["label"].get<std::string>().empty())
        e["label"] = n.name + ":" + std::to_string(it->second.second);
    }
    e["shape"] = w.shape;
    e["dtype"] = dtype_name(w.dtype);
    e["kind"] = weight_kind_name(w.kind);
    std::vector<std::string> srcs;
    for (uint32_t s : w.sources) srcs.push_back(p.sources[s].key);
    e["sources"] = srcs;
    e["recipe"] = recipe_summary(p, w);
    e["present"] = !(p.stripped && w.kind == WeightKind::Derived);
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
    if (s.binding.status != Binding::Status::None) {
      std::vector<std::string> names;
      for (const auto& in : s.binding.checkpoint) names.push_back(in.name);
      e["binding"] = {
          {"status", binding_status_name(s.binding.status)}, {"checkpoint", names}, {"note", s.binding.note}};
      // The copies of a tied parameter a checkpoint refit compares, by the tensor bound.
      for (const auto& in : s.binding.checkpoint)
        if (!in.ties.empty()) e["binding"]["ties"][in.name] = in.ties;
      if (s.binding.status == Binding::Status::Constant) {
        e["binding"]["reason"] = binding_reason_name(s.binding.reason);
        e["binding"]["rule"] = s.binding.rule;
      }
    }
    j["sources"].push_back(e);
  }
  // Every literal with why it is one; every source a checkpoint refit cannot derive.
  j["literals"] = nlohmann::json::array();
  for (const auto& n : p.literal_names) {
    nlohmann::json e = {{"name", n}, {"reason", "user"}, {"rule", "--literal"}};
    // Derived from the build's checkpoint: a checkpoint refit compares it (plan::LiteralBinding).
    for (const auto& b : p.literal_bindings)
      if (b.name == n) {
        std::vector<std::string> names;
        for (const auto& in : b.binding.checkpoint) names.push_back(in.name);
        e["checkpoint"] = names;
        e["binding"] = b.binding.note;
      }
    j["literals"].push_back(std::move(e));
  }
  for (const auto& w : p.weights)
    if (w.kind == WeightKind::Literal)
      j["literals"].push_back(
          {{"name", w.name},
           {"reason", "structural"},
           {"rule", "integer or bool tensor, Constant node, shape/axes/index input, or folded from these"}});
  for (const auto& s : p.sources)
    if (s.binding.status == Binding::Status::Constant)
      j["literals"].push_back({{"name", s.names.empty() ? s.key : s.names[0]},
                               {"source", s.key},
                               {"consumer", s.consumer},
                               {"reason", binding_reason_name(s.binding.reason)},
                               {"rule", s.binding.rule},
                               {"scope", "checkpoint refit (an ONNX refit takes it from the new model)"}});
  j["unbound"] = nlohmann::json::array();
  for (const auto& s : p.sources)
    if (s.refittable && s.binding.status == Binding::Status::Unbound)
      j["unbound"].push_back({{"name", s.names.empty() ? s.key : s.names[0]},
                              {"source", s.key},
                              {"consumer", s.consumer},
                              {"op_type", s.op_type},
                              {"why", s.binding.note}});
  return j;
}

}  // namespace reforge::plan
