#include "runtime/state.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "backends/placement.h"
#include "core/narrow.h"
#include "runtime/engine_impl.h"
#include "runtime/state_impl.h"

namespace reforge::runtime {

std::vector<StatePair> state_pairs(const ir::Graph& graph) {
  std::map<std::string, const ir::Node*> producer;
  for (const ir::Node& n : graph.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) producer[o] = &n;
  // The value `name` is a copy of, through the transfers placement inserts (reforge::ToDevice,
  // reforge::ToHost: a device plan's past goes to the device and its present comes back).
  auto through_transfers = [&](std::string name) {
    for (auto it = producer.find(name);
         it != producer.end() && backends::is_transfer(*it->second) && it->second->inputs.size() == 1;
         it = producer.find(name))
      name = it->second->inputs[0];
    return name;
  };
  std::vector<StatePair> pairs;
  for (const auto& out : graph.outputs) {
    auto it = producer.find(through_transfers(out.name));
    if (it == producer.end()) continue;
    const ir::Node& n = *it->second;
    // The input the output continues: a Concat's or TensorScatter's first input, or the past of
    // a GroupQueryAttention's present (present_key 1 <- past_key 3, present_value 2 <- past_value 4).
    std::string from;
    if (n.domain.empty() && n.outputs[0] == it->first && !n.inputs.empty() &&
        ((n.op_type == "Concat" && n.opset >= 4) || n.op_type == "TensorScatter"))
      from = n.inputs[0];
    if (n.domain == "com.microsoft" && n.op_type == "GroupQueryAttention")
      for (size_t o : {size_t{1}, size_t{2}})
        if (o < n.outputs.size() && n.outputs[o] == it->first && o + 2 < n.inputs.size()) from = n.inputs[o + 2];
    if (from.empty()) continue;
    const std::string first = through_transfers(from);
    for (const auto& in : graph.inputs)
      if (in.name == first) pairs.push_back({in.name, out.name});
  }
  return pairs;
}

namespace {

bool same_dim(const ir::Dim& a, const ir::Dim& b) {
  if (a.fixed() || b.fixed()) return a.fixed() && b.fixed() && a.value == b.value;
  return !a.symbol.empty() && a.symbol == b.symbol;
}

// ir::find_value_info, and its index among `infos` when found.
const ir::ValueInfo* find_info(const std::vector<ir::ValueInfo>& infos, const std::string& name, size_t& index) {
  const ir::ValueInfo* v = ir::find_value_info(infos, name);
  if (v) index = static_cast<size_t>(v - infos.data());
  return v;
}

// Whether step `st` reads the data of slot `v` (Shape and Size read only its dimensions).
bool reads_data(const Schedule& s, const Step& st, int v) {
  const ir::Node& n = s.graph.nodes[st.node_index];
  if (n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size")) return false;
  return std::find(st.inputs.begin(), st.inputs.end(), v) != st.inputs.end();
}

// True when pair `p`'s output can be written over its input in place: its producer runs on the
// host, declares Sharing::kInPlace from that input to that output, and no later step reads the
// input's data.
bool in_place_allowed(const Schedule& s, const StateSlot& p) {
  if (p.producer < 0) return false;
  const size_t ps = static_cast<size_t>(p.producer);
  const Step& st = s.steps[ps];
  if (st.device || s.memoized[ps] || !st.sharing) return false;
  bool declared = false;
  for (const ops::Sharing& sh : *st.sharing)
    declared |= sh.kind == ops::Sharing::kInPlace && sh.output == p.producer_output && sh.input < st.inputs.size() &&
                st.inputs[sh.input] == p.input_slot;
  if (!declared) return false;
  for (size_t i = ps + 1; i < s.steps.size(); ++i)
    if (reads_data(s, s.steps[i], p.input_slot)) return false;
  return std::find(s.output_slots.begin(), s.output_slots.end(), p.input_slot) == s.output_slots.end();
}

// True when pair `p` lives in device memory: its output is a device step's value that a ToHost
// copy only delivers (Schedule::output_device_slot), and no host step reads its input's data (a
// Shape of it is no read). Its ToDevice then passes the State's buffer through, and the ToHost
// copy is skipped: the cache never leaves the device.
bool on_device(const Schedule& s, const StateSlot& p) {
  const int d = s.output_device_slot[p.output_index];
  if (d < 0 || s.input_read_on_host[p.input_index]) return false;
  const int ps = s.producer[static_cast<size_t>(d)];
  return ps >= 0 && s.steps[static_cast<size_t>(ps)].device && !s.memoized[static_cast<size_t>(ps)];
}

// Zeroes `t` (host or device memory; a device buffer by a copy that has finished on return).
void clear(Tensor& t) {
  if (!t.nbytes()) return;
  if (t.on_host()) {
    std::memset(t.mutable_raw(), 0, t.nbytes());
    return;
  }
  const Tensor zeros = Tensor::empty(DType::UInt8, {static_cast<int64_t>(t.nbytes())});
  device_memory().copy(t.mutable_raw(), Memory::Device, zeros.raw(), Memory::Host, t.nbytes());
}

// A pair's buffer of shape `capacity`, in device or host memory, zero-filled when asked.
Tensor new_buffer(bool device, DType dtype, const Shape& capacity, bool zero) {
  if (!device) return zero ? Tensor::empty(dtype, capacity) : Tensor::uninitialized(dtype, capacity);
  Tensor t = device_memory().allocate(dtype, capacity);
  if (zero) clear(t);
  return t;
}

// The bytes of one position along pair p's length axis in one row (the dimensions after the
// axis), and the rows (the dimensions before it).
size_t position_bytes(const StateSlot& p) {
  size_t b = dtype_size(p.dtype);
  for (size_t d = static_cast<size_t>(p.axis) + 1; d < p.capacity.size(); ++d) b *= static_cast<size_t>(p.capacity[d]);
  return b;
}
size_t rows_of(const StateSlot& p) {
  size_t r = 1;
  for (size_t d = 0; d < static_cast<size_t>(p.axis); ++d) r *= static_cast<size_t>(p.capacity[d]);
  return r;
}

// Copies `rows` rows of `row_bytes`, `src_pitch` and `dst_pitch` apart, in host or device memory
// (device: in order with the calling thread's device work, not waited for).
void copy_rows(bool device, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               size_t rows) {
  if (!row_bytes || !rows) return;
  if (device) {
    device_memory().copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows);
    return;
  }
  for (size_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, row_bytes);
}

// In a window of `window` positions: the last `window` positions of pair p's output `out`
// (window + 1 long) into its current buffer.
void copy_window_back(const StateSlot& p, const Tensor& out, int64_t window) {
  const size_t pos = position_bytes(p), w = static_cast<size_t>(window);
  Tensor into = p.buffers[p.current];  // shares the buffer
  copy_rows(p.device, into.mutable_raw(), w * pos, static_cast<const char*>(out.raw()) + pos,
            (w + 1) * pos, w * pos, rows_of(p));
}

std::atomic<uint64_t> next_state_id{1};

}  // namespace

Tensor StateSlot::current_value() const {
  const Tensor& b = buffers[current];
  return Tensor::wrap(b.dtype(), shape, b.storage(), b.raw(), b.memory());
}

State::State(const Engine& engine, StateOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const Schedule& s = engine.impl_->schedule;
  m.engine = &engine;
  m.id = next_state_id++;
  m.max_length = options.max_length;
  m.pairs = options.pairs.empty() ? state_pairs(s.graph) : options.pairs;
  if (m.pairs.empty())
    fail(
        "state: the graph proves no state pair (an output made by Concat or TensorScatter from a graph input); "
        "name the pairs (StateOptions::pairs)");
  m.step_target.resize(s.steps.size());
  m.device_output.assign(s.output_slots.size(), false);
  m.skip_step.assign(s.steps.size(), false);
  for (size_t i = 0; i < s.steps.size(); ++i)
    m.step_target[i].assign(s.steps[i].outputs.size(), StateImplTarget::kNone);
  for (size_t k = 0; k < m.pairs.size(); ++k) {
    const StatePair& pair = m.pairs[k];
    const std::string what = "state pair '" + pair.input + "' -> '" + pair.output + "'";
    StateSlot p;
    const ir::ValueInfo* in = find_info(s.graph.inputs, pair.input, p.input_index);
    const ir::ValueInfo* out = find_info(s.graph.outputs, pair.output, p.output_index);
    if (!in) fail(what, ": '", pair.input, "' is not a graph input");
    if (!out) fail(what, ": '", pair.output, "' is not a graph output");
    for (size_t j = 0; j < k; ++j)
      if (m.pairs[j].input == pair.input || m.pairs[j].output == pair.output)
        fail(what, ": '", m.pairs[j].input == pair.input ? pair.input : pair.output, "' is in two pairs");
    if (in->dtype == DType::Undefined || in->dtype != out->dtype || !has_storage(in->dtype))
      fail(what, ": the input is ", dtype_name(in->dtype), " and the output ", dtype_name(out->dtype),
           "; a pair needs one numeric type");
    if (!in->has_shape || !out->has_shape || in->shape.size() != out->shape.size())
      fail(what, ": needs declared shapes of one rank");
    for (size_t d = 0; d < in->shape.size(); ++d) {
      if (same_dim(in->shape[d], out->shape[d])) continue;
      if (p.axis >= 0)
        fail(what, ": the shapes differ in dimensions ", p.axis, " and ", d, " (", ir::dim_str(in->shape[d]), " vs ",
             ir::dim_str(out->shape[d]), "); a pair may grow along one axis only");
      p.axis = static_cast<int>(d);
    }
    Shape capacity;
    for (size_t d = 0; d < in->shape.size(); ++d) {
      const ir::Dim& dim = in->shape[d];
      if (static_cast<int>(d) == p.axis) {
        if (options.max_length <= 0)
          fail(what, ": it grows along dimension ", d, " (", ir::dim_str(dim), " -> ", ir::dim_str(out->shape[d]),
               "): StateOptions::max_length must be > 0");
        capacity.push_back(options.max_length);
      } else if (dim.fixed()) {
        capacity.push_back(dim.value);
      } else {
        auto it = options.dims.find(dim.symbol);
        if (dim.symbol.empty() || it == options.dims.end() || it->second < 0)
          fail(what, ": dimension ", d, " ('", ir::dim_str(dim), "') of '", pair.input,
               "' has no value: give it in StateOptions::dims");
        capacity.push_back(it->second);
      }
    }
    p.input_slot = s.input_slots[p.input_index];
    p.device = on_device(s, p);
    p.output_slot = p.device ? s.output_device_slot[p.output_index] : s.output_slots[p.output_index];
    p.producer = s.producer[static_cast<size_t>(p.output_slot)];
    if (p.producer >= 0) p.producer_output = static_cast<size_t>(s.producer_output[static_cast<size_t>(p.output_slot)]);
    p.in_place = !p.device && in_place_allowed(s, p);
    if (p.axis >= 0) m.bounds[pair.input] = {static_cast<size_t>(p.axis), options.max_length};
    p.dtype = in->dtype;
    p.capacity = capacity;
    // A growing pair's buffer is never read past its length: only a host one is zeroed (cheaply).
    p.buffers[0] = new_buffer(p.device, p.dtype, capacity, !p.device || p.axis < 0);
    ++m.allocations;
    p.shape = capacity;
    if (p.axis >= 0) p.shape[static_cast<size_t>(p.axis)] = 0;
    if (p.producer >= 0 && (p.device || !s.steps[static_cast<size_t>(p.producer)].device) &&
        !s.memoized[static_cast<size_t>(p.producer)])
      m.step_target[static_cast<size_t>(p.producer)][p.producer_output] = static_cast<int>(k);
    if (p.device) {
      m.device_output[p.output_index] = true;
      m.skip_step[static_cast<size_t>(s.producer[static_cast<size_t>(s.output_slots[p.output_index])])] = true;
    }
    m.slots.push_back(std::move(p));
  }
  // The other graph outputs that host steps make go into the State's output buffers (a shape
  // subgraph's only when the run does not keep it in the memo: executor.cc).
  m.outputs.resize(s.output_slots.size());
  for (size_t o = 0; o < s.output_slots.size(); ++o) {
    const int v = s.output_slots[o];
    const int ps = s.producer[static_cast<size_t>(v)];
    if (ps < 0 || s.steps[static_cast<size_t>(ps)].device) continue;
    int& t = m.step_target[static_cast<size_t>(ps)][static_cast<size_t>(s.producer_output[static_cast<size_t>(v)])];
    if (t == StateImplTarget::kNone) t = StateImplTarget::output(o);
  }
}

State::~State() { impl_->drop_recordings(); }

const std::vector<StatePair>& State::pairs() const { return impl_->pairs; }
int64_t State::max_length() const { return impl_->max_length; }
bool State::needs_reset() const { return impl_->broken; }
int64_t State::allocations() const { return impl_->allocations; }

int64_t State::length() const {
  for (const StateSlot& p : impl_->slots)
    if (p.axis >= 0) return p.shape[static_cast<size_t>(p.axis)];
  return 0;
}

int64_t State::filled() const { return impl_->window > 0 ? impl_->filled : length(); }
int64_t State::window() const { return impl_->window; }

void State::set_window(int64_t window) {
  Impl& m = *impl_;
  if (m.busy.load()) fail("state: set_window while a run uses the state");
  if (m.broken) fail("state: set_window on a state that needs reset(): an earlier run failed after writing it");
  const int64_t filled = this->filled();
  bool grows = false;
  for (const StateSlot& p : m.slots) grows |= p.axis >= 0;
  if (!grows) fail("state: set_window: no state pair grows along a length axis");
  if (window <= filled)
    fail("state: set_window(", window, "): the sequence holds ", filled,
         " positions; a window must be longer (each run drops a padding position)");
  if (window + 1 > m.max_length)
    fail("state: set_window(", window, "): a run's output is ", window + 1, " positions long, past max_length ",
         m.max_length);
  const int64_t length = this->length();
  bool device = false;
  for (StateSlot& p : m.slots) {
    if (p.axis < 0) continue;
    const int other = 1 - p.current;
    if (!p.buffers[other].defined()) {
      p.buffers[other] = new_buffer(p.device, p.dtype, p.capacity, false);
      ++m.allocations;
    }
    // The last `filled` positions of the current value at the end of the window, zeros before.
    const size_t pos = position_bytes(p), rows = rows_of(p), w = static_cast<size_t>(window);
    const size_t f = static_cast<size_t>(filled), l = static_cast<size_t>(length);
    void* dst = p.buffers[other].mutable_raw();
    if (p.device)
      device_memory().zero(dst, rows * w * pos);
    else
      std::memset(dst, 0, rows * w * pos);
    copy_rows(p.device, static_cast<char*>(dst) + (w - f) * pos, w * pos,
              static_cast<const char*>(p.buffers[p.current].raw()) + (l - f) * pos, l * pos, f * pos, rows);
    device |= p.device;
    p.current = other;
    p.shape[static_cast<size_t>(p.axis)] = window;
  }
  if (device) m.engine->impl_->synchronize_devices();
  m.drop_recordings();  // the last window's
  m.window = window;
  m.filled = filled;
  ++m.window_epoch;
}

Tensor State::value(const std::string& input) const {
  for (size_t k = 0; k < impl_->pairs.size(); ++k)
    if (impl_->pairs[k].input == input) return impl_->slots[k].current_value();
  fail("state: '", input, "' is not the input of a state pair");
}

void State::reset() {
  Impl& m = *impl_;
  if (m.busy.load()) fail("state: reset while a run uses the state");
  for (StateSlot& p : m.slots) {
    p.current = 0;
    p.shape = p.capacity;
    if (p.axis >= 0)
      p.shape[static_cast<size_t>(p.axis)] = 0;
    else
      clear(p.buffers[0]);
  }
  m.broken = false;
  m.drop_recordings();
  m.window = 0;
  m.filled = 0;
}

// ---- What a run does with a State (runtime/state_impl.h) ----

void State::Impl::begin(const Engine& e, std::map<std::string, Tensor>& inputs) {
  if (&e != engine) fail("run: the state was made for another engine");
  bool expected = false;
  if (!busy.compare_exchange_strong(expected, true)) fail("run: the state is in use by another run");
  if (broken) {
    busy = false;
    fail("run: the state needs reset(): an earlier run failed after writing it in place");
  }
  for (size_t k = 0; k < slots.size(); ++k) {
    if (inputs.count(pairs[k].input)) {
      busy = false;
      fail("run: input '", pairs[k].input, "' is carried by the state; give only the other inputs");
    }
    inputs[pairs[k].input] = slots[k].current_value();
  }
  written = false;
}

Tensor State::Impl::output_copy(size_t o, const Tensor& t) {
  Tensor y = allocate(StateImplTarget::output(o), t.dtype(), t.shape(), false);
  if (t.nbytes()) std::memcpy(y.mutable_raw(), t.raw(), t.nbytes());
  return y;
}

Tensor State::Impl::allocate(int target, DType dtype, const Shape& shape, bool zero) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  Tensor* buffer = nullptr;
  if (target >= 0) {
    StateSlot& p = slots[static_cast<size_t>(target)];
    const StatePair& pair = pairs[static_cast<size_t>(target)];
    if (dtype != p.dtype || bytes > p.buffers[0].nbytes())
      fail("state output '", pair.output, "' is ", dtype_name(dtype), shape_str(shape), ", which does not fit its ",
           p.axis >= 0 ? "max_length " + std::to_string(max_length) : "state", " (", dtype_name(p.dtype),
           shape_str(p.capacity), ")");
    const int into = p.in_place && window == 0 ? p.current : 1 - p.current;
    if (!p.buffers[into].defined()) {
      p.buffers[into] = new_buffer(p.device, p.dtype, p.capacity, false);
      ++allocations;
    }
    if (into == p.current) written = true;
    buffer = &p.buffers[into];
  } else {
    Tensor& b = outputs[static_cast<size_t>(StateImplTarget::output_index(target))];
    if (!b.defined() || b.nbytes() < bytes) {
      b = Tensor::uninitialized(DType::UInt8, {static_cast<int64_t>(std::max<size_t>(bytes, 1))});
      ++allocations;
    }
    buffer = &b;
  }
  void* data = buffer->mutable_raw();
  if (zero && bytes) {
    if (buffer->on_host())
      std::memset(data, 0, bytes);
    else
      device_memory().zero(data, bytes);  // in order with this run's device work
  }
  return Tensor::wrap(dtype, shape, buffer->storage(), data, buffer->memory());
}

namespace {

// The output of pair k in `values`, checked to be one position longer than a window's input.
const Tensor& window_value(const State::Impl& m, size_t k, const std::vector<Tensor>& values) {
  const StateSlot& p = m.slots[k];
  const Tensor& out = values[static_cast<size_t>(p.output_slot)];
  REFORGE_CHECK(out.defined(), "run: state output '", m.pairs[k].output, "' was not made");
  Shape want = p.shape;
  want[static_cast<size_t>(p.axis)] = m.window + 1;
  if (out.dtype() != p.dtype || out.shape() != want || out.raw() == p.buffers[p.current].raw())
    fail("state output '", m.pairs[k].output, "' is ", out.describe(), "; in a window of ", m.window,
         " positions a run adds exactly one: ", dtype_name(p.dtype), shape_str(want), " expected");
  return out;
}

}  // namespace

void State::Impl::finish(const std::vector<Tensor>& values) {
  if (window > 0) {
    bool device = false;
    for (size_t k = 0; k < slots.size(); ++k) {
      StateSlot& p = slots[k];
      if (p.axis < 0) continue;  // a fixed-size pair: as below
      copy_window_back(p, window_value(*this, k, values), window);
      device |= p.device;
    }
    if (device) engine->impl_->synchronize_devices();
    ++filled;
  }
  for (size_t k = 0; k < slots.size(); ++k) {
    StateSlot& p = slots[k];
    const StatePair& pair = pairs[k];
    if (window > 0 && p.axis >= 0) continue;
    const Tensor& out = values[static_cast<size_t>(p.output_slot)];
    REFORGE_CHECK(out.defined(), "run: state output '", pair.output, "' was not made");
    bool ok = out.dtype() == p.dtype && out.rank() == static_cast<int64_t>(p.capacity.size());
    for (size_t d = 0; ok && d < p.capacity.size(); ++d)
      ok = static_cast<int>(d) == p.axis ? out.shape()[d] <= p.capacity[d] : out.shape()[d] == p.shape[d];
    if (!ok)
      fail("state output '", pair.output, "' is ", out.describe(), ", which does not continue '", pair.input, "' (",
           dtype_name(p.dtype), shape_str(p.shape),
           p.axis >= 0 ? ", growing along dimension " + std::to_string(p.axis) + " up to " + std::to_string(max_length)
                       : "",
           ")");
    const int other = 1 - p.current;
    if (out.raw() == p.buffers[p.current].raw()) {
      // Written in place.
    } else if (p.buffers[other].defined() && out.raw() == p.buffers[other].raw()) {
      p.current = other;
    } else {
      // Made elsewhere (a device step, a view): copied into the second buffer.
      if (!p.buffers[other].defined()) {
        p.buffers[other] = new_buffer(p.device, p.dtype, p.capacity, false);
        ++allocations;
      }
      if (out.nbytes()) {
        if (out.on_host() && !p.device)
          std::memcpy(p.buffers[other].mutable_raw(), out.raw(), out.nbytes());
        else
          device_memory().copy(p.buffers[other].mutable_raw(), p.buffers[other].memory(), out.raw(), out.memory(),
                               out.nbytes());
      }
      p.current = other;
    }
    p.shape = out.shape();
  }
}

bool State::Impl::replayable() const {
  if (window == 0) return false;
  return std::all_of(slots.begin(), slots.end(), [](const StateSlot& p) { return p.device && p.axis >= 0; });
}

std::string State::Impl::replay_key() const {
  return window > 0 ? "#state" + std::to_string(id) + "/" + std::to_string(window_epoch) + "#" : std::string();
}

bool State::Impl::device_input(size_t i) const {
  return std::any_of(slots.begin(), slots.end(), [&](const StateSlot& p) { return p.device && p.input_index == i; });
}

void State::Impl::record_window_copies(const std::vector<Tensor>& values) const {
  REFORGE_CHECK(replayable(), "internal error: a recorded run with a state that is not replayable");
  for (size_t k = 0; k < slots.size(); ++k) copy_window_back(slots[k], window_value(*this, k, values), window);
}

void State::Impl::replayed() { ++filled; }

void State::Impl::drop_recordings() const {
  if (window > 0) engine->impl_->replays->drop_containing(replay_key());
}

Tensor State::Impl::window_output(size_t o) const {
  auto it = std::find_if(slots.begin(), slots.end(), [&](const StateSlot& p) { return p.output_index == o; });
  REFORGE_CHECK(it != slots.end(), "internal error: graph output ", o, " is no state pair's");
  const StateSlot& p = *it;
  Shape shape = p.shape;
  shape[static_cast<size_t>(p.axis)] = window + 1;
  const Tensor& b = p.buffers[1 - p.current];
  return Tensor::wrap(p.dtype, shape, b.storage(), b.raw(), b.memory());
}

void State::Impl::end(bool failed) {
  if (failed && written) broken = true;
  busy = false;
}

}  // namespace reforge::runtime
