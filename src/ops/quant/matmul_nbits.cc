// com.microsoft MatMulNBits (opset 1 of that domain), as ONNX Runtime's contrib op defines it and
// its 4-bit quantizer (onnxruntime.quantization.matmul_nbits_quantizer) writes it:
//
//   Y[..., n] = sum_k A[..., k] * W[n, k]  (+ bias[n]),   W[n, k] = (q[n, k] - zp[n, g(k)]) * scale[n, g(k)]
//
// Attributes: K and N (B is [N, K] transposed, i.e. the weight of y = x W^T), bits (2, 4 or 8;
// default 4), block_size (a power of two >= 16), accuracy_level (ignored: it only permits ORT to
// compute in lower precision, e.g. to quantize A to int8 at level 4; this kernel always computes
// in float32, the most accurate of what every level permits).
//
// Inputs: A [..., K] (float32, float16 or bfloat16); B uint8 [N, k_blocks, blob_size], k_blocks =
// ceil(K / block_size), blob_size = block_size * bits / 8, each block's codes packed low bits
// first (code k of a block is bits (k * bits) % 8 .. of byte (k * bits) / 8 of its blob); scales
// (A's type) of N * k_blocks elements ([N * k_blocks] or [N, k_blocks]); zero_points (optional)
// either uint8, packed like B along the blocks of a row (N rows of ceil(k_blocks * bits / 8)
// bytes), or of A's type, one per block unpacked; absent, every zero point is 2^(bits-1);
// g_idx (optional, int32 [K]): the block of column k (default k / block_size), which selects the
// scale and zero point while the code stays at its position k; bias (optional, A's type, [N]).
//
// The reference kernel dequantizes W to float32 (the difference of code and zero point is exact,
// then one float32 multiply by the scale) and accumulates each output over k in ascending order in
// float32; bias is added last. The output has A's type.
#include <cmath>
#include <string>
#include <vector>

#include "ops/quant/quant_common.h"
#include "ops/registry.h"

namespace reforge::ops::quant {
namespace {

struct NBitsAttrs {
  int64_t K = 0, N = 0, bits = 4, block_size = 0, k_blocks = 0, blob_size = 0;
};

std::string nbits_check(const ir::Node& node) {
  if (!node.has_attr("K") || !node.has_attr("N")) return "needs the attributes K and N";
  if (!node.has_attr("block_size")) return "needs the attribute block_size";
  const int64_t K = node.attr_int("K"), N = node.attr_int("N"), bits = node.attr_int("bits", 4),
                bs = node.attr_int("block_size");
  if (K <= 0 || N <= 0) return "K and N must be positive, got K=" + std::to_string(K) + " N=" + std::to_string(N);
  if (bits != 2 && bits != 4 && bits != 8) return "bits " + std::to_string(bits) + " is not supported (2, 4 or 8)";
  if (bs < 16 || (bs & (bs - 1)) != 0) return "block_size must be a power of two >= 16, got " + std::to_string(bs);
  if (node.inputs.size() < 3 || node.inputs.size() > 6)
    return "takes 3 to 6 inputs (A, B, scales, zero_points, g_idx, bias), got " + std::to_string(node.inputs.size());
  return "";
}

NBitsAttrs nbits_attrs(const ir::Node& node) {
  const std::string why = nbits_check(node);
  REFORGE_CHECK(why.empty(), node.label(), ": ", why);
  NBitsAttrs a;
  a.K = node.attr_int("K");
  a.N = node.attr_int("N");
  a.bits = node.attr_int("bits", 4);
  a.block_size = node.attr_int("block_size");
  a.k_blocks = (a.K + a.block_size - 1) / a.block_size;
  a.blob_size = a.block_size * a.bits / 8;
  return a;
}

bool is_act_float(DType t) { return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16; }

// Every element of a float tensor as float32 (exact: the narrower float types widen exactly).
std::vector<float> to_floats(const Tensor& t) {
  const std::vector<double> d = to_double_vector(t);
  return std::vector<float>(d.begin(), d.end());
}

// The dequantized weight W [N, K] in float32.
std::vector<float> dequantize_weight(const KernelContext& ctx, const NBitsAttrs& a, DType act) {
  const std::string label = ctx.node().label();
  const Tensor& B = ctx.input(1);
  REFORGE_CHECK(B.dtype() == DType::UInt8 && B.shape() == Shape({a.N, a.k_blocks, a.blob_size}), label,
                ": B must be uint8[", a.N, ",", a.k_blocks, ",", a.blob_size, "] for K=", a.K, " N=", a.N,
                " bits=", a.bits, " block_size=", a.block_size, ", got ", B.describe());
  const Tensor& S = ctx.input(2);
  REFORGE_CHECK(S.dtype() == act && S.numel() == a.N * a.k_blocks, label, ": scales must hold ", a.N * a.k_blocks, " ",
                dtype_name(act), " elements (N * k_blocks), got ", S.describe());
  const std::vector<float> scale = to_floats(S);
  // Zero points, one float per (n, block).
  std::vector<float> zp(static_cast<size_t>(a.N * a.k_blocks), static_cast<float>(int64_t{1} << (a.bits - 1)));
  if (ctx.has_input(3)) {
    const Tensor& Z = ctx.input(3);
    if (Z.dtype() == DType::UInt8) {
      const int64_t row = (a.k_blocks * a.bits + 7) / 8;
      REFORGE_CHECK(Z.numel() == a.N * row, label, ": packed uint8 zero_points must hold ", a.N * row,
                    " bytes (N rows of ceil(k_blocks * bits / 8)), got ", Z.describe());
      const uint8_t* zp8 = Z.data<uint8_t>();
      const int mask = (1 << a.bits) - 1;
      for (int64_t n = 0; n < a.N; ++n)
        for (int64_t b = 0; b < a.k_blocks; ++b) {
          const int64_t bit = b * a.bits;
          zp[static_cast<size_t>(n * a.k_blocks + b)] =
              static_cast<float>((zp8[n * row + bit / 8] >> (bit % 8)) & mask);
        }
    } else {
      REFORGE_CHECK(Z.dtype() == act && Z.numel() == a.N * a.k_blocks, label,
                    ": zero_points must be packed uint8 or hold ", a.N * a.k_blocks, " ", dtype_name(act),
                    " elements, got ", Z.describe());
      zp = to_floats(Z);
    }
  }
  std::vector<int64_t> group(static_cast<size_t>(a.K));
  for (int64_t k = 0; k < a.K; ++k) group[static_cast<size_t>(k)] = k / a.block_size;
  if (ctx.has_input(4)) {
    const Tensor& G = ctx.input(4);
    REFORGE_CHECK(G.dtype() == DType::Int32 && G.numel() == a.K, label, ": g_idx must be int32[", a.K, "], got ",
                  G.describe());
    const int32_t* g = G.data<int32_t>();
    for (int64_t k = 0; k < a.K; ++k) {
      REFORGE_CHECK(g[k] >= 0 && g[k] < a.k_blocks, label, ": g_idx[", k, "] = ", g[k], " is outside [0, ", a.k_blocks,
                    ")");
      group[static_cast<size_t>(k)] = g[k];
    }
  }
  const uint8_t* q = B.data<uint8_t>();
  const int mask = (1 << a.bits) - 1;
  std::vector<float> w(static_cast<size_t>(a.N * a.K));
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t k = 0; k < a.K; ++k) {
      const int64_t bit = (k % a.block_size) * a.bits;
      const uint8_t byte = q[(n * a.k_blocks + k / a.block_size) * a.blob_size + bit / 8];
      const float code = static_cast<float>((byte >> (bit % 8)) & mask);
      const size_t s = static_cast<size_t>(n * a.k_blocks + group[static_cast<size_t>(k)]);
      w[static_cast<size_t>(n * a.K + k)] = (code - zp[s]) * scale[s];
    }
  return w;
}

void matmul_nbits_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const NBitsAttrs a = nbits_attrs(ctx.node());
  const Tensor& A = ctx.input(0);
  REFORGE_CHECK(is_act_float(A.dtype()), label, ": A must be float32, float16 or bfloat16, got ", A.describe());
  REFORGE_CHECK(A.rank() >= 1 && A.shape().back() == a.K, label, ": A ", A.describe(), " must end in K = ", a.K);
  const std::vector<float> w = dequantize_weight(ctx, a, A.dtype());
  std::vector<float> bias;
  if (ctx.has_input(5)) {
    const Tensor& b = ctx.input(5);
    REFORGE_CHECK(b.dtype() == A.dtype() && b.numel() == a.N, label, ": bias must be ", dtype_name(A.dtype()), "[", a.N,
                  "], got ", b.describe());
    bias = to_floats(b);
  }
  Shape out = A.shape();
  out.back() = a.N;
  const int64_t M = A.numel() / a.K;
  const std::vector<float> x = to_floats(A);
  Tensor y = Tensor::empty(DType::Float32, out);
  float* yp = y.mutable_data<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < a.N; ++n) {
      const float* xr = x.data() + m * a.K;
      const float* wr = w.data() + n * a.K;
      float acc = 0.0f;
      for (int64_t k = 0; k < a.K; ++k) acc += xr[k] * wr[k];
      if (!bias.empty()) acc += bias[static_cast<size_t>(n)];
      yp[m * a.N + n] = acc;
    }
  ctx.set_output(0, A.dtype() == DType::Float32 ? std::move(y) : cast_tensor(y, A.dtype()));
}

}  // namespace

void register_matmul_nbits_ops(OpRegistry& r) {
  using R = InputRole;
  OpDef d{"com.microsoft",
          "MatMulNBits",
          1,
          INT_MAX,
          matmul_nbits_kernel,
          nbits_check,
          nullptr,
          {R::kData, R::kWeight, R::kWeight, R::kWeight, R::kWeight, R::kWeight}};
  d.quantized_inputs = {1, 2, 3, 4};  // B, scales, zero_points, g_idx; A and bias are float
  r.add(std::move(d));
}

}  // namespace reforge::ops::quant
