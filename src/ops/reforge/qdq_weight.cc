// reforge::QdqWeight, the recipe step that lays a DequantizeLinear weight out for
// reforge::MatMulQuant, and reforge::Int4Unpack, its inverse for uint4 codes with zero points
// (rules in ops/reforge/qdq_weight.h). They have no other kernels: the build, every refit and every
// checkpoint binding lay the codes out with this code.
#include "ops/reforge/qdq_weight.h"

#include <algorithm>
#include <vector>

#include "ops/quant/quant_common.h"
#include "ops/registry.h"

namespace reforge::ops {

namespace quant {

std::string qdq_form(DType codes, const Shape& codes_shape, DType scale, const Shape& scale_shape, int64_t axis,
                     int64_t block_size, bool transposed, QdqForm& form) {
  int bits = 0;
  if (codes == DType::Int8 || codes == DType::UInt8)
    bits = 8;
  else if (codes == DType::Int4 || codes == DType::UInt4)
    bits = 4;
  else
    return str_cat(dtype_name(codes), " codes have no MatMulQuant form (int8, uint8, int4 and uint4 have)");
  if (scale != DType::Float32) return str_cat("the scale is ", dtype_name(scale), ", not float32");
  if (codes_shape.size() != 2) return str_cat("the weight ", shape_str(codes_shape), " is not a matrix");
  const int64_t K = codes_shape[transposed ? 1 : 0], N = codes_shape[transposed ? 0 : 1];
  if (K <= 0 || N <= 0) return str_cat("the weight ", shape_str(codes_shape), " is empty");
  if (axis < -2 || axis >= 2) return str_cat("axis ", axis, " is out of range for a matrix");
  if (axis < 0) axis += 2;
  const int64_t k_axis = transposed ? 1 : 0, n_axis = 1 - k_axis;
  const int64_t scale_numel = shape_numel(scale_shape);
  QdqForm f;
  f.axis = axis;
  f.dq_block_size = block_size;
  f.transposed = transposed;
  if (block_size == 0 && scale_numel == 1 && scale_shape.size() <= 1) {
    f.scales = QdqScales::kPerTensor;
  } else if (block_size == 0 && axis == n_axis && scale_shape == Shape{N}) {
    f.scales = QdqScales::kPerChannel;
  } else if (block_size > 0 && axis == k_axis) {
    Shape want(2);
    want[static_cast<size_t>(k_axis)] = (K + block_size - 1) / block_size;
    want[static_cast<size_t>(n_axis)] = N;
    if (scale_shape != want) return str_cat("the blocked scale ", shape_str(scale_shape), " is not ", shape_str(want));
    f.scales = QdqScales::kBlocked;
  } else {
    return str_cat("a scale ", shape_str(scale_shape), " with axis ", axis, " and block_size ", block_size,
                   " is not per tensor, per output channel or in blocks along K");
  }
  int64_t target_block = 0;
  if (bits == 8) {
    if (f.scales == QdqScales::kBlocked)
      return str_cat("int8 codes in blocks of ", block_size,
                     " along K: MatMulQuant's int8 form has one scale per "
                     "output channel");
  } else if (f.scales == QdqScales::kBlocked) {
    if (!valid_block_size(block_size))
      return str_cat("4-bit blocks of ", block_size, ": MatMulQuant's int4 blocks are a power of two >= 16");
    target_block = block_size;
  } else {
    target_block = 16;
    while (target_block < K) target_block *= 2;
    if (!valid_block_size(target_block)) return str_cat("K = ", K, " is longer than MatMulQuant's largest block");
  }
  f.target = quant_shape(bits, target_block, K, N, "qdq_form");
  f.code_offset = codes == DType::Int4 ? 8 : 0;
  form = f;
  return "";
}

bool symmetric_zero_points(const Tensor& zero_point) {
  const int64_t centre = zero_point.dtype() == DType::UInt8 ? 128 : 0;
  if (zero_point.dtype() != DType::UInt8 && zero_point.dtype() != DType::Int8) return false;
  for (int64_t z : to_int64_values(zero_point))
    if (z != centre) return false;
  return true;
}

}  // namespace quant

namespace {

// QdqWeight(codes, scale[, zero_point]) -> (Q, scales[, zero_points]) with DequantizeLinear's
// attributes `axis` and `block_size` and `transposed` (codes [N, K]): int8 form: two outputs,
// int4 form: three (the zero points always written, so that uint4 codes without zero points,
// whose zero point is 0, need no other case).
void qdq_weight(KernelContext& ctx) {
  const std::string& label = ctx.node().label();
  const Tensor& codes = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  quant::QdqForm f;
  const std::string why =
      quant::qdq_form(codes.dtype(), codes.shape(), scale.dtype(), scale.shape(), ctx.attr_int("axis", 1),
                      ctx.attr_int("block_size", 0), ctx.attr_int("transposed", 0) != 0, f);
  REFORGE_CHECK(why.empty(), label, ": DequantizeLinear weight ", codes.describe(), " has no MatMulQuant form: ", why);
  const quant::QuantShape& qs = f.target;
  if (zp) {
    REFORGE_CHECK(
        zp->dtype() == codes.dtype() && (zp->shape() == scale.shape() || (zp->numel() == 1 && scale.numel() == 1)),
        label, ": zero point ", zp->describe(), " must have the codes' type ", dtype_name(codes.dtype()),
        " and the scale's shape ", shape_str(scale.shape()));
    REFORGE_CHECK(qs.bits == 4 || quant::symmetric_zero_points(*zp), label, ": zero point ", zp->describe(), " is not ",
                  codes.dtype() == DType::UInt8 ? "128" : "0",
                  " everywhere: MatMulQuant's int8 form holds symmetrically quantized weights only (quantize the "
                  "model with symmetric weights, or build it again to keep this weight on DequantizeLinear)");
  }
  const int64_t K = qs.K, N = qs.N;
  const quant::ScaleMap map(codes.shape(), scale.shape(), f.axis, f.dq_block_size, label + ": scale");
  const std::vector<int64_t> c = quant::to_int64_values(codes);
  const std::vector<int64_t> z = zp ? quant::to_int64_values(*zp) : std::vector<int64_t>();
  const float* ps = scale.data<float>();
  // Flat index of element (k, n) in the codes.
  auto at = [&](int64_t k, int64_t n) { return f.transposed ? n * K + k : k * N + n; };
  Tensor& scales = ctx.allocate_output_uninit(1, DType::Float32, {qs.num_scales()});
  float* out_s = scales.mutable_data<float>();
  if (qs.bits == 8) {
    Tensor& q = ctx.allocate_output_uninit(0, DType::Int8, qs.q_shape());
    int8_t* pq = static_cast<int8_t*>(q.mutable_raw());
    for (int64_t n = 0; n < N; ++n) {
      out_s[n] = ps[map(at(0, n))];
      for (int64_t k = 0; k < K; ++k) {
        const int64_t i = at(k, n);
        pq[n * K + k] = static_cast<int8_t>(c[static_cast<size_t>(i)] - (zp ? z[static_cast<size_t>(map(i))] : 0));
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
      const int64_t k0 = b * qs.block_size;
      const int64_t s = map(at(k0, n));  // one scale and zero point per (block, n)
      out_s[n * qs.n_blocks + b] = ps[s];
      const auto zpv = static_cast<uint8_t>((zp ? z[static_cast<size_t>(s)] : 0) + f.code_offset);
      quant::put_zero_point(qs, pz, n, b, zpv);
      quant::put_block(qs, pq, n, b, zpv, [&](int64_t k) {
        return static_cast<uint8_t>(c[static_cast<size_t>(at(k, n))] + f.code_offset);
      });
    }
  }
}

// Int4Unpack(Q, scales, zero_points) -> (codes, scale, zero_point): the int4 layout of
// MatMulQuant / MatMulNBits (ops/reforge/quant_weight.h) as DequantizeLinear's blocked uint4
// inputs, attributes K and transposed (0: codes [K, N], scale and zero point [n_blocks, N], axis 0;
// 1: codes [N, K], [N, n_blocks], axis 1). The inverse of QdqWeight on uint4 codes with zero points:
// a binding step that re-derives a QDQ 4-bit weight from QuantizeWeight of a float tensor.
void int4_unpack(KernelContext& ctx) {
  const std::string& label = ctx.node().label();
  const Tensor& q = ctx.input(0);
  const Tensor& sc = ctx.input(1);
  const Tensor& zp = ctx.input(2);
  REFORGE_CHECK(q.dtype() == DType::UInt8 && q.rank() == 3, label, ": Q must be uint8 [N, n_blocks, blob], got ",
                q.describe());
  const int64_t N = q.dim(0), n_blocks = q.dim(1), block = q.dim(2) * 2, K = ctx.attr_int("K", 0);
  const quant::QuantShape qs = quant::quant_shape(4, block, K, N, label);
  REFORGE_CHECK(qs.n_blocks == n_blocks, label, ": Q ", q.describe(), " does not hold K = ", K);
  REFORGE_CHECK(sc.dtype() == DType::Float32 && sc.numel() == qs.num_scales(), label, ": scales ", sc.describe(),
                " are not float32[", qs.num_scales(), "]");
  REFORGE_CHECK(zp.dtype() == DType::UInt8 && zp.numel() == qs.num_zero_points(), label, ": zero points ",
                zp.describe(), " are not uint8[", qs.num_zero_points(), "]");
  const bool t = ctx.attr_int("transposed", 0) != 0;
  const auto* pq = static_cast<const uint8_t*>(q.raw());
  const auto* pz = static_cast<const uint8_t*>(zp.raw());
  const float* ps = sc.data<float>();
  std::vector<int64_t> codes(static_cast<size_t>(K * N)), zps(static_cast<size_t>(n_blocks * N));
  Shape ss = t ? Shape{N, n_blocks} : Shape{n_blocks, N};
  Tensor& scales = ctx.allocate_output_uninit(1, DType::Float32, ss);
  float* out_s = scales.mutable_data<float>();
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      const size_t at = static_cast<size_t>(t ? n * n_blocks + b : b * N + n);
      const uint8_t z = pz[n * qs.zp_row + b / 2];
      zps[at] = (b & 1) ? z >> 4 : z & 0x0f;
      out_s[at] = ps[n * n_blocks + b];
    }
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t byte = pq[(n * n_blocks + k / block) * qs.blob + (k % block) / 2];
      codes[static_cast<size_t>(t ? n * K + k : k * N + n)] = (k & 1) ? byte >> 4 : byte & 0x0f;
    }
  }
  ctx.set_output(0, quant::int_tensor(codes, DType::UInt4, t ? Shape{N, K} : Shape{K, N}));
  ctx.set_output(2, quant::int_tensor(zps, DType::UInt4, ss));
}

}  // namespace

void register_qdq_weight_ops(OpRegistry& r) {
  r.add({"reforge", "QdqWeight", 1, INT_MAX, qdq_weight, nullptr});
  r.add({"reforge", "Int4Unpack", 1, INT_MAX, int4_unpack, nullptr});
}

}  // namespace reforge::ops
