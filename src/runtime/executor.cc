// The executor: one eager run of an engine's steps (Engine::Impl::execute), with its activations
// from the arenas planned for the inputs' shape bucket and its shape subgraphs from the memo.
#include <algorithm>
#include <chrono>
#include <optional>

#include "backends/placement.h"
#include "core/omp_threads.h"
#include "core/timing.h"
#include "ops/infer_graph.h"
#include "runtime/engine_impl.h"

namespace reforge::runtime {

namespace {


// The graph inputs and the weight version's constants, by slot. A device input that a host step
// reads gets one host copy; device_given then points the ToDevice steps at the caller's tensor.
std::vector<Tensor> bind_values(const Schedule& s, const std::map<std::string, Tensor>& inputs,
                                const Engine::Weights& weights, std::vector<const Tensor*>& device_given) {
  std::vector<Tensor> values(s.num_slots);
  device_given.assign(s.graph.inputs.size(), nullptr);
  for (size_t i = 0; i < s.graph.inputs.size(); ++i) {
    const Tensor& given = inputs.at(s.graph.inputs[i].name);
    if (!given.on_host() && s.devices.empty())
      fail("input '", s.graph.inputs[i].name, "' is in device memory, but every node of this engine runs on the host");
    const bool copy = !given.on_host() && s.input_read_on_host[i];
    values[static_cast<size_t>(s.input_slots[i])] = copy ? to_memory(given, Memory::Host) : given;
    if (copy) device_given[i] = &given;
  }
  REFORGE_CHECK(weights.values.size() == s.num_slots, "run: not a weight set of this engine");
  for (size_t v = 0; v < s.num_slots; ++v) {
    if (!s.is_const[v]) continue;
    if (!weights.values[v].defined()) fail("the engine has missing weights (a stripped plan): refit it before running");
    values[v] = weights.values[v];
  }
  return values;
}

// Fills the recording's staging buffers (the graph inputs' device copies, which its ToDevice
// steps hand out) and allocates its result buffers, then starts recording.
// A state pair's device buffer is read where it is, and the pair's output is left in the State.
void begin_recording(const Schedule& s, const std::vector<Tensor>& values, Recording& record,
                     const State::Impl* state) {
  record.staging.assign(s.graph.inputs.size(), Tensor());
  for (size_t si = 0; si < s.steps.size(); ++si) {
    const int i = s.staged_input[si];
    if (i < 0 || record.staging[static_cast<size_t>(i)].defined()) continue;
    if (state && state->device_input(static_cast<size_t>(i))) continue;
    const Tensor& given = values[static_cast<size_t>(s.input_slots[static_cast<size_t>(i)])];
    Tensor staged = device_memory().allocate(given.dtype(), given.shape());
    s.recorder->copy(staged.mutable_raw(), given.raw(), given.nbytes());
    record.staging[static_cast<size_t>(i)] = std::move(staged);
  }
  record.results.clear();
  for (size_t o = 0; o < record.result_desc.size(); ++o) {
    const auto& [dtype, shape] = record.result_desc[o];
    record.results.push_back(state && state->device_output[o] ? Tensor() : device_memory().allocate(dtype, shape));
  }
  s.recorder->begin();
}

// Copies the outputs into the recording's result buffers and ends it: every value the recording
// allocated is released inside it, so that the recording owns all of its memory.
void end_recording(const Schedule& s, std::vector<Tensor>& values, Recording& record, const State::Impl* state) {
  if (state) state->record_window_copies(values);
  for (size_t o = 0; o < s.output_slots.size(); ++o) {
    if (state && state->device_output[o]) continue;
    const Tensor& t = values[static_cast<size_t>(s.output_device_slot[o])];
    const auto& [dtype, shape] = record.result_desc[o];
    if (t.dtype() != dtype || t.shape() != shape)
      fail("output '", s.graph.outputs[o].name, "' is ", t.describe(), " where the eager run of the same inputs made ",
           dtype_name(dtype), shape_str(shape));
    s.recorder->copy(record.results[o].mutable_raw(), t.raw(), t.nbytes());
  }
  values.clear();
  record.work = s.recorder->end();
}

// The run's outputs in the memory the options ask for. Values in an arena or in the shape memo
// (shared with later runs) are copied; the plan keeps graph outputs off the arenas, so that copy
// only guards against the unplanned.
std::vector<Tensor> collect_outputs(const Schedule& s, const EngineOptions& options, std::vector<Tensor>& values,
                                    const RunArenas& a, bool device_outputs, State::Impl* state) {
  std::vector<Tensor> outs;
  outs.reserve(s.output_slots.size());
  auto shared = [&](int v) { return s.any_memoized && options.arena && s.memo_value[static_cast<size_t>(v)]; };
  for (size_t o = 0; o < s.output_slots.size(); ++o) {
    const int slot = s.output_slots[o];
    if (device_outputs) {
      const int d = s.output_device_slot[o];
      const int v = d >= 0 ? d : slot;
      const Tensor& t = values[static_cast<size_t>(v)];
      Tensor out = to_memory(t, Memory::Device);  // made on the host: a device copy
      if (out.raw() == t.raw() && (shared(v) || (a.device && a.device->in_arena(t)))) out = out.clone();
      outs.push_back(std::move(out));
      continue;
    }
    if (state && state->device_output[o]) {  // a view of a device state buffer (state.h's contract)
      outs.push_back(values[static_cast<size_t>(s.output_device_slot[o])]);
      continue;
    }
    const Tensor& t = values[static_cast<size_t>(slot)];
    const bool copy = a.in_arena(t) || shared(slot);
    // With a State, the copy goes into its buffer of this output.
    outs.push_back(!copy ? t : state && t.on_host() ? state->output_copy(o, t) : t.clone());
  }
  return outs;
}

// The arena statistics of a finished run.
ArenaStats arena_stats_of(const std::string& signature, const RunArenas& a) {
  ArenaStats st;
  st.signature = signature;
  st.arena_bytes = a.buffer->size;
  st.planned_bytes = a.plan->total_bytes;
  st.planned_values = a.plan->value.size();
  const arena::RunStats& r = a.host->stats();
  st.arena_allocations = r.arena_allocations;
  st.heap_allocations = r.heap_allocations;
  st.leaving_allocations = r.leaving_allocations;
  st.unplanned_allocations = r.unplanned_allocations;
  st.copies = r.copies;
  st.inference_error = a.entry->error;
  if (a.device) {
    st.device.arena_bytes = a.device_buffer->size;
    st.device.planned_bytes = a.device_plan->total_bytes;
    st.device.planned_values = a.device_plan->value.size();
    const arena::RunStats& d = a.device->stats();
    st.device.arena_allocations = d.arena_allocations;
    st.device.backend_allocations = d.heap_allocations;
    st.device.leaving_allocations = d.leaving_allocations;
    st.device.unplanned_allocations = d.unplanned_allocations;
    st.device.copies = d.copies;
  }
  return st;
}

// Gives the run's buffers back to their entry's pools.
void release_arenas(RunArenas& a) {
  if (a.host) {
    a.host.reset();
    arena::PlanCache::give_back(*a.entry, std::move(a.buffer));
  }
  if (a.device) {
    a.device.reset();
    arena::PlanCache::give_back(*a.entry, std::move(a.device_buffer));
  }
}

// Serves the outputs of a step that go into a State's buffers (State::Impl::allocate), the
// others from `base`, or the heap when there is none.
class StateAllocator : public ops::OutputAllocator {
 public:
  StateAllocator(State::Impl& state, const std::vector<int>& targets, ops::OutputAllocator* base)
      : state_(state), targets_(targets), base_(base) {}
  Tensor allocate(size_t o, DType dtype, Shape shape, bool zero) override {
    const int t = o < targets_.size() ? targets_[o] : StateImplTarget::kNone;
    if (t != StateImplTarget::kNone) return state_.allocate(t, dtype, shape, zero);
    if (base_) return base_->allocate(o, dtype, std::move(shape), zero);
    return zero ? Tensor::empty(dtype, std::move(shape)) : Tensor::uninitialized(dtype, std::move(shape));
  }

 private:
  State::Impl& state_;
  const std::vector<int>& targets_;
  ops::OutputAllocator* base_;
};

bool any_target(const std::vector<int>& targets) {
  return std::any_of(targets.begin(), targets.end(), [](int t) { return t != StateImplTarget::kNone; });
}

}  // namespace

namespace {

// One eager run in progress: the values by slot and what the steps need around their kernels.
struct Run {
  const Schedule& s;
  const EngineOptions& options;
  const Engine::Weights& weights;
  Recording* record;
  RunArenas& a;
  State::Impl* state;
  std::vector<Tensor> values;
  std::vector<const Tensor*> device_given;  // per graph input (bind_values)
  bool keep_device_values = false;          // outputs stay on the device, or the run records
  std::vector<std::vector<Tensor>> kept;    // per step: its inputs, for rerun_step (device tracing)
  std::vector<double> step_ms, step_start_us;
  std::vector<const Tensor*> in_ptrs;

  // Drops the values whose last reader was step `st` (device values a run returns stay).
  void free_dead(const Step& st) {
    for (int v : st.free_after)
      if (!keep_device_values || !s.device_output_value[static_cast<size_t>(v)]) values[static_cast<size_t>(v)] = Tensor();
  }

  // Step `si` served without its kernel (a skipped copy, a staged input, the shape memo): true
  // when it was.
  bool served_without_kernel(size_t si) {
    const Step& st = s.steps[si];
    // Outputs that stay on the device skip their copy to the host (and keep the device value).
    // So does a device state pair's output: the State keeps it on the device.
    if ((keep_device_values || (state && state->skip_step[si])) && s.output_copy_step[si]) return true;
    // A weight's upload: the device copy the weight version made when it was set (what the
    // ToDevice kernel would hand out), without a kernel call.
    if (s.is_upload_step[si] && weights.prepared[si] && st.outputs.size() == 1 && st.outputs[0] >= 0) {
      values[static_cast<size_t>(st.outputs[0])] = *std::static_pointer_cast<const Tensor>(weights.prepared[si]);
      free_dead(st);
      return true;
    }
    if (record && s.staged_input[si] >= 0 &&
        record->staging[static_cast<size_t>(s.staged_input[si])].defined()) {  // a graph input: its staging buffer
      for (int v : st.outputs)
        if (v >= 0) values[static_cast<size_t>(v)] = record->staging[static_cast<size_t>(s.staged_input[si])];
      return true;
    }
    if (!a.memo || !s.memoized[si]) return false;
    const auto& outs = a.memo->outputs[si];
    for (size_t o = 0; o < st.outputs.size(); ++o)
      if (st.outputs[o] >= 0) values[static_cast<size_t>(st.outputs[o])] = outs[o];
    free_dead(st);
    return true;
  }

  // Runs step `si`'s kernel on `threads` threads and stores its outputs.
  void run_kernel(size_t si, int threads) {
    const Step& st = s.steps[si];
    const ir::Node& node = s.graph.nodes[st.node_index];
    in_ptrs.clear();
    for (int v : st.inputs) {
      if (v < 0) {
        in_ptrs.push_back(nullptr);
        continue;
      }
      const Tensor& t = values[static_cast<size_t>(v)];
      REFORGE_ASSERT(t.defined());
      const Tensor* given = st.device_input >= 0 ? device_given[static_cast<size_t>(st.device_input)] : nullptr;
      in_ptrs.push_back(given ? given : &t);
    }
    // Values kept in the memo outlive the run: never in an arena.
    const bool kept_in_memo = s.memoized[si] && a.new_memo;
    const bool host_arena = a.host && !st.device && !kept_in_memo;
    const bool device_arena = a.device && st.device && !s.memoized[si];
    ops::OutputAllocator* allocator = device_arena   ? &*a.device
                                      : st.device    ? &st.device->streams->allocator()
                                      : host_arena   ? &*a.host
                                                     : nullptr;
    std::optional<StateAllocator> to_state;
    if (state && !kept_in_memo && any_target(state->step_target[si]))
      allocator = &to_state.emplace(*state, state->step_target[si], allocator);
    ops::KernelContext ctx(node, in_ptrs, threads, allocator, weights.prepared[si].get());
    if (host_arena) a.host->begin_step(si);
    if (device_arena) a.device->begin_step(si);
    backends::DeviceTracer* tracer =
        options.device_trace && st.device && st.device->tracer && st.device->tracer->recording() ? st.device->tracer
                                                                                                 : nullptr;
    if (tracer) {
      tracer->push_tag(static_cast<int64_t>(si));
      for (const Tensor* t : in_ptrs) kept[si].push_back(t ? *t : Tensor());
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
    if (host_arena) a.host->placed(si, ctx.outputs());
    if (device_arena) a.device->placed(si, ctx.outputs());
    for (size_t o = 0; o < st.outputs.size(); ++o) {
      int slot = st.outputs[o];
      if (slot < 0) continue;
      Tensor& out = ctx.outputs()[o];
      if (!out.defined()) fail(node.label(), ": kernel did not produce output ", o, " ('", node.outputs[o], "')");
      values[static_cast<size_t>(slot)] = std::move(out);
    }
    if (a.new_memo && s.memoized[si]) {
      auto& keep = a.new_memo->outputs[si];
      keep.resize(st.outputs.size());
      for (size_t o = 0; o < st.outputs.size(); ++o)
        if (st.outputs[o] >= 0) keep[o] = values[static_cast<size_t>(st.outputs[o])];
    }
    free_dead(st);
    if (options.profile && st.device) st.device->streams->synchronize();  // the node's time
  }
};

}  // namespace

RunArenas Engine::Impl::take_arenas(const std::map<std::string, Tensor>& inputs, const std::string& signature,
                                    const std::vector<Tensor>& values, const Weights& weights, Recording*& record,
                                    const KnownBounds* known) const {
  const Schedule& s = schedule;
  RunArenas a;
  if (options.arena) {
    a.entry = arena_entry(inputs, signature, values, known);
    a.plan = arenas.plan(*a.entry, s.value_last_use, observed);
    a.buffer = arena::PlanCache::take(*a.entry, a.plan->total_bytes);
    a.host.emplace(*a.plan, a.buffer, s.value_last_use, observed);
    if (s.any_memoized) a.memo = arena::PlanCache::memo(*a.entry, signature, weights.generation);
  }
  if (record && s.any_memoized && !a.memo) record = nullptr;  // recorded once the memo exists: runs eagerly
  // Device activations: from the device arena, in eager runs (Schedule::arena_device says why).
  if (a.entry && s.arena_device && !record) {
    a.device_plan = arenas.plan(*a.entry, s.device_last_use, device_observed, Memory::Device);
    a.device_buffer = arena::PlanCache::take(*a.entry, a.device_plan->total_bytes, Memory::Device);
    a.device.emplace(*a.device_plan, a.device_buffer, s.device_last_use, device_observed,
                     &s.arena_device->streams->allocator());
  }
  // A signature's shape subgraphs are memoized from its second run on (PlanCache::seen_before),
  // or at once where runs record (a recording needs the memo).
  if (a.entry && s.any_memoized && !a.memo &&
      (s.recorder || arena::PlanCache::seen_before(*a.entry, signature + "#" + std::to_string(weights.generation)))) {
    a.new_memo = std::make_shared<arena::PlanCache::Memo>();
    a.new_memo->generation = weights.generation;
    a.new_memo->outputs.resize(s.steps.size());
  }
  return a;
}

std::vector<Tensor> Engine::Impl::execute(const std::map<std::string, Tensor>& inputs, const std::string& signature,
                                          const Weights& weights, const RunOptions& run_options,
                                          Recording* record, State::Impl* state) const {
  const Schedule& s = schedule;
  const uint64_t allocations_before = thread_tensor_allocations();
  const bool device_outputs = run_options.outputs == Memory::Device;
  if (device_outputs && s.devices.empty())
    fail(
        "run: outputs in device memory were asked for, but every node of this engine runs on the host; "
        "RunOptions::outputs = Device needs a plan built for a device backend");
  std::vector<const Tensor*> device_given;
  std::vector<Tensor> values = bind_values(s, inputs, weights, device_given);
  RunArenas a = take_arenas(inputs, signature, values, weights, record, state ? &state->bounds : nullptr);
  if (record) {
    record->keep = a.memo;
    begin_recording(s, values, *record, state);
  }
  Run r{s, options, weights, record, a, state, std::move(values), std::move(device_given)};
  r.keep_device_values = device_outputs || record;
  r.kept.resize(options.device_trace ? s.steps.size() : 0);
  r.step_ms.resize(options.profile ? s.steps.size() : 0);
  r.step_start_us.resize(r.step_ms.size());

  const OmpThreads omp_threads(threads);  // for oneDNN and OpenBLAS, this run only
  for (size_t si = 0; si < s.steps.size(); ++si) {
    const auto started = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    if (!r.served_without_kernel(si)) r.run_kernel(si, threads);
    if (options.profile) {
      r.step_start_us[si] = run_trace.since_created_us(started);
      r.step_ms[si] = ms_since(started);
    }
  }
  if (record) {
    end_recording(s, r.values, *record, state);
    r.in_ptrs.clear();
    if (a.host) {
      a.host.reset();
      arena::PlanCache::give_back(*a.entry, std::move(a.buffer));
    }
    return {};
  }
  ++replays->eager_runs;
  synchronize_devices();
  if (state) state->finish(r.values);
  if (options.device_trace && std::any_of(r.kept.begin(), r.kept.end(), [](const auto& k) { return !k.empty(); }))
    run_trace.keep(std::move(r.kept), weights.prepared);
  if (options.profile) run_trace.add_run(r.step_start_us, r.step_ms);
  std::vector<Tensor> outs = collect_outputs(s, options, r.values, a, device_outputs, state);
  r.values.clear();
  last_run_allocations = static_cast<int64_t>(thread_tensor_allocations() - allocations_before);
  if (a.host) {
    ArenaStats st = arena_stats_of(signature, a);
    {
      std::lock_guard<std::mutex> lock(stats_mutex);
      last_stats = std::move(st);
    }
    release_arenas(a);
  }
  if (a.entry && a.new_memo) arena::PlanCache::set_memo(*a.entry, signature, a.new_memo);
  return outs;
}

std::shared_ptr<arena::PlanCache::Entry> Engine::Impl::arena_entry(const std::map<std::string, Tensor>& inputs,
                                                                   const std::string& signature,
                                                                   const std::vector<Tensor>& values,
                                                                   const KnownBounds* known) const {
  const ShapeBucket bucket = options.shape_buckets ? shape_bucket(schedule.graph.inputs, inputs, known) : ShapeBucket{};
  auto infer_and_insert = [&](const std::string& key, const std::map<std::string, Shape>& shapes) {
    ++inference_passes;
    std::string error;
    arena::Sizes device_sizes;
    arena::Sizes sizes = infer_sizes(shapes, values, device_sizes, error);
    return arenas.insert(key, std::move(sizes), std::move(device_sizes), std::move(error));
  };
  if (options.shape_buckets) {
    auto e = arenas.find(bucket.key);
    if (!e) e = infer_and_insert(bucket.key, bucket.bounds);
    // A bucket whose bound could not be inferred: this signature is planned exactly.
    if (e->error.empty() || bucket.exact) return e;
  }
  auto e = arenas.find(signature);
  if (e) return e;
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : inputs) shapes[name] = t.shape();
  return infer_and_insert(signature, shapes);
}

arena::Sizes Engine::Impl::infer_sizes(const std::map<std::string, Shape>& shapes, const std::vector<Tensor>& values,
                                       arena::Sizes& device_sizes, std::string& error) const {
  const Schedule& s = schedule;
  arena::Sizes sizes(s.steps.size());
  for (size_t i = 0; i < s.steps.size(); ++i) sizes[i].resize(s.steps[i].outputs.size());
  device_sizes = sizes;
  // The graph with the constants of this run's weight set and the inputs' shapes.
  ir::Graph g;
  g.opsets = s.graph.opsets;
  g.inputs = s.graph.inputs;
  g.outputs = s.graph.outputs;
  g.nodes = s.graph.nodes;
  for (const auto& [name, slot] : s.const_slot) g.initializers[name] = values[static_cast<size_t>(slot)];
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
  for (size_t i = 0; i < s.steps.size(); ++i) {
    // Host shape subgraphs are planned too: a signature's first run computes them in the arena.
    if (s.memoized[i] && s.steps[i].device) continue;
    const ir::Node& n = s.graph.nodes[s.steps[i].node_index];
    // Device steps' outputs are the device arena's, except a ToHost's (host memory by definition)
    // and a ToDevice's of an engine weight (the upload made with the weight set, as the op says:
    // planning it would size the first run's arena by every weight the plan uploads).
    if (s.steps[i].device) {
      if (!s.arena_device) continue;
      const std::vector<int>& in = s.steps[i].inputs;
      if (backends::is_transfer(n) &&
          (n.op_type == "ToHost" || (in.size() == 1 && in[0] >= 0 && s.is_const[static_cast<size_t>(in[0])])))
        continue;
    }
    auto& out = s.steps[i].device ? device_sizes[i] : sizes[i];
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

void Engine::Impl::synchronize_devices() const {
  for (const backends::Backend* d : schedule.devices) {
    try {
      d->streams->synchronize();
    } catch (Error& e) {
      throw e.with_context("while finishing a run on backend '" + d->name + "'");
    }
  }
}

}  // namespace reforge::runtime
