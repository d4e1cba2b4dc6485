// NonZero on the GPU, with the CPU kernel's semantics (src/ops/tensor/tensor_misc.cc): the
// coordinates of every element that is not zero (16-bit floats compared in float32, NaN counts),
// in C order, as an int64 [rank, count] tensor. The count decides the output's size, so it is
// computed on the device (flags, then an exclusive prefix sum that also gives each hit its
// column), copied to the host, and the output is allocated before the coordinates are written.
#include <cub/device/device_scan.cuh>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"

namespace reforge::cuda {

namespace {

template <typename T>
__global__ void nonzero_flags(int64_t* flags, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    if constexpr (std::is_same_v<T, bool>)
      flags[i] = x[i] ? 1 : 0;
    else
      flags[i] = load_c(x, i) != compute_t<T>(0) ? 1 : 0;
  }
}

struct Dims {
  int rank = 0;
  int64_t d[kMaxRank] = {};
};

__global__ void nonzero_write(int64_t* out, const int64_t* flags, const int64_t* pos, Dims dims, int64_t n,
                              int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    if (!flags[i]) continue;
    const int64_t j = pos[i];
    int64_t lin = i;
    for (int d = dims.rank - 1; d >= 0; --d) {
      out[d * count + j] = lin % dims.d[d];
      lin /= dims.d[d];
    }
  }
}

void non_zero_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank(), n = x.numel();
  REFORGE_CHECK(rank <= kMaxRank, where, ": rank ", rank, " exceeds the CUDA backend's ", kMaxRank);
  if (n == 0) {
    ctx.allocate_output_uninit(0, DType::Int64, {rank, 0});
    return;
  }
  Tensor flags = device_tensor(DType::Int64, {n});
  Tensor pos = device_tensor(DType::Int64, {n});
  dispatch_device(x.dtype(), "NonZero", [&](auto tag) {
    using T = typename decltype(tag)::type;
    nonzero_flags<T><<<grid_for(n), 256, 0, stream()>>>(flags.mutable_data<int64_t>(), x.data<T>(), n);
  });
  check_launch("nonzero_flags");
  size_t temp_bytes = 0;
  REFORGE_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, flags.data<int64_t>(),
                                                   pos.mutable_data<int64_t>(), n, stream()));
  Tensor temp = device_tensor(DType::UInt8, {static_cast<int64_t>(temp_bytes ? temp_bytes : 1)});
  REFORGE_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.mutable_raw(), temp_bytes, flags.data<int64_t>(),
                                                   pos.mutable_data<int64_t>(), n, stream()));
  // count = pos[n-1] + flags[n-1], read on the host.
  int64_t last[2] = {0, 0};
  REFORGE_CUDA_CHECK(
      cudaMemcpyAsync(&last[0], pos.data<int64_t>() + (n - 1), sizeof(int64_t), cudaMemcpyDeviceToHost, stream()));
  REFORGE_CUDA_CHECK(
      cudaMemcpyAsync(&last[1], flags.data<int64_t>() + (n - 1), sizeof(int64_t), cudaMemcpyDeviceToHost, stream()));
  REFORGE_CUDA_CHECK(cudaStreamSynchronize(stream()));
  const int64_t count = last[0] + last[1];
  Tensor& y = ctx.allocate_output_uninit(0, DType::Int64, {rank, count});
  if (count == 0 || rank == 0) return;
  Dims dims;
  dims.rank = static_cast<int>(rank);
  for (int64_t d = 0; d < rank; ++d) dims.d[d] = x.dim(d);
  nonzero_write<<<grid_for(n), 256, 0, stream()>>>(y.mutable_data<int64_t>(), flags.data<int64_t>(),
                                                   pos.data<int64_t>(), dims, n, count);
  check_launch("nonzero_write");
}

}  // namespace

void register_nonzero_kernels(backends::KernelRegistry& r) { add_kernel(r, "", "NonZero", non_zero_kernel); }

}  // namespace reforge::cuda
