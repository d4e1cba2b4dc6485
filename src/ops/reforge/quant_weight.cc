// Reference kernels of reforge::QuantizeWeight (the recipe step of --precision int8 / int4) and
// reforge::MatMulQuant (the Linear layer on quantized weights). The rules and layouts are those of
// ops/reforge/quant_weight.h; QuantizeWeight has no other kernel, so the build and every refit
// quantize with this code.
#include "ops/reforge/quant_weight.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/registry.h"

namespace reforge::ops {

namespace {

using quant::QuantShape;

// QuantizeWeight(W) -> (Q, scales[, zero_points]); W float32 [K, N], or [N, K] with transposed = 1
// (a Gemm with transB = 1). Attributes bits (8 | 4) and block_size (int8: 0; int4: a power of two
// >= 16).
void quantize_weight(KernelContext& ctx) {
  const Tensor& w = ctx.input(0);
  const std::string& label = ctx.node().label();
  REFORGE_CHECK(w.dtype() == DType::Float32 && w.rank() == 2, label, ": weight must be a float32 matrix, got ",
                w.describe());
  const bool transposed = ctx.attr_int("transposed", 0) != 0;
  const int64_t K = w.dim(transposed ? 1 : 0), N = w.dim(transposed ? 0 : 1);
  const QuantShape qs = quant::quant_shape(ctx.attr_int("bits", 8), ctx.attr_int("block_size", 0), K, N, label);
  const float* pw = w.data<float>();
  // Element (k, n) of W [K, N].
  const int64_t sk = transposed ? 1 : N, sn = transposed ? K : 1;
  for (int64_t i = 0; i < w.numel(); ++i)
    REFORGE_CHECK(std::isfinite(pw[i]), label, ": weight element ", i, " is ", pw[i], "; only finite weights quantize");
  Tensor& scales = ctx.allocate_output_uninit(1, DType::Float32, {qs.num_scales()});
  float* ps = scales.mutable_data<float>();
  if (qs.bits == 8) {
    Tensor& q = ctx.allocate_output_uninit(0, DType::Int8, qs.q_shape());
    int8_t* pq = static_cast<int8_t*>(q.mutable_raw());
    for (int64_t n = 0; n < N; ++n) {
      float amax = 0.0f;
      for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(pw[k * sk + n * sn]));
      const float scale = amax / 127.0f;
      ps[n] = scale;
      for (int64_t k = 0; k < K; ++k) {
        float v = 0.0f;
        if (scale != 0.0f) v = std::clamp(quant::round_half_even(pw[k * sk + n * sn] / scale), -127.0f, 127.0f);
        pq[n * K + k] = static_cast<int8_t>(v);
      }
    }
    return;
  }
  Tensor& q = ctx.allocate_output(0, DType::UInt8, qs.q_shape());  // zero-filled: bytes past K stay 0
  Tensor& zps = ctx.allocate_output_uninit(2, DType::UInt8, {qs.num_zero_points()});
  uint8_t* pq = static_cast<uint8_t*>(q.mutable_raw());
  uint8_t* pz = static_cast<uint8_t*>(zps.mutable_raw());
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < qs.zp_row; ++j) pz[n * qs.zp_row + j] = 0x80;  // an odd row's last high nibble: 8
    for (int64_t b = 0; b < qs.n_blocks; ++b) {
      const int64_t k0 = b * qs.block_size, k1 = std::min(K, k0 + qs.block_size);
      float lo = std::numeric_limits<float>::max(), hi = -lo;
      for (int64_t k = k0; k < k1; ++k) {
        const float v = pw[k * sk + n * sn];
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      lo = std::min(lo, 0.0f);
      hi = std::max(hi, 0.0f);
      const float scale = (hi - lo) / 15.0f;
      float zp_f = lo;
      if (scale != 0.0f) zp_f = 0.0f - lo / scale;
      const uint8_t zp = zp_f < 0.0f ? 0 : zp_f > 15.0f ? 15 : static_cast<uint8_t>(quant::round_half_away(zp_f));
      const float r = scale != 0.0f ? 1.0f / scale : 0.0f;
      ps[n * qs.n_blocks + b] = scale;
      quant::put_zero_point(qs, pz, n, b, zp);
      quant::put_block(qs, pq, n, b, zp, [&](int64_t k) {
        const float t = pw[k * sk + n * sn] * r;  // rounded to float32 before the zero point is added
        return static_cast<uint8_t>(std::clamp(quant::round_half_away(t + static_cast<float>(zp)), 0.0f, 15.0f));
      });
    }
  }
}

// Y = X Wd (+ b): dequantizes each output channel's weights to float32 and sums the products over
// k in ascending order (float32 products and sums), then adds the bias.
void matmul_quant(KernelContext& ctx) {
  const quant::MatMulQuantSetup s = quant::matmul_quant_setup(ctx);
  const QuantShape& qs = s.w.shape;
  const float* x = ctx.input(0).data<float>();
  Tensor& y = ctx.allocate_output_uninit(0, DType::Float32, s.out);
  float* py = y.mutable_data<float>();
  std::vector<float> wd(qs.K);
  for (int64_t n = 0; n < qs.N; ++n) {
    if (qs.bits == 8) {
      const int8_t* q = static_cast<const int8_t*>(s.w.q) + n * qs.K;
      for (int64_t k = 0; k < qs.K; ++k) wd[k] = static_cast<float>(q[k]) * s.w.scales[n];
    } else {
      for (int64_t k = 0; k < qs.K; ++k) {
        const int64_t b = k / qs.block_size;
        const uint8_t byte =
            static_cast<const uint8_t*>(s.w.q)[(n * qs.n_blocks + b) * qs.blob + (k % qs.block_size) / 2];
        const int v = (k & 1) ? byte >> 4 : byte & 0x0f;
        wd[k] = static_cast<float>(v - s.w.zp(n, b)) * s.w.scales[n * qs.n_blocks + b];
      }
    }
    for (int64_t m = 0; m < s.rows; ++m) {
      const float* xm = x + m * qs.K;
      float acc = 0.0f;
      for (int64_t k = 0; k < qs.K; ++k) {
        const float p = xm[k] * wd[k];
        acc += p;
      }
      py[m * qs.N + n] = s.bias ? acc + s.bias[n] : acc;
    }
  }
}

}  // namespace

void register_quant_weight_ops(OpRegistry& r) {
  r.add({"reforge", "QuantizeWeight", 1, INT_MAX, quantize_weight, nullptr});
  // MatMulQuant(X, Q, scales, zero_points?, bias?). Like the other ops the passes emit, its inputs
  // are data: roles classify the imported graph's initializers, and the quantized weights only
  // exist after the passes, as engine weights derived by QuantizeWeight.
  r.add({"reforge", "MatMulQuant", 1, INT_MAX, matmul_quant, nullptr});
}

}  // namespace reforge::ops
