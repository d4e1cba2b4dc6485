// Pad on the GPU (constant, reflect, edge, and wrap from opset 19; negative pads crop), with the
// CPU kernel's semantics (src/ops/tensor/pad_ops.cc): the host builds, per output dimension, the
// map from output coordinate to source coordinate (negative: the constant value), uploads the maps,
// and one kernel gathers every output element through them. pads and axes arrive on the host; the
// constant value is a data input (device memory), downloaded once and cast to the data type on the host.
#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"
#include "ops/tensor/pad_setup.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::cuda {

namespace {

// Output dims, the input's strides, and where each dimension's map starts in the map buffer.
struct PadView {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  int64_t map_at[kMaxRank] = {};
};

template <typename U>
__global__ void pad_kernel_dev(U* dst, const U* src, U value, const int64_t* maps, PadView v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, off = 0;
    bool constant = false;
    for (int d = v.rank - 1; d >= 0; --d) {
      const int64_t q = rest / v.dims[d];
      const int64_t m = maps[v.map_at[d] + (rest - q * v.dims[d])];
      rest = q;
      if (m < 0) constant = true;
      off += m * v.stride[d];
    }
    dst[i] = constant ? value : src[off];
  }
}

void pad_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  const ops::PadSetup s = ops::pad_setup(ctx);
  const Shape& out = s.out;
  const std::vector<std::vector<int64_t>>& maps = s.maps;
  const Tensor value = s.value.on_host() ? s.value : download(s.value);
  const Tensor typed_value = cast_tensor(value.reshaped({}), x.dtype());
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), out);
  const int64_t n = y.numel();
  if (n == 0) return;
  REFORGE_CHECK(rank <= kMaxRank, where, ": rank ", rank, " exceeds the CUDA backend's ", kMaxRank);
  const std::vector<int64_t> xs = ops::contiguous_strides(x.shape());
  PadView v;
  v.rank = static_cast<int>(rank);
  std::vector<int64_t> all;
  for (int64_t d = 0; d < rank; ++d) {
    v.dims[d] = out[static_cast<size_t>(d)];
    v.stride[d] = xs[static_cast<size_t>(d)];
    v.map_at[d] = static_cast<int64_t>(all.size());
    all.insert(all.end(), maps[static_cast<size_t>(d)].begin(), maps[static_cast<size_t>(d)].end());
  }
  if (all.empty()) all.push_back(0);  // rank 0: nothing to map
  const Tensor map_dev = to_device(Tensor::copy_of(DType::Int64, {static_cast<int64_t>(all.size())}, all.data()));
  ops::dispatch_bytes(
      x.dtype(),
      [&](auto tag) {
        using U = typename decltype(tag)::type;
        U value_bits;
        std::memcpy(&value_bits, typed_value.raw(), sizeof(U));
        pad_kernel_dev<U><<<grid_for(n), 256, 0, stream()>>>(static_cast<U*>(y.mutable_raw()),
                                                             static_cast<const U*>(x.raw()), value_bits,
                                                             map_dev.data<int64_t>(), v, n);
      },
      where, kOnCuda);
  check_launch("pad");
}

}  // namespace

void register_pad_kernels(backends::KernelRegistry& r) { add_kernel(r, "", "Pad", pad_kernel, ops::pad_check); }

}  // namespace reforge::cuda
