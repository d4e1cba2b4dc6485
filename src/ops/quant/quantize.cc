// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear.
//
// QuantizeLinear: y = saturate(round(x / scale) + zero_point) for integer targets (round half to
// even, clamped to the type's range), y = cast(x / scale + zero_point) for float8/float4 targets
// (by core/narrow.h, honouring `saturate`; the zero point of a float target is 0 by the spec).
// The quotient is computed the way the ONNX reference computes it: in the `precision` type when
// the attribute is set (opset 23+), else in float64 when x or the scale is float64 or x is an
// integer, in float16/bfloat16 when both x and the scale are that type (a float32 division
// rounded to it), and in float32 otherwise. The target type is the zero point's, else
// `output_dtype` (opset 21+), else uint8.
//
// DequantizeLinear: y = (x - zero_point) * scale, computed in float32 (float64 when the scale is
// float64 or x is int32) and rounded once to the output type: `output_dtype` (opset 23+) or
// the scale's type. Float8/float4 inputs have no zero point other than 0.
//
// Scales and zero points are per tensor, per axis (`axis`, opset 13+) or blocked (`block_size`,
// opset 21+), see quant_common.h.
//
// DynamicQuantizeLinear: uint8 quantization with scale (max(0, max x) - min(0, min x)) / 255 and
// zero point round(clamp(-min / scale, 0, 255)), all in float32 like the ONNX reference.
#include <cmath>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "ops/quant/quant_common.h"
#include "ops/registry.h"

namespace reforge::ops::quant {
namespace {

// Rounds a double to the value type `t` holds (float32, float16, bfloat16 or float64).
double round_to(double v, DType t) {
  switch (t) {
    case DType::Float32:
      return static_cast<float>(v);
    case DType::Float16:
      return static_cast<float>(float16(static_cast<float>(v)));
    case DType::BFloat16:
      return static_cast<float>(bfloat16(static_cast<float>(v)));
    default:
      return v;
  }
}

// The quantized type a QuantizeLinear node writes (see the header comment).
DType quantize_target(const ir::Node& node, const Tensor* zero_point) {
  const int64_t attr = node.attr_int("output_dtype", 0);
  const DType from_attr = attr == 0 ? DType::Undefined : dtype_from_onnx(static_cast<int32_t>(attr));
  if (zero_point) {
    REFORGE_CHECK(from_attr == DType::Undefined || from_attr == zero_point->dtype(), node.label(), ": output_dtype ",
                  dtype_name(from_attr), " differs from the zero point's type ", dtype_name(zero_point->dtype()));
    return zero_point->dtype();
  }
  REFORGE_CHECK(attr == 0 || from_attr != DType::Undefined, node.label(), ": unknown output_dtype ", attr);
  return from_attr == DType::Undefined ? DType::UInt8 : from_attr;
}

std::string quantize_check(const ir::Node& node) {
  const int64_t attr = node.attr_int("output_dtype", 0);
  if (attr != 0) {
    const DType t = dtype_from_onnx(static_cast<int32_t>(attr));
    int64_t lo = 0, hi = 0;
    if (t == DType::Int32 || (!quant_int_range(t, lo, hi) && !is_quant_float(t)))
      return str_cat("output_dtype ", dtype_name(t), " is not a quantized type");
  }
  const int64_t precision = node.attr_int("precision", 0);
  if (precision != 0) {
    const DType p = dtype_from_onnx(static_cast<int32_t>(precision));
    if (!is_float(p)) return str_cat("precision ", dtype_name(p), " is not a float type");
  }
  return "";
}

void quantize_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const DType to = quantize_target(node, zp);
  int64_t lo = 0, hi = 0;
  const bool int_target = to != DType::Int32 && quant_int_range(to, lo, hi);
  REFORGE_CHECK(int_target || is_quant_float(to), label, ": cannot quantize to ", dtype_name(to));
  REFORGE_CHECK(is_float(scale.dtype()), label, ": the scale must be a float tensor, got ", scale.describe());
  REFORGE_CHECK(is_float(x.dtype()) || x.dtype() == DType::Int32, label, ": x must be float or int32, got ",
                x.describe());
  const int64_t axis = ctx.attr_int("axis", 1), block = ctx.attr_int("block_size", 0);
  const ScaleMap map(x.shape(), scale.shape(), axis, block, label + ": y_scale");
  if (zp)
    REFORGE_CHECK(zp->shape() == scale.shape() || (zp->numel() == 1 && scale.numel() == 1), label, ": zero point ",
                  zp->describe(), " must have the scale's shape ", shape_str(scale.shape()));

  DType precision = DType::Float32;
  if (const int64_t p = ctx.attr_int("precision", 0); p != 0) {
    precision = dtype_from_onnx(static_cast<int32_t>(p));
    REFORGE_CHECK(is_float(precision), label, ": precision ", dtype_name(precision), " is not a float type");
  } else if (x.dtype() == DType::Float64 || scale.dtype() == DType::Float64 || !is_float(x.dtype())) {
    precision = DType::Float64;
  } else if (x.dtype() == scale.dtype()) {
    precision = x.dtype();
  }

  const std::vector<double> xv = to_double_vector(x), sv = to_double_vector(scale);
  const std::vector<double> zv = zp ? to_double_vector(*zp) : std::vector<double>();
  const int64_t n = x.numel();
  if (int_target) {
    std::vector<int64_t> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = map(i);
      const double q = round_to(round_to(xv[i], precision) / round_to(sv[s], precision), precision);
      double r = std::nearbyint(q) + (zp ? zv[s] : 0.0);  // round half to even (default mode)
      if (std::isnan(r)) r = 0;
      out[static_cast<size_t>(i)] = static_cast<int64_t>(std::fmin(std::fmax(r, double(lo)), double(hi)));
    }
    ctx.set_output(0, int_tensor(out, to, x.shape()));
    return;
  }
  Tensor wide = Tensor::empty(DType::Float64, x.shape());
  double* w = wide.mutable_data<double>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = map(i);
    w[i] = round_to(round_to(xv[i], precision) / round_to(sv[s], precision), precision) + (zp ? zv[s] : 0.0);
  }
  NarrowCastOptions o;
  o.saturate = ctx.attr_int("saturate", 1) != 0;
  ctx.set_output(0, cast_tensor(wide, to, o));
}

void dequantize_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  int64_t lo = 0, hi = 0;
  REFORGE_CHECK(quant_int_range(x.dtype(), lo, hi) || is_quant_float(x.dtype()), label, ": cannot dequantize ",
                x.describe());
  REFORGE_CHECK(is_float(scale.dtype()), label, ": the scale must be a float tensor, got ", scale.describe());
  const int64_t out_attr = ctx.attr_int("output_dtype", 0);
  const DType to = out_attr == 0 ? scale.dtype() : dtype_from_onnx(static_cast<int32_t>(out_attr));
  REFORGE_CHECK(is_float(to), label, ": output_dtype ", dtype_name(to), " is not a float type");
  const int64_t axis = ctx.attr_int("axis", 1), block = ctx.attr_int("block_size", 0);
  const ScaleMap map(x.shape(), scale.shape(), axis, block, label + ": x_scale");
  std::vector<double> zv;
  if (zp) {
    REFORGE_CHECK(zp->dtype() == x.dtype(), label, ": zero point ", zp->describe(), " must have x's type ",
                  dtype_name(x.dtype()));
    REFORGE_CHECK(zp->shape() == scale.shape() || (zp->numel() == 1 && scale.numel() == 1), label, ": zero point ",
                  zp->describe(), " must have the scale's shape ", shape_str(scale.shape()));
    zv = to_double_vector(*zp);
    if (is_quant_float(x.dtype()))
      for (double z : zv) REFORGE_CHECK(z == 0, label, ": the zero point of ", dtype_name(x.dtype()), " must be 0");
  }
  const bool wide = scale.dtype() == DType::Float64 || x.dtype() == DType::Int32;
  const std::vector<double> xv = to_double_vector(x), sv = to_double_vector(scale);
  Tensor y = Tensor::empty(DType::Float64, x.shape());
  double* yp = y.mutable_data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t s = map(i);
    const double d = xv[i] - (zp ? zv[s] : 0.0);  // exact: integers of at most 32 bits
    yp[i] = wide ? d * sv[s] : static_cast<double>(static_cast<float>(d) * static_cast<float>(sv[s]));
  }
  ctx.set_output(0, cast_tensor(y, to));
}

void dynamic_quantize_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(x.dtype() == DType::Float32, ctx.node().label(), ": x must be float32, got ", x.describe());
  const float* p = x.data<float>();
  float mx = 0, mn = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    mx = std::fmax(mx, p[i]);
    mn = std::fmin(mn, p[i]);
  }
  const float scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
  const float zp0 = 0.0f - mn / scale;
  const float zp = std::nearbyint(std::fmin(255.0f, std::fmax(0.0f, zp0)));
  Tensor& y = ctx.allocate_output_uninit(0, DType::UInt8, x.shape());
  uint8_t* yp = y.mutable_data<uint8_t>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float q = std::nearbyint(p[i] / scale) + zp;
    yp[i] = static_cast<uint8_t>(std::fmin(255.0f, std::fmax(0.0f, q)));
  }
  if (ctx.output_wanted(1)) ctx.set_output(1, Tensor::scalar<float>(DType::Float32, scale));
  if (ctx.output_wanted(2)) ctx.set_output(2, Tensor::scalar<uint8_t>(DType::UInt8, static_cast<uint8_t>(zp)));
}

}  // namespace

void register_quantize_ops(OpRegistry& r) {
  // QuantizeLinear's x may be a float weight (quantized at run time, bindable); its scale and
  // zero point are the quantizer's. Every input of DequantizeLinear is.
  OpDef q{"", "QuantizeLinear", 10, INT_MAX, quantize_kernel, quantize_check};
  q.quantized_inputs = {1, 2};
  r.add(std::move(q));
  OpDef dq{"", "DequantizeLinear", 10, INT_MAX, dequantize_kernel, nullptr};
  dq.quantized_inputs = {0, 1, 2};
  r.add(std::move(dq));
  r.add({"", "DynamicQuantizeLinear", 11, INT_MAX, dynamic_quantize_kernel, nullptr});
}

}  // namespace reforge::ops::quant
