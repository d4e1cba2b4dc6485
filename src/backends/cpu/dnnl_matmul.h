// oneDNN float32 matrix products: the fast path behind MatMul and Gemm.
#pragma once

#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "ops/nn/matmul.h"

namespace reforge::cpu {

// The dimensions of a product (ops/nn/matmul.h).
using MatmulDims = ops::nn::MatmulDims;

// Runs the product with a cached oneDNN matmul primitive. Returns false (having written
// nothing) when oneDNN has no implementation for these dimensions; the caller then uses its
// reference loop. All dimensions must be positive.
bool dnnl_matmul_f32(const MatmulDims& d, const float* a, const float* b, float* c);

// A constant right-hand matrix W [K, N] reordered once into the blocked layout oneDNN's matmul
// picks for it (format `any`), so that products with many rows do not re-pack W on every call.
// Float32 weights give a float32 product; bfloat16 weights two bfloat16 x bfloat16 products with
// float32 accumulation and output (AMX or AVX-512 BF16), of the activations' high and low
// bfloat16 parts (split_f32_to_bf16), so that only the weights' rounding remains.
struct PackedWeights;

// Packs W (row-major [K, N], or [N, K] when `transposed`) of type Float32 or BFloat16, for
// products of about `rows` rows. Returns null when oneDNN has no implementation for it (the
// caller then keeps its plain path). When oneDNN wants W as it is (its float32 gemm takes the
// plain row-major layout) and `owner` keeps `w` alive, the result aliases `w` instead of copying
// it: the engine then holds one copy of the weight, not two.
std::shared_ptr<const PackedWeights> pack_weights(int64_t K, int64_t N, bool transposed, DType dtype, const void* w,
                                                  int64_t rows, std::shared_ptr<const void> owner = nullptr);

// True when oneDNN multiplies bfloat16 weights natively on this CPU (AVX512-BF16 or AMX), i.e.
// pack_weights accepts BFloat16. Elsewhere bfloat16 weights are widened to float32 for products.
bool has_bf16_matmul();

// True when `w` aliases the weights it was packed from (no copy was made).
bool packed_aliases_plain(const PackedWeights& w);
// True when the layout oneDNN chose for `w` is W's own row-major [K, N] layout (float32 gemm:jit
// on AVX2 CPUs; AVX-512 CPUs pick a blocked layout for brgemm).
bool packed_layout_is_plain(const PackedWeights& w);

// C[M, N] = A[M, K] x W + bias[N] (bias may be null) with packed weights. Returns false
// (having written nothing) when no oneDNN primitive accepts the packed layout for these rows;
// the caller then uses the plain weights. `round_a` multiplies A rounded to bfloat16 (the
// `--activations bf16` semantics): with bfloat16 weights that is one product of M rows instead of
// two (of A's high and low parts), the rounding being the conversion to bfloat16 it needs anyway.
bool dnnl_matmul_packed(const PackedWeights& w, int64_t M, const float* a, const float* bias, float* c,
                        bool round_a = false);

}  // namespace reforge::cpu
