// reforge::ToDevice and reforge::ToHost on the CUDA backend (backends/placement.h inserts them).
#include "backends/cuda/cuda_common.h"
#include "ops/reforge/float16_weights.h"

namespace reforge::cuda {

namespace {

void to_device_kernel(ops::KernelContext& ctx) {
  if (const Tensor* uploaded = ctx.prepared<Tensor>()) {  // an engine weight, uploaded when it was set
    ctx.set_output(0, *uploaded);
    return;
  }
  const Tensor& x = ctx.input(0);
  if (!x.on_host()) {  // a caller's device buffer
    ctx.set_output(0, x);
    return;
  }
  ctx.set_output(0, to_device(x));
}

std::shared_ptr<const void> upload_weight(const ir::Node& node, const std::vector<const Tensor*>& constants,
                                          ops::PrepareContext& context) {
  if (constants.empty() || !constants[0]) return nullptr;
  if (node.has_attr(ops::kFiniteFloat16For))
    ops::refuse_float16_infinities(node.attr_string(ops::kFiniteFloat16For, ""), to_host(*constants[0]));
  return std::make_shared<const Tensor>(context.upload(*constants[0]));
}

void to_host_kernel(ops::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.set_output(0, x.on_host() ? x : download(x));
}

}  // namespace

void register_transfer_kernels(backends::KernelRegistry& r) {
  r.add({"cuda", "reforge", "ToDevice", 1, INT_MAX, to_device_kernel, nullptr, upload_weight});
  r.add({"cuda", "reforge", "ToHost", 1, INT_MAX, to_host_kernel});
}

}  // namespace reforge::cuda
