#include "support/counting_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backends/backend.h"
#include "ops/registry.h"

namespace reforge::test_support {

namespace {

std::mutex& calls_mutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, int64_t>& calls() {
  static std::map<std::string, int64_t> c;
  return c;
}

// Counts the call, then runs the op's reference kernel.
void counting_kernel(ops::KernelContext& ctx) {
  const ir::Node& n = ctx.node();
  {
    std::lock_guard<std::mutex> lock(calls_mutex());
    ++calls()[n.op_type];
  }
  const ops::OpDef* def = ops::OpRegistry::global().find(n.domain, n.op_type, n.opset);
  REFORGE_CHECK(def && def->kernel, n.label(), ": no reference kernel");
  def->kernel(ctx);
}

int64_t& prepares() {
  static int64_t n = 0;
  return n;
}

int& prepares_before_failure() {
  static int n = -1;
  return n;
}

// MatMul's prepare step: a copy of a constant B (the stand-in of an upload), or nothing.
std::shared_ptr<const void> prepare_matmul(const ir::Node& n, const std::vector<const Tensor*>& constants,
                                           ops::PrepareContext& context) {
  {
    std::lock_guard<std::mutex> lock(calls_mutex());
    ++prepares();
    int& left = prepares_before_failure();
    if (left == 0) {
      left = -1;
      fail("counting: the prepare step of ", n.label(), " failed (as told by fail_counting_prepares_after)");
    }
    if (left > 0) --left;
  }
  if (constants.size() < 2 || !constants[1]) return nullptr;
  return std::make_shared<const Tensor>(context.upload(*constants[1]));
}

std::atomic<int64_t> live_blocks{0}, blocks_made{0};

// Weight memory in host memory: one block per version as a device backend's, counted.
class CountingUpload final : public backends::WeightUpload {
 public:
  explicit CountingUpload(size_t reserve) : reserve_(reserve) {}
  Tensor upload(const Tensor& t) override {
    const size_t slot = slot_bytes(t.nbytes());
    std::shared_ptr<const void> owner;
    char* at = nullptr;
    if (used_ + slot <= reserve_) {
      if (!block_) block_ = block(reserve_);
      owner = block_;
      at = static_cast<char*>(const_cast<void*>(block_.get())) + used_;
      used_ += slot;
    } else {
      owner = block(slot);
      at = static_cast<char*>(const_cast<void*>(owner.get()));
    }
    if (t.nbytes()) std::memcpy(at, t.raw(), t.nbytes());
    bytes_ += t.nbytes();
    return Tensor::wrap(t.dtype(), t.shape(), std::move(owner), at);
  }
  void* stream() override { return nullptr; }
  ops::OutputAllocator* allocator() override { return nullptr; }
  void finish() override {}
  int64_t allocations() const override { return allocations_; }
  size_t bytes() const override { return bytes_; }
  static size_t slot_bytes(size_t n) { return (std::max<size_t>(n, 1) + 63) / 64 * 64; }

 private:
  std::shared_ptr<const void> block(size_t bytes) {
    ++allocations_;
    ++blocks_made;
    ++live_blocks;
    return std::shared_ptr<const void>(std::malloc(bytes), [](const void* p) {
      std::free(const_cast<void*>(p));
      --live_blocks;
    });
  }
  const size_t reserve_;
  std::shared_ptr<const void> block_;
  size_t used_ = 0, bytes_ = 0;
  int64_t allocations_ = 0;
};

class CountingWeightMemory final : public backends::WeightMemory {
 public:
  std::unique_ptr<backends::WeightUpload> begin(size_t reserve) override {
    return std::make_unique<CountingUpload>(reserve);
  }
  size_t weight_bytes(size_t bytes) const override { return CountingUpload::slot_bytes(bytes); }
  // Host memory: a source's "device" copy is a copy, and there is no ring to size.
  Tensor stream_to_device(const Tensor& t) override { return t.clone(); }
  size_t staging_bytes() const override { return 0; }
  void set_staging_bytes(size_t) override {}
};

// MatMul with a prepared B reads that copy, not its input.
void counting_matmul(ops::KernelContext& ctx) {
  const Tensor* b = ctx.prepared<Tensor>();
  if (!b) {
    counting_kernel(ctx);
    return;
  }
  ops::KernelContext with_copy(ctx.node(), {&ctx.input(0), b}, 1);
  counting_kernel(with_copy);
  ctx.set_output(0, with_copy.outputs().at(0));
}

const bool registered_at_start = (register_counting_backend(), true);

}  // namespace

const std::set<std::string>& counting_ops() {
  static const std::set<std::string> ops = {"Add", "Mul", "MatMul", "Relu", "Softmax", "Transpose", "Reshape", "Gemm"};
  return ops;
}

void register_counting_backend() {
  static std::once_flag once;
  std::call_once(once, [] {
    backends::Backend b;
    b.name = kCountingBackend;
    b.memory = backends::Memory::Host;
    b.runs_reference_kernels = false;
    static CountingWeightMemory weight_memory;
    b.weight_memory = &weight_memory;
    b.register_kernels = [](backends::KernelRegistry& r) {
      for (const auto& op : counting_ops())
        if (op == "MatMul")
          r.add({kCountingBackend, "", op, 1, INT_MAX, counting_matmul, nullptr, prepare_matmul});
        else
          r.add({kCountingBackend, "", op, 1, INT_MAX, counting_kernel});
    };
    backends::register_backend(std::move(b));
  });
}

std::map<std::string, int64_t> counting_calls() {
  std::lock_guard<std::mutex> lock(calls_mutex());
  return calls();
}

void reset_counting_calls() {
  std::lock_guard<std::mutex> lock(calls_mutex());
  calls().clear();
  prepares() = 0;
}

int64_t counting_prepares() {
  std::lock_guard<std::mutex> lock(calls_mutex());
  return prepares();
}

int64_t counting_weight_blocks() { return live_blocks.load(); }
int64_t counting_weight_blocks_made() { return blocks_made.load(); }

void fail_counting_prepares_after(int successes) {
  std::lock_guard<std::mutex> lock(calls_mutex());
  prepares_before_failure() = successes;
}

}  // namespace reforge::test_support
