// Mod's arithmetic on one element, shared by the CPU reference kernel (binary_arith.cc) and the
// CUDA kernel (backends/cuda/select.cu): the host compiler builds it for the CPU, the CUDA
// compiler for the device, from this one text. C is a compute type (an integer type, float or
// double; 16-bit floats compute in float).
//
// fmod=1: C's fmod (the result takes the dividend's sign). fmod=0: Python / numpy mod, the result
// takes the divisor's sign; for floats this follows numpy's npy_divmod exactly (x mod 0 = NaN, a
// zero result gets the divisor's sign, a negative x mod +inf = +inf). Integer x mod 0 is 0, and
// x mod -1 is 0 (no trap on the most negative x).
#pragma once

#include <math.h>

#include <type_traits>

#include "ops/host_device.h"

namespace reforge::ops {

REFORGE_HOST_DEVICE inline float mod_fmod(float x, float y) { return ::fmodf(x, y); }
REFORGE_HOST_DEVICE inline double mod_fmod(double x, double y) { return ::fmod(x, y); }
REFORGE_HOST_DEVICE inline float mod_copysign(float x, float y) { return ::copysignf(x, y); }
REFORGE_HOST_DEVICE inline double mod_copysign(double x, double y) { return ::copysign(x, y); }

struct FmodOp {
  template <typename C>
  REFORGE_HOST_DEVICE inline C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) {
      if (y == 0) return 0;
      if constexpr (std::is_signed_v<C>) {
        if (y == C(-1)) return 0;
      }
      return static_cast<C>(x % y);
    } else {
      return mod_fmod(x, y);
    }
  }
};

// Fmod's remainder moved to the divisor's side.
struct PyModOp {
  template <typename C>
  REFORGE_HOST_DEVICE inline C operator()(C x, C y) const {
    C r = FmodOp{}(x, y);
    if constexpr (std::is_integral_v<C>) {
      if constexpr (std::is_signed_v<C>) {
        if (r != 0 && ((r < 0) != (y < 0))) r = static_cast<C>(r + y);
      }
      return r;
    } else {
      if (y == 0) return r;
      if (r != 0) {
        if ((y < 0) != (r < 0)) r += y;
      } else {
        r = mod_copysign(C(0), y);
      }
      return r;
    }
  }
};

}  // namespace reforge::ops
