#include "runtime/engine.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "backends/backend.h"
#include "backends/placement.h"
#include "core/timing.h"
#include "ops/infer_graph.h"
#include "ops/registry.h"
#include "runtime/arena.h"

namespace reforge::runtime {

namespace {

// One node ready to execute: its kernel and value slots.
struct Step {
  size_t node_index;
  const ops::KernelFn* kernel;    // the kernel its backend runs it with
  const ops::PrepareFn* prepare;  // null or empty: nothing to prepare
  std::vector<int> inputs;        // value slot or -1 for an absent optional input
  std::vector<int> outputs;       // value slot or -1 for an unwanted output
  std::vector<int> free_after;    // slots whose last use is this step
  // The device backend the node runs on, whose allocator its outputs come from; null on the
  // host, whose outputs come from the activation arena or the heap.
  const backends::Backend* device = nullptr;
  // A reforge::ToDevice of a graph input: given a device tensor, it reads the caller's tensor even
  // where the run also made a host copy for host readers.
  int device_input = -1;  // graph input index, or -1
};

// A process-wide counter: every constant set gets a generation no other set has had.
uint64_t next_generation() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

}  // namespace

// The engine's weights and what kernels prepared from them: swapped as one (copy on write).
struct Engine::Weights {
  uint64_t generation = 0;                            // new for every derived set
  std::vector<Tensor> values;                         // slot -> value (undefined: computed or missing)
  std::vector<std::shared_ptr<const void>> prepared;  // step -> OpDef::prepare result
};

struct Engine::Impl {
  ir::Graph graph;
  EngineOptions options;
  std::vector<Step> steps;
  std::vector<bool> is_const;  // slot holds a constant (engine weight)
  std::unordered_map<std::string, int> const_slot;
  std::unordered_map<std::string, std::pair<DType, Shape>> const_desc;  // declared dtype/shape when known
  mutable std::mutex constants_mutex;
  std::mutex writer_mutex;
  std::shared_ptr<const Weights> constants;
  std::vector<size_t> preparing_steps;  // steps whose op has a prepare step and a constant input

  // Runs the prepare step of every step in `which` against `values`.
  void prepare(const std::vector<Tensor>& values, const std::vector<size_t>& which,
               std::vector<std::shared_ptr<const void>>& prepared) const;
  std::vector<int> input_slots;   // per graph input
  std::vector<int> output_slots;  // per graph output
  size_t num_slots = 0;
  int threads = 1;
  // Per step and output: the last step that reads the value (arena::kEscapes for graph
  // outputs), for planning the activation arena.
  arena::LastUse value_last_use;
  // Steps whose outputs depend only on the input shapes and the constants (Shape, Size and what
  // is computed from them and constants alone): run once per input signature and constant set,
  // then served from the plan cache's memo.
  std::vector<bool> memoized;
  std::vector<bool> memo_value;  // per slot: produced by a memoized step
  bool any_memoized = false;
  mutable arena::PlanCache arenas;
  mutable arena::Observed observed;  // where runs found kernels put their outputs, for every plan
  // The device arena (arena.h): steps on the engine's one device backend take their outputs from
  // it, in eager runs only. A run that records device work (device_replay.h) never uses it: a
  // recording's allocations must be the recording's own memory, which it keeps for its replays,
  // while an arena buffer goes back to the pool for the next run. Null when the engine has no
  // device arena (EngineOptions::arena off, no device step, or steps on several devices).
  const backends::Backend* arena_device = nullptr;
  arena::LastUse device_last_use;  // value_last_use as the device arena plans it (arena::device_last_use)
  mutable arena::Observed device_observed;
  mutable std::mutex stats_mutex;
  mutable ArenaStats last_stats;  // of the most recent run

  // The size of every host step output (and, in `device_sizes`, of every device step output that
  // the device arena may serve) for the inputs in `values` (with the constants there), by shape
  // inference; `error` says why none is known when inference fails.
  arena::Sizes infer_sizes(const std::vector<Tensor>& values, arena::Sizes& device_sizes, std::string& error) const;
  std::vector<NodeProfile> step_nodes;  // per step: its node's name and op type (no timings)
  // options.device_trace: per device step, the inputs it read in the most recent run (rerun_step).
  mutable std::mutex kept_mutex;
  mutable std::vector<std::vector<Tensor>> kept_inputs;
  mutable std::vector<std::shared_ptr<const void>> kept_prepared;  // what the kernels prepared, of that run's set
  mutable std::mutex profile_mutex;
  mutable std::vector<NodeProfile> profile;           // per step, when options.profile
  mutable std::deque<std::vector<TraceEvent>> trace;  // the last kTraceRuns runs' events
  mutable int64_t runs_traced = 0;
  mutable std::map<std::thread::id, int> trace_threads;
  std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();
  // Device backends that nodes run on: each run ends by waiting for their work (Backend::synchronize).
  std::vector<const backends::Backend*> devices;
  // Device-bound I/O (RunOptions, Engine::run). Per graph input: some node reads it in host
  // memory, so a device tensor given for it is copied to the host once per run.
  std::vector<bool> input_read_on_host;
  // Per graph output: the device value whose reforge::ToHost copy it is (skipped when outputs
  // stay on the device), or -1.
  std::vector<int> output_device_slot;
  std::vector<bool> output_copy_step;     // per step: such a ToHost, read by no other step
  std::vector<bool> device_output_value;  // per slot: the input of such a ToHost (kept to the end)

  // Recorded replay (EngineOptions::device_replay).
  struct Recording;
  backends::DeviceRecorder* recorder = nullptr;  // null when the engine's runs are never recorded
  std::string replay_declined;                   // why not, then
  std::vector<int> staged_input;                 // per step: the graph input its ToDevice reads, or -1
  mutable std::mutex recordings_mutex;
  mutable std::map<std::string, std::shared_ptr<Recording>> recordings;
  mutable std::atomic<int64_t> recorded{0}, replays{0}, eager_runs{0}, failed_recordings{0}, live_recordings{0};
  mutable std::string last_failure;  // under recordings_mutex

  // The record of `signature`, made on first use; null once the table of signatures is full.
  std::shared_ptr<Recording> recording(const std::string& signature) const;
  // Runs the graph step by step on inputs Engine::run has checked, whose input signature is `signature` (what the
  // arena plans are kept per; "" when the engine has no arena). With `record`, the run's device work is recorded
  // into it instead (the inputs go through its staging buffers, the outputs into its result buffers), and nothing is
  // returned: the caller replays the recording. Throws when the recording fails.
  std::vector<Tensor> execute(const std::map<std::string, Tensor>& inputs, const std::string& signature,
                              const Weights& weights, const RunOptions& options, Recording* record) const;
  // Copies the inputs into `r`'s staging buffers, replays it and returns the outputs (copies of
  // its result buffers, in the memory the options ask for).
  std::vector<Tensor> replay(const std::map<std::string, Tensor>& inputs, Recording& r,
                             const RunOptions& options) const;
};

// One input signature's recorded run, for one weight set.
struct Engine::Impl::Recording {
  std::mutex busy;                                   // held by the run that records or replays it
  uint64_t generation = 0;                           // the weight set it belongs to
  int eager_runs = 0;                                // runs of this signature and weight set before a recording
  int failures = 0;                                  // failed recordings; after two the signature stays eager
  std::shared_ptr<const void> work;                  // the recording, or null
  std::vector<Tensor> staging;                       // per graph input: the device buffer its ToDevice step hands out
  std::vector<Tensor> results;                       // per graph output: the device buffer the recording copies it into
  std::vector<std::pair<DType, Shape>> result_desc;  // per graph output, as the last eager run made it
  std::shared_ptr<const void> keep;                  // the shape memo whose device values the recording reads

  // Drops the recording and its buffers.
  void discard() {
    work.reset();
    staging.clear();
    results.clear();
    keep.reset();
  }
  // Forgets everything but the lock, for the weight set `g`.
  void reset(uint64_t g) {
    discard();
    generation = g;
    eager_runs = failures = 0;
    result_desc.clear();
  }
};

Engine::Engine(LoweredGraph lowered, EngineOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.graph = std::move(lowered.graph_);
  const std::vector<std::string> placement = std::move(lowered.placement_);
  m.options = options;
  m.threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<size_t> order = m.graph.topological_order();

  std::unordered_map<std::string, int> slot_of;
  auto consts = std::make_shared<Weights>();
  auto new_slot = [&](const std::string& name) {
    int s = static_cast<int>(m.num_slots++);
    slot_of[name] = s;
    consts->values.emplace_back();
    m.is_const.push_back(false);
    return s;
  };
  for (const auto& in : m.graph.inputs) {
    if (slot_of.count(in.name)) fail("graph input '", in.name, "' is declared twice");
    m.input_slots.push_back(new_slot(in.name));
  }
  for (const auto& [name, t] : m.graph.initializers) {
    if (slot_of.count(name)) continue;
    int slot = new_slot(name);
    consts->values[static_cast<size_t>(slot)] = t;
    m.is_const[static_cast<size_t>(slot)] = true;
    m.const_slot[name] = slot;
    if (t.defined()) m.const_desc[name] = {t.dtype(), t.shape()};
  }
  // The engine's constant table owns the weights from here on; the graph keeps only structure,
  // so a refit that replaces them frees the old tensors.
  for (auto& [name, t] : m.graph.initializers) t = Tensor();
  for (size_t idx : order) {
    const ir::Node& n = m.graph.nodes[idx];
    Step st;
    st.node_index = idx;
    backends::Resolved kernel;
    const std::string why = backends::resolve(n, placement[idx], &kernel);
    REFORGE_CHECK(why.empty(), n.label(), ": ", why);  // LoweredGraph checked this
    st.kernel = kernel.kernel;
    st.prepare = kernel.prepare && *kernel.prepare ? kernel.prepare : nullptr;
    const backends::Backend* be = backends::find_backend(placement[idx]);
    if (be->memory == Memory::Device) {
      REFORGE_CHECK(be->allocator != nullptr, "internal error: device backend '", be->name, "' has no allocator");
      st.device = be;
      if (std::find(m.devices.begin(), m.devices.end(), be) == m.devices.end()) m.devices.push_back(be);
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
    m.steps.push_back(std::move(st));
    m.step_nodes.push_back({n.name.empty() ? "#" + std::to_string(idx) : n.name,
                            n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type, 0, 0.0});
    if (m.options.profile) m.profile.push_back(m.step_nodes.back());
  }
  for (size_t si = 0; si < m.steps.size(); ++si) {
    if (!m.steps[si].prepare) continue;
    for (int v : m.steps[si].inputs)
      if (v >= 0 && m.is_const[static_cast<size_t>(v)]) {
        m.preparing_steps.push_back(si);
        break;
      }
  }
  consts->prepared.resize(m.steps.size());
  consts->generation = next_generation();
  m.prepare(consts->values, m.preparing_steps, consts->prepared);
  m.constants = consts;
  for (const auto& out : m.graph.outputs) {
    auto it = slot_of.find(out.name);
    if (it == slot_of.end()) fail("graph output '", out.name, "' is not produced by any node");
    m.output_slots.push_back(it->second);
  }
  // Last use of each computed value: free it after that step (graph outputs are kept).
  std::vector<int> last_use(m.num_slots, -1);
  for (size_t s = 0; s < m.steps.size(); ++s)
    for (int v : m.steps[s].inputs)
      if (v >= 0) last_use[static_cast<size_t>(v)] = static_cast<int>(s);
  for (int v : m.output_slots) last_use[static_cast<size_t>(v)] = -2;
  for (int v : m.input_slots) last_use[static_cast<size_t>(v)] = -2;
  for (size_t v = 0; v < m.num_slots; ++v)
    if (last_use[v] >= 0 && !m.is_const[v])
      m.steps[static_cast<size_t>(last_use[v])].free_after.push_back(static_cast<int>(v));
  // Shape subgraphs. Nondeterministic nodes (as the registry says) never qualify.
  {
    std::vector<bool> shape_value(m.num_slots, false);
    m.memoized.assign(m.steps.size(), false);
    for (size_t s = 0; s < m.steps.size(); ++s) {
      const ir::Node& n = m.graph.nodes[m.steps[s].node_index];
      bool only_shapes = n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size");
      if (!only_shapes && ops::is_deterministic(n)) {
        bool any_shape = false, all_known = true;
        for (int v : m.steps[s].inputs) {
          if (v < 0) continue;
          if (shape_value[static_cast<size_t>(v)])
            any_shape = true;
          else if (!m.is_const[static_cast<size_t>(v)])
            all_known = false;
        }
        only_shapes = any_shape && all_known;
      }
      if (!only_shapes) continue;
      m.memoized[s] = true;
      m.any_memoized = true;
      for (int v : m.steps[s].outputs)
        if (v >= 0) shape_value[static_cast<size_t>(v)] = true;
    }
    m.memo_value = shape_value;
  }
  // Device-bound I/O: where graph inputs are read, and which ToHost steps only deliver outputs.
  {
    std::vector<int> readers(m.num_slots, 0);
    for (const Step& st : m.steps)
      for (int v : st.inputs)
        if (v >= 0) ++readers[static_cast<size_t>(v)];
    std::vector<int> input_index(m.num_slots, -1);
    for (size_t i = 0; i < m.input_slots.size(); ++i)
      input_index[static_cast<size_t>(m.input_slots[i])] = static_cast<int>(i);
    m.input_read_on_host.assign(m.input_slots.size(), false);
    std::vector<int> producer(m.num_slots, -1);
    for (size_t s = 0; s < m.steps.size(); ++s) {
      Step& st = m.steps[s];
      const ir::Node& n = m.graph.nodes[st.node_index];
      if (st.device && backends::is_transfer(n) && n.op_type == "ToDevice" && st.inputs.size() == 1 &&
          st.inputs[0] >= 0)
        st.device_input = input_index[static_cast<size_t>(st.inputs[0])];
      for (int v : st.outputs)
        if (v >= 0) producer[static_cast<size_t>(v)] = static_cast<int>(s);
      const bool only_dimensions = n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size");
      for (size_t i = 0; i < st.inputs.size(); ++i) {
        const int v = st.inputs[i];
        if (v < 0 || input_index[static_cast<size_t>(v)] < 0 || only_dimensions) continue;
        if (!st.device || ops::input_role(n, i) == ops::InputRole::kShape)
          m.input_read_on_host[static_cast<size_t>(input_index[static_cast<size_t>(v)])] = true;
      }
    }
    m.output_copy_step.assign(m.steps.size(), false);
    m.device_output_value.assign(m.num_slots, false);
    m.output_device_slot.assign(m.output_slots.size(), -1);
    for (size_t o = 0; o < m.output_slots.size(); ++o) {
      const int p = producer[static_cast<size_t>(m.output_slots[o])];
      if (p < 0) continue;
      const Step& st = m.steps[static_cast<size_t>(p)];
      const ir::Node& n = m.graph.nodes[st.node_index];
      // A memoized copy (of a shape value) stays: later runs read it from the memo.
      if (!st.device || !backends::is_transfer(n) || n.op_type != "ToHost" || st.inputs.size() != 1 ||
          st.inputs[0] < 0 || readers[static_cast<size_t>(m.output_slots[o])] != 0 ||
          m.memoized[static_cast<size_t>(p)])
        continue;
      m.output_device_slot[o] = st.inputs[0];
      m.output_copy_step[static_cast<size_t>(p)] = true;
      m.device_output_value[static_cast<size_t>(st.inputs[0])] = true;
    }
  }
  m.value_last_use.resize(m.steps.size());
  for (size_t s = 0; s < m.steps.size(); ++s)
    for (int v : m.steps[s].outputs) {
      int lu = v < 0 ? -1 : last_use[static_cast<size_t>(v)];
      m.value_last_use[s].push_back(lu == -2 ? arena::kEscapes : lu < 0 ? s : static_cast<size_t>(lu));
    }
  // A device-tracing engine keeps every device step's inputs for rerun_step past the run, which a
  // reused arena slot would overwrite: its device values come from the backend's pool, as do the
  // values of runs that record (below).
  if (m.options.arena && m.devices.size() == 1 && !m.options.device_trace) {
    // Device values that a run returns in device memory leave the run.
    std::vector<std::vector<bool>> leaving(m.steps.size());
    for (size_t s = 0; s < m.steps.size(); ++s)
      for (int v : m.steps[s].outputs) leaving[s].push_back(v >= 0 && m.device_output_value[static_cast<size_t>(v)]);
    m.arena_device = m.devices[0];
    m.device_last_use = arena::device_last_use(m.value_last_use, leaving);
  }
  // Recorded replay: only where a recording computes exactly what an eager run would, for every
  // run of the signature and weight set it was made with.
  m.staged_input.assign(m.steps.size(), -1);
  auto decline = [&](std::string why) {
    if (m.replay_declined.empty()) m.replay_declined = std::move(why);
  };
  if (!m.options.device_replay) decline("turned off (EngineOptions::device_replay)");
  if (m.options.profile) decline("the engine profiles every node");
  if (m.options.device_trace) decline("the engine traces device work");
  if (!m.options.arena) decline("the engine runs without its arena and shape memo");
  if (m.devices.size() != 1)
    decline(m.devices.empty() ? "every node runs on the host" : "nodes run on several devices");
  if (m.replay_declined.empty() && !m.devices[0]->recorder)
    decline("backend '" + m.devices[0]->name + "' cannot record device work");
  for (size_t s = 0; s < m.steps.size() && m.replay_declined.empty(); ++s) {
    const Step& st = m.steps[s];
    const ir::Node& n = m.graph.nodes[st.node_index];
    if (!st.device && !m.memoized[s]) decline(n.label() + " runs on the host");
    if (!ops::is_deterministic(n)) decline(n.label() + " is not deterministic");
    if (st.device_input >= 0) m.staged_input[s] = st.device_input;
  }
  for (size_t i = 0; i < m.input_slots.size() && m.replay_declined.empty(); ++i)
    if (m.input_read_on_host[i]) decline("input '" + m.graph.inputs[i].name + "' is read on the host");
  for (size_t o = 0; o < m.output_slots.size() && m.replay_declined.empty(); ++o)
    if (m.output_device_slot[o] < 0) decline("output '" + m.graph.outputs[o].name + "' is not made on the device");
  if (m.replay_declined.empty()) m.recorder = m.devices[0]->recorder;
}

void Engine::Impl::prepare(const std::vector<Tensor>& values, const std::vector<size_t>& which,
                           std::vector<std::shared_ptr<const void>>& prepared) const {
  for (size_t si : which) {
    const Step& st = steps[si];
    const ir::Node& node = graph.nodes[st.node_index];
    std::vector<const Tensor*> cins(st.inputs.size(), nullptr);
    bool complete = true;
    for (size_t i = 0; i < st.inputs.size(); ++i) {
      int v = st.inputs[i];
      if (v < 0 || !is_const[static_cast<size_t>(v)]) continue;
      if (!values[static_cast<size_t>(v)].defined()) complete = false;  // stripped: prepared at refit
      cins[i] = &values[static_cast<size_t>(v)];
    }
    prepared[si] = nullptr;
    if (!complete) continue;
    try {
      prepared[si] = (*st.prepare)(node, cins);
    } catch (Error& e) {
      throw e.with_context("while preparing the weights of " + node.label());
    } catch (const std::bad_alloc&) {
      fail("out of memory while preparing the weights of ", node.label());
    }
  }
}

arena::Sizes Engine::Impl::infer_sizes(const std::vector<Tensor>& values, arena::Sizes& device_sizes,
                                       std::string& error) const {
  arena::Sizes sizes(steps.size());
  for (size_t s = 0; s < steps.size(); ++s) sizes[s].resize(steps[s].outputs.size());
  device_sizes = sizes;
  // The graph with the constants of this run's weight set and the inputs' actual shapes.
  ir::Graph g;
  g.opsets = graph.opsets;
  g.inputs = graph.inputs;
  g.outputs = graph.outputs;
  g.nodes = graph.nodes;
  for (const auto& [name, slot] : const_slot) g.initializers[name] = values[static_cast<size_t>(slot)];
  std::map<std::string, Shape> shapes;
  for (size_t i = 0; i < graph.inputs.size(); ++i)
    shapes[graph.inputs[i].name] = values[static_cast<size_t>(input_slots[i])].shape();
  ops::InferOptions io;
  io.input_shapes = &shapes;
  io.require_all = false;
  ops::GraphTypes types;
  try {
    types = ops::infer_graph(g, io);
  } catch (const Error& e) {
    // The run itself reports what is wrong with these inputs; its values go to the heap.
    error = e.what();
    return sizes;
  }
  for (size_t s = 0; s < steps.size(); ++s) {
    if (memoized[s]) continue;  // shape subgraphs run on the heap and are kept in the memo
    const ir::Node& n = graph.nodes[steps[s].node_index];
    // Device steps' outputs are the device arena's, except a ToHost's (host memory by definition)
    // and a ToDevice's of an engine weight (the upload made with the weight set, as the op says:
    // planning it would size the first run's arena by every weight the plan uploads).
    if (steps[s].device) {
      if (!arena_device) continue;
      const std::vector<int>& in = steps[s].inputs;
      if (backends::is_transfer(n) &&
          (n.op_type == "ToHost" || (in.size() == 1 && in[0] >= 0 && is_const[static_cast<size_t>(in[0])])))
        continue;
    }
    auto& out = steps[s].device ? device_sizes[s] : sizes[s];
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const ops::ValueType* t = n.outputs[o].empty() ? nullptr : types.find(n.outputs[o]);
      if (!t || !t->fully_known() || t->dtype == DType::String || dtype_size(t->dtype) == 0) continue;
      size_t numel = 1;
      for (const auto& d : t->shape) numel *= static_cast<size_t>(d.value());
      out[o] = numel * dtype_size(t->dtype);
    }
  }
  return sizes;
}

Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

const std::vector<ir::ValueInfo>& Engine::inputs() const { return impl_->graph.inputs; }
const std::vector<ir::ValueInfo>& Engine::outputs() const { return impl_->graph.outputs; }
const ir::Graph& Engine::graph() const { return impl_->graph; }

namespace {

std::string declared_str(const ir::ValueInfo& vi) {
  std::string s = dtype_name(vi.dtype);
  if (!vi.has_shape) return s + "[?]";
  s += "[";
  for (size_t i = 0; i < vi.shape.size(); ++i) {
    if (i) s += ",";
    const auto& d = vi.shape[i];
    s += d.fixed() ? std::to_string(d.value) : (d.symbol.empty() ? "?" : d.symbol);
  }
  return s + "]";
}

void check_input(const ir::ValueInfo& vi, const Tensor& t, std::map<std::string, int64_t>& symbols) {
  auto mismatch = [&]() { fail("input '", vi.name, "' is ", t.describe(), ", the model expects ", declared_str(vi)); };
  if (vi.dtype != DType::Undefined && t.dtype() != vi.dtype) mismatch();
  if (!vi.has_shape) return;
  if (t.rank() != static_cast<int64_t>(vi.shape.size())) mismatch();
  for (size_t i = 0; i < vi.shape.size(); ++i) {
    const auto& d = vi.shape[i];
    int64_t actual = t.shape()[i];
    if (d.fixed()) {
      if (actual != d.value) mismatch();
    } else if (!d.symbol.empty()) {
      auto [it, inserted] = symbols.emplace(d.symbol, actual);
      if (!inserted && it->second != actual)
        fail("input '", vi.name, "' has ", d.symbol, " = ", actual, " but another input set ", d.symbol, " = ",
             it->second);
    }
  }
}

}  // namespace

void check_inputs(const std::vector<ir::ValueInfo>& declared, const std::map<std::string, Tensor>& inputs) {
  std::map<std::string, int64_t> symbols;
  for (const auto& [name, t] : inputs) {
    bool known = false;
    for (const auto& vi : declared) known |= vi.name == name;
    if (!known) {
      std::string names;
      for (const auto& vi : declared) names += (names.empty() ? "" : ", ") + vi.name;
      fail("unknown input '", name, "'; the model's inputs are: ", names);
    }
  }
  for (const auto& vi : declared) {
    auto it = inputs.find(vi.name);
    if (it == inputs.end()) fail("missing input '", vi.name, "' (", declared_str(vi), ")");
    check_input(vi, it->second, symbols);
  }
}

std::vector<Tensor> Engine::run(const std::map<std::string, Tensor>& inputs) const { return run(inputs, *weights()); }

std::vector<Tensor> Engine::run(const std::map<std::string, Tensor>& inputs, const RunOptions& options) const {
  return run(inputs, *weights(), options);
}

namespace {

// The inputs' dtypes and shapes: what an arena plan and a recording are kept per.
std::string input_signature(const std::vector<ir::ValueInfo>& declared, const std::map<std::string, Tensor>& inputs) {
  std::string signature;
  for (const auto& in : declared) {
    const Tensor& t = inputs.at(in.name);
    signature += dtype_name(t.dtype()) + shape_str(t.shape()) + ";";
  }
  return signature;
}

}  // namespace

std::shared_ptr<Engine::Impl::Recording> Engine::Impl::recording(const std::string& signature) const {
  std::lock_guard<std::mutex> lock(recordings_mutex);
  auto it = recordings.find(signature);
  if (it != recordings.end()) return it->second;
  if (recordings.size() >= kReplaySignatures) return nullptr;
  return recordings.emplace(signature, std::make_shared<Recording>()).first->second;
}

std::vector<Tensor> Engine::run(const std::map<std::string, Tensor>& inputs, const Weights& weights,
                                const RunOptions& options) const {
  const Impl& m = *impl_;
  check_inputs(m.graph.inputs, inputs);
  // One signature per run, for the arena plans and the recordings.
  const std::string signature = m.options.arena || m.recorder ? input_signature(m.graph.inputs, inputs) : std::string();
  if (!m.recorder) return m.execute(inputs, signature, weights, options, nullptr);
  std::shared_ptr<Impl::Recording> r = m.recording(signature);
  if (!r) return m.execute(inputs, signature, weights, options, nullptr);
  std::unique_lock<std::mutex> busy(r->busy, std::try_to_lock);
  if (!busy.owns_lock()) return m.execute(inputs, signature, weights, options, nullptr);
  if (r->generation != weights.generation) {  // a new weight set: its own recording
    if (r->work) --m.live_recordings;
    r->reset(weights.generation);
  }
  if (r->work) {
    ++m.replays;
    return m.replay(inputs, *r, options);
  }
  if (r->eager_runs > 0 && r->failures < 2 && r->result_desc.size() == m.output_slots.size()) {
    std::vector<Tensor> outs;
    try {
      outs = m.execute(inputs, signature, weights, options, r.get());
    } catch (const Error& e) {
      m.recorder->abandon();
      r->discard();
      ++r->failures;
      ++m.failed_recordings;
      std::lock_guard<std::mutex> lock(m.recordings_mutex);
      m.last_failure = e.what();
    }
    if (r->work) {
      ++m.live_recordings;
      ++m.recorded;
      ++m.replays;
      return m.replay(inputs, *r, options);
    }
    if (!outs.empty()) {  // not recorded: the shape memo of this weight set was not there yet
      ++r->eager_runs;
      return outs;
    }
  }
  std::vector<Tensor> outs = m.execute(inputs, signature, weights, options, nullptr);
  ++r->eager_runs;
  r->result_desc.clear();
  for (const Tensor& t : outs) r->result_desc.emplace_back(t.dtype(), t.shape());
  return outs;
}

std::vector<Tensor> Engine::Impl::replay(const std::map<std::string, Tensor>& inputs, Recording& r,
                                         const RunOptions& options) const {
  for (size_t i = 0; i < r.staging.size(); ++i) {
    if (!r.staging[i].defined()) continue;
    const Tensor& given = inputs.at(graph.inputs[i].name);
    recorder->copy(r.staging[i].mutable_raw(), given.raw(), given.nbytes());
  }
  recorder->replay(r.work.get());
  std::vector<Tensor> outs;
  outs.reserve(r.results.size());
  for (const Tensor& d : r.results) {
    if (options.outputs == Memory::Host) {
      outs.push_back(to_memory(d, Memory::Host));  // waits for the device
      continue;
    }
    Tensor out = device_memory().allocate(d.dtype(), d.shape());  // the next replay reuses `d`
    recorder->copy(out.mutable_raw(), d.raw(), d.nbytes());
    outs.push_back(std::move(out));
  }
  const backends::Backend* d = devices[0];
  if (d->synchronize) {
    try {
      d->synchronize();
    } catch (Error& e) {
      throw e.with_context("while finishing a run on backend '" + d->name + "'");
    }
  }
  return outs;
}

std::vector<Tensor> Engine::Impl::execute(const std::map<std::string, Tensor>& inputs, const std::string& signature,
                                          const Weights& weights, const RunOptions& options, Recording* record) const {
  const Impl& m = *this;
  std::vector<Tensor> values(m.num_slots);  // Engine::run checked the inputs
  const bool device_outputs = options.outputs == Memory::Device;
  if (device_outputs && m.devices.empty())
    fail(
        "run: outputs in device memory were asked for, but every node of this engine runs on the host; "
        "RunOptions::outputs = Device needs a plan built for a device backend");
  // Device inputs read on the host somewhere: one host copy serves the host readers, and the
  // ToDevice steps of the input read the caller's tensor (device_given).
  std::vector<const Tensor*> device_given(m.graph.inputs.size(), nullptr);
  for (size_t i = 0; i < m.graph.inputs.size(); ++i) {
    const Tensor& given = inputs.at(m.graph.inputs[i].name);
    if (!given.on_host() && m.devices.empty())
      fail("input '", m.graph.inputs[i].name, "' is in device memory, but every node of this engine runs on the host");
    const bool copy = !given.on_host() && m.input_read_on_host[i];
    values[static_cast<size_t>(m.input_slots[i])] = copy ? to_memory(given, Memory::Host) : given;
    if (copy) device_given[i] = &given;
  }
  const Weights* consts = &weights;
  REFORGE_CHECK(consts->values.size() == m.num_slots, "run: not a weight set of this engine");
  for (size_t v = 0; v < m.num_slots; ++v) {
    if (!m.is_const[v]) continue;
    if (!consts->values[v].defined()) fail("the engine has missing weights (a stripped plan): refit it before running");
    values[v] = consts->values[v];
  }

  // Activations: from the arena planned for these input shapes (inferred the first time a
  // signature is seen).
  std::shared_ptr<arena::PlanCache::Entry> arena_entry;
  std::shared_ptr<const arena::Plan> arena_plan;
  std::optional<arena::ArenaAllocator> arena_alloc;
  std::shared_ptr<arena::Buffer> arena_buffer;
  if (m.options.arena) {
    arena_entry = m.arenas.find(signature);
    if (!arena_entry) {
      std::string error;
      arena::Sizes device_sizes;
      arena::Sizes sizes = m.infer_sizes(values, device_sizes, error);
      arena_entry = m.arenas.insert(signature, std::move(sizes), std::move(device_sizes), std::move(error));
    }
    arena_plan = arena::PlanCache::plan(*arena_entry, m.value_last_use, m.observed);
    arena_buffer = arena::PlanCache::take(*arena_entry, arena_plan->total_bytes);
    arena_alloc.emplace(*arena_plan, arena_buffer, m.value_last_use, m.observed);
  }
  ops::OutputAllocator* allocator = arena_alloc ? &*arena_alloc : nullptr;
  // Shape subgraphs: served from the memo, or computed (on the heap) and memoized after the run.
  std::shared_ptr<const arena::PlanCache::Memo> memo =
      arena_entry && m.any_memoized ? arena::PlanCache::memo(*arena_entry, consts->generation) : nullptr;
  std::shared_ptr<arena::PlanCache::Memo> new_memo;
  if (record && m.any_memoized && !memo) record = nullptr;  // recorded once the memo exists: runs eagerly
  // Device activations: from the device arena, in eager runs (Impl::arena_device says why).
  std::shared_ptr<const arena::Plan> device_plan;
  std::optional<arena::ArenaAllocator> device_alloc;
  std::shared_ptr<arena::Buffer> device_buffer;
  if (arena_entry && m.arena_device && !record) {
    device_plan = arena::PlanCache::plan(*arena_entry, m.device_last_use, m.device_observed, Memory::Device);
    device_buffer = arena::PlanCache::take(*arena_entry, device_plan->total_bytes, Memory::Device);
    device_alloc.emplace(*device_plan, device_buffer, m.device_last_use, m.device_observed, m.arena_device->allocator);
  }
  if (record) {
    // The recording's staging buffers (the graph inputs' device copies, which its ToDevice steps
    // hand out) and result buffers, allocated and filled before the recording starts.
    record->keep = memo;
    record->staging.assign(m.graph.inputs.size(), Tensor());
    for (size_t si = 0; si < m.steps.size(); ++si) {
      const int i = m.staged_input[si];
      if (i < 0 || record->staging[static_cast<size_t>(i)].defined()) continue;
      const Tensor& given = values[static_cast<size_t>(m.input_slots[static_cast<size_t>(i)])];
      Tensor staged = device_memory().allocate(given.dtype(), given.shape());
      m.recorder->copy(staged.mutable_raw(), given.raw(), given.nbytes());
      record->staging[static_cast<size_t>(i)] = std::move(staged);
    }
    record->results.clear();
    for (const auto& [dtype, shape] : record->result_desc)
      record->results.push_back(device_memory().allocate(dtype, shape));
    m.recorder->begin();
  }
  if (arena_entry && m.any_memoized && !memo) {
    new_memo = std::make_shared<arena::PlanCache::Memo>();
    new_memo->generation = consts->generation;
    new_memo->outputs.resize(m.steps.size());
  }

  omp_set_num_threads(m.threads);
  std::vector<std::vector<Tensor>> kept(m.options.device_trace ? m.steps.size() : 0);
  std::vector<const Tensor*> in_ptrs;
  std::vector<double> step_ms(m.options.profile ? m.steps.size() : 0);
  std::vector<double> step_start_us(step_ms.size());
  for (size_t si = 0; si < m.steps.size(); ++si) {
    const Step& st = m.steps[si];
    // Outputs that stay on the device skip their copy to the host (and keep the device value).
    if ((device_outputs || record) && m.output_copy_step[si]) continue;
    if (record && m.staged_input[si] >= 0) {  // a graph input: the recording's staging buffer
      for (size_t o = 0; o < st.outputs.size(); ++o)
        if (st.outputs[o] >= 0)
          values[static_cast<size_t>(st.outputs[o])] = record->staging[static_cast<size_t>(m.staged_input[si])];
      continue;
    }
    auto started = m.options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    if (m.options.profile) step_start_us[si] = std::chrono::duration<double, std::micro>(started - m.created).count();
    const ir::Node& node = m.graph.nodes[st.node_index];
    if (memo && m.memoized[si]) {
      const auto& outs = memo->outputs[si];
      for (size_t o = 0; o < st.outputs.size(); ++o)
        if (st.outputs[o] >= 0) values[static_cast<size_t>(st.outputs[o])] = outs[o];
      for (int v : st.free_after)
        if (!(device_outputs || record) || !m.device_output_value[static_cast<size_t>(v)])
          values[static_cast<size_t>(v)] = Tensor();
      if (m.options.profile) step_ms[si] = ms_since(started);
      continue;
    }
    in_ptrs.clear();
    for (int v : st.inputs) {
      if (v < 0) {
        in_ptrs.push_back(nullptr);
        continue;
      }
      const Tensor& t = values[static_cast<size_t>(v)];
      REFORGE_ASSERT(t.defined());
      in_ptrs.push_back(st.device_input >= 0 && device_given[static_cast<size_t>(st.device_input)]
                            ? device_given[static_cast<size_t>(st.device_input)]
                            : &t);
    }
    const bool host_arena = arena_alloc && !st.device;
    // Memoized values outlive the run: never in an arena.
    const bool device_arena = device_alloc && st.device && !m.memoized[si];
    ops::OutputAllocator* step_allocator = device_arena     ? &*device_alloc
                                           : st.device      ? st.device->allocator
                                           : m.memoized[si] ? nullptr
                                                            : allocator;
    ops::KernelContext ctx(node, in_ptrs, m.threads, step_allocator, consts->prepared[si].get());
    if (host_arena) arena_alloc->begin_step(si);
    if (device_arena) device_alloc->begin_step(si);
    backends::DeviceTracer* tracer =
        m.options.device_trace && st.device && st.device->tracer && st.device->tracer->recording() ? st.device->tracer
                                                                                                   : nullptr;
    if (tracer) {
      tracer->push_tag(static_cast<int64_t>(si));
      std::vector<Tensor>& keep = kept[si];
      for (const Tensor* t : in_ptrs) keep.push_back(t ? *t : Tensor());
    }
    try {
      (*st.kernel)(ctx);
    } catch (Error& e) {
      if (tracer) tracer->pop_tag();
      throw e.with_context("while running " + node.label());
    } catch (const std::bad_alloc&) {
      if (tracer) tracer->pop_tag();
      fail("out of memory while running ", node.label());
    }
    if (tracer) tracer->pop_tag();
    if (host_arena) arena_alloc->placed(si, ctx.outputs());
    if (device_arena) device_alloc->placed(si, ctx.outputs());
    for (size_t o = 0; o < st.outputs.size(); ++o) {
      int slot = st.outputs[o];
      if (slot < 0) continue;
      Tensor& out = ctx.outputs()[o];
      if (!out.defined()) fail(node.label(), ": kernel did not produce output ", o, " ('", node.outputs[o], "')");
      values[static_cast<size_t>(slot)] = std::move(out);
    }
    if (new_memo && m.memoized[si]) {
      auto& keep = new_memo->outputs[si];
      keep.resize(st.outputs.size());
      for (size_t o = 0; o < st.outputs.size(); ++o)
        if (st.outputs[o] >= 0) keep[o] = values[static_cast<size_t>(st.outputs[o])];
    }
    for (int v : st.free_after)
      if (!(device_outputs || record) || !m.device_output_value[static_cast<size_t>(v)])
        values[static_cast<size_t>(v)] = Tensor();
    if (m.options.profile) {
      if (st.device && st.device->synchronize) st.device->synchronize();  // the node's time, not its launch's
      step_ms[si] = ms_since(started);
    }
  }
  if (record) {
    // The outputs go into the recording's result buffers; every value the recording allocated is
    // released inside it, so that the recording owns all of its memory.
    for (size_t o = 0; o < m.output_slots.size(); ++o) {
      const Tensor& t = values[static_cast<size_t>(m.output_device_slot[o])];
      const auto& [dtype, shape] = record->result_desc[o];
      if (t.dtype() != dtype || t.shape() != shape)
        fail("output '", m.graph.outputs[o].name, "' is ", t.describe(),
             " where the eager run of the same inputs made ", dtype_name(dtype), shape_str(shape));
      m.recorder->copy(record->results[o].mutable_raw(), t.raw(), t.nbytes());
    }
    values.clear();
    in_ptrs.clear();
    record->work = m.recorder->end();
    if (arena_alloc) {
      arena_alloc.reset();
      arena::PlanCache::give_back(*arena_entry, std::move(arena_buffer));
    }
    return {};
  }
  ++m.eager_runs;
  for (const backends::Backend* d : m.devices)
    if (d->synchronize) {
      try {
        d->synchronize();
      } catch (Error& e) {
        throw e.with_context("while finishing a run on backend '" + d->name + "'");
      }
    }
  if (m.options.device_trace && std::any_of(kept.begin(), kept.end(), [](const auto& k) { return !k.empty(); })) {
    std::lock_guard<std::mutex> lock(m.kept_mutex);
    m.kept_inputs = std::move(kept);
    m.kept_prepared = consts->prepared;
  }
  if (m.options.profile) {
    std::lock_guard<std::mutex> lock(m.profile_mutex);
    for (size_t si = 0; si < step_ms.size(); ++si) {
      m.profile[si].calls += 1;
      m.profile[si].total_ms += step_ms[si];
    }
    const auto thread =
        m.trace_threads.emplace(std::this_thread::get_id(), static_cast<int>(m.trace_threads.size())).first;
    std::vector<TraceEvent> events(step_ms.size());
    for (size_t si = 0; si < step_ms.size(); ++si)
      events[si] = {si, m.runs_traced, thread->second, step_start_us[si], 1000.0 * step_ms[si]};
    ++m.runs_traced;
    m.trace.push_back(std::move(events));
    if (m.trace.size() > kTraceRuns) m.trace.pop_front();
  }
  std::vector<Tensor> outs;
  outs.reserve(m.output_slots.size());
  for (size_t o = 0; o < m.output_slots.size(); ++o) {
    const int s = m.output_slots[o];
    if (device_outputs) {
      const int d = m.output_device_slot[o];
      const int v = d >= 0 ? d : s;
      const Tensor& t = values[static_cast<size_t>(v)];
      Tensor out = to_memory(t, Memory::Device);  // made on the host: a device copy
      // Memoized values are shared with later runs, so the caller gets a copy; so are values in
      // the device arena (its plan keeps them off it: this only guards against the unplanned).
      if (out.raw() == t.raw() && ((m.any_memoized && m.options.arena && m.memo_value[static_cast<size_t>(v)]) ||
                                   (device_alloc && device_alloc->in_arena(t))))
        out = out.clone();
      outs.push_back(std::move(out));
      continue;
    }
    const Tensor& t = values[static_cast<size_t>(s)];
    // The plan keeps graph outputs off the arena; this copy only guards against the unplanned.
    // Memoized values are shared with later runs, so the caller gets a copy.
    bool shared = m.any_memoized && m.options.arena && m.memo_value[static_cast<size_t>(s)];
    const bool in_arena = (arena_alloc && arena_alloc->in_arena(t)) || (device_alloc && device_alloc->in_arena(t));
    outs.push_back(in_arena || shared ? t.clone() : t);
  }
  values.clear();
  if (arena_alloc) {
    ArenaStats st;
    st.signature = signature;
    st.arena_bytes = arena_buffer->size;
    st.planned_bytes = arena_plan->total_bytes;
    st.planned_values = arena_plan->value.size();
    const arena::RunStats& r = arena_alloc->stats();
    st.arena_allocations = r.arena_allocations;
    st.heap_allocations = r.heap_allocations;
    st.leaving_allocations = r.leaving_allocations;
    st.unplanned_allocations = r.unplanned_allocations;
    st.copies = r.copies;
    st.inference_error = arena_entry->error;
    if (device_alloc) {
      st.device.arena_bytes = device_buffer->size;
      st.device.planned_bytes = device_plan->total_bytes;
      st.device.planned_values = device_plan->value.size();
      const arena::RunStats& d = device_alloc->stats();
      st.device.arena_allocations = d.arena_allocations;
      st.device.backend_allocations = d.heap_allocations;
      st.device.leaving_allocations = d.leaving_allocations;
      st.device.unplanned_allocations = d.unplanned_allocations;
      st.device.copies = d.copies;
    }
    {
      std::lock_guard<std::mutex> lock(m.stats_mutex);
      m.last_stats = std::move(st);
    }
    arena_alloc.reset();
    arena::PlanCache::give_back(*arena_entry, std::move(arena_buffer));
    if (device_alloc) {
      device_alloc.reset();
      arena::PlanCache::give_back(*arena_entry, std::move(device_buffer));
    }
  }
  if (arena_entry && new_memo) arena::PlanCache::set_memo(*arena_entry, new_memo);
  return outs;
}

ReplayStats Engine::replay_stats() const {
  const Impl& m = *impl_;
  ReplayStats st;
  st.declined = m.replay_declined;
  st.recorded = m.recorded.load();
  st.replays = m.replays.load();
  st.eager_runs = m.eager_runs.load();
  st.failed = m.failed_recordings.load();
  st.recordings = static_cast<size_t>(m.live_recordings.load());
  std::lock_guard<std::mutex> lock(m.recordings_mutex);
  st.last_failure = m.last_failure;
  return st;
}

ArenaStats Engine::arena_stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->last_stats;
}

std::vector<TraceEvent> Engine::trace() const {
  std::lock_guard<std::mutex> lock(impl_->profile_mutex);
  std::vector<TraceEvent> all;
  for (const auto& run : impl_->trace) all.insert(all.end(), run.begin(), run.end());
  return all;
}

std::vector<NodeProfile> Engine::steps() const { return impl_->step_nodes; }

void Engine::rerun_step(size_t step, int times) const {
  const Impl& m = *impl_;
  REFORGE_CHECK(m.options.device_trace, "rerun_step: the engine was not made with EngineOptions::device_trace");
  REFORGE_CHECK(step < m.steps.size(), "rerun_step: no step ", step, " (the engine has ", m.steps.size(), ")");
  const Step& st = m.steps[step];
  REFORGE_CHECK(st.device != nullptr, "rerun_step: step ", step, " does not run on a device");
  std::vector<Tensor> inputs;
  std::shared_ptr<const void> prepared;
  {
    std::lock_guard<std::mutex> lock(m.kept_mutex);
    if (step < m.kept_inputs.size()) inputs = m.kept_inputs[step];
    if (step < m.kept_prepared.size()) prepared = m.kept_prepared[step];
  }
  const ir::Node& node = m.graph.nodes[st.node_index];
  REFORGE_CHECK(!inputs.empty() || st.inputs.empty(), "rerun_step: ", node.label(), " did not run in the last run");
  std::vector<const Tensor*> in_ptrs;
  for (const Tensor& t : inputs) in_ptrs.push_back(t.defined() ? &t : nullptr);
  backends::DeviceTracer* tracer = st.device->tracer;
  for (int i = 0; i < times; ++i) {
    ops::KernelContext ctx(node, in_ptrs, m.threads, st.device->allocator, prepared.get());
    if (tracer) tracer->push_tag(static_cast<int64_t>(step));
    try {
      (*st.kernel)(ctx);
    } catch (Error& e) {
      if (tracer) tracer->pop_tag();
      throw e.with_context("while running " + node.label() + " alone");
    }
    if (tracer) tracer->pop_tag();
  }
  if (st.device->synchronize) st.device->synchronize();
}

std::vector<NodeProfile> Engine::profile() const {
  std::lock_guard<std::mutex> lock(impl_->profile_mutex);
  return impl_->profile;
}

std::vector<std::string> Engine::missing_constants() const {
  std::lock_guard<std::mutex> lock(impl_->constants_mutex);
  std::vector<std::string> out;
  for (const auto& [name, slot] : impl_->const_slot)
    if (!impl_->constants->values[static_cast<size_t>(slot)].defined()) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

Tensor Engine::constant(const std::string& name) const { return constant(*weights(), name); }

Tensor Engine::constant(const Weights& weights, const std::string& name) const {
  auto it = impl_->const_slot.find(name);
  if (it == impl_->const_slot.end()) return Tensor();
  return weights.values[static_cast<size_t>(it->second)];
}

std::shared_ptr<const Engine::Weights> Engine::weights() const {
  std::lock_guard<std::mutex> lock(impl_->constants_mutex);
  return impl_->constants;
}

bool Engine::has_constant(const std::string& name) const { return impl_->const_slot.count(name) != 0; }

Tensor Engine::device_constant(const std::string& name) const { return device_constant(*weights(), name); }

Tensor Engine::device_constant(const Weights& weights, const std::string& name) const {
  const Impl& m = *impl_;
  REFORGE_CHECK(weights.values.size() == m.num_slots, "device_constant: not a weight set of this engine");
  auto it = m.const_slot.find(name);
  if (it == m.const_slot.end()) return Tensor();
  const Tensor& value = weights.values[static_cast<size_t>(it->second)];
  if (!value.defined()) return Tensor();
  for (size_t si = 0; si < m.steps.size(); ++si) {
    const Step& st = m.steps[si];
    const ir::Node& n = m.graph.nodes[st.node_index];
    if (!st.device || !backends::is_transfer(n) || n.op_type != "ToDevice" || st.inputs.size() != 1 ||
        st.inputs[0] != it->second)
      continue;
    // The step's own kernel, as a run calls it: it hands out what its prepare step made.
    ops::KernelContext ctx(n, {&value}, 1, st.device->allocator, weights.prepared[si].get());
    try {
      (*st.kernel)(ctx);
    } catch (Error& e) {
      throw e.with_context("while reading the device copy of engine weight '" + name + "' (" + n.label() + ")");
    }
    if (st.device->synchronize) st.device->synchronize();
    return ctx.outputs().at(0);
  }
  return Tensor();
}

void Engine::replace_constants(const std::map<std::string, Tensor>& values) {
  // Writers queue on writer_mutex; runs take constants_mutex only to copy the pointer, so they
  // are not held up while a refit re-packs.
  std::lock_guard<std::mutex> writer(impl_->writer_mutex);
  install_weights(derive_weights(*weights(), values));
}

void Engine::install_weights(std::shared_ptr<const Weights> weights) {
  REFORGE_CHECK(weights && weights->values.size() == impl_->num_slots,
                "install_weights: not a weight set of this engine");
  std::lock_guard<std::mutex> lock(impl_->constants_mutex);
  impl_->constants = std::move(weights);
}

std::shared_ptr<const Engine::Weights> Engine::derive_weights(const Weights& base,
                                                              const std::map<std::string, Tensor>& values) const {
  const Impl& m = *impl_;
  REFORGE_CHECK(base.values.size() == m.num_slots, "derive_weights: not a weight set of this engine");
  auto next = std::make_shared<Weights>(base);
  next->generation = next_generation();
  std::vector<bool> changed(m.num_slots, false);
  for (const auto& [name, t] : values) {
    auto it = m.const_slot.find(name);
    if (it == m.const_slot.end()) fail("'", name, "' is not an engine weight");
    auto d = m.const_desc.find(name);
    if (d != m.const_desc.end() && (d->second.first != t.dtype() || d->second.second != t.shape()))
      fail("engine weight '", name, "' is ", dtype_name(d->second.first), shape_str(d->second.second),
           ", the replacement is ", t.describe());
    next->values[static_cast<size_t>(it->second)] = t;
    changed[static_cast<size_t>(it->second)] = true;
  }
  // Re-prepare (re-pack) every step that reads a replaced constant, before anything is visible:
  // a failure here leaves the engine on its old weights.
  std::vector<size_t> redo;
  for (size_t si : m.preparing_steps)
    for (int v : m.steps[si].inputs)
      if (v >= 0 && changed[static_cast<size_t>(v)]) {
        redo.push_back(si);
        break;
      }
  m.prepare(next->values, redo, next->prepared);
  return next;
}

}  // namespace reforge::runtime
