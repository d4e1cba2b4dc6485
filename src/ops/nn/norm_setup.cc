// The shared setup of the normalizations (norm_setup.h).
#include "ops/nn/norm_setup.h"

#include "core/error.h"

namespace reforge::ops {

LayerNormSetup layer_norm_setup(const KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const Tensor& S = ctx.input(1);
  const Tensor* B = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const std::string& label = ctx.node().label();
  const int64_t rank = X.rank();
  LayerNormSetup s;
  int64_t axis = ctx.attr_int("axis", -1);
  REFORGE_CHECK(axis >= -rank && axis < rank, label, ": axis ", axis, " is out of range for ", X.describe());
  if (axis < 0) axis += rank;
  s.axis = axis;
  s.eps = ctx.attr_float("epsilon", 1e-5f);
  const int64_t stash = ctx.attr_int("stash_type", 1);
  s.stash_dtype = dtype_from_onnx(static_cast<int32_t>(stash));
  REFORGE_CHECK(is_float(s.stash_dtype), label, ": stash_type ", stash, " is not a float type");
  REFORGE_CHECK(is_float(S.dtype()) && (!B || is_float(B->dtype())), label, ": Scale and B must be float tensors");

  const Shape& xs = X.shape();
  for (int64_t i = 0; i < rank; ++i) (i < axis ? s.outer : s.inner) *= xs[i];
  s.norm_shape.assign(xs.begin() + axis, xs.end());
  s.stat_shape.assign(xs.begin(), xs.begin() + axis);
  s.stat_shape.resize(xs.size(), 1);
  s.full = S.rank() > static_cast<int64_t>(s.norm_shape.size()) ||
           (B && B->rank() > static_cast<int64_t>(s.norm_shape.size()));
  s.param_shape = s.full ? xs : s.norm_shape;
  return s;
}

LayerNormStats layer_norm_stat_outputs(KernelContext& ctx, const LayerNormSetup& s) {
  LayerNormStats t;
  if (ctx.output_wanted(1)) t.mean = &ctx.allocate_output(1, s.stash_dtype, s.stat_shape);
  if (ctx.output_wanted(2)) t.inv_std = &ctx.allocate_output(2, s.stash_dtype, s.stat_shape);
  return t;
}

void check_norm_param(const Tensor& p, const Shape& target, const std::string& label, const char* name) {
  const Shape& ps = p.shape();
  REFORGE_CHECK(ps.size() <= target.size(), label, ": ", name, " ", p.describe(), " has more dims than ",
                shape_str(target));
  const size_t off = target.size() - ps.size();
  for (size_t i = 0; i < ps.size(); ++i)
    REFORGE_CHECK(ps[i] == target[off + i] || ps[i] == 1, label, ": ", name, " ", p.describe(),
                  " cannot be broadcast to ", shape_str(target));
}

std::string rms_norm_check(const ir::Node& node) {
  const int64_t st = node.attr_int("stash_type", 1);
  if (st != 1 && st != 11) return str_cat("stash_type ", st, " is not supported (only 1 = float, 11 = double)");
  return "";
}

RmsNormSetup rms_norm_setup(const KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const std::string err = rms_norm_check(ctx.node());
  REFORGE_CHECK(err.empty(), where, ": ", err);
  REFORGE_CHECK(is_float(x.dtype()) && is_float(scale.dtype()), where, ": X and scale must be float tensors, got ",
                dtype_name(x.dtype()), " and ", dtype_name(scale.dtype()));
  const int64_t rank = x.rank();
  REFORGE_CHECK(rank >= 1, where, ": X must have rank >= 1");
  RmsNormSetup s;
  int64_t axis = ctx.attr_int("axis", -1);
  REFORGE_CHECK(axis >= -rank && axis < rank, where, ": axis ", axis, " is out of range for rank ", rank);
  if (axis < 0) axis += rank;
  s.axis = axis;
  for (int64_t i = 0; i < axis; ++i) s.outer *= x.dim(i);
  for (int64_t i = axis; i < rank; ++i) s.inner *= x.dim(i);
  REFORGE_CHECK(scale.rank() <= rank, where, ": scale ", shape_str(scale.shape()), " does not broadcast to X ",
                shape_str(x.shape()));
  for (int64_t i = 0; i < scale.rank(); ++i) {
    const int64_t sd = scale.dim(scale.rank() - 1 - i), xd = x.dim(rank - 1 - i);
    REFORGE_CHECK(sd == 1 || sd == xd, where, ": scale ", shape_str(scale.shape()), " does not broadcast to X ",
                  shape_str(x.shape()));
  }
  s.eps = ctx.attr_float("epsilon", 1e-5f);
  s.stash_double = ctx.attr_int("stash_type", 1) == 11;
  return s;
}

std::string batch_norm_check(const ir::Node& node) {
  const bool training = node.opset >= 14 && node.attr_int("training_mode", 0) != 0;
  for (size_t i = training ? 3 : 1; i < node.outputs.size(); ++i)
    if (!node.outputs[i].empty())
      return training ? "training-mode outputs beyond running_mean/running_var are not supported"
                      : "training outputs (running/saved statistics) are only supported with training_mode=1 "
                        "from opset 14";
  return "";
}

BatchNormSetup batch_norm_setup(const KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const std::string& label = ctx.node().label();
  REFORGE_CHECK(X.rank() >= 2, label, ": X must be [N, C, ...], got ", X.describe());
  BatchNormSetup s;
  s.n = X.dim(0);
  s.c = X.dim(1);
  s.inner = s.n * s.c == 0 ? 0 : X.numel() / (s.n * s.c);
  s.eps = ctx.attr_float("epsilon", 1e-5f);
  s.momentum = ctx.attr_float("momentum", 0.9f);
  s.training = ctx.opset() >= 14 && ctx.attr_int("training_mode", 0) != 0;
  return s;
}

int64_t batch_norm_param_size(const KernelContext& ctx, const BatchNormSetup& s) {
  const std::string& label = ctx.node().label();
  const Tensor& X = ctx.input(0);
  const char* names[4] = {"scale", "B", "input_mean", "input_var"};
  int64_t size[4];
  for (int i = 0; i < 4; ++i) {
    const Tensor& t = ctx.input(static_cast<size_t>(i + 1));
    REFORGE_CHECK(is_float(t.dtype()), label, ": ", names[i], " must be a float tensor, got ", t.describe());
    // Per-channel [C], or per-activation [C, spatial...] (opsets before 9 with spatial=0).
    REFORGE_CHECK(t.numel() == s.c || (t.numel() == s.c * s.inner && ctx.opset() < 9), label, ": ", names[i], " ",
                  t.describe(), " must have ", s.c, " elements (X is ", X.describe(), ")");
    size[i] = t.numel();
  }
  REFORGE_CHECK(size[0] == size[1] && size[1] == size[2] && size[2] == size[3], label,
                ": scale, B, input_mean and input_var must have the same size");
  if (s.training) REFORGE_CHECK(size[0] == s.c, label, ": training mode needs per-channel parameters");
  return size[0];
}

}  // namespace reforge::ops
