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
      for (const auto& op : counting_ops()) r.add({kCountingBackend, "", op, 1, INT_MAX, counting_kernel});
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
}

}  // namespace reforge::test_support
