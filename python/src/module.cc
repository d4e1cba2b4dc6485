// reforge._reforge: the Python extension (nanobind). A thin layer over the library: it converts
// arrays and options, releases the GIL around every call into the library, and maps the
// library's errors to the Python exception classes by what the call was doing (reading a plan:
// CorruptPlan, importing or building a model: InvalidModel, checking run inputs: InvalidInput,
// refitting: RefitRefused), with the message the CLI prints. The Python API (python/reforge/)
// is written on top of it; building, loading, refitting, running and saving are the session's
// (session/session.h, session/build.h), the same calls the CLI makes, and a refit's report is the
// session's one schema (RefitReport::json) as a dict.
//
// Arrays. A numpy array or anything with __dlpack__ arrives as a DLPack tensor, which the
// library's reader turns into a Tensor (refit/dlpack.h: dtype, layout and memory checked there).
// Run inputs are wrapped, not copied: the Tensor keeps the Python object alive (its release takes
// the GIL); a run input in device memory (a CUDA tensor) is read there by a plan whose nodes run on
// the device and refused by a plan that runs on the CPU. Run outputs are handed out without a
// copy: the numpy array's base owns the engine's output Tensor. An output whose bytes belong to an
// input or to an engine weight (an Identity or a Reshape of one) is returned read-only, so that
// writing to it cannot change the weights. A run asked for device outputs (RunOptions::outputs =
// Device) hands each out as an array in device memory that owns the engine's output Tensor, which
// the Python layer copies into a tensor of its framework (python/reforge/_tensors.py says why).
// Refit values are read in place, and whatever of them the engine would keep (identity weights,
// kept sources) is copied into storage it owns (refit::CommitOptions::own_values): the engine
// must never share memory the caller goes on changing (an optimizer step updates a state dict in
// place), or runs would see weights no refit committed.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"
#include "core/version.h"
#include "onnx/importer.h"
#include "plan/plan_inspect.h"
#include "refit/dlpack.h"
#include "refit/refit_from.h"
#include "run_gate.h"
#include "runtime/engine.h"
#include "runtime/state.h"
#include "session/build.h"
#include "session/generate.h"
#include "session/session.h"
#include "session/text_stream.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace reforge::python {

namespace {

// The Python exception classes, made at module initialization (they live as long as the process).
enum class Kind { Plain, InvalidModel, InvalidInput, CorruptPlan, RefitRefused };
PyObject* exception_class[5] = {};

// A library error classified by the call that raised it; the translator turns it into the class.
struct Raised {
  Kind kind;
  std::string message;
};

// Runs `f` with the GIL released; a reforge::Error becomes Raised{kind}, with the message the CLI
// prints (the error and its context lines).
template <typename F>
auto guarded(Kind kind, F&& f) -> decltype(f()) {
  try {
    nb::gil_scoped_release release;
    return f();
  } catch (const Error& e) {
    throw Raised{kind, e.what()};
  }
}

// The session's steps as calls of `progress(step, done, total, unit)`, with the GIL held. The
// callable is borrowed: the caller holds it for the whole call, and the copies the library makes of
// the callback (without the GIL) must not touch its reference count. An exception it raises stops
// the work (a build makes no plan, a refit changes nothing) and reaches the caller as raised.
class ProgressObserver : public session::Observer {
 public:
  explicit ProgressObserver(const std::optional<nb::callable>& progress)
      : callable_(progress ? progress->ptr() : nullptr) {}
  void progress(const Progress& p) override {
    if (!callable_) return;
    nb::gil_scoped_acquire gil;
    const nb::handle callable(callable_);
    callable(p.step, p.done, p.total, p.unit);
  }

 private:
  PyObject* callable_;
};

// ---- arrays ----

// Any device and dtype: the library's DLPack reader decides (refit/dlpack.h).
using InArray = nb::ndarray<nb::ro, nb::c_contig>;

// `obj` as an array, or a TypeError naming `what`.
InArray as_array(nb::handle obj, const std::string& what) {
  InArray a;
  if (!nb::try_cast(obj, a))
    throw nb::type_error(
        str_cat(what, ": expected a numpy array or a tensor with __dlpack__, got ", nb::type_name(obj.type()).c_str())
            .c_str());
  return a;
}

// The array's DLPack fields; the Tensor made of them keeps the array alive, and its release takes
// the GIL (the last reference may go on any thread).
refit::DlpackTensor dlpack_of(const InArray& a) {
  refit::DlpackTensor t;
  t.data = a.data_handle();
  t.byte_offset = a.byte_offset();
  t.device_type = a.device_type();
  t.device_id = a.device_id();
  t.dtype = {a.dtype().code, a.dtype().bits, a.dtype().lanes};
  for (size_t i = 0; i < a.ndim(); ++i) t.shape.push_back(static_cast<int64_t>(a.shape(i)));
  if (a.stride_ptr())
    for (size_t i = 0; i < a.ndim(); ++i) t.strides.push_back(a.stride(i));
  t.owner = std::shared_ptr<const void>(new InArray(a), [](const InArray* p) {
    nb::gil_scoped_acquire gil;
    delete p;
  });
  return t;
}

// The arrays of a {name: array} dict as DLPack tensors (Python type errors here; the library's
// reader raises class `kind` for what it refuses).
std::vector<std::pair<std::string, refit::DlpackTensor>> arrays_of(const nb::dict& d, const char* role) {
  std::vector<std::pair<std::string, refit::DlpackTensor>> out;
  for (auto [k, v] : d) {
    if (!nb::isinstance<nb::str>(k))
      throw nb::type_error(str_cat(role, " names must be strings, got ", nb::type_name(k.type()).c_str()).c_str());
    std::string name = nb::cast<std::string>(k);
    out.emplace_back(name, dlpack_of(as_array(v, str_cat(role, " '", name, "'"))));
  }
  return out;
}

// Tensors of the arrays read by the library's DLPack reader (the GIL released: a device array is
// copied to the host there, unless `device` says otherwise).
std::map<std::string, Tensor> tensors_of(const std::vector<std::pair<std::string, refit::DlpackTensor>>& arrays,
                                         const char* role, refit::DeviceUse device = refit::DeviceUse::CopyToHost) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : arrays) out[name] = refit::tensor_from_dlpack(t, str_cat(role, " '", name, "'"), device);
  return out;
}

// `t` as a numpy array that owns it (no copy). bfloat16, which numpy lacks, comes back as float32
// (exact).
nb::object to_numpy(Tensor t, bool read_only) {
  if (t.dtype() == DType::BFloat16) t = cast_tensor(t, DType::Float32);
  const refit::DlType type = refit::dlpack_type_of(t.dtype());
  const nb::dlpack::dtype dt{type.code, type.bits, type.lanes};
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  auto* keep = new Tensor(std::move(t));
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  void* data = keep->mutable_raw();
  if (read_only) return nb::ndarray<nb::numpy, nb::ro>(data, shape.size(), shape.data(), owner, nullptr, dt).cast();
  return nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), owner, nullptr, dt).cast();
}

// `t` (device memory) as an array over it that owns it (no copy), on CUDA device `device_id`:
// nanobind's ndarray, which any framework imports through __dlpack__.
nb::object to_device_array(Tensor t, int device_id) {
  const refit::DlType type = refit::dlpack_type_of(t.dtype());
  const nb::dlpack::dtype dt{type.code, type.bits, type.lanes};
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  auto* keep = new Tensor(std::move(t));
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  return nb::ndarray<>(keep->mutable_raw(), shape.size(), shape.data(), owner, nullptr, dt, nb::device::cuda::value,
                       device_id)
      .cast();
}

// A JSON document as Python objects (dicts keep the document's key order).
nb::object to_python(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return nb::none();
    case nlohmann::ordered_json::value_t::boolean:
      return nb::bool_(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return nb::int_(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return nb::int_(j.get<uint64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return nb::float_(j.get<double>());
    case nlohmann::ordered_json::value_t::string: {
      const std::string& v = j.get_ref<const std::string&>();
      return nb::str(v.data(), v.size());
    }
    case nlohmann::ordered_json::value_t::array: {
      nb::list l;
      for (const auto& e : j) l.append(to_python(e));
      return l;
    }
    case nlohmann::ordered_json::value_t::object: {
      nb::dict d;
      for (const auto& [k, v] : j.items()) d[nb::str(k.data(), k.size())] = to_python(v);
      return d;
    }
    default:
      return nb::none();
  }
}

// ---- the plan ----

plan::Precision precision_of(const std::string& v, const char* option) {
  if (v == "fp32") return plan::Precision::Fp32;
  if (v == "bf16") return plan::Precision::Bf16;
  if (v == "fp16") return plan::Precision::Fp16;
  if (v == "int8") return plan::Precision::Int8;
  if (v == "int4") return plan::Precision::Int4;
  fail(option, " must be 'fp32', 'bf16', 'fp16', 'int8' or 'int4', got '", v, "'");
}

refit::RefitMode refit_mode_of(const std::string& v) {
  if (v == "fast") return refit::RefitMode::Fast;
  if (v == "slow") return refit::RefitMode::Slow;
  if (v == "verify") return refit::RefitMode::Verify;
  fail("refit mode must be 'fast', 'slow' or 'verify', got '", v, "'");
}

runtime::EngineOptions engine_options(int threads, bool device_replay) {
  runtime::EngineOptions eo;
  eo.threads = threads;
  eo.device_replay = device_replay;
  return eo;
}

// A LoRA adapter as Plan.refit gives it (python/reforge: lora=, lora_scale=): a path, or arrays by
// PEFT's names with the config's JSON text; read in the refit (refit/lora.h).
struct LoraArgs {
  std::string path;
  std::vector<std::pair<std::string, refit::DlpackTensor>> arrays;
  std::string config;
  double scale = 1;

  LoraArgs(std::string path, const nb::dict& tensors, std::string config, double scale)
      : path(std::move(path)), arrays(arrays_of(tensors, "LoRA tensor")), config(std::move(config)), scale(scale) {}
  // Where the GIL is released: the arrays read by the library's DLPack reader.
  refit::LoraSource source() const {
    refit::LoraSource s;
    s.path = path;
    s.tensors = tensors_of(arrays, "LoRA tensor");
    s.config_json = config;
    s.multiplier = scale;
    return s;
  }
};

class Plan {
 public:
  explicit Plan(session::Session s) : session_(std::move(s)) {}

  // Inputs in device memory are read there by a plan for a device and refused by a CPU plan.
  // `device_outputs`: the outputs stay in device memory (RunOptions::outputs = Device), each handed
  // out as an array on CUDA device `device_id` (the one the caller's inputs live on; reforge runs
  // on the calling thread's current device) that owns the output; the run has waited for the
  // device, so the arrays' bytes are final.
  std::vector<nb::object> run(const nb::dict& feed, const std::string& version, bool device_outputs,
                              int device_id) const {
    auto arrays = arrays_of(feed, "input");
    std::map<std::string, Tensor> inputs;
    std::vector<Tensor> outs;
    std::vector<bool> read_only;
    guarded(Kind::InvalidInput, [&] {
      const bool host_plan = session_.device() == "cpu";
      inputs = tensors_of(arrays, "input", host_plan ? refit::DeviceUse::Refuse : refit::DeviceUse::InPlace);
      session_.check_inputs(inputs);
    });
    guarded(Kind::Plain, [&] {
      RunGate::instance().pass();  // a test hook (run_gate.h); unarmed, one atomic load
      runtime::RunOptions options;
      options.outputs = device_outputs ? Memory::Device : Memory::Host;
      outs = session_.run(inputs, options, version);
      read_only = session_.shares_memory(outs, inputs);
    });
    std::vector<nb::object> result;
    for (size_t i = 0; i < outs.size(); ++i)
      result.push_back(device_outputs ? to_device_array(std::move(outs[i]), device_id)
                                      : to_numpy(std::move(outs[i]), read_only[i]));
    return result;
  }

  nb::object refit_files(const std::vector<std::string>& files, const std::string& mode, bool allow_nonfinite,
                         bool keep_baked, bool skip_unchanged, const std::string& strip_prefix,
                         const std::string& add_prefix, const std::string& version, const std::string& lora_path,
                         const nb::dict& lora_tensors, const std::string& lora_config, double lora_scale,
                         std::optional<nb::callable> progress, bool host_replay) {
    const LoraArgs lora(lora_path, lora_tensors, lora_config, lora_scale);
    ProgressObserver observer(progress);
    return to_python(guarded(Kind::RefitRefused, [&] {
      refit::RefitRequest req;
      req.files = files;
      req.commit.skip_unchanged = skip_unchanged;
      req.commit.device_replay = !host_replay;
      req.lora = lora.source();
      req.strip_prefix = strip_prefix;
      req.add_prefix = add_prefix;
      req.mode = refit_mode_of(mode);
      req.commit.check_finite = !allow_nonfinite;
      req.commit.keep_baked = keep_baked;
      return session_.refit(req, &observer, version).json();
    }));
  }

  nb::object refit_tensors(const nb::dict& values, bool checkpoint_names, bool allow_nonfinite, bool incremental,
                           bool keep_baked, bool skip_unchanged, const std::string& strip_prefix, const std::string& add_prefix,
                           const std::string& version, const std::string& lora_path, const nb::dict& lora_tensors,
                           const std::string& lora_config, double lora_scale, std::optional<nb::callable> progress,
                           bool host_replay) {
    const char* role = checkpoint_names ? "checkpoint tensor" : "source";
    auto arrays = arrays_of(values, role);
    const LoraArgs lora(lora_path, lora_tensors, lora_config, lora_scale);
    ProgressObserver observer(progress);
    return to_python(guarded(Kind::RefitRefused, [&] {
      refit::RefitRequest req;
      req.lora = lora.source();
      req.strip_prefix = strip_prefix;
      req.add_prefix = add_prefix;
      (checkpoint_names ? req.checkpoint_tensors : req.tensors) = tensors_of(arrays, role);
      req.memory_reader = "dlpack";
      req.commit.check_finite = !allow_nonfinite;
      req.commit.incremental = incremental;
      req.commit.keep_baked = keep_baked;
      req.commit.skip_unchanged = skip_unchanged;
      req.commit.device_replay = !host_replay;
      req.commit.own_values = true;  // the caller's arrays may change once refit() returns
      return session_.refit(req, &observer, version).json();
    }));
  }

  std::vector<std::string> versions() const { return session_.versions(); }
  void drop_version(const std::string& name) {
    guarded(Kind::Plain, [&] { session_.drop_version(name); });
  }

  void save(const std::string& path, bool strip, const std::optional<nb::callable>& progress) {
    ProgressObserver observer(progress);
    guarded(Kind::Plain, [&] { session_.save(path, strip, &observer); });
  }

  std::string inspect() const {
    return guarded(Kind::Plain, [&] { return session_.inspect().dump(); });
  }

  std::string stats() const {
    return guarded(Kind::Plain, [&] { return session_.stats().dump(); });
  }

  std::string value_infos(bool outputs) const {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& v : outputs ? session_.engine().outputs() : session_.engine().inputs())
      j.push_back(plan::value_info_json(v));
    return j.dump();
  }

  std::vector<std::string> missing() const { return session_.engine().missing_sources(); }
  std::string mode() const { return plan::build_mode_name(session_.plan().mode); }
  bool stripped() const { return session_.plan().stripped; }
  std::string device() const { return session_.device(); }
  bool bound() const { return session_.bound(); }
  std::optional<std::string> path() const { return session_.path(); }
  const session::Session& session() const { return session_; }

  // session::generate; `callback(prompt, token)` (with the GIL) as each token is made: a false
  // return ends that prompt, an exception ends the call. `version` (not ""): every step on that
  // named version. Returns the tokens and, per token, the version its step ran on.
  std::pair<std::vector<std::vector<int64_t>>, std::vector<std::vector<uint64_t>>> generate(
      const std::vector<std::vector<int64_t>>& prompts, int64_t max_new_tokens, double temperature, int64_t top_k,
      double top_p, uint64_t seed, const std::vector<int64_t>& stop, int64_t window,
      std::optional<nb::callable> callback, const std::string& version) {
    session::GenerateOptions o;
    if (!version.empty()) {
      const runtime::PlanEngine::Version v = guarded(Kind::Plain, [&] { return session_.version(version); });
      o.version_at = [v](int64_t) { return v; };
    }
    o.window = window;
    o.max_new_tokens = max_new_tokens;
    o.sampling.temperature = temperature;
    o.sampling.top_k = top_k;
    o.sampling.top_p = top_p;
    o.sampling.seed = seed;
    o.stop_tokens = stop;
    if (callback) {
      PyObject* f = callback->ptr();  // borrowed: the caller holds it for the whole call
      o.on_token = [f](size_t prompt, int64_t token) {
        nb::gil_scoped_acquire gil;
        nb::object r = nb::handle(f)(prompt, token);
        return r.is_none() || nb::cast<bool>(r);
      };
    }
    return guarded(Kind::Plain, [&] {
      session::GenerateResult r = session::generate(session_.engine(), prompts, o);
      return std::make_pair(std::move(r.tokens), std::move(r.weights));
    });
  }
  // The id of the named version (or, for "", of the current weights): what generate reports per token.
  uint64_t version_id(const std::string& name) const {
    return guarded(Kind::Plain, [&] { return session_.version(name).generation(); });
  }

 private:
  session::Session session_;
};

// A sequence of runs of one plan that carries state (runtime/state.h): a KV cache updated in
// place. Outputs are copied out of the state's buffers (`copy`), or returned as read-only views
// of them, valid until the sequence's next run or reset.
class Sequence {
 public:
  Sequence(const Plan& plan, int64_t max_length, const std::vector<std::pair<std::string, std::string>>& pairs,
           const std::map<std::string, int64_t>& dims)
      : plan_(plan), state_(guarded(Kind::Plain, [&] {
          runtime::StateOptions o;
          for (const auto& [in, out] : pairs) o.pairs.push_back({in, out});
          o.max_length = max_length;
          o.dims = dims;
          return std::make_unique<runtime::State>(plan.session().engine().engine(), std::move(o));
        })) {}

  std::vector<nb::object> run(const nb::dict& feed, bool copy) {
    auto arrays = arrays_of(feed, "input");
    std::map<std::string, Tensor> inputs;
    std::vector<Tensor> outs;
    guarded(Kind::InvalidInput, [&] { inputs = tensors_of(arrays, "input"); });
    guarded(Kind::Plain, [&] {
      runtime::RunOptions ro;
      ro.state = state_.get();
      outs = plan_.session().run(inputs, ro);
      if (copy)
        for (Tensor& t : outs) t = t.clone();
    });
    std::vector<nb::object> result;
    for (Tensor& t : outs) result.push_back(to_numpy(std::move(t), !copy));
    return result;
  }

  int64_t length() const { return state_->length(); }
  int64_t max_length() const { return state_->max_length(); }
  bool needs_reset() const { return state_->needs_reset(); }
  void reset() {
    guarded(Kind::Plain, [&] { state_->reset(); });
  }
  nb::object value(const std::string& input) const {
    return to_numpy(guarded(Kind::Plain, [&] { return state_->value(input).clone(); }), false);
  }
  std::vector<std::pair<std::string, std::string>> pairs() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& p : state_->pairs()) out.emplace_back(p.input, p.output);
    return out;
  }

 private:
  const Plan& plan_;
  std::unique_ptr<runtime::State> state_;
};

std::vector<std::string> check(const std::string& model) {
  return guarded(Kind::InvalidModel, [&] { return runtime::unsupported_nodes(onnx::import_model_file(model)); });
}

Plan* build_model(const std::string& model, const std::string& mode, const std::vector<std::string>& individual,
                  bool strip, const std::vector<std::string>& literals, const std::string& precision,
                  const std::string& activations, const std::vector<std::string>& skip_passes,
                  const std::vector<std::string>& checkpoint_files, std::optional<nb::dict> checkpoint_tensors,
                  const std::map<std::string, std::string>& binds, const std::string& bind_file, bool strict_binding,
                  bool allow_partial_binding, int threads, const std::string& device, bool allow_cpu_fallback,
                  int64_t block_size, bool allow_nonfinite, bool reference_rounding, const std::string& strip_prefix,
                  const std::string& add_prefix, std::optional<nb::callable> progress, bool device_replay) {
  std::vector<std::pair<std::string, refit::DlpackTensor>> ckpt_arrays;
  if (checkpoint_tensors) ckpt_arrays = arrays_of(*checkpoint_tensors, "checkpoint tensor");
  session::BuildRequest req;
  guarded(Kind::Plain, [&] {
    req.model = model;
    req.threads = threads;
    build::BuildOptions& o = req.options;
    o.mode = mode == "baked"              ? plan::BuildMode::Baked
             : mode == "refit"            ? plan::BuildMode::Refit
             : mode == "refit-identical"  ? plan::BuildMode::RefitIdentical
             : mode == "refit-individual" ? plan::BuildMode::RefitIndividual
                                          : (fail("unknown build mode '", mode, "'"), plan::BuildMode::Baked);
    o.individual_patterns = individual;
    o.literal_names = literals;
    o.strip_weights = strip;
    o.skip_passes = skip_passes;
    o.precision = precision_of(precision, "precision");
    o.activations = precision_of(activations, "activations");
    o.backend = device;
    o.host_fallback = allow_cpu_fallback;
    o.block_size = block_size;
    o.check_finite = !allow_nonfinite;
    o.reference_rounding = reference_rounding;
    session::CheckpointBinding& c = req.checkpoint;
    c.files = checkpoint_files;
    for (const auto& [k, v] : binds) c.binds.push_back({k, v, "bind={'" + k + "': '" + v + "'}"});
    c.bind_file = bind_file;
    c.strict = strict_binding;
    c.allow_partial = allow_partial_binding;
    c.strip_prefix = strip_prefix;
    c.add_prefix = add_prefix;
    if (!ckpt_arrays.empty() && !checkpoint_files.empty()) fail("give the checkpoint as files or as tensors, not both");
    c.tensors = tensors_of(ckpt_arrays, "checkpoint tensor");
    req.validate();
  });
  ProgressObserver observer(progress);
  plan::Plan p = guarded(Kind::InvalidModel, [&] { return session::build_plan(req, &observer).plan; });
  return guarded(Kind::Plain,
                 [&] { return new Plan(session::Session(std::move(p), engine_options(threads, device_replay))); });
}

Plan* load(const std::string& path, bool verify, int threads, bool device_replay) {
  session::PlanFile f = guarded(Kind::CorruptPlan, [&] { return session::read_plan_file(path, verify); });
  return guarded(Kind::Plain,
                 [&] { return new Plan(session::Session(std::move(f), engine_options(threads, device_replay))); });
}

bool load_timing_cache(const std::string& path, const std::string& device) {
  return guarded(Kind::Plain, [&] { return backends::load_timing_cache_file(device, path); });
}

void save_timing_cache(const std::string& path, const std::string& device) {
  guarded(Kind::Plain, [&] { backends::save_timing_cache_file(device, path); });
}

PyObject* new_exception(nb::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string full = std::string("reforge.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(full.c_str(), doc, base, nullptr);
  if (!cls) throw nb::python_error();
  m.attr(name) = nb::borrow(cls);
  return cls;
}

}  // namespace

}  // namespace reforge::python

using namespace reforge;
using namespace reforge::python;

NB_MODULE(_reforge, m) {
  m.doc() = "reforge's C++ library (see the reforge package for the documented API)";
  m.attr("__version__") = kVersion;
  PyObject* base = new_exception(m, "Error", PyExc_RuntimeError,
                                 "A reforge error: the message names what is wrong and where, as the CLI's does.");
  exception_class[int(Kind::Plain)] = base;
  exception_class[int(Kind::InvalidModel)] =
      new_exception(m, "InvalidModel", base, "The ONNX model (or its checkpoint) cannot be imported or built.");
  exception_class[int(Kind::InvalidInput)] =
      new_exception(m, "InvalidInput", base, "A run input is unknown, missing, or of another dtype or shape.");
  exception_class[int(Kind::CorruptPlan)] = new_exception(
      m, "CorruptPlan", base, "A plan file cannot be read: damaged bytes, a failed hash, a newer format.");
  exception_class[int(Kind::RefitRefused)] =
      new_exception(m, "RefitRefused", base, "A refit was refused; the plan is unchanged (all or nothing).");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Raised& r) {
      PyErr_SetString(exception_class[int(r.kind)], r.message.c_str());
    } catch (const Error& e) {
      PyErr_SetString(exception_class[int(Kind::Plain)], e.what());
    }
  });

  nb::class_<Plan>(m, "Plan")
      .def("run", &Plan::run, "inputs"_a, "version"_a = "", "device_outputs"_a = false, "device_id"_a = 0)
      .def("refit_files", &Plan::refit_files, "files"_a, "mode"_a, "allow_nonfinite"_a, "keep_baked"_a,
           "skip_unchanged"_a, "strip_prefix"_a, "add_prefix"_a, "version"_a, "lora_path"_a, "lora_tensors"_a, "lora_config"_a,
           "lora_scale"_a, "progress"_a.none(), "host_replay"_a = false)
      .def("refit_tensors", &Plan::refit_tensors, "values"_a, "checkpoint_names"_a, "allow_nonfinite"_a,
           "incremental"_a, "keep_baked"_a, "skip_unchanged"_a, "strip_prefix"_a, "add_prefix"_a, "version"_a, "lora_path"_a,
           "lora_tensors"_a, "lora_config"_a, "lora_scale"_a, "progress"_a.none(), "host_replay"_a = false)
      .def("versions", &Plan::versions)
      .def("drop_version", &Plan::drop_version, "name"_a)
      .def("save", &Plan::save, "path"_a, "strip"_a, "progress"_a = nb::none())
      .def("inspect", &Plan::inspect)
      .def("stats", &Plan::stats)
      .def("generate", &Plan::generate, "prompts"_a, "max_new_tokens"_a, "temperature"_a, "top_k"_a, "top_p"_a,
           "seed"_a, "stop"_a, "window"_a, "callback"_a.none(), "version"_a = "")
      .def("version_id", &Plan::version_id, "name"_a = "")
      .def("value_infos", &Plan::value_infos, "outputs"_a)
      .def_prop_ro("missing", &Plan::missing)
      .def_prop_ro("mode", &Plan::mode)
      .def_prop_ro("stripped", &Plan::stripped)
      .def_prop_ro("device", &Plan::device)
      .def_prop_ro("bound", &Plan::bound)
      .def_prop_ro("path", &Plan::path);
  nb::class_<Sequence>(m, "Sequence")
      .def(nb::init<const Plan&, int64_t, const std::vector<std::pair<std::string, std::string>>&,
                    const std::map<std::string, int64_t>&>(),
           "plan"_a, "max_length"_a, "pairs"_a, "dims"_a, nb::keep_alive<1, 2>())
      .def("run", &Sequence::run, "inputs"_a, "copy"_a)
      .def("reset", &Sequence::reset)
      .def("value", &Sequence::value, "input"_a)
      .def_prop_ro("pairs", &Sequence::pairs)
      .def_prop_ro("length", &Sequence::length)
      .def_prop_ro("max_length", &Sequence::max_length)
      .def_prop_ro("needs_reset", &Sequence::needs_reset);
  // Text prompts' streaming (python/reforge/text.py): the library's incremental detokenizer over
  // the Python tokenizer's decode, called with the GIL held.
  nb::class_<session::TextStream>(m, "TextStream")
      .def(nb::init<session::TextStream::Decode, std::vector<int64_t>>(), "decode"_a, "prompt"_a)
      .def("push", &session::TextStream::push, "token"_a)
      .def("finish", &session::TextStream::finish)
      .def_prop_ro("text", &session::TextStream::text);
  m.def("check", &check, "model"_a);
  m.def("build", &build_model, "model"_a, "mode"_a, "individual"_a, "strip"_a, "literals"_a, "precision"_a,
        "activations"_a, "skip_passes"_a, "checkpoint_files"_a, "checkpoint_tensors"_a.none(), "binds"_a, "bind_file"_a,
        "strict_binding"_a, "allow_partial_binding"_a, "threads"_a, "device"_a, "allow_cpu_fallback"_a, "block_size"_a,
        "allow_nonfinite"_a, "reference_rounding"_a, "strip_prefix"_a, "add_prefix"_a, "progress"_a.none(),
        "device_replay"_a, nb::rv_policy::take_ownership);
  m.def("load", &load, "path"_a, "verify"_a, "threads"_a, "device_replay"_a, nb::rv_policy::take_ownership);
  m.def("load_timing_cache", &load_timing_cache, "path"_a, "device"_a);
  m.def("save_timing_cache", &save_timing_cache, "path"_a, "device"_a);
  RunGate::register_functions(m);  // test hooks (run_gate.h), not API
}
