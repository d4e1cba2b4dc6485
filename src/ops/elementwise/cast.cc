// Cast, CastLike and BitCast.
//
// The conversion itself is cast_tensor() (core/tensor.cc), shared with the rest of the engine:
// float -> int truncates toward zero (NaN -> 0, out of range saturates), float -> bool is
// x != 0, bool -> number is 0/1, integer narrowing wraps, and double -> float16/bfloat16 rounds
// once. Float8, float4 and the 4-/2-bit integers convert by core/narrow.h, where `saturate`
// (opset 19+, float8 targets) and `round_mode` (opset 24+, float8e8m0 targets) take effect.
// String and complex types have no kernels: the checker reports them so `reforge check` names
// the node up front.
#include <cstring>

#include "core/dispatch.h"
#include "core/narrow.h"
#include "ops/elementwise/cast_setup.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

// The `saturate` and `round_mode` attributes (absent before opsets 19 and 24: saturating, "up").
NarrowCastOptions narrow_options(const ir::Node& node, std::string& why) {
  NarrowCastOptions o;
  o.saturate = node.attr_int("saturate", 1) != 0;
  const std::string mode = node.attr_string("round_mode", "up");
  if (!parse_e8m0_rounding(mode, o.e8m0_rounding))
    why = str_cat("round_mode '", mode, "' is not one of 'up', 'down', 'nearest'");
  return o;
}

std::string cast_check(const ir::Node& node) {
  std::string why;
  cast_target(node, has_storage, why);
  if (why.empty()) narrow_options(node, why);
  return why;
}

std::string castlike_check(const ir::Node& node) {
  std::string why;
  narrow_options(node, why);
  return why;
}

NarrowCastOptions kernel_options(const KernelContext& ctx) {
  std::string why;
  NarrowCastOptions o = narrow_options(ctx.node(), why);
  if (!why.empty()) fail(ctx.node().label(), ": ", why);
  return o;
}

void cast_kernel(KernelContext& ctx) {
  std::string why;
  const DType to = cast_target(ctx.node(), has_storage, why);
  if (to == DType::Undefined) fail(ctx.node().label(), ": ", why);
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(has_storage(x.dtype()), ctx.node().label(), ": casting from ", dtype_name(x.dtype()),
                " is not supported");
  if (x.dtype() != to && is_supported(x.dtype()) && is_supported(to) && x.on_host()) {
    cast_into(x, ctx.allocate_output_uninit(0, to, x.shape()));  // into the run's memory
    return;
  }
  ctx.set_output(0, cast_tensor(x, to, kernel_options(ctx)));
}

void castlike_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const DType to = ctx.input(1).dtype();
  REFORGE_CHECK(has_storage(x.dtype()) && has_storage(to), ctx.node().label(), ": casting ", x.describe(), " to ",
                dtype_name(to), " is not supported");
  ctx.set_output(0, cast_tensor(x, to, kernel_options(ctx)));
}

// BitCast: the same bytes read as another type of the same bit width (little endian, as held).
// Narrow types compare by their ONNX width (int4 to uint4 or float4e2m1, float8 to 8-bit
// integers); their one-element-per-byte codes carry over unchanged. A bool result must come
// from bytes 0 and 1: other patterns are not bools.
DType bitcast_target(const ir::Node& node, std::string& why) {
  const DType t = dtype_from_onnx(static_cast<int32_t>(node.attr_int("to", 0)));
  if (t == DType::Undefined)
    why = str_cat("unknown target type code ", node.attr_int("to", 0));
  else if (!has_storage(t))
    why = str_cat("bit-casting to ", dtype_name(t), " is not supported");
  return why.empty() ? t : DType::Undefined;
}

std::string bitcast_check(const ir::Node& node) {
  std::string why;
  bitcast_target(node, why);
  return why;
}

void bitcast_kernel(KernelContext& ctx) {
  std::string why;
  const DType to = bitcast_target(ctx.node(), why);
  if (to == DType::Undefined) fail(ctx.node().label(), ": ", why);
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(has_storage(x.dtype()), ctx.node().label(), ": bit-casting from ", dtype_name(x.dtype()),
                " is not supported");
  REFORGE_CHECK(onnx_bits_per_element(x.dtype()) == onnx_bits_per_element(to), ctx.node().label(), ": ",
                dtype_name(x.dtype()), " (", onnx_bits_per_element(x.dtype()), " bits) and ", dtype_name(to), " (",
                onnx_bits_per_element(to), " bits) differ in bit width");
  if (to == DType::Bool) {
    const uint8_t* p = x.data<uint8_t>();
    for (int64_t i = 0; i < x.numel(); ++i)
      REFORGE_CHECK(p[i] <= 1, ctx.node().label(), ": element ", i, " has the byte ", int(p[i]),
                    ", which is not a bool (0 or 1)");
  }
  Tensor& y = ctx.allocate_output_uninit(0, to, x.shape());
  if (x.nbytes() > 0) std::memcpy(y.mutable_raw(), x.raw(), x.nbytes());
}

}  // namespace

void register_cast_ops(OpRegistry& r) {
  r.add({"", "Cast", 1, INT_MAX, cast_kernel, cast_check});
  r.add({"", "CastLike", 15, INT_MAX, castlike_kernel, castlike_check});
  r.add({"", "BitCast", 26, INT_MAX, bitcast_kernel, bitcast_check});
}

}  // namespace reforge::ops
