// Running ops on the device from inside a CUDA kernel: the unfused forms of the fused ops
// (ops/reforge/unfused.h), which reforge::Attention and reforge::Rotary run for the inputs their
// fast paths do not take, and the allocator every device node's outputs come from.
#pragma once

#include "ops/reforge/unfused.h"
#include "ops/registry.h"

namespace reforge::cuda {

// Kernel outputs of nodes on the device: stream-ordered device memory (device_tensor).
ops::OutputAllocator& device_outputs();

// The CUDA backend's kernels as an ops::RunOp, for the node that `ctx` runs (its label names the
// ops' errors). Each op runs with its CUDA kernel and checker, on the calling thread's stream;
// structure inputs (role kShape) are read on the host, data inputs on the device (a host one is
// copied there, which a recorded run refuses). zeros() fills device memory with a memset, which
// records.
ops::RunOp device_ops(const ops::KernelContext& ctx);

}  // namespace reforge::cuda
