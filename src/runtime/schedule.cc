#include "runtime/schedule.h"

#include <algorithm>

#include "backends/placement.h"
#include "ops/registry.h"

namespace reforge::runtime {

namespace {

// Numbers the values (graph inputs, then engine weights) and resolves every node, in topological
// order, to its backend's kernel; node outputs get the next slots.
void resolve_steps(Schedule& s, const std::vector<std::string>& placement, std::vector<Tensor>& initial) {
  std::unordered_map<std::string, int> slot_of;
  auto new_slot = [&](const std::string& name) {
    int slot = static_cast<int>(s.num_slots++);
    slot_of[name] = slot;
    initial.emplace_back();
    s.is_const.push_back(false);
    return slot;
  };
  for (const auto& in : s.graph.inputs) {
    if (slot_of.count(in.name)) fail("graph input '", in.name, "' is declared twice");
    s.input_slots.push_back(new_slot(in.name));
  }
  for (const auto& [name, t] : s.graph.initializers) {
    if (slot_of.count(name)) continue;
    int slot = new_slot(name);
    initial[static_cast<size_t>(slot)] = t;
    s.is_const[static_cast<size_t>(slot)] = true;
    s.const_slot[name] = slot;
    if (t.defined()) s.const_desc[name] = {t.dtype(), t.shape()};
  }
  // The engine's weight store owns the weights from here on; the graph keeps only structure, so
  // a refit that replaces them frees the old tensors.
  for (auto& [name, t] : s.graph.initializers) t = Tensor();
  for (size_t idx : s.graph.topological_order()) {
    const ir::Node& n = s.graph.nodes[idx];
    Step st;
    st.node_index = idx;
    backends::Resolved kernel;
    const std::string why = backends::resolve(n, placement[idx], &kernel);
    REFORGE_CHECK(why.empty(), n.label(), ": ", why);  // LoweredGraph checked this
    st.kernel = kernel.kernel;
    st.prepare = kernel.prepare && *kernel.prepare ? kernel.prepare : nullptr;
    st.sharing = kernel.sharing && !kernel.sharing->empty() ? kernel.sharing : nullptr;
    const backends::Backend* be = backends::find_backend(placement[idx]);
    st.weight_memory = be->weight_memory;
    if (be->memory == Memory::Device) {
      REFORGE_CHECK(be->streams != nullptr, "internal error: device backend '", be->name, "' offers no DeviceStreams");
      st.device = be;
      if (std::find(s.devices.begin(), s.devices.end(), be) == s.devices.end()) s.devices.push_back(be);
    }
    for (const auto& in : n.inputs) {
      if (in.empty()) {
        st.inputs.push_back(-1);
        continue;
      }
      auto it = slot_of.find(in);
      REFORGE_ASSERT(it != slot_of.end());  // topological_order checked this
      st.inputs.push_back(it->second);
    }
    for (const auto& o : n.outputs) {
      if (o.empty()) {
        st.outputs.push_back(-1);
        continue;
      }
      if (slot_of.count(o)) fail(n.label(), ": output '", o, "' redefines an existing value");
      st.outputs.push_back(new_slot(o));
    }
    s.steps.push_back(std::move(st));
    s.step_nodes.push_back({n.name.empty() ? "#" + std::to_string(idx) : n.name,
                            n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type, 0, 0.0});
  }
  for (size_t si = 0; si < s.steps.size(); ++si) {
    if (!s.steps[si].prepare) continue;
    for (int v : s.steps[si].inputs)
      if (v >= 0 && s.is_const[static_cast<size_t>(v)]) {
        s.preparing_steps.push_back(si);
        break;
      }
  }
  for (const auto& out : s.graph.outputs) {
    auto it = slot_of.find(out.name);
    if (it == slot_of.end()) fail("graph output '", out.name, "' is not produced by any node");
    s.output_slots.push_back(it->second);
  }
}

// Per slot: how many step inputs read it.
std::vector<int> reader_counts(const Schedule& s) {
  std::vector<int> readers(s.num_slots, 0);
  for (const Step& st : s.steps)
    for (int v : st.inputs)
      if (v >= 0) ++readers[static_cast<size_t>(v)];
  return readers;
}

// Weights whose one reader is a ToDevice step that uploads them into weight memory.
void find_upload_steps(Schedule& s, const EngineOptions& options) {
  s.upload_step.assign(s.num_slots, -1);
  s.is_upload_step.assign(s.steps.size(), false);
  const std::vector<int> readers = reader_counts(s);
  for (size_t si : s.preparing_steps) {
    const Step& st = s.steps[si];
    const ir::Node& n = s.graph.nodes[st.node_index];
    if (!st.device || !st.weight_memory || !backends::is_transfer(n) || n.op_type != "ToDevice" ||
        st.inputs.size() != 1 || st.inputs[0] < 0 || !s.is_const[static_cast<size_t>(st.inputs[0])])
      continue;
    s.upload_steps.push_back(si);
    s.is_upload_step[si] = true;
    const auto v = static_cast<size_t>(st.inputs[0]);
    if (!options.keep_host_weights && readers[v] == 1) s.upload_step[v] = static_cast<int>(si);
  }
}

// Last use of each computed value: it is freed after that step (graph inputs and outputs are kept).
// Returns per slot the last reading step, -2 for graph inputs and outputs, -1 for unread values.
std::vector<int> find_last_uses(Schedule& s) {
  std::vector<int> last_use(s.num_slots, -1);
  for (size_t i = 0; i < s.steps.size(); ++i)
    for (int v : s.steps[i].inputs)
      if (v >= 0) last_use[static_cast<size_t>(v)] = static_cast<int>(i);
  for (int v : s.output_slots) last_use[static_cast<size_t>(v)] = -2;
  for (int v : s.input_slots) last_use[static_cast<size_t>(v)] = -2;
  for (size_t v = 0; v < s.num_slots; ++v)
    if (last_use[v] >= 0 && !s.is_const[v])
      s.steps[static_cast<size_t>(last_use[v])].free_after.push_back(static_cast<int>(v));
  return last_use;
}

// Shape subgraphs. Nondeterministic nodes (as the registry says) never qualify.
void find_shape_subgraphs(Schedule& s) {
  std::vector<bool> shape_value(s.num_slots, false);
  s.memoized.assign(s.steps.size(), false);
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const ir::Node& n = s.graph.nodes[s.steps[i].node_index];
    bool only_shapes = n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size");
    if (!only_shapes && ops::is_deterministic(n)) {
      bool any_shape = false, all_known = true;
      for (int v : s.steps[i].inputs) {
        if (v < 0) continue;
        if (shape_value[static_cast<size_t>(v)])
          any_shape = true;
        else if (!s.is_const[static_cast<size_t>(v)])
          all_known = false;
      }
      only_shapes = any_shape && all_known;
    }
    if (!only_shapes) continue;
    s.memoized[i] = true;
    s.any_memoized = true;
    for (int v : s.steps[i].outputs)
      if (v >= 0) shape_value[static_cast<size_t>(v)] = true;
  }
  s.memo_value = shape_value;
}

// Device-bound I/O: where graph inputs are read, and which ToHost steps only deliver outputs.
void find_device_io(Schedule& s) {
  const std::vector<int> readers = reader_counts(s);
  std::vector<int> input_index(s.num_slots, -1);
  for (size_t i = 0; i < s.input_slots.size(); ++i)
    input_index[static_cast<size_t>(s.input_slots[i])] = static_cast<int>(i);
  s.input_read_on_host.assign(s.input_slots.size(), false);
  for (size_t i = 0; i < s.steps.size(); ++i) {
    Step& st = s.steps[i];
    const ir::Node& n = s.graph.nodes[st.node_index];
    if (st.device && backends::is_transfer(n) && n.op_type == "ToDevice" && st.inputs.size() == 1 && st.inputs[0] >= 0)
      st.device_input = input_index[static_cast<size_t>(st.inputs[0])];
    const bool only_dimensions = n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size");
    for (size_t k = 0; k < st.inputs.size(); ++k) {
      const int v = st.inputs[k];
      if (v < 0 || input_index[static_cast<size_t>(v)] < 0 || only_dimensions) continue;
      if (!st.device || ops::input_role(n, k) == ops::InputRole::kShape)
        s.input_read_on_host[static_cast<size_t>(input_index[static_cast<size_t>(v)])] = true;
    }
  }
  s.output_copy_step.assign(s.steps.size(), false);
  s.device_output_value.assign(s.num_slots, false);
  s.output_device_slot.assign(s.output_slots.size(), -1);
  for (size_t o = 0; o < s.output_slots.size(); ++o) {
    const int p = s.producer[static_cast<size_t>(s.output_slots[o])];
    if (p < 0) continue;
    const Step& st = s.steps[static_cast<size_t>(p)];
    const ir::Node& n = s.graph.nodes[st.node_index];
    // A memoized copy (of a shape value) stays: later runs read it from the memo.
    if (!st.device || !backends::is_transfer(n) || n.op_type != "ToHost" || st.inputs.size() != 1 || st.inputs[0] < 0 ||
        readers[static_cast<size_t>(s.output_slots[o])] != 0 || s.memoized[static_cast<size_t>(p)])
      continue;
    s.output_device_slot[o] = st.inputs[0];
    s.output_copy_step[static_cast<size_t>(p)] = true;
    s.device_output_value[static_cast<size_t>(st.inputs[0])] = true;
  }
}

// The arenas' lifetimes. A device-tracing engine keeps every device step's inputs for rerun_step
// past the run, which a reused arena slot would overwrite: its device values come from the
// backend's pool, as do the values of runs that record.
void plan_lifetimes(Schedule& s, const std::vector<int>& last_use, const EngineOptions& options) {
  s.value_last_use.resize(s.steps.size());
  for (size_t i = 0; i < s.steps.size(); ++i)
    for (int v : s.steps[i].outputs) {
      int lu = v < 0 ? -1 : last_use[static_cast<size_t>(v)];
      s.value_last_use[i].push_back(lu == -2 ? arena::kEscapes : lu < 0 ? i : static_cast<size_t>(lu));
    }
  if (!options.arena || s.devices.size() != 1 || options.device_trace) return;
  // Device values that a run returns in device memory leave the run.
  std::vector<std::vector<bool>> leaving(s.steps.size());
  for (size_t i = 0; i < s.steps.size(); ++i)
    for (int v : s.steps[i].outputs) leaving[i].push_back(v >= 0 && s.device_output_value[static_cast<size_t>(v)]);
  s.arena_device = s.devices[0];
  s.device_last_use = arena::device_last_use(s.value_last_use, leaving);
}

// The step (and its output) that makes each slot.
void find_producers(Schedule& s) {
  s.producer.assign(s.num_slots, -1);
  s.producer_output.assign(s.num_slots, -1);
  for (size_t i = 0; i < s.steps.size(); ++i)
    for (size_t o = 0; o < s.steps[i].outputs.size(); ++o)
      if (const int v = s.steps[i].outputs[o]; v >= 0) {
        s.producer[static_cast<size_t>(v)] = static_cast<int>(i);
        s.producer_output[static_cast<size_t>(v)] = static_cast<int>(o);
      }
}

// The host arena's aliases known from the kernels' declarations.
void find_declared_views(Schedule& s) {
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& st = s.steps[i];
    if (!st.sharing || st.device || s.memoized[i]) continue;
    for (const ops::Sharing& sh : *st.sharing) {
      if (sh.kind != ops::Sharing::kView || sh.input >= st.inputs.size() || sh.output >= st.outputs.size()) continue;
      const int in = st.inputs[sh.input];
      if (in < 0 || st.outputs[sh.output] < 0) continue;
      const arena::ValueRef alias{i, sh.output};
      const int p = s.producer[static_cast<size_t>(in)];
      if (p < 0)
        s.declared_outside.push_back(alias);
      else if (!s.steps[static_cast<size_t>(p)].device)
        s.declared_views.push_back(
            {alias, {static_cast<size_t>(p), static_cast<size_t>(s.producer_output[static_cast<size_t>(in)])}});
    }
  }
}

// Recorded replay: only where a recording computes exactly what an eager run would, for every
// run of the signature and weight set it was made with.
void decide_replay(Schedule& s, const EngineOptions& options) {
  s.staged_input.assign(s.steps.size(), -1);
  auto decline = [&](std::string why) {
    if (s.replay_declined.empty()) s.replay_declined = std::move(why);
  };
  if (!options.device_replay) decline("turned off (EngineOptions::device_replay)");
  if (options.profile) decline("the engine profiles every node");
  if (options.device_trace) decline("the engine traces device work");
  if (!options.arena) decline("the engine runs without its arena and shape memo");
  if (s.devices.size() != 1)
    decline(s.devices.empty() ? "every node runs on the host" : "nodes run on several devices");
  if (s.replay_declined.empty() && !s.devices[0]->recorder)
    decline("backend '" + s.devices[0]->name + "' cannot record device work");
  for (size_t i = 0; i < s.steps.size() && s.replay_declined.empty(); ++i) {
    const Step& st = s.steps[i];
    const ir::Node& n = s.graph.nodes[st.node_index];
    if (!st.device && !s.memoized[i]) decline(n.label() + " runs on the host");
    if (!ops::is_deterministic(n)) decline(n.label() + " is not deterministic");
    if (st.device_input >= 0) s.staged_input[i] = st.device_input;
  }
  for (size_t i = 0; i < s.input_slots.size() && s.replay_declined.empty(); ++i)
    if (s.input_read_on_host[i]) decline("input '" + s.graph.inputs[i].name + "' is read on the host");
  for (size_t o = 0; o < s.output_slots.size() && s.replay_declined.empty(); ++o)
    if (s.output_device_slot[o] < 0) decline("output '" + s.graph.outputs[o].name + "' is not made on the device");
  if (s.replay_declined.empty()) s.recorder = s.devices[0]->recorder;
}

}  // namespace

Schedule make_schedule(ir::Graph graph, const std::vector<std::string>& placement, const EngineOptions& options,
                       std::vector<Tensor>& initial_weights) {
  Schedule s;
  s.graph = std::move(graph);
  initial_weights.clear();
  resolve_steps(s, placement, initial_weights);
  find_upload_steps(s, options);
  const std::vector<int> last_use = find_last_uses(s);
  find_shape_subgraphs(s);
  find_producers(s);
  find_device_io(s);
  find_declared_views(s);
  plan_lifetimes(s, last_use, options);
  decide_replay(s, options);
  return s;
}

std::string input_signature(const std::vector<ir::ValueInfo>& declared, const std::map<std::string, Tensor>& inputs) {
  std::string signature;
  for (const auto& in : declared) {
    const Tensor& t = inputs.at(in.name);
    signature += dtype_name(t.dtype()) + shape_str(t.shape()) + ";";
  }
  return signature;
}

}  // namespace reforge::runtime
