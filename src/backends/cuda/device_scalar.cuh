// A scalar of any float or integer type, read on the device as double: reforge::Attention's
// scale and fill, which live in device memory (weights, or values of the run).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace reforge::cuda {

// The scalar's type, as the kernels receive it.
enum ScalarType : int { kF32, kF64, kF16, kBF16, kI32, kI64 };
__device__ __forceinline__ double load_scalar(const void* p, int type) {
  switch (type) {
    case kF32:
      return *static_cast<const float*>(p);
    case kF64:
      return *static_cast<const double*>(p);
    case kF16:
      return __half2float(*static_cast<const __half*>(p));
    case kBF16:
      return __bfloat162float(*static_cast<const __nv_bfloat16*>(p));
    case kI32:
      return *static_cast<const int32_t*>(p);
    default:
      return static_cast<double>(*static_cast<const int64_t*>(p));
  }
}

}  // namespace reforge::cuda
