// The integer matrix products and convolutions of quantized ONNX models: MatMulInteger,
// QLinearMatMul, ConvInteger and QLinearConv.
//
// Inputs are 8-bit (int8/uint8); zero points are subtracted first and the products accumulate
// exactly in int64 (an int32 in ONNX: the spec's accumulator, which these sizes cannot
// overflow). MatMulInteger and ConvInteger return that accumulator as int32. The QLinear ops
// requantize it: y = saturate(round(acc * (scale_a * scale_b / scale_y)) + zero_point_y), the
// multiplier computed in the scales' own type (float32, or float16 rounded at each step) and the
// product in double, round half to even, as the ONNX reference does.
//
// Zero points: per tensor (one element), or per row of A / per column of B for the matrix
// products (A's [M] or [..., M, 1], B's [N] or [..., 1, N]; QLinearMatMul's b_scale too),
// per output channel ([M]) for W of a convolution. QLinearConv's w_scale may be per output channel too.
#include <cmath>
#include <string>
#include <vector>

#include "ops/nn/conv.h"
#include "ops/quant/quant_common.h"
#include "ops/registry.h"

namespace reforge::ops::quant {
namespace {

bool is_int8(DType t) { return t == DType::Int8 || t == DType::UInt8; }

// The values of `zp` (or zeros) expanded to every element of a tensor of shape `shape` by numpy
// broadcasting; a 1-D zero point of `shape[row_axis]` elements (row_axis >= 0) applies along
// that axis (per row of A, per output channel of W).
std::vector<int64_t> expand_zero_point(const Tensor* zp, const Shape& shape, int64_t row_axis,
                                       const std::string& where) {
  const int64_t n = shape_numel(shape);
  if (!zp) return std::vector<int64_t>(static_cast<size_t>(n), 0);
  const std::vector<int64_t> v = to_int64_values(*zp);
  if (zp->numel() == 1) return std::vector<int64_t>(static_cast<size_t>(n), v[0]);
  const int64_t rank = static_cast<int64_t>(shape.size());
  Shape zs = zp->shape();
  if (zs.size() == 1 && row_axis >= 0 && row_axis < rank && zs[0] == shape[static_cast<size_t>(row_axis)]) {
    zs.assign(static_cast<size_t>(rank - row_axis), 1);
    zs[0] = shape[static_cast<size_t>(row_axis)];
  }
  REFORGE_CHECK(zs.size() <= shape.size(), where, " ", zp->describe(), " does not broadcast to ", shape_str(shape));
  // Right-aligned numpy broadcasting of zs against shape.
  const size_t off = shape.size() - zs.size();
  std::vector<int64_t> zstride(shape.size(), 0);
  int64_t st = 1;
  for (size_t d = shape.size(); d-- > off;) {
    const int64_t zd = zs[d - off];
    REFORGE_CHECK(zd == 1 || zd == shape[d], where, " ", zp->describe(), " does not broadcast to ", shape_str(shape));
    zstride[d] = zd == 1 ? 0 : st;
    st *= zd;
  }
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t zi = 0;
    for (size_t d = 0; d < shape.size(); ++d) zi += idx[d] * zstride[d];
    out[static_cast<size_t>(i)] = v[static_cast<size_t>(zi)];
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// numpy matmul of two int64 arrays (1-D operands promoted, batch dimensions broadcast).
std::vector<int64_t> int_matmul(const std::vector<int64_t>& a, Shape as, const std::vector<int64_t>& b, Shape bs,
                                Shape& out_shape, const std::string& where) {
  REFORGE_CHECK(!as.empty() && !bs.empty(), where, ": operands must have rank >= 1");
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  REFORGE_CHECK(bs[bs.size() - 2] == K, where, ": A has ", K, " columns but B has ", bs[bs.size() - 2], " rows");
  const size_t batch_rank = std::max(as.size(), bs.size()) - 2;
  Shape batch(batch_rank, 1);
  auto bdim = [&](const Shape& s, size_t d) -> int64_t {  // d indexes `batch`, right-aligned
    const size_t sb = s.size() - 2;
    return d + sb >= batch_rank ? s[d + sb - batch_rank] : 1;
  };
  for (size_t d = 0; d < batch_rank; ++d) {
    const int64_t x = bdim(as, d), y = bdim(bs, d);
    REFORGE_CHECK(x == y || x == 1 || y == 1, where, ": batch dimensions ", shape_str(as), " and ", shape_str(bs),
                  " do not broadcast");
    batch[d] = std::max(x, y);
  }
  const int64_t nb = shape_numel(batch);
  std::vector<int64_t> c(static_cast<size_t>(nb * M * N), 0);
  std::vector<int64_t> idx(batch_rank, 0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t ao = 0, bo = 0, astep = 1, bstep = 1;
    for (size_t d = batch_rank; d-- > 0;) {
      const int64_t ad = bdim(as, d), bd = bdim(bs, d);
      ao += (ad == 1 ? 0 : idx[d]) * astep;
      bo += (bd == 1 ? 0 : idx[d]) * bstep;
      astep *= ad;
      bstep *= bd;
    }
    const int64_t* ap = a.data() + ao * M * K;
    const int64_t* bp = b.data() + bo * K * N;
    int64_t* cp = c.data() + bi * M * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t av = ap[m * K + k];
        for (int64_t n = 0; n < N; ++n) cp[m * N + n] += av * bp[k * N + n];
      }
    for (size_t d = batch_rank; d-- > 0;) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  out_shape = batch;
  if (!a1) out_shape.push_back(M);
  if (!b1) out_shape.push_back(N);
  return c;
}

std::vector<int64_t> minus(const std::vector<int64_t>& v, const std::vector<int64_t>& z) {
  std::vector<int64_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = v[i] - z[i];
  return r;
}

// scale_a * scale_b / scale_y in the scales' type, as a double.
double requant_multiplier(const Tensor& sa, double a, double b, double y) {
  if (sa.dtype() == DType::Float64) return a * b / y;
  if (sa.dtype() == DType::Float32) return static_cast<float>(static_cast<float>(a * b) / static_cast<float>(y));
  auto r = [&](double v) -> double {
    return sa.dtype() == DType::Float16 ? static_cast<float>(float16(static_cast<float>(v)))
                                        : static_cast<float>(bfloat16(static_cast<float>(v)));
  };
  return r(static_cast<float>(r(a * b)) / static_cast<float>(y));
}

double scalar_scale(const Tensor& s, const std::string& what, const std::string& label) {
  REFORGE_CHECK(is_float(s.dtype()) && s.numel() == 1, label, ": ", what, " must be a float scalar, got ",
                s.describe());
  return s.as_double(0);
}

// round half to even, then clamped to the range of `to` (an 8-bit type).
Tensor requantize(const std::vector<double>& d, DType to, const Shape& shape) {
  int64_t lo = 0, hi = 0;
  quant_int_range(to, lo, hi);
  std::vector<int64_t> q(d.size());
  for (size_t i = 0; i < d.size(); ++i)
    q[i] = static_cast<int64_t>(std::fmin(std::fmax(std::nearbyint(d[i]), double(lo)), double(hi)));
  return int_tensor(q, to, shape);
}

void matmul_integer_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  REFORGE_CHECK(is_int8(A.dtype()) && is_int8(B.dtype()), label, ": A and B must be int8/uint8, got ", A.describe(),
                " and ", B.describe());
  const Tensor* az = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const Tensor* bz = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  const auto a = minus(to_int64_values(A), expand_zero_point(az, A.shape(), A.rank() - 2, label + ": a_zero_point"));
  const auto b = minus(to_int64_values(B), expand_zero_point(bz, B.shape(), -1, label + ": b_zero_point"));
  Shape out;
  const auto c = int_matmul(a, A.shape(), b, B.shape(), out, label);
  ctx.set_output(0, int_tensor(c, DType::Int32, out));
}

void qlinear_matmul_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(3);
  REFORGE_CHECK(is_int8(A.dtype()) && is_int8(B.dtype()), label, ": a and b must be int8/uint8, got ", A.describe(),
                " and ", B.describe());
  const Tensor& yz = ctx.input(7);
  REFORGE_CHECK(is_int8(yz.dtype()) && yz.numel() == 1, label, ": y_zero_point must be an int8/uint8 scalar, got ",
                yz.describe());
  const double sa = scalar_scale(ctx.input(1), "a_scale", label), sy = scalar_scale(ctx.input(6), "y_scale", label);
  // b_scale: per tensor, or per column of B (1-D with B's last dimension).
  const Tensor& bs = ctx.input(4);
  const int64_t N = B.rank() >= 2 ? B.shape().back() : 1;
  REFORGE_CHECK(is_float(bs.dtype()) && (bs.numel() == 1 || (bs.rank() == 1 && B.rank() >= 2 && bs.numel() == N)),
                label, ": b_scale must be a float scalar or 1-D with B's ", N, " columns, got ", bs.describe());
  const std::vector<double> sb = to_double_vector(bs);
  const auto a = minus(to_int64_values(A), expand_zero_point(&ctx.input(2), A.shape(), A.rank() - 2, label));
  const auto b = minus(to_int64_values(B), expand_zero_point(&ctx.input(5), B.shape(), -1, label));
  Shape out;
  const auto c = int_matmul(a, A.shape(), b, B.shape(), out, label);
  std::vector<double> m(sb.size());
  for (size_t n = 0; n < sb.size(); ++n) m[n] = requant_multiplier(ctx.input(1), sa, sb[n], sy);
  const double z = yz.as_double(0);
  std::vector<double> d(c.size());
  for (size_t i = 0; i < c.size(); ++i)
    d[i] = static_cast<double>(c[i]) * m[m.size() == 1 ? 0 : i % static_cast<size_t>(N)] + z;
  ctx.set_output(0, requantize(d, yz.dtype(), out));
}

// The integer convolution of x - x_zero_point with w - w_zero_point (plus an int32 bias).
std::vector<int64_t> int_conv(const KernelContext& ctx, const Tensor& X, const Tensor* xz, const Tensor& W,
                              const Tensor* wz, const Tensor* bias, nn::ConvSetup& s) {
  const std::string label = ctx.node().label();
  REFORGE_CHECK(is_int8(X.dtype()) && is_int8(W.dtype()), label, ": x and w must be int8/uint8, got ", X.describe(),
                " and ", W.describe());
  s = nn::conv_setup(ctx, X, W, nullptr, false);
  REFORGE_CHECK(!xz || xz->numel() == 1, label, ": x_zero_point must be a scalar, got ", xz->describe());
  const auto x = minus(to_int64_values(X), expand_zero_point(xz, X.shape(), -1, label + ": x_zero_point"));
  const auto w = minus(to_int64_values(W), expand_zero_point(wz, W.shape(), 0, label + ": w_zero_point"));
  std::vector<int64_t> b;
  if (bias) {
    REFORGE_CHECK(bias->dtype() == DType::Int32 && bias->rank() == 1 && bias->numel() == s.M, label, ": bias ",
                  bias->describe(), " must be int32[", s.M, "]");
    b = to_int64_values(*bias);
  }
  std::vector<int64_t> y(static_cast<size_t>(shape_numel(s.out_shape)));
  if (!y.empty())
    nn::conv_ref<int64_t>(x.data(), w.data(), bias ? b.data() : nullptr, y.data(), s.N, s.C, s.M, s.group, s.g);
  return y;
}

void conv_integer_kernel(KernelContext& ctx) {
  const Tensor* xz = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const Tensor* wz = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  nn::ConvSetup s;
  const auto y = int_conv(ctx, ctx.input(0), xz, ctx.input(1), wz, nullptr, s);
  ctx.set_output(0, int_tensor(y, DType::Int32, s.out_shape));
}

void qlinear_conv_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& yz = ctx.input(7);
  REFORGE_CHECK(is_int8(yz.dtype()) && yz.numel() == 1, label, ": y_zero_point must be an int8/uint8 scalar, got ",
                yz.describe());
  nn::ConvSetup s;
  const auto acc = int_conv(ctx, ctx.input(0), &ctx.input(2), ctx.input(3), &ctx.input(5),
                            ctx.has_input(8) ? &ctx.input(8) : nullptr, s);
  const Tensor& xs = ctx.input(1);
  const Tensor& ws = ctx.input(4);
  const double sx = scalar_scale(xs, "x_scale", label), sy = scalar_scale(ctx.input(6), "y_scale", label);
  REFORGE_CHECK(is_float(ws.dtype()) && (ws.numel() == 1 || (ws.rank() == 1 && ws.numel() == s.M)), label,
                ": w_scale must be a scalar or [", s.M, "], got ", ws.describe());
  const std::vector<double> wsv = to_double_vector(ws);
  std::vector<double> m(static_cast<size_t>(s.M));
  for (int64_t c = 0; c < s.M; ++c)
    m[static_cast<size_t>(c)] = requant_multiplier(xs, sx, wsv[ws.numel() == 1 ? 0 : c], sy);
  const int64_t plane = shape_numel(s.out_shape) / std::max<int64_t>(1, s.N * s.M);
  const double z = yz.as_double(0);
  std::vector<double> d(acc.size());
  for (size_t i = 0; i < acc.size(); ++i)
    d[i] = static_cast<double>(acc[i]) * m[static_cast<size_t>((static_cast<int64_t>(i) / plane) % s.M)] + z;
  ctx.set_output(0, requantize(d, yz.dtype(), s.out_shape));
}

}  // namespace

void register_qlinear_ops(OpRegistry& r) {
  using R = InputRole;
  // Every input that is an initializer was written by the quantizer (codes, scales, zero points,
  // QLinearConv's int32 bias): quantized_inputs lists them all.
  auto add = [&](const char* op, KernelFn k, std::vector<InputRole> roles, size_t ninputs) {
    OpDef d{"", op, 10, INT_MAX, std::move(k), nullptr, nullptr, std::move(roles)};
    for (size_t i = 0; i < ninputs; ++i) d.quantized_inputs.push_back(i);
    r.add(std::move(d));
  };
  add("MatMulInteger", matmul_integer_kernel, {R::kData, R::kWeight}, 4);
  add("QLinearMatMul", qlinear_matmul_kernel, {R::kData, R::kData, R::kData, R::kWeight}, 8);
  add("ConvInteger", conv_integer_kernel, {R::kData, R::kWeight}, 4);
  add("QLinearConv", qlinear_conv_kernel,
      {R::kData, R::kData, R::kData, R::kWeight, R::kData, R::kData, R::kData, R::kData, R::kWeight}, 9);
}

}  // namespace reforge::ops::quant
