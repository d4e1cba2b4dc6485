// Sweep cases of the normalizations (cuda_sweep/sweep.h): LayerNormalization (axis, optional B,
// Mean and InvStdDev outputs, stash_type), RMSNormalization, reforge::AddRmsNorm, reforge::RmsNorm (weight of N or 1
// elements, exponent and numerator inputs), BatchNormalization (inference and training with
// running statistics), InstanceNormalization, GroupNormalization (per-group and per-channel
// parameters) and Dropout (identity, and seeded training masks). Rows past one block included.
#include "cuda_sweep/sweep.h"

namespace reforge::cuda_sweep {

namespace {

std::vector<Shape> norm_shapes(Gen& g) {
  return {g.shape(1, 1, 40), g.shape(2, 1, 12), g.shape(3, 1, 8), g.shape(4, 1, 5), {3, 2500}, {0, 5}};
}

// A normalization of X of shape `s`: an axis, the parameters' shape (over [axis, rank), or
// broadcast to it) and the attributes.
struct NormForm {
  Shape params;
  Attrs attrs;
};

NormForm norm_form(Gen& g, const Shape& s) {
  const int64_t r = static_cast<int64_t>(s.size());
  const int64_t axis = g.between(-r, r - 1);
  const size_t a = static_cast<size_t>(axis < 0 ? axis + r : axis);
  NormForm f;
  f.params.assign(s.begin() + static_cast<int64_t>(a), s.end());
  if (g.coin() && f.params.size() > 1) f.params.erase(f.params.begin());  // broadcasts over the leading normalized dims
  f.attrs = {ir::int_attr("axis", axis), ir::float_attr("epsilon", g.coin() ? 1e-5f : 0.25f)};
  if (g.coin()) f.attrs.push_back(ir::int_attr("stash_type", g.coin() ? 1 : 11));
  return f;
}

// LayerNormalization and RMSNormalization: X, Scale over [axis, rank) (or broadcast to it), B.
void layer_norm_cases(Gen& g) {
  const bool rms = g.op() == "RMSNormalization";
  const auto shapes = norm_shapes(g);
  for (DType t : kFloats)
    for (const Shape& s : t == DType::Float32 ? shapes : g.some(shapes, 3)) {
      const NormForm f = norm_form(g, s);
      const Shape& ps = f.params;
      const Attrs& at = f.attrs;
      const Tensor x = g.random(t, s, -3.0f, 5.0f);
      if (rms) {
        g.add({x, g.random(t, ps)}, at);
        continue;
      }
      const Tensor b = g.coin() ? g.random(t, ps) : Tensor();
      Case& c = g.add({x, g.random(t, ps), b}, at, 3);
      if (g.coin()) Gen::drop_output(c, 1), Gen::drop_output(c, 2);
    }
}

// reforge::AddRmsNorm(X, scale, R) -> (Y, X + R): RMSNormalization's forms with a residual of X's
// type and shape, and rows of 16-bit models (a multiple of 8 elements: the one-kernel path).
void add_rms_cases(Gen& g) {
  const auto shapes = norm_shapes(g);
  for (DType t : kFloats)
    for (const Shape& s : t == DType::Float32 ? shapes : g.some(shapes, 3)) {
      const NormForm f = norm_form(g, s);
      g.add({g.random(t, s, -3.0f, 5.0f), g.random(t, f.params), g.random(t, s, -3.0f, 3.0f)}, f.attrs, 2);
    }
  for (DType t : {DType::BFloat16, DType::Float16})
    for (const Shape& s : {Shape{1, 1, 2048}, Shape{3, 7, 256}, Shape{2, 8192}})
      g.add({g.random(t, s, -3.0f, 3.0f), g.random(t, {s.back()}), g.random(t, s, -3.0f, 3.0f)},
            {ir::int_attr("axis", -1), ir::float_attr("epsilon", 1e-6f)}, 2);
}

// reforge::RmsNorm(X, W?, eps, p?, n?) in float32.
void rms_fused_cases(Gen& g) {
  for (const Shape& s : norm_shapes(g))
    for (int i = 0; i < 3; ++i) {
      const int64_t n = s.back();
      const Tensor w = g.pick(std::vector<Tensor>{g.random(DType::Float32, {n}), g.random(DType::Float32, {1}), Tensor()});
      std::vector<Tensor> ins = {g.random(DType::Float32, s, -3.0f, 3.0f), w, Gen::scalar(DType::Float32, 1e-6)};
      if (i == 2) ins.push_back(Gen::scalar(DType::Float32, 2.0)), ins.push_back(Gen::scalar(DType::Float32, 1.5));
      g.add(ins);
    }
}

// BatchNormalization: [C] parameters (types of their own from 15), variance positive; training
// mode (14) with its running statistics outputs.
void batch_norm_cases(Gen& g) {
  for (DType t : kFloats)
    for (int i = 0; i < (t == DType::Float32 ? 8 : 3); ++i) {
      const Shape s = g.pick(std::vector<Shape>{g.shape(2, 1, 6), g.shape(3, 1, 6), g.shape(4, 1, 5), g.shape(5, 1, 4), {2, 3, 40, 40}});
      const int64_t c = s[1];
      const DType pt = g.opset() >= 15 && g.coin() ? g.pick(kFloats) : t;
      const DType st = g.opset() >= 15 && g.coin() ? g.pick(kFloats) : pt;
      const bool training = g.opset() >= 14 && g.coin();
      Attrs a = {ir::float_attr("epsilon", g.coin() ? 1e-5f : 0.1f), ir::float_attr("momentum", 0.75f)};
      if (training) a.push_back(ir::int_attr("training_mode", 1));
      g.add({g.random(t, s), g.random(pt, {c}), g.random(pt, {c}), g.random(st, {c}), g.random(st, {c}, 0.1f, 2.0f)}, a,
            training ? 3 : 1);
    }
}

void instance_norm_cases(Gen& g) {
  for (DType t : kFloats)
    for (int i = 0; i < (t == DType::Float32 ? 8 : 3); ++i) {
      const Shape s = g.pick(std::vector<Shape>{g.shape(3, 1, 9), g.shape(4, 1, 6), g.shape(5, 1, 4), {2, 3, 50, 50}});
      g.add({g.random(t, s, -2.0f, 4.0f), g.random(t, {s[1]}), g.random(t, {s[1]})},
            {ir::float_attr("epsilon", g.coin() ? 1e-5f : 0.3f)});
    }
}

void group_norm_cases(Gen& g) {
  for (DType t : kFloats)
    for (int i = 0; i < (t == DType::Float32 ? 8 : 3); ++i) {
      const int64_t groups = g.between(1, 4);
      Shape s = g.pick(std::vector<Shape>{g.shape(2, 1, 3), g.shape(3, 1, 9), g.shape(4, 1, 6), {2, 1, 50, 50}});
      s[1] = groups * g.between(1, 3);
      const int64_t p = g.opset() >= 21 ? s[1] : groups;
      Attrs a = {ir::int_attr("num_groups", groups), ir::float_attr("epsilon", g.coin() ? 1e-5f : 0.3f)};
      g.add({g.random(t, s, -2.0f, 4.0f), g.random(t, {p}), g.random(t, {p})}, a);
    }
}

// Dropout: inference (the identity, with an all-true mask), and from 12 seeded training masks.
void dropout_cases(Gen& g) {
  for (DType t : kFloats)
    for (const Shape& s : g.some(norm_shapes(g), 3)) {
      const Tensor x = g.random(t, s);
      if (g.opset() < 12) {
        g.add({x}, {}, g.opset() >= 7 ? 2 : 1);
        continue;
      }
      g.add({x}, {}, 2);
      const Tensor ratio = Gen::scalar(g.coin() ? DType::Float32 : t, static_cast<double>(g.between(0, 8)) / 10);
      g.add({x, ratio, Gen::scalar(DType::Bool, 1)}, {ir::int_attr("seed", g.between(0, 1000))}, 2);
      // A training_mode input off: the identity (a seed, as the GPU declines unseeded training_mode inputs).
      g.add({x, ratio, Gen::scalar(DType::Bool, 0)}, {ir::int_attr("seed", 7)}, 1);
    }
}

}  // namespace

void add_norm_cases(std::vector<OpCases>& out) {
  out.push_back({"norm", "", "LayerNormalization", layer_norm_cases});
  out.push_back({"norm", "", "RMSNormalization", layer_norm_cases});
  out.push_back({"norm", "reforge", "RmsNorm", rms_fused_cases});
  out.push_back({"norm", "reforge", "AddRmsNorm", add_rms_cases});
  out.push_back({"norm", "", "BatchNormalization", batch_norm_cases, {14, 15}});
  out.push_back({"norm", "", "InstanceNormalization", instance_norm_cases});
  out.push_back({"norm", "", "GroupNormalization", group_norm_cases, {21}});
  out.push_back({"norm", "", "Dropout", dropout_cases, {7, 12}});
}

}  // namespace reforge::cuda_sweep
