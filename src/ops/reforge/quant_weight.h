// Quantized Linear weights (--precision int8 | int4): the rounding rules of reforge::QuantizeWeight,
// the layouts reforge::MatMulQuant reads, and the validation both its kernels share.
//
// QuantizeWeight(W) is a recipe step: the builder quantizes a float32 weight with it and a refit
// replays it on the new float32 weights, so the rules below are the only definition of the
// quantized values, written once here and called by the reference kernel (ops/reforge/
// quant_weight.cc). Every operation is float32 arithmetic with one rounding per operation (the
// reference kernel is compiled for the generic target, so no multiply-add is fused).
//
// int8 (bits = 8): symmetric, per output channel (one scale per column n of W [K, N]):
//   amax = max_k |W[k, n]|, scale = amax / 127, q = clamp(round_half_even(W[k, n] / scale), -127, 127);
//   an all-zero column has scale 0 and q = 0. Q is int8 [N, K] (a row per output channel), scales
//   float32 [N]. The scale equals ONNX Runtime quantize_dynamic's symmetric int8 one ((amax + amax)
//   / 254 is the same float32 quotient); quantize_dynamic quantizes per tensor by default.
// int4 (bits = 4): asymmetric, blocks of `block_size` consecutive k (a power of two >= 16; the last
//   block of a column is short when K is not a multiple), the rule of ONNX Runtime's MatMulNBits
//   quantizer (MlasQuantizeBlockwise, range2scalezp):
//   lo = min(0, min of block), hi = max(0, max of block), scale = (hi - lo) / 15,
//   zp_f = scale != 0 ? 0 - lo / scale : lo, zp = zp_f < 0 ? 0 : zp_f > 15 ? 15 : roundf(zp_f),
//   r = scale != 0 ? 1 / scale : 0, q = clamp(roundf(W * r + zp), 0, 15)  (W * r rounded, then + zp);
//   roundf rounds halves away from zero. Layout (MatMulNBits'): Q uint8 [N, n_blocks, block_size / 2],
//   element k of a block in byte k / 2, low nibble first; a nibble past K pairs with a real one holds
//   the block's zp, whole bytes past K hold 0. scales float32 [N * n_blocks]; zero points uint8
//   [N * ceil(n_blocks / 2)], two per byte, low nibble first, an odd row's last high nibble 8.
//
// MatMulQuant's value is Y[m, n] = sum_k X[m, k] * Wd[k, n] (+ b[n]) with the dequantized weight
// Wd = q * scale (int8) or (q - zp) * scale (int4, zp = 8 when the zero points are absent, as in
// MatMulNBits), each a float32 product of an exact integer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "ops/registry.h"

namespace reforge::ops::quant {

inline constexpr int64_t kInt4DefaultBlock = 32;

// Rounds to the nearest integer, halves to even, independent of the FPU's rounding mode.
inline float round_half_even(float x) {
  float f = std::floor(x);
  const float d = x - f;  // exact for every float
  if (d > 0.5f || (d == 0.5f && std::fmod(f, 2.0f) != 0.0f)) f += 1.0f;
  return f;
}

// Rounds to the nearest integer, halves away from zero (C's roundf).
inline float round_half_away(float x) { return std::round(x); }

inline bool valid_block_size(int64_t b) { return b >= 16 && b <= (int64_t{1} << 20) && (b & (b - 1)) == 0; }

// The quantized form of a [K, N] weight.
struct QuantShape {
  int bits = 8;
  int64_t K = 0, N = 0;
  int64_t block_size = 0;  // int4: k per block; int8: 0 (one block of K)
  int64_t n_blocks = 1;    // int4: ceil(K / block_size)
  int64_t blob = 0;        // int4: bytes per block (block_size / 2)
  int64_t zp_row = 0;      // int4: zero-point bytes per output channel (ceil(n_blocks / 2))
  Shape q_shape() const { return bits == 8 ? Shape{N, K} : Shape{N, n_blocks, blob}; }
  int64_t num_scales() const { return bits == 8 ? N : N * n_blocks; }
  int64_t num_zero_points() const { return N * zp_row; }
};

// int4, MatMulNBits' layout: zero point `zp` (its low 4 bits) of block `b` of output channel `n`, into
// `pz` (num_zero_points() bytes): two per byte, the even block in the low nibble.
inline void put_zero_point(const QuantShape& qs, uint8_t* pz, int64_t n, int64_t b, uint8_t zp) {
  uint8_t& byte = pz[n * qs.zp_row + b / 2];
  byte = (b & 1) ? static_cast<uint8_t>((byte & 0x0f) | (zp << 4)) : static_cast<uint8_t>((byte & 0xf0) | zp);
}

// int4, MatMulNBits' layout: the codes of block `b` of output channel `n` into `pq`, code(k) for each
// k of the block below K (two per byte, the even k in the low nibble); an odd block's last high
// nibble is `pad`.
template <typename Code>
inline void put_block(const QuantShape& qs, uint8_t* pq, int64_t n, int64_t b, uint8_t pad, Code code) {
  const int64_t k0 = b * qs.block_size, k1 = std::min(qs.K, k0 + qs.block_size);
  uint8_t* blob = pq + (n * qs.n_blocks + b) * qs.blob;
  for (int64_t k = k0; k < k1; k += 2) {
    const uint8_t v0 = code(k);
    const uint8_t v1 = k + 1 < k1 ? code(k + 1) : pad;
    blob[(k - k0) / 2] = static_cast<uint8_t>(v0 | (v1 << 4));
  }
}

// Throws naming `where` when bits or block_size are not a supported pair.
inline QuantShape quant_shape(int64_t bits, int64_t block_size, int64_t K, int64_t N, const std::string& where) {
  REFORGE_CHECK(bits == 8 || bits == 4, where, ": bits ", bits, " is not 8 or 4");
  REFORGE_CHECK(K > 0 && N > 0, where, ": the weight [K = ", K, ", N = ", N, "] is empty");
  QuantShape s;
  s.bits = static_cast<int>(bits);
  s.K = K;
  s.N = N;
  if (bits == 8) {
    REFORGE_CHECK(block_size == 0, where, ": int8 weights are quantized per output channel (block_size 0), not in ",
                  "blocks of ", block_size);
    return s;
  }
  REFORGE_CHECK(valid_block_size(block_size), where, ": block_size ", block_size, " is not a power of two >= 16");
  s.block_size = block_size;
  s.n_blocks = (K + block_size - 1) / block_size;
  s.blob = block_size / 2;
  s.zp_row = (s.n_blocks + 1) / 2;
  return s;
}

// A quantized weight as MatMulQuant's kernels read it (pointers into the engine's tensors).
struct QuantMatrix {
  QuantShape shape;
  const void* q = nullptr;               // int8 [N, K] or uint8 [N, n_blocks, blob]
  const float* scales = nullptr;         // [num_scales()]
  const uint8_t* zero_points = nullptr;  // int4: [N * zp_row], or null (zp 8)
  int zp(int64_t n, int64_t b) const {
    if (!zero_points) return 8;
    const uint8_t byte = zero_points[n * shape.zp_row + b / 2];
    return (b & 1) ? byte >> 4 : byte & 0x0f;
  }
};

// MatMulQuant(X, Q, scales[, zero_points][, bias]) with attributes bits, block_size, K, N: checks
// every input against the attributes (the same errors for every kernel) and returns the weight.
struct MatMulQuantSetup {
  QuantMatrix w;
  Shape out;  // X's shape with N last
  int64_t rows = 0;
  const float* bias = nullptr;
};

inline MatMulQuantSetup matmul_quant_setup(const KernelContext& ctx) {
  const std::string& label = ctx.node().label();
  MatMulQuantSetup s;
  s.w.shape = quant_shape(ctx.attr_int("bits", 8), ctx.attr_int("block_size", 0), ctx.attr_int("K", 0),
                          ctx.attr_int("N", 0), label);
  const QuantShape& qs = s.w.shape;
  const Tensor& x = ctx.input(0);
  const Tensor& q = ctx.input(1);
  const Tensor& sc = ctx.input(2);
  REFORGE_CHECK(x.dtype() == DType::Float32 && x.rank() >= 1 && x.shape().back() == qs.K, label, ": input ",
                x.describe(), " does not match the quantized weight's K = ", qs.K);
  const DType qt = qs.bits == 8 ? DType::Int8 : DType::UInt8;
  REFORGE_CHECK(q.dtype() == qt && q.shape() == qs.q_shape(), label, ": quantized weight is ", q.describe(),
                ", expected ", dtype_name(qt), shape_str(qs.q_shape()));
  REFORGE_CHECK(sc.dtype() == DType::Float32 && sc.numel() == qs.num_scales() && sc.rank() == 1, label, ": scales are ",
                sc.describe(), ", expected float32[", qs.num_scales(), "]");
  s.w.q = q.raw();
  s.w.scales = sc.data<float>();
  if (ctx.has_input(3)) {
    const Tensor& zp = ctx.input(3);
    REFORGE_CHECK(qs.bits == 4, label, ": int8 weights take no zero points");
    REFORGE_CHECK(zp.dtype() == DType::UInt8 && zp.rank() == 1 && zp.numel() == qs.num_zero_points(), label,
                  ": zero points are ", zp.describe(), ", expected uint8[", qs.num_zero_points(), "]");
    s.w.zero_points = static_cast<const uint8_t*>(zp.raw());
  }
  if (ctx.has_input(4)) {
    const Tensor& b = ctx.input(4);
    REFORGE_CHECK(b.dtype() == DType::Float32 && b.rank() == 1 && b.dim(0) == qs.N, label, ": bias ", b.describe(),
                  " does not match N = ", qs.N);
    s.bias = b.data<float>();
  }
  s.out = x.shape();
  s.out.back() = qs.N;
  s.rows = qs.K ? x.numel() / qs.K : 0;
  return s;
}

}  // namespace reforge::ops::quant
