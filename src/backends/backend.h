// Backends: where nodes run, and the kernel registry that says with what.
//
// The op registry (ops/registry.h) holds each op's schema: domain, type, opset range, input roles,
// inference, the schema checker, and the op's reference kernel (portable C++). A backend brings
// kernels of its own, registered here keyed by (backend, domain, op type, opset range), each with
// a checker that says whether *this* kernel can run a given node and an optional prepare step.
//
// A node placed on backend B runs B's kernel for its op when one covers its opset and that
// kernel's checker accepts the node; otherwise it runs the op's reference kernel when B runs
// reference kernels (the CPU backend does: it is the host); otherwise B cannot run it, and a build
// for B fails listing every such node. The builder's placement records the backend of every node
// in the plan; the engine resolves each node's kernel from that record when it is made.
//
// Adding a backend is a folder under src/backends with a Backend descriptor and its kernel
// registrations; nothing in src/ops or src/runtime changes. The built-in backends (cpu) register
// themselves when this registry is first used; more can be added at any time before a build or an
// engine names them (a test registers one from a static initializer).
#pragma once

#include <climits>
#include <functional>
#include <string>
#include <vector>

#include "backends/capabilities.h"
#include "backends/device_replay.h"
#include "backends/device_trace.h"
#include "ir/graph.h"
#include "ops/infer.h"
#include "ops/registry.h"

namespace reforge::backends {

// Where a backend's tensors live (core/tensor.h): host memory, or the memory of a device whose
// backend provides allocation and copies (set_device_memory).
using reforge::Memory;

// What a build knows of a node's inputs before any data exists (ops/infer_graph.h), for a kernel's
// shape check: per input slot its inferred type and, for small integer values inference follows
// (constants, shape arithmetic), its contents as dimensions. Null where the slot is absent or the
// build could not infer it.
struct InputFacts {
  std::vector<const ops::ValueType*> types;
  std::vector<const ops::SymShape*> dims_values;
  const ops::ValueType* type(size_t i) const { return i < types.size() ? types[i] : nullptr; }
  const ops::SymShape* dims_value(size_t i) const { return i < dims_values.size() ? dims_values[i] : nullptr; }
};

// "" when a kernel runs the node for every input these facts allow; else why not. A kernel that
// refuses some input forms at run time declares them here, so that placement reports the node
// at build time instead of the run failing. Strict: a form that a symbolic dimension or an
// unknown value may make unsupported is declined, never assumed to be fine.
using ShapeCheckFn = std::function<std::string(const ir::Node&, const InputFacts&)>;

// One backend kernel of (domain, op type) for opsets [since, end].
struct KernelDef {
  std::string backend;
  std::string domain;  // "" = default ONNX domain
  std::string op_type;
  int since = 1;
  int end = INT_MAX;  // inclusive
  ops::KernelFn kernel;
  ops::CheckFn check = nullptr;            // "" when this kernel can run the node; null: every node
  ops::PrepareFn prepare = nullptr;        // optional, as OpDef::prepare
  ShapeCheckFn shape_check = nullptr;      // optional: asked with the inferred input types at placement
  std::vector<ops::Sharing> sharing = {};  // how its outputs may share its inputs' memory (ops/registry.h)
};

class KernelRegistry;

// A backend: its name (what plans record and BuildOptions::backend names), where its tensors
// live, whether nodes it has no kernel for may run their ops' reference kernels on it, the
// function that registers its kernels, and the capabilities it offers (backends/capabilities.h),
// each an interface it implements or null.
//
// A device backend (memory == Device) offers DeviceStreams (its allocator, synchronization,
// memory account), WeightMemory where its prepare steps upload weights, a readiness check that says why it cannot run
// here (no device, no driver) or
// "", and its kernels of the transfer ops reforge::ToDevice and reforge::ToHost that placement
// inserts between host and device values (backends/placement.h).
struct Backend {
  std::string name;
  Memory memory = Memory::Host;
  bool runs_reference_kernels = false;
  std::function<void(KernelRegistry&)> register_kernels;
  std::function<std::string()> unavailable = nullptr;  // null: always available
  // Capabilities (null: not offered).
  DeviceStreams* streams = nullptr;       // device backends: required
  DeviceTracer* tracer = nullptr;         // the device's profiler
  DeviceRecorder* recorder = nullptr;     // recorded replay of device work
  TimingCache* timing_cache = nullptr;    // choices timed at a kernel's first call
  WeightLayoutPolicy* layouts = nullptr;  // the weight layouts it wants for a build
  WeightMemory* weight_memory = nullptr;  // where its prepared weights live (device backends)
};

// Backend `backend`'s timing cache and a file (`reforge run/bench --timing-cache`, Python's
// reforge.load_timing_cache / save_timing_cache). Loading reads `path` into the cache and returns
// true, or returns false when no file is there; saving writes the whole cache to `path`
// atomically (core/atomic_file.h). Both throw an Error naming the file: it cannot be read or
// written, its text is refused, or the backend keeps no timing cache (a host backend).
bool load_timing_cache_file(const std::string& backend, const std::string& path);
void save_timing_cache_file(const std::string& backend, const std::string& path);

class KernelRegistry {
 public:
  // Adds a kernel of a registered backend; kernels of one (backend, domain, op) must not overlap
  // in their opset ranges.
  void add(KernelDef def);
  // The kernel of `backend` covering `opset` for (domain, op_type), or null.
  const KernelDef* find(const std::string& backend, const std::string& domain, const std::string& op_type,
                        int opset) const;
  // Every kernel of `backend`, ordered by (domain, op type), then as registered.
  std::vector<const KernelDef*> entries(const std::string& backend) const;

 private:
  struct Impl;
  friend struct Global;  // backend.cc: the process's one registry
  KernelRegistry();
  ~KernelRegistry();
  Impl* impl_;
};

// Registers a backend and its kernels. Throws when a backend of that name exists.
void register_backend(Backend backend);
// The backend named `name`, or null.
const Backend* find_backend(const std::string& name);
// Names of every registered backend, in registration order (the built-in ones first).
std::vector<std::string> backend_names();
// The registry of every backend's kernels.
const KernelRegistry& kernels();

// What runs a node on a backend.
struct Resolved {
  const ops::KernelFn* kernel = nullptr;
  const ops::PrepareFn* prepare = nullptr;             // null or an empty function: nothing to prepare
  bool reference = false;                              // the op's reference kernel (not the backend's own)
  const std::vector<ops::Sharing>* sharing = nullptr;  // the kernel's declarations (null: none)
};

// Resolves the kernel of `node` on `backend`. Returns "" and fills `out`, or says why the node
// cannot run there: unknown backend, unknown op or opset, the schema checker's reason, or "no
// kernel on backend 'x'" (with the backend kernel checker's reason when it declined the node).
// With `facts` (placement), a backend kernel's shape check is asked too; without them (an engine
// resolving a placed plan) it is not: placement has decided.
std::string resolve(const ir::Node& node, const std::string& backend, Resolved* out, const InputFacts* facts = nullptr);

// The kernel that computes an op on the host where weights are transformed (recipe replay,
// constant folding): the CPU backend's kernel for the node, else the op's reference kernel.
// Throws an Error naming the node when neither can run it.
Resolved host_kernel(const ir::Node& node);

// The backend every build and lowering uses unless told otherwise.
inline constexpr const char* kDefaultBackend = "cpu";

}  // namespace reforge::backends
