// The CUDA backend's weight memory (backends/capabilities.h: WeightMemory, WeightUpload).
//
// A weight version's device weights are one cudaMalloc allocation, sized by the engine before the
// version's prepare steps run; each upload takes the next 256-byte aligned slot of it. Bytes reach
// it on one copy stream of the process (non-blocking: runs on other streams go on meanwhile):
//   - from pageable host memory through a ring of pinned staging chunks: the host copies into a
//     chunk (on its threads, for a large piece) while the device copies the previous ones, and a
//     chunk is reused once the event recorded after its copy has passed. Consecutive uploads are
//     consecutive slots, so a chunk carries many small weights in one copy;
//   - from pinned host memory directly (the tensor is held until the copies are waited for);
//   - from device memory on the device, after the calling thread's stream (which may still be
//     making the tensor).
// finish() waits for the copy stream once. The ring is the process's (kDefaultStagingBytes over
// kChunks chunks, resizable): one upload or source stream uses it at a time (another waits).
//
// stream_to_device moves a refit's source to the device through the same ring and copy stream,
// into a tensor of the device allocator; the calling thread's stream waits for it by an event, so
// the recipe steps that read it run on the device while the host fills the next chunks.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_ops.h"

namespace reforge::cuda {

namespace {

constexpr size_t kAlign = 256;  // aligned_device_bytes' alignment
constexpr int kChunks = 4;
constexpr size_t kDefaultStagingBytes = size_t{64} << 20;
constexpr size_t kMinStagingBytes = size_t{4} << 20;

// A device allocation for weights, freed when the last tensor in it goes.
std::shared_ptr<const void> weight_block(size_t bytes) {
  void* p = nullptr;
  cudaError_t status = cudaMalloc(&p, bytes);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    fail("out of device memory allocating ", bytes, " bytes for a weight version (", cudaGetErrorString(status), ")");
  }
  note_weights(static_cast<int64_t>(bytes));
  return std::shared_ptr<const void>(p, [bytes](const void* q) {
    (void)cudaFree(const_cast<void*>(q));
    note_weights(-static_cast<int64_t>(bytes));
  });
}

// memcpy of `n` bytes, over the host's threads in 1 MiB blocks when `n` is large enough to pay for
// waking them (one thread copies a few GB/s; filling the ring must keep up with the device's copy).
void host_copy(char* dst, const char* src, size_t n) {
  constexpr size_t kBlock = size_t{1} << 20;
  if (n < 4 * kBlock || omp_in_parallel()) {
    std::memcpy(dst, src, n);
    return;
  }
  const auto blocks = static_cast<int64_t>((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t off = static_cast<size_t>(b) * kBlock;
    std::memcpy(dst + off, src + off, std::min(kBlock, n - off));
  }
}

// The process's copy stream and pinned staging ring, made at first use.
struct Staging {
  std::mutex in_use;  // held by one upload from its first copy to its end, or by one source stream
  cudaStream_t copies = nullptr;
  size_t chunk_bytes = 0;
  void* chunk[kChunks] = {};
  cudaEvent_t copied[kChunks] = {};
  cudaEvent_t ordered = nullptr, done = nullptr;  // stream_to_device's order with the caller's stream
  int next = 0;                                   // stream_to_device's next chunk

  static Staging& get() {
    static Staging* s = [] {
      auto* st = new Staging;  // kept for the process: its memory is pinned once
      REFORGE_CUDA_CHECK(cudaStreamCreateWithFlags(&st->copies, cudaStreamNonBlocking));
      for (int i = 0; i < kChunks; ++i)
        REFORGE_CUDA_CHECK(cudaEventCreateWithFlags(&st->copied[i], cudaEventDisableTiming));
      REFORGE_CUDA_CHECK(cudaEventCreateWithFlags(&st->ordered, cudaEventDisableTiming));
      REFORGE_CUDA_CHECK(cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming));
      st->resize(kDefaultStagingBytes);
      return st;
    }();
    return *s;
  }

  // New chunks of `total` / kChunks bytes each (the caller holds in_use); when pinning them fails
  // the old ring stays.
  void resize(size_t total) {
    void* fresh[kChunks] = {};
    const size_t each = total / kChunks;
    for (void*& c : fresh) {
      cudaError_t status = cudaHostAlloc(&c, each, cudaHostAllocDefault);
      if (status != cudaSuccess) {
        (void)cudaGetLastError();
        for (void* f : fresh)
          if (f) (void)cudaFreeHost(f);
        fail("out of pinned host memory allocating a ", total, "-byte weight staging ring (",
             cudaGetErrorString(status), ")");
      }
    }
    if (copies) REFORGE_CUDA_CHECK(cudaStreamSynchronize(copies));  // no copy reads the old chunks
    for (int i = 0; i < kChunks; ++i) {
      if (chunk[i]) (void)cudaFreeHost(chunk[i]);
      chunk[i] = fresh[i];
    }
    chunk_bytes = each;
  }
};

class Upload final : public backends::WeightUpload {
 public:
  explicit Upload(size_t reserve) : reserve_(reserve) {}
  ~Upload() override {
    if (!lock_.owns_lock()) return;
    // A prepare step failed: the copies issued must end before the staging chunks or the blocks
    // they write can be reused.
    (void)cudaStreamSynchronize(staging_->copies);
    (void)cudaGetLastError();
  }

  Tensor upload(const Tensor& t) override {
    REFORGE_CHECK(!finished_, "internal error: an upload after its weight version was finished");
    REFORGE_CHECK(t.defined() && t.dtype() != DType::String && dtype_size(t.dtype()) > 0, "weights of type ",
                  dtype_name(t.dtype()), " cannot live in device memory");
    begin();
    const size_t bytes = t.nbytes(), slot = aligned_device_bytes(bytes);
    std::shared_ptr<const void> owner;
    char* dst = nullptr;
    if (used_ + slot <= reserve_) {
      if (!block_) {
        block_ = weight_block(reserve_);
        ++allocations_;
      }
      owner = block_;
      dst = static_cast<char*>(const_cast<void*>(block_.get())) + used_;
      used_ += slot;
    } else {  // past the reservation: an allocation of its own
      owner = weight_block(slot);
      ++allocations_;
      dst = static_cast<char*>(const_cast<void*>(owner.get()));
    }
    bytes_ += bytes;
    if (bytes) copy(t, dst);
    return Tensor::wrap(t.dtype(), t.shape(), std::move(owner), dst, Memory::Device);
  }

  void* stream() override { return begin(), staging_->copies; }
  ops::OutputAllocator* allocator() override { return &device_outputs(); }

  void finish() override {
    if (finished_) return;
    finished_ = true;
    if (!lock_.owns_lock()) return;
    flush();
    cudaError_t status = cudaStreamSynchronize(staging_->copies);
    held_.clear();
    lock_.unlock();
    check(status, "waiting for the copies of a weight version");
  }

  int64_t allocations() const override { return allocations_; }
  size_t bytes() const override { return bytes_; }

 private:
  void begin() {
    if (lock_.owns_lock()) return;
    staging_ = &Staging::get();
    lock_ = std::unique_lock<std::mutex>(staging_->in_use);
  }

  void copy(const Tensor& t, char* dst) {
    const size_t bytes = t.nbytes();
    if (!t.on_host()) {
      // The tensor may still be in the making on the calling thread's stream.
      cudaEvent_t made;
      REFORGE_CUDA_CHECK(cudaEventCreateWithFlags(&made, cudaEventDisableTiming));
      cudaError_t status = cudaEventRecord(made, cuda::stream());
      if (status == cudaSuccess) status = cudaStreamWaitEvent(staging_->copies, made, 0);
      (void)cudaEventDestroy(made);
      check(status, "ordering a device-to-device weight copy after its source");
      REFORGE_CUDA_CHECK(cudaMemcpyAsync(dst, t.raw(), bytes, cudaMemcpyDeviceToDevice, staging_->copies));
      held_.push_back(t);
      return;
    }
    if (t.memory() == Memory::Pinned) {
      REFORGE_CUDA_CHECK(cudaMemcpyAsync(dst, t.raw(), bytes, cudaMemcpyHostToDevice, staging_->copies));
      held_.push_back(t);
      return;
    }
    // Pageable: through the ring. A chunk mirrors a contiguous range of device memory, so the
    // padding between consecutive slots rides along (its bytes are never read).
    if (fill_ && dst != chunk_dst_ + fill_) {
      const size_t gap = static_cast<size_t>(dst - (chunk_dst_ + fill_));
      if (dst > chunk_dst_ + fill_ && gap < kAlign && fill_ + gap < staging_->chunk_bytes)
        fill_ += gap;
      else
        flush();
    }
    const char* src = static_cast<const char*>(t.raw());
    for (size_t off = 0; off < bytes;) {
      if (fill_ == 0) {
        REFORGE_CUDA_CHECK(cudaEventSynchronize(staging_->copied[chunk_]));
        chunk_dst_ = dst + off;
      }
      const size_t take = std::min(staging_->chunk_bytes - fill_, bytes - off);
      host_copy(static_cast<char*>(staging_->chunk[chunk_]) + fill_, src + off, take);
      fill_ += take;
      off += take;
      if (fill_ == staging_->chunk_bytes) flush();
    }
  }

  // Sends the current chunk's bytes and moves to the next chunk.
  void flush() {
    if (fill_ == 0) return;
    REFORGE_CUDA_CHECK(
        cudaMemcpyAsync(chunk_dst_, staging_->chunk[chunk_], fill_, cudaMemcpyHostToDevice, staging_->copies));
    REFORGE_CUDA_CHECK(cudaEventRecord(staging_->copied[chunk_], staging_->copies));
    chunk_ = (chunk_ + 1) % kChunks;
    fill_ = 0;
  }

  const size_t reserve_;
  Staging* staging_ = nullptr;
  std::unique_lock<std::mutex> lock_;
  std::shared_ptr<const void> block_;
  size_t used_ = 0, bytes_ = 0;
  int64_t allocations_ = 0;
  bool finished_ = false;
  std::vector<Tensor> held_;  // pinned and device sources, until their copies are waited for
  int chunk_ = 0;
  size_t fill_ = 0;
  char* chunk_dst_ = nullptr;
};

class CudaWeightMemory final : public backends::WeightMemory {
 public:
  std::unique_ptr<backends::WeightUpload> begin(size_t reserve) override { return std::make_unique<Upload>(reserve); }
  size_t weight_bytes(size_t bytes) const override { return aligned_device_bytes(bytes); }

  Tensor stream_to_device(const Tensor& t) override {
    if (!t.on_host()) return t;
    Tensor d = device_tensor(t.dtype(), t.shape());  // stream-ordered on the caller's stream
    const size_t bytes = t.nbytes();
    if (!bytes) return d;
    Staging& s = Staging::get();
    std::lock_guard<std::mutex> lock(s.in_use);
    // The copy stream writes `d` after its allocation on the caller's stream.
    REFORGE_CUDA_CHECK(cudaEventRecord(s.ordered, stream()));
    REFORGE_CUDA_CHECK(cudaStreamWaitEvent(s.copies, s.ordered, 0));
    char* dst = static_cast<char*>(d.mutable_raw());
    const char* src = static_cast<const char*>(t.raw());
    if (t.memory() == Memory::Pinned) {
      REFORGE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s.copies));
    } else {
      for (size_t off = 0; off < bytes;) {
        const int c = s.next;
        s.next = (s.next + 1) % kChunks;
        REFORGE_CUDA_CHECK(cudaEventSynchronize(s.copied[c]));
        const size_t take = std::min(s.chunk_bytes, bytes - off);
        host_copy(static_cast<char*>(s.chunk[c]), src + off, take);
        REFORGE_CUDA_CHECK(cudaMemcpyAsync(dst + off, s.chunk[c], take, cudaMemcpyHostToDevice, s.copies));
        REFORGE_CUDA_CHECK(cudaEventRecord(s.copied[c], s.copies));
        off += take;
      }
    }
    // The caller's later work (the recipe steps reading `d`, and `d`'s release) waits for the copies.
    REFORGE_CUDA_CHECK(cudaEventRecord(s.done, s.copies));
    REFORGE_CUDA_CHECK(cudaStreamWaitEvent(stream(), s.done, 0));
    return d;
  }

  size_t staging_bytes() const override {
    Staging& s = Staging::get();
    std::lock_guard<std::mutex> lock(s.in_use);
    return s.chunk_bytes * kChunks;
  }

  void set_staging_bytes(size_t bytes) override {
    if (bytes < kMinStagingBytes)
      fail("the weight staging ring's size must be at least ", kMinStagingBytes, " bytes (", kChunks, " chunks), not ",
           bytes);
    Staging& s = Staging::get();
    std::lock_guard<std::mutex> lock(s.in_use);
    if (bytes / kChunks != s.chunk_bytes) s.resize(bytes);
  }
};

}  // namespace

backends::WeightMemory* weight_memory() {
  static CudaWeightMemory memory;
  return &memory;
}

Tensor pinned_tensor(DType dtype, Shape shape) {
  if (std::string why = unavailable_reason(); !why.empty()) fail("pinned host memory needs a CUDA device: ", why);
  const int64_t numel = shape_numel(shape);
  const size_t bytes = std::max<size_t>(static_cast<size_t>(numel) * dtype_size(dtype), 1);
  void* p = nullptr;
  cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    fail("out of pinned host memory allocating ", bytes, " bytes for ", dtype_name(dtype), shape_str(shape), " (",
         cudaGetErrorString(status), ")");
  }
  count_tensor_allocation();
  std::shared_ptr<const void> owner(p, [](const void* q) { (void)cudaFreeHost(const_cast<void*>(q)); });
  return Tensor::wrap(dtype, std::move(shape), std::move(owner), p, Memory::Pinned);
}

}  // namespace reforge::cuda
