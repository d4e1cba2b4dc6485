// MatMul and Gemm: the shape logic (numpy broadcasting of MatMul's batch dimensions, Gemm's
// transposes and C broadcast) shared by the reference kernels here and the backends' kernels,
// which differ only in the product they plug in; and the reference product itself, loops that
// accumulate float32 (and widened 16-bit floats) in float32, float64 in float64 and integers
// wrapping like numpy.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/registry.h"

namespace reforge::ops::nn {

// C[b] = alpha * op(A[b]) x op(B[b]) + beta * C[b] for b in [0, batch), all row-major and
// dense. op(A) is M x K (A stored K x M when trans_a), op(B) is K x N (stored N x K when
// trans_b). A broadcast operand is one matrix shared by every batch. C is read only when
// beta != 0.
struct MatmulDims {
  int64_t batch = 1;
  bool a_broadcast = false;
  bool b_broadcast = false;
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
};

// A product in element type `dtype` (any numeric type) of the shape `d` describes.
using MatmulProduct = void (*)(DType dtype, const MatmulDims& d, const void* a, const void* b, void* c);

// The reference product: the loops below for every type (16-bit floats widened to float32).
void matmul_reference_product(DType dtype, const MatmulDims& d, const void* a, const void* b, void* c);

// MatMul's output (numpy semantics: 1-D operands promoted and the added dimension removed, batch
// dimensions broadcast), computed by `product`.
void matmul_run(KernelContext& ctx, MatmulProduct product);
// Gemm's output: Y = alpha * op(A) x op(B) + beta * C, C broadcast unidirectionally to [M, N],
// computed by `product` (which accumulates into the broadcast C).
void gemm_run(KernelContext& ctx, MatmulProduct product);
// Gemm's product (A and B 2-D of one type, inner dimensions equal; beta 0 without C) and whether
// C takes part (present, beta != 0). Shared with the CUDA kernel.
struct GemmSetup {
  MatmulDims dims;
  bool has_c = false;
};
GemmSetup gemm_setup(const KernelContext& ctx);
// C's extent [rows, cols] (each M or N, or 1), checked to broadcast to [M, N] with A's type.
struct GemmBias {
  int64_t rows = 1, cols = 1;
};
GemmBias gemm_bias(const KernelContext& ctx, const MatmulDims& d);
// ConvTranspose's output (conv_transpose.cc), its column matrix computed by `product`.
void conv_transpose_run(KernelContext& ctx, MatmulProduct product);

// Accumulator: double for float64 (and float for float32), wrapping unsigned 64-bit for
// integers (signed overflow would be undefined; two's complement wraps the same way).
template <typename T>
struct Accum {
  using type = std::conditional_t<std::is_integral_v<T>, uint64_t, T>;
};

template <typename T>
void matmul_ref(const MatmulDims& d, const T* a, const T* b, T* c) {
  using Acc = typename Accum<T>::type;
  const int64_t M = d.M, N = d.N, K = d.K;
  // Element strides of A (row i, column k) and B (row k, column j).
  const int64_t a_rs = d.trans_a ? 1 : K, a_cs = d.trans_a ? M : 1;
  const int64_t b_rs = d.trans_b ? 1 : N, b_cs = d.trans_b ? K : 1;
  const bool plain_scale = d.alpha == 1.0f && (d.beta == 0.0f || d.beta == 1.0f);
  const int64_t rows = d.batch * M;
  parallel_for(rows, rows * N * K > (1 << 16) ? omp_get_max_threads() : 1, 1, [&](int64_t r0, int64_t r1) {
    std::vector<Acc> acc(static_cast<size_t>(N));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t bi = r / M, i = r % M;
      const T* A = a + (d.a_broadcast ? 0 : bi * M * K);
      const T* B = b + (d.b_broadcast ? 0 : bi * K * N);
      T* C = c + bi * M * N + i * N;
      std::fill(acc.begin(), acc.end(), Acc(0));
      if (!d.trans_b) {
        for (int64_t k = 0; k < K; ++k) {
          const Acc av = static_cast<Acc>(A[i * a_rs + k * a_cs]);
          const T* Brow = B + k * b_rs;
          for (int64_t j = 0; j < N; ++j) acc[j] += av * static_cast<Acc>(Brow[j]);
        }
      } else {
        for (int64_t j = 0; j < N; ++j) {
          Acc s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += static_cast<Acc>(A[i * a_rs + k * a_cs]) * static_cast<Acc>(B[j * b_cs + k]);
          acc[j] = s;
        }
      }
      for (int64_t j = 0; j < N; ++j) {
        if constexpr (std::is_integral_v<T>) {
          if (plain_scale) {
            C[j] = static_cast<T>(d.beta == 0.0f ? acc[j] : acc[j] + static_cast<Acc>(C[j]));
          } else {
            // Gemm with non-unit alpha/beta on integers: numpy computes this in float64.
            double v = static_cast<double>(static_cast<T>(acc[j])) * d.alpha;
            if (d.beta != 0.0f) v += static_cast<double>(d.beta) * static_cast<double>(C[j]);
            C[j] = static_cast<T>(v);
          }
        } else {
          Acc v = plain_scale ? acc[j] : acc[j] * static_cast<Acc>(d.alpha);
          if (d.beta != 0.0f) v += static_cast<Acc>(d.beta) * C[j];
          C[j] = static_cast<T>(v);
        }
      }
    }
  });
}

template <typename H>
std::vector<float> widen_to_float(const H* p, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(p[i]);
  return v;
}

// The dispatch of a product over element types: float32 through `f32` (a float32 product of the
// same signature as matmul_ref<float>), 16-bit floats widened to float32 for `f32` and rounded
// once at the end, float64 and integers through the reference loop.
template <typename F32Product>
void matmul_product(DType dtype, const MatmulDims& d, const void* a, const void* b, void* c, F32Product f32) {
  const int64_t c_n = d.batch * d.M * d.N;
  if (c_n == 0) return;
  if (d.K == 0) {
    // Empty sum: the product is zero, leaving beta * C.
    dispatch_numeric(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* C = static_cast<T*>(c);
      for (int64_t i = 0; i < c_n; ++i) C[i] = d.beta == 0.0f ? T{} : from_compute<T>(to_compute(C[i]) * d.beta);
    });
    return;
  }
  const int64_t a_n = (d.a_broadcast ? 1 : d.batch) * d.M * d.K;
  const int64_t b_n = (d.b_broadcast ? 1 : d.batch) * d.K * d.N;
  dispatch_numeric(
      dtype,
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, float>) {
          f32(d, static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(c));
        } else if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
          std::vector<float> fa = widen_to_float(static_cast<const T*>(a), a_n);
          std::vector<float> fb = widen_to_float(static_cast<const T*>(b), b_n);
          std::vector<float> fc =
              d.beta != 0.0f ? widen_to_float(static_cast<const T*>(c), c_n) : std::vector<float>(c_n);
          f32(d, fa.data(), fb.data(), fc.data());
          T* C = static_cast<T*>(c);
          for (int64_t i = 0; i < c_n; ++i) C[i] = T(fc[i]);
        } else {
          matmul_ref<T>(d, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(c));
        }
      },
      "MatMul");
}

}  // namespace reforge::ops::nn
