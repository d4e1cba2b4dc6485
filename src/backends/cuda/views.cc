// Ops that only change a tensor's shape (Identity, Reshape, Flatten, Squeeze, Unsqueeze): their
// reference kernels alias the input's storage and read structure inputs on the host, so they run
// unchanged on device tensors. Shape and Size (which read only their input's dimensions) and
// Constant, where placement puts them on the device (their result is data for a device node),
// compute on the host and upload the bytes.
#include "backends/cuda/cuda_common.h"

namespace reforge::cuda {

void register_view_kernels(backends::KernelRegistry& r) {
  for (const ops::OpDef* def : ops::OpRegistry::global().entries()) {
    if (!def->domain.empty() || !def->kernel) continue;
    const std::string& op = def->op_type;
    if (op == "Identity" || op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
      r.add({"cuda", "", op, def->since_version, def->end_version, def->kernel});
    } else if (op == "Shape" || op == "Size" || op == "Constant") {
      ops::KernelFn host = def->kernel;
      r.add({"cuda", "", op, def->since_version, def->end_version, [host](ops::KernelContext& ctx) {
               std::vector<const Tensor*> inputs;
               for (size_t i = 0; i < ctx.num_inputs(); ++i)
                 inputs.push_back(ctx.has_input(i) ? &ctx.input(i) : nullptr);
               ops::KernelContext on_host(ctx.node(), inputs, 1);
               host(on_host);
               ctx.set_output(0, to_device(on_host.outputs()[0]));
             }});
    }
  }
}

}  // namespace reforge::cuda
