#include "backends/placement.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "backends/backend.h"
#include "core/error.h"
#include "ops/infer_graph.h"
#include "ops/reforge/float16_weights.h"
#include "ops/registry.h"

namespace reforge::backends {

namespace {

// Shape and Size read their input's dimensions, never its bytes.
bool reads_only_dimensions(const ir::Node& n) {
  return n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size");
}

const Backend& backend_named(const std::string& name) {
  const Backend* b = find_backend(name);
  if (!b) {
    std::string known;
    for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
    fail("backend '", name, "' is not registered (registered: ", known, ")");
  }
  return *b;
}

std::string node_line(const ir::Node& n, const std::string& why) {
  return n.label() + ", opset " + std::to_string(n.opset) + ": " + why;
}

[[noreturn]] void fail_lines(const std::string& head, const std::vector<std::string>& lines) {
  std::string msg = head;
  for (const auto& l : lines) msg += "\n  " + l;
  fail(msg);
}

// Node indices with every node after the producers of its inputs. Values no node produces are the
// graph's inputs and its weights (which a plan keeps outside the graph); a cycle is an error.
std::vector<size_t> node_order(const ir::Graph& g) {
  const size_t n = g.nodes.size();
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < n; ++i)
    for (const auto& out : g.nodes[i].outputs)
      if (!out.empty()) producer[out] = i;
  std::vector<std::vector<size_t>> next(n);
  std::vector<size_t> waiting(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (const auto& in : g.nodes[i].inputs) {
      auto p = producer.find(in);
      if (in.empty() || p == producer.end()) continue;
      next[p->second].push_back(i);
      ++waiting[i];
    }
  std::vector<size_t> order, ready;
  for (size_t i = n; i-- > 0;)
    if (waiting[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    const size_t i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (size_t j : next[i])
      if (--waiting[j] == 0) ready.push_back(j);
  }
  if (order.size() != n) fail("the graph has a cycle (", n - order.size(), " node(s) on it)");
  return order;
}

// The input facts of each node for the shape checks of `backend`'s kernels, inferred once, when the
// first node whose kernel has a shape check asks. Where inference fails, every fact is unknown (and
// the checks decline), with inference's message kept for the reason.
class FactsSource {
 public:
  FactsSource(const ir::Graph& g, const PlaceOptions& o) : g_(g), o_(o) {}

  // Null when the node's kernel on the backend has no shape check.
  const InputFacts* facts_for(const ir::Node& node) {
    const KernelDef* k = kernels().find(o_.backend, node.domain, node.op_type, node.opset);
    if (!k || !k->shape_check) return nullptr;
    if (!inferred_) infer();
    facts_ = input_facts(node, types_.get());
    return &facts_;
  }
  // Why the facts are unknown ("" when inference succeeded).
  const std::string& inference_error() const { return error_; }

 private:
  void infer() {
    inferred_ = true;
    ir::Graph copy = g_;
    if (o_.constants)
      for (const auto& [name, t] : *o_.constants) copy.initializers.emplace(name, t);
    ops::InferOptions io;
    io.require_all = false;
    try {
      types_ = std::make_unique<ops::GraphTypes>(ops::infer_graph(copy, io));
    } catch (const Error& e) {
      error_ = e.what();
    }
  }

  const ir::Graph& g_;
  const PlaceOptions& o_;
  bool inferred_ = false;
  std::unique_ptr<ops::GraphTypes> types_;
  std::string error_;
  InputFacts facts_;
};

}  // namespace

InputFacts input_facts(const ir::Node& node, const ops::GraphTypes* types) {
  InputFacts f;
  for (const auto& in : node.inputs) {
    const ops::ValueType* t = nullptr;
    const ops::SymShape* d = nullptr;
    if (!in.empty() && types) {
      t = types->find(in);
      if (auto it = types->dims_values.find(in); it != types->dims_values.end()) d = &it->second;
    }
    f.types.push_back(t);
    f.dims_values.push_back(d);
  }
  return f;
}

bool is_transfer(const ir::Node& n) {
  return n.domain == "reforge" && (n.op_type == "ToDevice" || n.op_type == "ToHost");
}

std::vector<bool> shape_computation(const ir::Graph& g) {
  const size_t n = g.nodes.size();
  const std::vector<size_t> order = node_order(g);
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> uses;  // value -> (node, slot)
  for (size_t i = 0; i < n; ++i)
    for (size_t s = 0; s < g.nodes[i].inputs.size(); ++s)
      if (!g.nodes[i].inputs[s].empty()) uses[g.nodes[i].inputs[s]].push_back({i, s});
  std::set<std::string> graph_outputs;
  for (const auto& v : g.outputs) graph_outputs.insert(v.name);
  // From the consumers back: every use of every output is a structure input, or an input of
  // another shape-computation node that reads its bytes, or the input of a Shape or Size (which
  // reads its dimensions wherever it lives, so it neither asks for nor forbids the host); and at
  // least one use is of the first two kinds.
  std::vector<bool> shape_side(n, false);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const ir::Node& node = g.nodes[*it];
    if (is_transfer(node) || !ops::is_deterministic(node) || !resolve(node, kHostBackend, nullptr).empty()) continue;
    bool used = false, only_structure = true;
    for (const auto& out : node.outputs) {
      if (out.empty()) continue;
      if (graph_outputs.count(out)) only_structure = false;
      auto u = uses.find(out);
      if (u == uses.end()) continue;
      for (const auto& [c, slot] : u->second) {
        const ir::Node& consumer = g.nodes[c];
        if (reads_only_dimensions(consumer)) continue;
        used = true;
        const bool structure = ops::input_role(consumer, slot) == ops::InputRole::kShape;
        if (!structure && !shape_side[c]) only_structure = false;
      }
    }
    shape_side[*it] = used && only_structure;
  }
  return shape_side;
}

PlaceResult place_graph(ir::Graph& g, const PlaceOptions& o) {
  const Backend& target = backend_named(o.backend);
  PlaceResult r;
  const size_t n = g.nodes.size();
  const std::string of = " node(s)" + (o.subject.empty() ? std::string() : " of " + o.subject);
  if (target.memory == Memory::Host) {
    std::vector<std::string> bad;
    for (const auto& node : g.nodes)
      if (std::string why = resolve(node, o.backend, nullptr); !why.empty()) bad.push_back(node_line(node, why));
    if (!bad.empty())
      fail_lines(
          std::to_string(bad.size()) + " of " + std::to_string(n) + of + " cannot run on backend '" + o.backend + "':",
          bad);
    r.node_backend.assign(n, o.backend);
    return r;
  }

  const std::vector<size_t> order = node_order(g);
  const std::vector<bool> shape_side = shape_computation(g);
  std::set<std::string> graph_outputs;
  for (const auto& v : g.outputs) graph_outputs.insert(v.name);

  std::vector<std::string> where(n);
  std::vector<std::string> missing;
  FactsSource facts(g, o);
  for (size_t i = 0; i < n; ++i) {
    const ir::Node& node = g.nodes[i];
    if (shape_side[i]) {
      where[i] = kHostBackend;
      ++r.shape_nodes_on_host;
      continue;
    }
    std::string why = resolve(node, o.backend, nullptr, facts.facts_for(node));
    if (!why.empty() && !facts.inference_error().empty() && facts.facts_for(node))
      why += " (shape inference of the graph failed: " + facts.inference_error() + ")";
    if (why.empty()) {
      where[i] = o.backend;
      continue;
    }
    if (o.host_fallback) {
      if (const std::string host_why = resolve(node, kHostBackend, nullptr); host_why.empty()) {
        where[i] = kHostBackend;
        ++r.fallback_nodes;
        continue;
      } else {
        missing.push_back(node_line(node, why + "; on the host: " + host_why));
        continue;
      }
    }
    missing.push_back(node_line(node, why));
  }
  if (!missing.empty())
    fail_lines(std::to_string(missing.size()) + " of " + std::to_string(n) + of + " cannot run on backend '" +
                   o.backend + "'" +
                   (o.host_fallback ? "" : " (--allow-cpu-fallback runs nodes without a device kernel on the host)") +
                   ":",
               missing);

  auto memory_of = [&](const std::string& backend) { return backend_named(backend).memory; };

  // Every value name in use, so that the transfers' names are new.
  std::set<std::string> names;
  for (const auto& v : g.inputs) names.insert(v.name);
  for (const auto& [name, t] : g.initializers) names.insert(name);
  for (const auto& node : g.nodes)
    for (const auto& out : node.outputs)
      if (!out.empty()) names.insert(out);
  auto fresh = [&](const std::string& base) {
    std::string name = base;
    for (int k = 2; names.count(name); ++k) name = base + "#" + std::to_string(k);
    names.insert(name);
    return name;
  };

  // Graph outputs made on the device are renamed at their producer and copied to the host under
  // their own name at the end.
  std::map<std::string, std::string> device_output;  // graph output -> the device value
  for (size_t i = 0; i < n; ++i) {
    if (memory_of(where[i]) != Memory::Device) continue;
    for (auto& out : g.nodes[i].outputs)
      if (!out.empty() && graph_outputs.count(out) && !device_output.count(out))
        device_output[out] = fresh(out + "::device");
  }
  if (!device_output.empty())
    for (auto& node : g.nodes) {
      for (auto& v : node.inputs)
        if (auto it = device_output.find(v); it != device_output.end()) v = it->second;
      for (auto& v : node.outputs)
        if (auto it = device_output.find(v); it != device_output.end()) v = it->second;
    }

  std::map<std::string, Memory> memory;  // value -> where it lives
  for (const auto& v : g.inputs) memory[v.name] = Memory::Host;
  for (const auto& [name, t] : g.initializers) memory[name] = Memory::Host;

  std::vector<ir::Node> placed_nodes;
  std::vector<std::string> placed_backend;
  placed_nodes.reserve(n);
  std::map<std::pair<std::string, Memory>, std::string> moved;  // (value, to) -> transferred value
  auto transfer = [&](const std::string& value, Memory to, const std::string& out_name) {
    // One transfer per value and direction; a graph output gets its own, under its own name.
    auto key = std::make_pair(value, to);
    if (auto it = moved.find(key); it != moved.end() && out_name.empty()) return it->second;
    ir::Node t;
    t.domain = "reforge";
    t.opset = 1;
    t.op_type = to == Memory::Device ? "ToDevice" : "ToHost";
    t.inputs = {value};
    t.outputs = {out_name.empty() ? fresh(value + (to == Memory::Device ? "::device" : "::host")) : out_name};
    t.name = (to == Memory::Device ? "to_device:" : "to_host:") + value;
    memory[t.outputs[0]] = to;
    moved.emplace(key, t.outputs[0]);
    placed_nodes.push_back(t);
    placed_backend.push_back(o.backend);
    ++r.transfers;
    return t.outputs[0];
  };

  for (size_t i : order) {
    ir::Node node = std::move(g.nodes[i]);
    const Memory at = memory_of(where[i]);
    if (!reads_only_dimensions(node))
      for (size_t s = 0; s < node.inputs.size(); ++s) {
        std::string& in = node.inputs[s];
        if (in.empty()) continue;
        const Memory want = ops::input_role(node, s) == ops::InputRole::kShape ? Memory::Host : at;
        auto have = memory.find(in);
        // A value nothing produces is an input or a weight: on the host.
        const Memory where_now = have == memory.end() ? Memory::Host : have->second;
        if (where_now != want) in = transfer(in, want, "");
      }
    for (const auto& out : node.outputs)
      if (!out.empty()) memory[out] = at;
    placed_nodes.push_back(std::move(node));
    placed_backend.push_back(where[i]);
  }
  for (const auto& [out, device_value] : device_output) transfer(device_value, Memory::Host, out);
  // A float16 Linear weight reaches a device's reforge::MatMulAdd through a transfer: mark it, so
  // that the upload refuses infinities as the CPU's prepare step does (ops/reforge/float16_weights.h).
  std::map<std::string, size_t> to_device_of;  // transferred value -> its ToDevice node
  for (size_t k = 0; k < placed_nodes.size(); ++k)
    if (placed_nodes[k].domain == "reforge" && placed_nodes[k].op_type == "ToDevice")
      to_device_of[placed_nodes[k].outputs[0]] = k;
  for (const auto& node : placed_nodes)
    if (node.domain == "reforge" && node.op_type == "MatMulAdd" && node.inputs.size() > 1)
      if (auto it = to_device_of.find(node.inputs[1]); it != to_device_of.end())
        placed_nodes[it->second].attrs[ops::kFiniteFloat16For] = ir::string_attr(ops::kFiniteFloat16For, node.label());

  g.nodes = std::move(placed_nodes);
  r.node_backend = std::move(placed_backend);
  return r;
}

}  // namespace reforge::backends
