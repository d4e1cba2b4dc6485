#include "backends/cuda/device_ops.h"

#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/cuda/cuda_common.h"
#include "core/error.h"

namespace reforge::cuda {

namespace {

class DeviceAllocator : public ops::OutputAllocator {
 public:
  Tensor allocate(size_t, DType dtype, Shape shape, bool zero) override {
    Tensor t = device_tensor(dtype, std::move(shape));
    if (zero && t.nbytes()) REFORGE_CUDA_CHECK(cudaMemsetAsync(t.mutable_raw(), 0, t.nbytes(), stream()));
    return t;
  }
};

}  // namespace

ops::OutputAllocator& device_outputs() {
  static DeviceAllocator allocator;
  return allocator;
}

ops::RunOp device_ops(const ops::KernelContext& ctx) {
  ops::RunOp r;
  r.op = [&ctx](const char* op, int opset, std::vector<const Tensor*> ins, std::map<std::string, ir::Attribute> attrs) {
    const ir::Node node = ops::unfused_node(ctx.node(), op, opset, ins.size(), std::move(attrs));
    const backends::KernelDef* k = backends::kernels().find("cuda", "", op, opset);
    REFORGE_CHECK(k, ctx.node().label(), ": the CUDA backend has no kernel of ", op, "-", opset,
                  " for the unfused form");
    if (k->check)
      if (std::string why = k->check(node); !why.empty()) fail(ctx.node().label(), ": ", op, " (unfused form): ", why);
    // Operands where the kernel reads them.
    std::vector<Tensor> moved(ins.size());
    for (size_t i = 0; i < ins.size(); ++i) {
      if (!ins[i]) continue;
      const bool structure = ops::input_role(node, i) == ops::InputRole::kShape;
      if (structure && !ins[i]->on_host())
        moved[i] = download(*ins[i]);
      else if (!structure && ins[i]->on_host())
        moved[i] = to_device(*ins[i]);
      if (moved[i].defined()) ins[i] = &moved[i];
    }
    ops::KernelContext inner(node, std::move(ins), ctx.threads(), &device_outputs());
    k->kernel(inner);
    return std::move(inner.outputs()[0]);
  };
  r.zeros = [](DType dtype, Shape shape) { return device_outputs().allocate(0, dtype, std::move(shape), true); };
  return r;
}

}  // namespace reforge::cuda
