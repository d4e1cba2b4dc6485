// Conv's reference kernel: the direct loop of conv.h for every float type (16-bit floats widened
// to float32 and rounded once at the end), and the schema of reforge::FusedConv, which only
// backends implement.
#include "ops/nn/conv.h"

#include <type_traits>

#include "core/dispatch.h"

namespace reforge::ops::nn {

ConvSetup conv_setup(const KernelContext& ctx) {
  return conv_setup(ctx, ctx.input(0), ctx.input(1), ctx.has_input(2) ? &ctx.input(2) : nullptr, true);
}

ConvSetup conv_setup(const KernelContext& ctx, const Tensor& X, const Tensor& W, const Tensor* B, bool same_types) {
  const ir::Node& node = ctx.node();
  REFORGE_CHECK(X.rank() >= 3, node.label(), ": X must be [N, C, spatial...], got ", X.describe());
  REFORGE_CHECK(W.rank() == X.rank(), node.label(), ": W ", W.describe(), " must have the rank of X ", X.describe());
  REFORGE_CHECK(!same_types || W.dtype() == X.dtype(), node.label(), ": W has element type ", dtype_name(W.dtype()),
                ", X has ", dtype_name(X.dtype()));
  const int64_t N = X.dim(0), C = X.dim(1), M = W.dim(0);
  const int64_t group = ctx.attr_int("group", 1);
  REFORGE_CHECK(group >= 1, node.label(), ": group must be positive, got ", group);
  REFORGE_CHECK(C == W.dim(1) * group, node.label(), ": X has ", C, " channels but W ", W.describe(), " with group ",
                group, " expects ", W.dim(1) * group);
  REFORGE_CHECK(M % group == 0, node.label(), ": ", M, " output channels are not divisible by group ", group);
  if (B) {
    REFORGE_CHECK(B->numel() == M && B->rank() == 1, node.label(), ": bias ", B->describe(), " must be [", M, "]");
    REFORGE_CHECK(!same_types || B->dtype() == X.dtype(), node.label(), ": bias has element type ",
                  dtype_name(B->dtype()));
  }
  const size_t nsp = static_cast<size_t>(X.rank() - 2);
  const std::vector<int64_t> in(X.shape().begin() + 2, X.shape().end());
  const std::vector<int64_t> wk(W.shape().begin() + 2, W.shape().end());
  std::vector<int64_t> k = kernel_shape_attr(ctx, nsp);
  REFORGE_CHECK(k.empty() || k == wk, node.label(), ": kernel_shape ", shape_str(k), " does not match W ",
                W.describe());
  REFORGE_CHECK(nsp <= 3, node.label(), ": only 1-D, 2-D and 3-D convolutions are supported, got ", nsp,
                " spatial dims");
  ConvSetup s;
  s.N = N, s.C = C, s.M = M, s.group = group, s.nsp = nsp, s.wk = wk;
  s.win = resolve_window(ctx, in, wk, false);
  s.g = to_geo3(s.win);
  s.out_shape = {N, M};
  s.out_shape.insert(s.out_shape.end(), s.win.out.begin(), s.win.out.end());
  return s;
}

namespace {

void conv_kernel(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const Tensor& W = ctx.input(1);
  const Tensor* B = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const ConvSetup s = conv_setup(ctx);
  Tensor& Y = ctx.allocate_output_uninit(0, X.dtype(), s.out_shape);
  if (Y.numel() == 0) return;
  dispatch_float(
      X.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          conv_ref<T>(X.data<T>(), W.data<T>(), B ? B->data<T>() : nullptr, Y.mutable_data<T>(), s.N, s.C, s.M, s.group,
                      s.g);
        } else {
          std::vector<float> x = to_floats(X), w = to_floats(W), b = B ? to_floats(*B) : std::vector<float>();
          std::vector<float> y(static_cast<size_t>(Y.numel()));
          conv_ref<float>(x.data(), w.data(), B ? b.data() : nullptr, y.data(), s.N, s.C, s.M, s.group, s.g);
          store_floats(y, Y);
        }
      },
      "Conv");
}

}  // namespace

std::string check_conv_like(const ir::Node& node) {
  const std::string ap = node.attr_string("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID")
    return "auto_pad '" + ap + "' is not supported";
  const size_t n = node.attr_ints("kernel_shape").size();
  if (n > 3) return "only 1-D, 2-D and 3-D convolutions are supported";
  if (node.attr_int("group", 1) < 1) return "group must be positive";
  return "";
}

std::string check_fused_conv(const ir::Node& node) {
  const std::string act = node.attr_string("activation", "");
  if (!act.empty() && act != "Relu") return "activation '" + act + "' is not supported (expected 'Relu' or none)";
  for (const char* a : {"x_layout", "y_layout", "z_layout"}) {
    const std::string l = node.attr_string(a, "NCHW");
    if (l != "NCHW" && l != "NHWC" && l != "NCHWc")
      return std::string(a) + " '" + l + "' is not supported (expected 'NCHW', 'NHWC' or 'NCHWc')";
  }
  if (node.inputs.size() > 4) return "takes at most 4 inputs (X, W, B, Z)";
  return check_conv_like(node);
}

void register_conv_ops(OpRegistry& r) {
  r.add({"",
         "Conv",
         1,
         INT_MAX,
         conv_kernel,
         check_conv_like,
         nullptr,
         {InputRole::kData, InputRole::kWeight, InputRole::kWeight}});
  // No reference kernel: made only by a backend's fusion pass where that backend has a kernel.
  r.add({"reforge", "FusedConv", 1, INT_MAX, nullptr, check_fused_conv});
}

}  // namespace reforge::ops::nn
