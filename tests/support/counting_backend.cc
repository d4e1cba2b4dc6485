#include "support/counting_backend.h"

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
std::shared_ptr<const void> prepare_matmul(const ir::Node& n, const std::vector<const Tensor*>& constants) {
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
  return std::make_shared<const Tensor>(constants[1]->clone());
}

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

void fail_counting_prepares_after(int successes) {
  std::lock_guard<std::mutex> lock(calls_mutex());
  prepares_before_failure() = successes;
}

}  // namespace reforge::test_support
