// Engine: the facade over the runtime's parts (runtime/engine_impl.h): construction wires the
// schedule, the weight store, the arena plan cache, the replay cache and the run trace; run()
// checks the inputs and hands them to the replay path or the executor.
#include "runtime/engine.h"

#include <algorithm>
#include <thread>

#include "backends/placement.h"
#include "runtime/engine_impl.h"

namespace reforge::runtime {

Engine::Impl::Impl(ir::Graph graph, const std::vector<std::string>& placement, EngineOptions opts)
    : options(opts),
      threads(opts.threads > 0 ? opts.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))),
      schedule(make_schedule(std::move(graph), placement, opts, initial_weights)),
      weights(schedule, std::move(initial_weights),
              [cache = std::weak_ptr<ReplayCache>(replays)](uint64_t g) {
                if (auto c = cache.lock()) c->drop_generation(g);
              }),
      run_trace(schedule.step_nodes, opts.profile) {
  for (const auto& [alias, holder] : schedule.declared_views) observed.add_alias(alias, holder);
  for (const arena::ValueRef& v : schedule.declared_outside) observed.add_outside(v);
}

Engine::Engine(LoweredGraph lowered, EngineOptions options)
    : impl_(std::make_unique<Impl>(std::move(lowered.graph_), lowered.placement_, options)) {}

Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

const std::vector<ir::ValueInfo>& Engine::inputs() const { return impl_->schedule.graph.inputs; }
const std::vector<ir::ValueInfo>& Engine::outputs() const { return impl_->schedule.graph.outputs; }
const ir::Graph& Engine::graph() const { return impl_->schedule.graph; }

namespace {

std::string declared_str(const ir::ValueInfo& vi) {
  std::string s = dtype_name(vi.dtype);
  if (!vi.has_shape) return s + "[?]";
  s += "[";
  for (size_t i = 0; i < vi.shape.size(); ++i) {
    if (i) s += ",";
    s += ir::dim_str(vi.shape[i]);
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

std::vector<Tensor> Engine::run(const std::map<std::string, Tensor>& inputs, const Weights& weights,
                                const RunOptions& options) const {
  const Impl& m = *impl_;
  REFORGE_CHECK(options.outputs != Memory::Pinned,
                "run: outputs are returned in host or device memory; RunOptions::outputs = Pinned is not offered");
  if (options.weights_generation) *options.weights_generation = weights.generation;
  if (options.state) return run_with_state(inputs, weights, options);
  check_inputs(m.schedule.graph.inputs, inputs);
  ++m.runs;
  // One signature per run, for the shape memo, the exact arena plans and the recordings.
  const std::string signature =
      m.options.arena || m.schedule.recorder ? input_signature(m.schedule.graph.inputs, inputs) : std::string();
  if (!m.schedule.recorder) return m.execute(inputs, signature, weights, options, nullptr);
  return m.run_replaying(inputs, signature, weights, options);
}

std::vector<Tensor> Engine::run_with_state(const std::map<std::string, Tensor>& given, const Weights& weights,
                                           const RunOptions& options) const {
  const Impl& m = *impl_;
  State::Impl& state = options.state->impl();
  std::map<std::string, Tensor> inputs = given;
  state.begin(*this, inputs);
  try {
    check_inputs(m.schedule.graph.inputs, inputs);
    ++m.runs;
    const std::string signature = m.options.arena ? input_signature(m.schedule.graph.inputs, inputs) : std::string();
    // In a window every decode step has one signature: recorded once and replayed.
    std::vector<Tensor> outs = m.schedule.recorder && state.replayable()
                                   ? m.run_replaying(inputs, signature, weights, options, &state)
                                   : m.execute(inputs, signature, weights, options, nullptr, &state);
    state.end(false);
    return outs;
  } catch (...) {
    state.end(true);
    throw;
  }
}

EngineStats Engine::stats() const {
  const Impl& m = *impl_;
  EngineStats st;
  st.runs = m.runs.load();
  st.inference_passes = m.inference_passes.load();
  st.arena_plans = m.arenas.plans_made();
  st.shape_buckets = static_cast<int64_t>(m.arenas.size());
  st.shape_buckets_evicted = m.arenas.evicted();
  st.recordings_made = m.replays->recorded.load();
  st.replays = m.replays->replays.load();
  st.recordings_evicted = m.replays->evicted.load();
  st.recordings_retired = m.replays->retired.load();
  st.live_recordings = m.replays->live.load();
  st.eager_runs = m.replays->eager_runs.load();
  st.last_run_allocations = m.last_run_allocations.load();
  st.live_weight_versions = m.weights.live_versions();
  st.weight_allocations = m.weights.weight_allocations();
  st.weight_bytes_uploaded = m.weights.weight_bytes_uploaded();
  return st;
}

ReplayStats Engine::replay_stats() const {
  const Impl& m = *impl_;
  ReplayStats st;
  st.declined = m.schedule.replay_declined;
  st.recorded = m.replays->recorded.load();
  st.replays = m.replays->replays.load();
  st.eager_runs = m.replays->eager_runs.load();
  st.failed = m.replays->failed.load();
  st.recordings = static_cast<size_t>(m.replays->live.load());
  st.last_failure = m.replays->last_failure();
  return st;
}

ArenaStats Engine::arena_stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->last_stats;
}

std::vector<TraceEvent> Engine::trace() const { return impl_->run_trace.trace(); }
std::vector<NodeProfile> Engine::profile() const { return impl_->run_trace.profile(); }
std::vector<NodeProfile> Engine::steps() const { return impl_->schedule.step_nodes; }

void Engine::rerun_step(size_t step, int times) const {
  const Impl& m = *impl_;
  const Schedule& s = m.schedule;
  REFORGE_CHECK(m.options.device_trace, "rerun_step: the engine was not made with EngineOptions::device_trace");
  REFORGE_CHECK(step < s.steps.size(), "rerun_step: no step ", step, " (the engine has ", s.steps.size(), ")");
  const Step& st = s.steps[step];
  REFORGE_CHECK(st.device != nullptr, "rerun_step: step ", step, " does not run on a device");
  std::vector<Tensor> inputs;
  std::shared_ptr<const void> prepared;
  m.run_trace.kept(step, inputs, prepared);
  const ir::Node& node = s.graph.nodes[st.node_index];
  REFORGE_CHECK(!inputs.empty() || st.inputs.empty(), "rerun_step: ", node.label(), " did not run in the last run");
  std::vector<const Tensor*> in_ptrs;
  for (const Tensor& t : inputs) in_ptrs.push_back(t.defined() ? &t : nullptr);
  backends::DeviceTracer* tracer = st.device->tracer;
  for (int i = 0; i < times; ++i) {
    ops::KernelContext ctx(node, in_ptrs, m.threads, &st.device->streams->allocator(), prepared.get());
    if (tracer) tracer->push_tag(static_cast<int64_t>(step));
    try {
      (*st.kernel)(ctx);
    } catch (Error& e) {
      if (tracer) tracer->pop_tag();
      throw e.with_context("while running " + node.label() + " alone");
    }
    if (tracer) tracer->pop_tag();
  }
  st.device->streams->synchronize();
}

std::vector<std::string> Engine::missing_constants() const { return impl_->weights.missing(); }

Tensor Engine::constant(const std::string& name) const { return constant(*weights(), name); }

Tensor Engine::constant(const Weights& weights, const std::string& name) const {
  return to_host(impl_->weights.value(weights, name));
}

std::shared_ptr<const Engine::Weights> Engine::weights() const { return impl_->weights.current(); }

bool Engine::has_constant(const std::string& name) const { return impl_->schedule.const_slot.count(name) != 0; }

bool Engine::has_weight_value(const Weights& weights, const std::string& name) const {
  return impl_->weights.value(weights, name).defined();
}

Memory Engine::constant_location(const Weights& weights, const std::string& name) const {
  const Tensor t = impl_->weights.value(weights, name);
  return t.defined() ? t.memory() : Memory::Host;
}

const backends::Backend* Engine::held_on_device(const std::string& name) const {
  const Schedule& s = impl_->schedule;
  auto it = s.const_slot.find(name);
  if (it == s.const_slot.end()) return nullptr;
  const int si = s.upload_step[static_cast<size_t>(it->second)];
  return si < 0 ? nullptr : s.steps[static_cast<size_t>(si)].device;
}

Tensor Engine::device_constant(const std::string& name) const { return device_constant(*weights(), name); }

Tensor Engine::device_constant(const Weights& weights, const std::string& name) const {
  const Schedule& s = impl_->schedule;
  REFORGE_CHECK(weights.values.size() == s.num_slots, "device_constant: not a weight set of this engine");
  auto it = s.const_slot.find(name);
  if (it == s.const_slot.end()) return Tensor();
  const Tensor& value = weights.values[static_cast<size_t>(it->second)];
  if (!value.defined()) return Tensor();
  for (size_t si = 0; si < s.steps.size(); ++si) {
    const Step& st = s.steps[si];
    const ir::Node& n = s.graph.nodes[st.node_index];
    if (!st.device || !backends::is_transfer(n) || n.op_type != "ToDevice" || st.inputs.size() != 1 ||
        st.inputs[0] != it->second)
      continue;
    // The step's own kernel, as a run calls it: it hands out what its prepare step made.
    ops::KernelContext ctx(n, {&value}, 1, &st.device->streams->allocator(), weights.prepared[si].get());
    try {
      (*st.kernel)(ctx);
    } catch (Error& e) {
      throw e.with_context("while reading the device copy of engine weight '" + name + "' (" + n.label() + ")");
    }
    st.device->streams->synchronize();
    return ctx.outputs().at(0);
  }
  return Tensor();
}

void Engine::replace_constants(const std::map<std::string, Tensor>& values) { impl_->weights.replace(values); }

void Engine::install_weights(std::shared_ptr<const Weights> weights) { impl_->weights.install(std::move(weights)); }

std::shared_ptr<const Engine::Weights> Engine::derive_weights(const Weights& base,
                                                              const std::map<std::string, Tensor>& values) const {
  return impl_->weights.derive(base, values);
}

}  // namespace reforge::runtime
