// Shared oneDNN state for the CPU kernels: one engine, a stream per thread, a primitive cache
// and per-thread scratchpads.
//
// Building a oneDNN primitive descriptor means searching its implementation list and, for JIT
// kernels, generating code: far too slow to repeat on every call. Kernels therefore key each
// primitive by everything that defines it (op, shapes, strides, attributes) and build it once.
// Primitives use a user-provided scratchpad so that one cached primitive can run on several
// threads at once (the library-owned scratchpad of some oneDNN builds is not thread-safe).
// oneDNN here uses the OpenMP runtime: the executor's omp_set_num_threads() governs its threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

namespace reforge::cpu::dnnl_util {

// The process-wide CPU engine.
const dnnl::engine& engine();
// A stream for the calling thread on that engine.
dnnl::stream& stream();

// Primitive cache keyed by a string the caller builds from everything that defines the
// primitive. `make` runs outside the lock (two threads may both build one; one copy wins).
// A null result from `make` is cached too: it records "oneDNN cannot do this, use the
// reference kernel", so that failure is not rediscovered on every call.
std::shared_ptr<const void> cached(const std::string& key, const std::function<std::shared_ptr<const void>()>& make);

template <typename T>
std::shared_ptr<const T> cached_as(const std::string& key, const std::function<std::shared_ptr<const T>()>& make) {
  return std::static_pointer_cast<const T>(cached(key, [&]() -> std::shared_ptr<const void> { return make(); }));
}

// A primitive with the descriptor it came from (needed for scratchpad and reorder queries).
struct CachedPrimitive {
  dnnl::primitive prim;
  dnnl::memory::desc scratchpad_md;
  size_t scratchpad_bytes = 0;

  // Makes the primitive of kind `Primitive` from `pd` and records its scratchpad.
  template <typename Primitive, typename PrimitiveDesc>
  void make(const PrimitiveDesc& pd) {
    prim = Primitive(pd);
    scratchpad_md = pd.scratchpad_desc();
    scratchpad_bytes = scratchpad_md.get_size();
  }
};

// Row-major (dense, C-order) memory descriptor.
dnnl::memory::desc plain_md(const std::vector<int64_t>& dims, dnnl::memory::data_type dt);
// Memory descriptor with explicit strides (in elements).
dnnl::memory::desc strided_md(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                              dnnl::memory::data_type dt);

// Runs `p` on this thread's stream with `args` plus a scratchpad from a per-thread buffer, and
// waits for completion. oneDNN errors become reforge Errors naming `what`.
void execute(const CachedPrimitive& p, std::unordered_map<int, dnnl::memory> args, const char* what);

// Runs the enclosed oneDNN calls on the calling thread alone when the work (multiply-adds) is
// too small to pay for waking the OpenMP team: on small models a parallel region costs more
// than the product, and on a loaded machine a barrier can wait a whole scheduler time slice.
class SerialIfSmall {
 public:
  explicit SerialIfSmall(double work);
  ~SerialIfSmall();
  SerialIfSmall(const SerialIfSmall&) = delete;
  SerialIfSmall& operator=(const SerialIfSmall&) = delete;

 private:
  int saved_ = 0;
};

// The per-thread buffers' owners, one slot each, so that no two users of one thread's buffers
// (a kernel and a product it calls) ever share one.
enum ThreadSlot : int {
  kConvSrcSlot = 0,      // dnnl_conv: blocked copy of the source
  kConvWeightsSlot = 1,  //            of the weights
  kConvDstSlot = 2,      //            of the destination
  kConvScratchSlot = 3,  //            the direct path's scratchpad
  kWinogradSlot = 4,     // winograd: V and M
  kRoundedXSlot = 5,     // backends/cpu/linear: activations rounded to bfloat16 (--activations bf16)
  kBf16DstSlot = 6,      // dnnl_matmul: the bfloat16 product's two partial products
  kBf16SrcSlot = 7,      //              the activations as bfloat16 (high and low parts)
  kThreadSlots = 8,
};

// A 64-byte aligned per-thread buffer of at least `bytes`, one per `slot` (ThreadSlot), reused
// across calls: for blocked-layout copies of activations and weights around a primitive, and for
// the scratch of reforge's own kernels. The contents are garbage on entry and only valid until
// the same thread asks for the slot again. Throws an Error when out of memory.
void* thread_buffer(int slot, size_t bytes);

// Builds the cache-key fragment for a list of integers: "2x3x4".
std::string dims_key(const std::vector<int64_t>& dims);

}  // namespace reforge::cpu::dnnl_util
