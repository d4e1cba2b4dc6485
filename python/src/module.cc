// reforge._reforge: the Python extension (nanobind). A thin layer over the library: it converts
// arrays and options, releases the GIL around every call into the library, and maps the
// library's errors to the Python exception classes by what the call was doing (reading a plan:
// CorruptPlan, importing or building a model: InvalidModel, checking run inputs: InvalidInput,
// refitting: RefitRefused), with the message the CLI prints. The Python API (python/reforge/)
// is written on top of it; the checks and behaviour are the library's, reached the way the CLI
// reaches them (tools/cli).
//
// Arrays. Run inputs are wrapped, not copied: a C-contiguous CPU array (numpy, or anything with
// __dlpack__) becomes a Tensor that keeps the Python object alive (its release takes the GIL).
// Run outputs are handed out without a copy: the numpy array's base owns the engine's output
// Tensor. An output whose bytes belong to an input or to an engine weight (an Identity or a
// Reshape of one) is returned read-only, so that writing to it cannot change the weights.
// Refit values are read in place, and whatever of them the engine would keep (identity weights,
// kept sources) is copied into storage it owns (refit::CommitOptions::own_values): the engine
// must never share memory the caller goes on changing (an optimizer step updates a state dict in
// place), or runs would see weights no refit committed.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <omp.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "builder/binding.h"
#include "builder/builder.h"
#include "builder/onnx_refit.h"
#include "core/error.h"
#include "core/version.h"
#include "onnx/importer.h"
#include "plan/plan_inspect.h"
#include "plan/plan_io.h"
#include "refit/refit_from.h"
#include "refit/safetensors.h"
#include "run_gate.h"
#include "runtime/engine.h"
#include "runtime/plan_engine.h"

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

// A library progress callback that calls `progress(step, done, total, unit)` with the GIL held. The
// callable is borrowed: the caller holds it for the whole call, and the copies the library makes of
// the callback (without the GIL) must not touch its reference count. An exception it raises stops
// the work (a build makes no plan, a refit changes nothing) and reaches the caller as raised.
ProgressCallback progress_of(const std::optional<nb::callable>& progress) {
  if (!progress) return {};
  PyObject* cb = progress->ptr();
  return [cb](const Progress& p) {
    nb::gil_scoped_acquire gil;
    const nb::handle callable(cb);
    callable(p.step, p.done, p.total, p.unit);
  };
}

// ---- arrays ----

using InArray = nb::ndarray<nb::ro, nb::device::cpu, nb::c_contig>;

DType dtype_of(nb::dlpack::dtype d) {
  using C = nb::dlpack::dtype_code;
  if (d.lanes != 1) return DType::Undefined;
  switch (static_cast<C>(d.code)) {
    case C::Float:
      return d.bits == 32   ? DType::Float32
             : d.bits == 64 ? DType::Float64
             : d.bits == 16 ? DType::Float16
                            : DType::Undefined;
    case C::Bfloat:
      return d.bits == 16 ? DType::BFloat16 : DType::Undefined;
    case C::Int:
      return d.bits == 8    ? DType::Int8
             : d.bits == 16 ? DType::Int16
             : d.bits == 32 ? DType::Int32
             : d.bits == 64 ? DType::Int64
                            : DType::Undefined;
    case C::UInt:
      return d.bits == 8    ? DType::UInt8
             : d.bits == 16 ? DType::UInt16
             : d.bits == 32 ? DType::UInt32
             : d.bits == 64 ? DType::UInt64
                            : DType::Undefined;
    case C::Bool:
      return d.bits == 8 ? DType::Bool : DType::Undefined;
    default:
      return DType::Undefined;
  }
}

std::string dlpack_name(nb::dlpack::dtype d) {
  using C = nb::dlpack::dtype_code;
  const char* code = "type";
  switch (static_cast<C>(d.code)) {
    case C::Float:
      code = "float";
      break;
    case C::Bfloat:
      code = "bfloat";
      break;
    case C::Int:
      code = "int";
      break;
    case C::UInt:
      code = "uint";
      break;
    case C::Bool:
      code = "bool";
      break;
    case C::Complex:
      code = "complex";
      break;
    default:
      break;
  }
  return str_cat(code, int(d.bits), d.lanes != 1 ? str_cat("x", int(d.lanes)) : std::string());
}

nb::dlpack::dtype dlpack_of(DType t) {
  switch (t) {
    case DType::Float32:
      return nb::dtype<float>();
    case DType::Float64:
      return nb::dtype<double>();
    case DType::Int8:
      return nb::dtype<int8_t>();
    case DType::Int16:
      return nb::dtype<int16_t>();
    case DType::Int32:
      return nb::dtype<int32_t>();
    case DType::Int64:
      return nb::dtype<int64_t>();
    case DType::UInt8:
      return nb::dtype<uint8_t>();
    case DType::UInt16:
      return nb::dtype<uint16_t>();
    case DType::UInt32:
      return nb::dtype<uint32_t>();
    case DType::UInt64:
      return nb::dtype<uint64_t>();
    case DType::Bool:
      return nb::dtype<bool>();
    case DType::Float16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    default:
      fail("a tensor of dtype ", dtype_name(t), " has no numpy counterpart");
  }
}

// `obj` as a C-contiguous CPU array, or a TypeError naming `what`.
InArray as_array(nb::handle obj, const std::string& what) {
  InArray a;
  if (!nb::try_cast(obj, a))
    throw nb::type_error(str_cat(what, ": expected a numpy array or a CPU tensor with __dlpack__, got ",
                                 nb::type_name(obj.type()).c_str())
                             .c_str());
  return a;
}

Shape shape_of(const InArray& a) {
  Shape s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = static_cast<int64_t>(a.shape(i));
  return s;
}

DType checked_dtype(const InArray& a, Kind kind, const std::string& what) {
  DType t = dtype_of(a.dtype());
  if (t == DType::Undefined)
    throw Raised{kind, str_cat(what, " has dtype ", dlpack_name(a.dtype()), ", which reforge does not compute with")};
  return t;
}

// A Tensor over the array's memory (no copy); it keeps the array alive, and its release takes
// the GIL (the last reference may go on any thread).
Tensor wrap_array(const InArray& a, DType t) {
  std::shared_ptr<const void> owner(new InArray(a), [](InArray* p) {
    nb::gil_scoped_acquire gil;
    delete p;
  });
  return Tensor::wrap(t, shape_of(a), std::move(owner), a.data());
}

// The arrays of a {name: array} dict, checked for dtype (errors of class `kind`).
std::vector<std::pair<std::string, InArray>> arrays_of(const nb::dict& d, Kind kind, const char* role) {
  std::vector<std::pair<std::string, InArray>> out;
  for (auto [k, v] : d) {
    if (!nb::isinstance<nb::str>(k))
      throw nb::type_error(str_cat(role, " names must be strings, got ", nb::type_name(k.type()).c_str()).c_str());
    std::string name = nb::cast<std::string>(k);
    InArray a = as_array(v, str_cat(role, " '", name, "'"));
    checked_dtype(a, kind, str_cat(role, " '", name, "'"));
    out.emplace_back(std::move(name), std::move(a));
  }
  return out;
}

// `t` as a numpy array that owns it (no copy). bfloat16, which numpy lacks, comes back as float32
// (exact).
nb::object to_numpy(Tensor t, bool read_only) {
  if (t.dtype() == DType::BFloat16) t = cast_tensor(t, DType::Float32);
  nb::dlpack::dtype dt = dlpack_of(t.dtype());
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  auto* keep = new Tensor(std::move(t));
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  void* data = keep->mutable_raw();
  if (read_only) return nb::ndarray<nb::numpy, nb::ro>(data, shape.size(), shape.data(), owner, nullptr, dt).cast();
  return nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), owner, nullptr, dt).cast();
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

nb::dict report_dict(const refit::RefitReport& r) {
  nb::dict d;
  d["from"] = r.from;
  d["mode"] = std::string(refit::refit_mode_name(r.mode));
  d["sources_set"] = r.commit.sources_set;
  d["weights_replayed"] = r.commit.weights_replayed;
  d["bytes_in"] = r.commit.bytes_in;
  d["bytes_out"] = r.commit.bytes_out;
  d["bytes_copied"] = r.commit.bytes_copied;
  d["read_ms"] = r.read_ms;
  d["validate_ms"] = r.commit.validate_ms;
  d["replay_ms"] = r.commit.replay_ms;
  d["commit_ms"] = r.commit.commit_ms;
  d["verify_ms"] = r.verify_ms;
  d["verified"] = r.verified;
  d["unused"] = r.unused;
  d["baked_given"] = r.commit.baked_given;
  d["baked_differing_kept"] = r.commit.baked_differing_keys;
  d["literals_given"] = r.literals_given;
  d["literals_differing_kept"] = r.literals_differing;
  d["note"] = r.note;
  d["summary"] = r.summary();
  return d;
}

class Plan {
 public:
  Plan(plan::Plan p, int threads, std::optional<std::string> path, bool verified) : path_(std::move(path)) {
    if (verified) {
      // What read_plan hashed (the engine takes the data over, so count it now).
      size_t n = 0, bytes = 0;
      for (const auto& w : p.weights)
        if (w.data.defined()) ++n, bytes += w.data.nbytes();
      verified_ = std::make_pair(n, bytes);
    }
    runtime::EngineOptions eo;
    eo.threads = threads;
    engine_ = std::make_unique<runtime::PlanEngine>(std::move(p), eo);
    for (const auto& w : engine_->plan().weights) weight_names_.push_back(w.name);
  }

  std::vector<nb::object> run(const nb::dict& feed) const {
    auto arrays = arrays_of(feed, Kind::InvalidInput, "input");
    std::map<std::string, Tensor> inputs;
    for (const auto& [name, a] : arrays) inputs[name] = wrap_array(a, dtype_of(a.dtype()));
    std::vector<Tensor> outs;
    std::vector<bool> read_only;
    guarded(Kind::InvalidInput, [&] { runtime::check_inputs(engine_->inputs(), inputs); });
    guarded(Kind::Plain, [&] {
      RunGate::instance().pass();  // a test hook (run_gate.h); unarmed, one atomic load
      outs = engine_->run(inputs);
      read_only = aliases(outs, inputs);
    });
    std::vector<nb::object> result;
    for (size_t i = 0; i < outs.size(); ++i) result.push_back(to_numpy(std::move(outs[i]), read_only[i]));
    return result;
  }

  nb::dict refit_files(const std::vector<std::string>& files, const std::string& mode, bool allow_nonfinite,
                       bool keep_baked, std::optional<nb::callable> progress) {
    return report_dict(guarded(Kind::RefitRefused, [&] {
      refit::RefitRequest req;
      req.files = files;
      req.mode = refit_mode_of(mode);
      req.commit.check_finite = !allow_nonfinite;
      req.commit.keep_baked = keep_baked;
      req.commit.progress = progress_of(progress);
      return build::refit_from(*engine_, req);
    }));
  }

  nb::dict refit_tensors(const nb::dict& values, bool checkpoint_names, bool allow_nonfinite, bool incremental,
                         bool keep_baked, std::optional<nb::callable> progress) {
    auto arrays = arrays_of(values, Kind::RefitRefused, checkpoint_names ? "checkpoint tensor" : "source");
    return report_dict(guarded(Kind::RefitRefused, [&] {
      refit::RefitRequest req;
      auto& tensors = checkpoint_names ? req.checkpoint_tensors : req.tensors;
      for (const auto& [name, a] : arrays) tensors[name] = wrap_array(a, dtype_of(a.dtype()));
      req.commit.check_finite = !allow_nonfinite;
      req.commit.incremental = incremental;
      req.commit.keep_baked = keep_baked;
      req.commit.own_values = true;  // the caller's arrays may change once refit() returns
      req.commit.progress = progress_of(progress);
      return build::refit_from(*engine_, req);
    }));
  }

  void save(const std::string& path, bool strip, const std::optional<nb::callable>& progress) {
    guarded(Kind::Plain, [&] {
      if (!strip) {
        auto missing = engine_->missing_sources();
        if (!missing.empty())
          fail("save: ", missing.size(), " refittable source(s) have no value yet (first: '", missing[0],
               "'); refit them first, or save with strip=True");
      }
      plan::write_plan(engine_->current_plan(strip), path, progress_of(progress));
    });
    path_ = path;
  }

  std::string inspect() const {
    return guarded(Kind::Plain, [&] {
      std::optional<size_t> bytes;
      if (path_ && std::filesystem::exists(*path_)) bytes = std::filesystem::file_size(*path_);
      nlohmann::json j = plan::inspect_json(engine_->plan(), bytes, false);
      if (verified_) j["verified"] = {{"weights", verified_->first}, {"bytes", verified_->second}};
      return j.dump();
    });
  }

  std::string value_infos(bool outputs) const {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& v : outputs ? engine_->outputs() : engine_->inputs()) j.push_back(plan::value_info_json(v));
    return j.dump();
  }

  std::vector<std::string> missing() const { return engine_->missing_sources(); }
  std::string mode() const { return plan::build_mode_name(engine_->plan().mode); }
  bool stripped() const { return engine_->plan().stripped; }
  std::string device() const {
    const auto& b = engine_->plan().build;
    return b ? b->backend : std::string("cpu");
  }
  bool bound() const {
    for (const auto& s : engine_->plan().sources)
      if (s.binding.status != plan::Binding::Status::None) return true;
    return false;
  }
  std::optional<std::string> path() const { return path_; }

 private:
  // For each output: whether its bytes lie in an input's or an engine weight's (then the numpy
  // array is made read-only).
  std::vector<bool> aliases(const std::vector<Tensor>& outs, const std::map<std::string, Tensor>& inputs) const {
    std::vector<std::pair<const char*, const char*>> ranges;
    auto add = [&](const Tensor& t) {
      if (t.defined() && t.nbytes())
        ranges.emplace_back(static_cast<const char*>(t.raw()), static_cast<const char*>(t.raw()) + t.nbytes());
    };
    for (const auto& [n, t] : inputs) add(t);
    std::vector<Tensor> weights;  // held while comparing
    for (const auto& name : weight_names_) weights.push_back(engine_->weight(name)), add(weights.back());
    std::vector<bool> out;
    for (const auto& t : outs) {
      const char* b = static_cast<const char*>(t.raw());
      bool in = false;
      for (const auto& [lo, hi] : ranges) in |= t.nbytes() && b >= lo && b < hi;
      out.push_back(in);
    }
    return out;
  }

  std::unique_ptr<runtime::PlanEngine> engine_;
  std::vector<std::string> weight_names_;
  std::optional<std::string> path_;  // the file it was read from or last saved to
  // Read with every stored weight hashed: how many weights and bytes.
  std::optional<std::pair<size_t, size_t>> verified_;
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
                  int64_t block_size, bool allow_nonfinite, std::optional<nb::callable> progress) {
  std::vector<std::pair<std::string, InArray>> ckpt_arrays;
  if (checkpoint_tensors) ckpt_arrays = arrays_of(*checkpoint_tensors, Kind::InvalidModel, "checkpoint tensor");
  build::BuildOptions o;
  guarded(Kind::Plain, [&] {
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
    o.progress = progress_of(progress);
    o.validate();
    const bool with_checkpoint = !checkpoint_files.empty() || !ckpt_arrays.empty();
    if (!with_checkpoint && (!binds.empty() || !bind_file.empty() || strict_binding || allow_partial_binding))
      fail("bind, bind_file, strict_binding and allow_partial_binding need a checkpoint");
    if (!checkpoint_files.empty() && !ckpt_arrays.empty()) fail("give the checkpoint as files or as tensors, not both");
  });
  plan::Plan p = guarded(Kind::InvalidModel, [&] {
    if (threads > 0) omp_set_num_threads(threads);
    if (checkpoint_files.empty() && ckpt_arrays.empty()) return build::build_plan(onnx::import_model_file(model), o);
    build::BindOptions bo;
    if (!bind_file.empty()) {
      build::BindFile bf = build::read_bind_file(bind_file);
      for (const auto& [k, v] : bf.binds) bo.add_bind(k, v, "bind file '" + bind_file + "'");
      o.literal_names.insert(o.literal_names.end(), bf.literals.begin(), bf.literals.end());
    }
    for (const auto& [k, v] : binds) bo.add_bind(k, v, "bind={'" + k + "': '" + v + "'}");
    bo.strict = strict_binding;
    bo.allow_partial = allow_partial_binding;
    refit::Checkpoint ckpt;
    if (!checkpoint_files.empty()) {
      ckpt = refit::Checkpoint::open(checkpoint_files);
    } else {
      std::map<std::string, Tensor> ts;
      for (const auto& [name, a] : ckpt_arrays) ts[name] = wrap_array(a, dtype_of(a.dtype()));
      ckpt = refit::Checkpoint::from_tensors(std::move(ts), "state dict");
    }
    return build::build_plan_with_checkpoint(onnx::import_model_file(model), o, ckpt, bo);
  });
  return new Plan(std::move(p), threads, std::nullopt, false);
}

Plan* load(const std::string& path, bool verify, int threads) {
  plan::Plan p = guarded(Kind::CorruptPlan, [&] {
    plan::ReadOptions ro;
    ro.verify_weight_hashes = verify;
    return plan::read_plan(path, ro);
  });
  return guarded(Kind::Plain, [&] { return new Plan(std::move(p), threads, path, verify); });
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
      .def("run", &Plan::run, "inputs"_a)
      .def("refit_files", &Plan::refit_files, "files"_a, "mode"_a, "allow_nonfinite"_a, "keep_baked"_a,
           "progress"_a.none())
      .def("refit_tensors", &Plan::refit_tensors, "values"_a, "checkpoint_names"_a, "allow_nonfinite"_a,
           "incremental"_a, "keep_baked"_a, "progress"_a.none())
      .def("save", &Plan::save, "path"_a, "strip"_a, "progress"_a = nb::none())
      .def("inspect", &Plan::inspect)
      .def("value_infos", &Plan::value_infos, "outputs"_a)
      .def_prop_ro("missing", &Plan::missing)
      .def_prop_ro("mode", &Plan::mode)
      .def_prop_ro("stripped", &Plan::stripped)
      .def_prop_ro("device", &Plan::device)
      .def_prop_ro("bound", &Plan::bound)
      .def_prop_ro("path", &Plan::path);
  m.def("check", &check, "model"_a);
  m.def("build", &build_model, "model"_a, "mode"_a, "individual"_a, "strip"_a, "literals"_a, "precision"_a,
        "activations"_a, "skip_passes"_a, "checkpoint_files"_a, "checkpoint_tensors"_a.none(), "binds"_a, "bind_file"_a,
        "strict_binding"_a, "allow_partial_binding"_a, "threads"_a, "device"_a, "allow_cpu_fallback"_a, "block_size"_a,
        "allow_nonfinite"_a, "progress"_a.none(), nb::rv_policy::take_ownership);
  m.def("load", &load, "path"_a, "verify"_a, "threads"_a, nb::rv_policy::take_ownership);
  m.def("load_timing_cache", &load_timing_cache, "path"_a, "device"_a);
  m.def("save_timing_cache", &save_timing_cache, "path"_a, "device"_a);
  RunGate::register_functions(m);  // test hooks (run_gate.h), not API
}
