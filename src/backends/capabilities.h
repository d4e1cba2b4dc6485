// What a backend can do beyond running kernels, as interfaces it implements or not (the
// Backend descriptor holds a pointer to each one it offers; null: it does not). The engine, the
// builder, `reforge bench` and the Python binding ask for a capability and use it; nothing asks a
// backend by name.
//
//   DeviceStreams      allocation and streams of a device backend: the allocator its kernels'
//                      outputs come from, waiting for the calling thread's work, its memory
//                      account, evicting its caches (for timing one kernel alone)
//   DeviceTracer       the device's profiler (device_trace.h)
//   DeviceRecorder     recorded replay of device work (device_replay.h)
//   TimingCache        the choices the backend times at a kernel's first call, saved and loaded
//   WeightLayoutPolicy the weight layouts the backend wants for a build on this machine (the CPU
//                      backend decides its Linear panels from its instruction sets)
//   WeightMemory       where a weight version's device weights live: one allocation per version,
//                      filled by asynchronous copies through a pinned staging ring, waited for
//                      once (the context the backend's prepare steps get); the same ring streams a
//                      refit's sources to the device
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/device_trace.h"
#include "ops/registry.h"

namespace reforge::backends {

class DeviceStreams {
 public:
  virtual ~DeviceStreams() = default;
  // Where the outputs of the backend's kernels come from (thread-safe; the engine hands it to
  // every node placed on the backend).
  virtual ops::OutputAllocator& allocator() = 0;
  // Waits for the calling thread's work on the device and throws an Error for any failure it
  // reports; the engine calls it at the end of every run. Kernels run on the calling thread's
  // stream of work, so concurrent runs on several threads do not wait for each other.
  virtual void synchronize() = 0;
  // What the device's memory holds for this process.
  virtual DeviceMemoryStats memory_stats() const = 0;
  // Evicts what the device's caches hold, by writing a buffer larger than its last-level cache on
  // the calling thread's stream of work (untagged, not waited for), so that the next kernel reads
  // its operands from memory, as a benchmark of one kernel alone measures it.
  virtual void flush_caches() = 0;
};

// As TensorRT's timing cache (the CUDA backend's: cuDNN convolution algorithms per geometry).
// save() gives every choice made or loaded in this process, as text; load() takes such text
// (`where` names its file in errors), after which those geometries take the loaded choice
// without timing. Two processes that load one cache run the same algorithms, so their results
// and speed agree (`reforge run/bench --timing-cache FILE`).
class TimingCache {
 public:
  virtual ~TimingCache() = default;
  virtual std::string save() const = 0;
  virtual void load(const std::string& text, const std::string& where) = 0;
};

// What a build asks of the backend's weight layouts (the builder's options, in backend terms).
struct LayoutRequest {
  enum class Packing { Auto, Panels, Plain };
  Packing packing = Packing::Auto;
  enum class Weights { Float32, Float16, BFloat16, Other };
  Weights weights = Weights::Float32;  // the precision of the build's Linear weights
};

// The backend's answer: the layouts, and the machine features consulted to choose them (recorded
// in the plan's build record, so that a refit on another machine can tell).
struct LayoutChoice {
  bool linear_panels = false;  // float32 Linear weights in panels (MatMulAddPacked)
  bool half_panels = false;    // 16-bit Linear weights in panels too
  bool linear_transposed = false;  // 16-bit products' constant matrices stored [N, K]
  std::vector<std::string> features;
};

// One weight version's device weights in the making, and the context the prepare steps of the
// backend's nodes get while the version is made (ops::PrepareContext: upload, stream, allocator).
// The engine makes one per version and backend (runtime/weight_store.h), runs the prepare steps,
// then calls finish() once; the tensors upload() gave are valid from then on. Destroyed without
// finish() (a prepare step failed), it waits for the copies already issued and frees what it
// allocated unless an upload's tensor still holds it.
class WeightUpload : public ops::PrepareContext {
 public:
  // Waits for every copy this upload issued, once, and throws an Error naming the failure.
  virtual void finish() = 0;
  // Device allocations made for weights (1 when the reservation held every upload; 0 when
  // nothing was uploaded) and the bytes uploaded.
  virtual int64_t allocations() const = 0;
  virtual size_t bytes() const = 0;
};

class WeightMemory {
 public:
  virtual ~WeightMemory() = default;
  // Begins a version's device weights with one allocation of `reserve` bytes: what the engine
  // expects its prepare steps to upload (its nodes' constant inputs, each rounded up to the
  // backend's alignment, weight_bytes()). An upload past it takes an allocation of its own.
  virtual std::unique_ptr<WeightUpload> begin(size_t reserve) = 0;
  // The bytes that a weight of `bytes` takes in the version's allocation (its alignment).
  virtual size_t weight_bytes(size_t bytes) const = 0;
  // A device copy of host tensor `t` for the calling thread's device work (a refit's source, in
  // its checkpoint form, for recipe steps replayed on the device): the bytes go on the copy stream
  // through the staging ring (from pageable memory: copied into its pinned chunks, while the device
  // copies the chunks filled before; from pinned memory: directly), and the calling thread's later
  // device work waits for them on the device, not on the host. Returns once the host is done
  // reading pageable bytes; a pinned `t` must stay unchanged until the calling thread's device work
  // is waited for. A device `t` is returned as it is.
  virtual Tensor stream_to_device(const Tensor& t) = 0;
  // The staging ring's size in bytes (over its chunks), shared by every upload of the process;
  // set_staging_bytes resizes it, after waiting for an upload that uses it. Throws for a size below
  // the minimum, naming it.
  virtual size_t staging_bytes() const = 0;
  virtual void set_staging_bytes(size_t bytes) = 0;
};

class WeightLayoutPolicy {
 public:
  virtual ~WeightLayoutPolicy() = default;
  virtual LayoutChoice choose(const LayoutRequest& request) const = 0;
};

}  // namespace reforge::backends
