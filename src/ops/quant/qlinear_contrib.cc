// ONNX Runtime's com.microsoft quantized operators that its quantize_static writes in QOperator
// format for the ops the ONNX domain has no QLinear form of: QLinearAdd, QLinearMul, QGemm and
// QLinearSoftmax (opset 1 of that domain). Each reference kernel computes what ONNX Runtime's CPU
// kernel computes, operation for operation in float32 (its x86 MLAS kernels), so that a model runs
// on the same integer codes as under ONNX Runtime:
//
//   QLinearAdd(A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale, C_zp?), numpy broadcasting:
//     rA = A_scale / C_scale, rB = B_scale / C_scale, f = C_zp - (rA * A_zp + rB * B_zp);
//     C = saturate(round_half_even(fma(a, rA, fma(b, rB, f)))); where one operand is constant
//     along the innermost run (a scalar, or a size-1 last dimension) its term is folded into f
//     first (f + s * r, two roundings) and the other operand takes the one fma.
//   QLinearMul(same inputs): r = A_scale * B_scale / C_scale;
//     C = saturate(round_half_even((a - A_zp) * (b - B_zp) * r + C_zp)).
//   QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?), attributes transA, transB,
//     alpha: acc = C + sum_k (a - a_zp)(b - b_zp[n]) in int32 (C broadcast to [M, N]);
//     s[n] = alpha * a_scale * b_scale[n] (/ y_scale when given); y = float(acc) * s[n] (float32
//     output, y_zp absent), else saturate(round_half_even(float(acc) * s[n]) + y_zp).
//   QLinearSoftmax(X, X_scale, x_zp?, y_scale, y_zp?), attributes axis and opset (the ONNX
//     Softmax semantics: opset < 13 flattens from axis, 13+ reduces along axis): a table
//     e[i] = float(exp((i - 255 + t) * X_scale)) for i in 0..255, t = max(0, log(FLT_MAX / D) - 5)
//     / X_scale, indexed by the code shifted so that the row's maximum reads e[255]; the row's sum
//     s of the looked-up values (float32, in order) and y = round_half_even(e * floor(1 / y_scale)
//     / s) + y_zp (uint8: capped at 255). The zero point of X cancels out.
//
// Scales and zero points are scalars (b_scale and b_zp of QGemm may be [N]).
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops/quant/quant_common.h"
#include "ops/registry.h"

namespace reforge::ops::quant {
namespace {

bool is_int8(DType t) { return t == DType::Int8 || t == DType::UInt8; }

float scalar_float(const KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  REFORGE_CHECK(t.dtype() == DType::Float32 && t.numel() == 1, ctx.node().label(), ": ", what,
                " must be a float32 scalar, got ", t.describe());
  return t.data<float>()[0];
}

// The scalar zero point at input `i` (0 when absent); it must have type `t`.
int32_t scalar_zero_point(const KernelContext& ctx, size_t i, DType t, const char* what) {
  if (!ctx.has_input(i)) return 0;
  const Tensor& z = ctx.input(i);
  REFORGE_CHECK(z.dtype() == t && z.numel() == 1, ctx.node().label(), ": ", what, " must be a ", dtype_name(t),
                " scalar, got ", z.describe());
  return static_cast<int32_t>(to_int64_values(z)[0]);
}

int32_t saturate(float v, DType t) {
  int64_t lo = 0, hi = 0;
  quant_int_range(t, lo, hi);
  const float r = std::nearbyint(v);  // round half to even (the default rounding mode)
  if (!(r >= static_cast<float>(lo))) return static_cast<int32_t>(lo);
  if (r > static_cast<float>(hi)) return static_cast<int32_t>(hi);
  return static_cast<int32_t>(r);
}

// Numpy broadcasting of a and b: the output shape and, per output element, the flat index into each.
struct Broadcast2 {
  Shape out;
  std::vector<int64_t> ia, ib;
  bool a_inner_const = false, b_inner_const = false;  // constant along the innermost dimension
};

Broadcast2 broadcast2(const Shape& a, const Shape& b, const std::string& where) {
  Broadcast2 r;
  const size_t rank = std::max(a.size(), b.size());
  auto dim = [&](const Shape& s, size_t d) -> int64_t { return d + s.size() >= rank ? s[d + s.size() - rank] : 1; };
  r.out.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t x = dim(a, d), y = dim(b, d);
    REFORGE_CHECK(x == y || x == 1 || y == 1, where, ": shapes ", shape_str(a), " and ", shape_str(b),
                  " do not broadcast");
    r.out[d] = x == 1 ? y : x;
  }
  std::vector<int64_t> sa(rank, 0), sb(rank, 0);
  for (int64_t d = static_cast<int64_t>(rank) - 1, pa = 1, pb = 1; d >= 0; --d) {
    const size_t u = static_cast<size_t>(d);
    sa[u] = dim(a, u) == 1 ? 0 : pa;
    sb[u] = dim(b, u) == 1 ? 0 : pb;
    pa *= dim(a, u);
    pb *= dim(b, u);
  }
  const int64_t n = shape_numel(r.out);
  r.ia.resize(static_cast<size_t>(n));
  r.ib.resize(static_cast<size_t>(n));
  std::vector<int64_t> idx(rank, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t x = 0, y = 0;
    for (size_t d = 0; d < rank; ++d) {
      x += idx[d] * sa[d];
      y += idx[d] * sb[d];
    }
    r.ia[static_cast<size_t>(i)] = x;
    r.ib[static_cast<size_t>(i)] = y;
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < r.out[d]) break;
      idx[d] = 0;
    }
  }
  const bool inner = rank > 0 && r.out.back() > 1;
  r.a_inner_const = shape_numel(a) == 1 || (inner && sa.back() == 0);
  r.b_inner_const = shape_numel(b) == 1 || (inner && sb.back() == 0);
  return r;
}

struct BinaryQ {
  std::vector<int64_t> a, b;
  DType t = DType::Undefined;
  float sa = 0, sb = 0, sc = 0;
  int32_t za = 0, zb = 0, zc = 0;
  Broadcast2 bc;
};

BinaryQ binary_inputs(const KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(3);
  REFORGE_CHECK(is_int8(A.dtype()) && B.dtype() == A.dtype(), label, ": A and B must be both int8 or both uint8, got ",
                A.describe(), " and ", B.describe());
  BinaryQ q;
  q.t = A.dtype();
  q.sa = scalar_float(ctx, 1, "A_scale");
  q.za = scalar_zero_point(ctx, 2, q.t, "A_zero_point");
  q.sb = scalar_float(ctx, 4, "B_scale");
  q.zb = scalar_zero_point(ctx, 5, q.t, "B_zero_point");
  q.sc = scalar_float(ctx, 6, "C_scale");
  q.zc = scalar_zero_point(ctx, 7, q.t, "C_zero_point");
  q.a = to_int64_values(A);
  q.b = to_int64_values(B);
  q.bc = broadcast2(A.shape(), B.shape(), label);
  return q;
}

void qlinear_add_kernel(KernelContext& ctx) {
  const BinaryQ q = binary_inputs(ctx);
  const float ra = q.sa / q.sc, rb = q.sb / q.sc;
  const float za = static_cast<float>(q.za) * ra, zb = static_cast<float>(q.zb) * rb;
  const float fixed = static_cast<float>(q.zc) - (za + zb);
  std::vector<int64_t> out(q.bc.ia.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const auto a = static_cast<float>(q.a[static_cast<size_t>(q.bc.ia[i])]);
    const auto b = static_cast<float>(q.b[static_cast<size_t>(q.bc.ib[i])]);
    float v;
    if (q.bc.a_inner_const && !q.bc.b_inner_const)
      v = std::fma(b, rb, fixed + a * ra);
    else if (q.bc.b_inner_const)
      v = std::fma(a, ra, fixed + b * rb);
    else
      v = std::fma(a, ra, std::fma(b, rb, fixed));
    out[i] = saturate(v, q.t);
  }
  ctx.set_output(0, int_tensor(out, q.t, q.bc.out));
}

void qlinear_mul_kernel(KernelContext& ctx) {
  const BinaryQ q = binary_inputs(ctx);
  const float r = q.sa * q.sb / q.sc;
  std::vector<int64_t> out(q.bc.ia.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t p = (q.a[static_cast<size_t>(q.bc.ia[i])] - q.za) * (q.b[static_cast<size_t>(q.bc.ib[i])] - q.zb);
    const float v = static_cast<float>(p) * r + static_cast<float>(q.zc);
    out[i] = saturate(v, q.t);
  }
  ctx.set_output(0, int_tensor(out, q.t, q.bc.out));
}

void qgemm_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(3);
  REFORGE_CHECK(is_int8(A.dtype()) && is_int8(B.dtype()) && A.rank() == 2 && B.rank() == 2, label,
                ": A and B must be int8/uint8 matrices, got ", A.describe(), " and ", B.describe());
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  const float alpha = node.attr_float("alpha", 1.0f);
  const int64_t M = A.dim(ta ? 1 : 0), K = A.dim(ta ? 0 : 1), N = B.dim(tb ? 0 : 1);
  REFORGE_CHECK(B.dim(tb ? 1 : 0) == K, label, ": A ", A.describe(), " and B ", B.describe(),
                " do not multiply (transA ", ta, ", transB ", tb, ")");
  const float sa = scalar_float(ctx, 1, "a_scale");
  const int32_t za = scalar_zero_point(ctx, 2, A.dtype(), "a_zero_point");
  const Tensor& bs = ctx.input(4);
  REFORGE_CHECK(bs.dtype() == DType::Float32 && (bs.numel() == 1 || (bs.rank() == 1 && bs.numel() == N)), label,
                ": b_scale must be a float32 scalar or [", N, "], got ", bs.describe());
  std::vector<int64_t> zb(static_cast<size_t>(N), 0);
  if (ctx.has_input(5)) {
    const Tensor& z = ctx.input(5);
    REFORGE_CHECK(z.dtype() == B.dtype() && z.numel() == bs.numel(), label, ": b_zero_point ", z.describe(),
                  " must have B's type and b_scale's shape");
    const std::vector<int64_t> v = to_int64_values(z);
    for (int64_t n = 0; n < N; ++n) zb[static_cast<size_t>(n)] = v[z.numel() == 1 ? 0 : static_cast<size_t>(n)];
  }
  const bool requant = ctx.has_input(8);
  DType out_t = DType::Float32;
  int32_t zy = 0;
  if (requant) {
    out_t = ctx.input(8).dtype();
    REFORGE_CHECK(is_int8(out_t), label, ": y_zero_point must be int8/uint8, got ", ctx.input(8).describe());
    zy = scalar_zero_point(ctx, 8, out_t, "y_zero_point");
  }
  std::vector<float> scale(static_cast<size_t>(N));
  const float* bsp = bs.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    float s = alpha * sa * bsp[bs.numel() == 1 ? 0 : n];
    if (ctx.has_input(7)) s /= scalar_float(ctx, 7, "y_scale");
    scale[static_cast<size_t>(n)] = s;
  }
  const std::vector<int64_t> a = to_int64_values(A), b = to_int64_values(B);
  std::vector<int64_t> acc(static_cast<size_t>(M * N), 0);
  if (ctx.has_input(6)) {
    const Tensor& C = ctx.input(6);
    REFORGE_CHECK(C.dtype() == DType::Int32 && C.rank() <= 2, label, ": C must be int32 of rank <= 2, got ",
                  C.describe());
    const Broadcast2 bc = broadcast2(C.shape(), Shape{M, N}, label + ": C");
    REFORGE_CHECK(bc.out == (Shape{M, N}), label, ": C ", C.describe(), " does not broadcast to [", M, ",", N, "]");
    const std::vector<int64_t> c = to_int64_values(C);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = c[static_cast<size_t>(bc.ia[i])];
  }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t av = a[static_cast<size_t>(ta ? k * M + m : m * K + k)] - za;
      for (int64_t n = 0; n < N; ++n)
        acc[static_cast<size_t>(m * N + n)] +=
            av * (b[static_cast<size_t>(tb ? n * K + k : k * N + n)] - zb[static_cast<size_t>(n)]);
    }
  if (!requant) {
    Tensor& y = ctx.allocate_output_uninit(0, DType::Float32, {M, N});
    float* py = y.mutable_data<float>();
    for (size_t i = 0; i < acc.size(); ++i)
      py[i] = static_cast<float>(static_cast<int32_t>(acc[i])) * scale[i % static_cast<size_t>(N)];
    return;
  }
  int64_t lo = 0, hi = 0;
  quant_int_range(out_t, lo, hi);
  std::vector<int64_t> out(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) {
    const float v = static_cast<float>(static_cast<int32_t>(acc[i])) * scale[i % static_cast<size_t>(N)];
    const float r = std::nearbyint(v) + static_cast<float>(zy);
    out[i] = static_cast<int64_t>(std::fmin(std::fmax(r, static_cast<float>(lo)), static_cast<float>(hi)));
  }
  ctx.set_output(0, int_tensor(out, out_t, {M, N}));
}

void qlinear_softmax_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Tensor& X = ctx.input(0);
  REFORGE_CHECK(is_int8(X.dtype()), label, ": X must be int8/uint8, got ", X.describe());
  REFORGE_CHECK(node.has_attr("opset"), label, ": needs the attribute opset (the ONNX Softmax semantics it follows)");
  const int64_t opset = node.attr_int("opset", 13);
  const int64_t rank = X.rank();
  int64_t axis = node.attr_int("axis", opset < 13 ? 1 : -1);
  REFORGE_CHECK(rank > 0 && axis >= -rank && axis < rank, label, ": axis ", axis, " is out of range for ",
                X.describe());
  if (axis < 0) axis += rank;
  const bool is_signed = X.dtype() == DType::Int8;
  const float xs = scalar_float(ctx, 1, "X_scale");
  const float ys = scalar_float(ctx, 3, "y_scale");
  const int32_t zy = scalar_zero_point(ctx, 4, X.dtype(), "y_zero_point");
  // Rows: D elements `stride` apart; opset < 13 flattens [.., axis, ..] into rows of the trailing size.
  int64_t D = 1, stride = 1, outer = 1;
  if (opset < 13) {
    for (int64_t d = axis; d < rank; ++d) D *= X.dim(d);
    for (int64_t d = 0; d < axis; ++d) outer *= X.dim(d);
  } else {
    D = X.dim(axis);
    for (int64_t d = axis + 1; d < rank; ++d) stride *= X.dim(d);
    for (int64_t d = 0; d < axis; ++d) outer *= X.dim(d);
  }
  Tensor& Y = ctx.allocate_output_uninit(0, X.dtype(), X.shape());
  if (X.numel() == 0) return;
  double shift = std::log(static_cast<double>(std::numeric_limits<float>::max() / static_cast<float>(D)));
  shift = std::max(0.0, shift - 5.0) / static_cast<double>(xs);
  float table[256];
  for (int32_t i = 0; i < 256; ++i) {
    const double e = std::exp((static_cast<double>(i) - 255 + shift) * static_cast<double>(xs));
    table[static_cast<uint8_t>(is_signed ? i - 128 : i)] = static_cast<float>(e);
  }
  const float yscale = std::floor(1.0f / ys);
  const auto* x = static_cast<const uint8_t*>(X.raw());
  auto* y = static_cast<uint8_t*>(Y.mutable_raw());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t s = 0; s < stride; ++s) {
      const int64_t base = o * D * stride + s;
      auto code = [&](int64_t j) -> int32_t {
        const uint8_t v = x[base + j * stride];
        return is_signed ? static_cast<int32_t>(static_cast<int8_t>(v)) : static_cast<int32_t>(v);
      };
      int32_t mx = code(0);
      for (int64_t j = 1; j < D; ++j) mx = std::max(mx, code(j));
      // The table entry of each code: the maximum reads e[255] (uint8), the code 127 (int8).
      auto entry = [&](int32_t c) {
        return is_signed ? table[static_cast<uint8_t>(127 - mx + c)] : table[static_cast<size_t>(255 - mx + c)];
      };
      float sum = 0.0f;
      for (int64_t j = 0; j < D; ++j) sum += entry(code(j));
      REFORGE_CHECK(sum != 0.0f, label, ": the exponentials of a row sum to 0 (X_scale ", xs, ")");
      for (int64_t j = 0; j < D; ++j) {
        const float q = std::nearbyint(entry(code(j)) * yscale / sum);
        uint8_t out;
        if (is_signed) {
          const int32_t v = static_cast<int32_t>(q) + zy;
          out = static_cast<uint8_t>(static_cast<int8_t>(v > 255 ? 255 : v));
        } else {
          const auto v = static_cast<uint32_t>(q) + static_cast<uint32_t>(zy);
          out = static_cast<uint8_t>(v > 255 ? 255 : v);
        }
        y[base + j * stride] = out;
      }
    }
}

}  // namespace

void register_qlinear_contrib_ops(OpRegistry& r) {
  using R = InputRole;
  // Initializers these ops read were written by the quantizer: every input but the activations
  // (the codes and scales of a weight, its zero points, QGemm's int32 bias, and the activations'
  // own scales and zero points, which calibration chose).
  auto add = [&](const char* op, KernelFn k, std::vector<InputRole> roles, std::vector<size_t> quantized,
                 CheckFn check = nullptr) {
    OpDef d{"com.microsoft", op, 1, INT_MAX, std::move(k), std::move(check), nullptr, std::move(roles)};
    d.quantized_inputs = std::move(quantized);
    r.add(std::move(d));
  };
  add("QLinearAdd", qlinear_add_kernel, {}, {0, 1, 2, 3, 4, 5, 6, 7});
  add("QLinearMul", qlinear_mul_kernel, {}, {0, 1, 2, 3, 4, 5, 6, 7});
  add("QGemm", qgemm_kernel, {R::kData, R::kData, R::kData, R::kWeight, R::kData, R::kData, R::kWeight},
      {0, 1, 2, 3, 4, 5, 6, 7, 8});
  add("QLinearSoftmax", qlinear_softmax_kernel, {}, {0, 1, 2, 3, 4}, [](const ir::Node& n) -> std::string {
    return n.has_attr("opset") ? "" : "needs the attribute opset (the ONNX Softmax semantics it follows)";
  });
}

}  // namespace reforge::ops::quant
