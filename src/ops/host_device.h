// REFORGE_HOST_DEVICE marks element arithmetic written once for the CPU reference kernels and the
// CUDA kernels: the host compiler sees a plain function, the CUDA compiler one it builds for both
// the host and the device. Such code uses only what both have (the C math library's functions,
// no std:: calls the device lacks).
#pragma once

#ifdef __CUDACC__
#define REFORGE_HOST_DEVICE __host__ __device__
#else
#define REFORGE_HOST_DEVICE
#endif
