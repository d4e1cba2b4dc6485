// Sweep cases of the unary family (cuda_sweep/sweep.h): math functions on their domains,
// predicates, activations with their attributes, Clip in both forms, and the reforge fused
// activations (Gelu with and without its decomposition's constants, Silu, SiluMul).
#include "cuda_sweep/sweep.h"

namespace reforge::cuda_sweep {

namespace {

struct Unary {
  const char* op;
  bool numeric;  // integers too, else floats only
  float lo = -4.0f, hi = 4.0f;
  bool specials = true;          // NaN, infinities, signed zeros in the input
  std::vector<Attrs> variants = {{}};  // attribute sets, each swept
};

Generator unary(Unary u) {
  return [u](Gen& g) {
    const std::vector<DType> types = u.numeric ? numeric_types() : kFloats;
    const auto shapes = g.shapes();
    for (const Attrs& attrs : u.variants)
      for (DType t : types)
        for (const Shape& s : t == types[0] ? shapes : g.some(shapes, 3)) {
          Tensor x = g.random(t, s, u.lo, u.hi);
          if (u.specials && is_float(t) && g.coin()) x = Gen::with_specials(x);
          g.add({x}, attrs);
        }
  };
}

ir::Attribute f(const char* name, float v) { return ir::float_attr(name, v); }

void isinf_cases(Gen& g) {
  for (int64_t neg : {0, 1})
    for (int64_t pos : {0, 1})
      for (DType t : kFloats)
        for (const Shape& s : g.some(g.shapes(), 3))
          g.add({Gen::with_specials(g.random(t, s))},
                {ir::int_attr("detect_negative", neg), ir::int_attr("detect_positive", pos)});
}

void not_cases(Gen& g) {
  for (const Shape& s : g.shapes()) g.add({g.random(DType::Bool, s)});
}

// Opset 6: bounds as attributes (either, both, none); from 11: optional one-element inputs of
// X's type (integers from 12), lo > hi included.
void clip_cases(Gen& g) {
  const auto shapes = g.shapes();
  if (g.opset() < 11) {
    for (DType t : kFloats)
      for (const Shape& s : g.some(shapes, 4)) {
        Tensor x = Gen::with_specials(g.random(t, s));
        g.add({x}, {f("min", -0.5f)});
        g.add({x}, {f("max", 0.75f)});
        g.add({x}, {f("min", -1.25f), f("max", 1.0f)});
        g.add({x});
      }
    return;
  }
  const std::vector<DType> types = g.opset() >= 12 ? numeric_types() : kFloats;
  for (DType t : types)
    for (const Shape& s : t == types[0] ? shapes : g.some(shapes, 2)) {
      Tensor x = g.random(t, s, -3.0f, 3.0f);
      if (is_float(t)) x = Gen::with_specials(x);
      const Tensor lo = g.random(t, g.pick(std::vector<Shape>{{}, {1}}), -2.0f, 0.0f);
      const Tensor hi = g.random(t, g.pick(std::vector<Shape>{{}, {1}}), 0.0f, 2.0f);
      g.add({x, lo, hi});
      g.add({x, lo});
      g.add({x, Tensor(), hi});
      g.add({x, hi, lo});  // lo > hi: every element is hi
    }
}

// reforge::Gelu: the standard forms for every float type, and float32 with the constants of its
// decomposition as scalar inputs (erf form: k with k_op div or mul; tanh form: c1, c2, p).
void fused_gelu_cases(Gen& g) {
  const auto shapes = g.shapes();
  for (const char* approx : {"none", "tanh"})
    for (DType t : kFloats)
      for (const Shape& s : g.some(shapes, 3)) g.add({g.random(t, s, -5.0f, 5.0f)}, {ir::string_attr("approximate", approx)});
  auto c = [](float v) { return Gen::scalar(DType::Float32, v); };
  for (const Shape& s : g.some(shapes, 4)) {
    const Tensor x = g.random(DType::Float32, s, -5.0f, 5.0f);
    g.add({x, c(1.4142135f), c(1.0f), c(0.5f)}, {ir::string_attr("approximate", "none")});
    g.add({x, c(0.70710677f), c(1.0f), c(0.5f)},
          {ir::string_attr("approximate", "none"), ir::string_attr("k_op", "mul")});
    g.add({x, c(0.7978846f), c(0.044715f), c(3.0f), c(1.0f), c(0.5f)}, {ir::string_attr("approximate", "tanh")});
  }
}

void silu_mul_cases(Gen& g) {
  for (DType t : kFloats)
    for (const Shape& s : g.some(g.shapes(), 4)) {
      g.add({g.random(t, s, -6.0f, 6.0f), g.random(t, s)});
      if (!s.empty()) g.add({g.random(t, s, -6.0f, 6.0f), g.random(t, g.broadcast_of(s))});
    }
}

}  // namespace

void add_unary_cases(std::vector<OpCases>& out) {
  auto add = [&](Unary u) { out.push_back({"unary", "", u.op, unary(u)}); };
  for (const char* op : {"Abs", "Neg", "Sign", "Relu"}) add({op, true});
  for (const char* op : {"Reciprocal", "Exp", "Erf", "Floor", "Ceil", "Round", "Sin", "Cos", "Tan", "Atan", "Sinh",
                         "Cosh", "Asinh", "Tanh", "Sigmoid", "HardSwish", "Softsign", "Mish"})
    add({op, false});
  add({"Sqrt", false, 0.0f, 9.0f});
  add({"Log", false, 0.0f, 9.0f});
  add({"Acosh", false, 1.0f, 9.0f, false});
  for (const char* op : {"Asin", "Acos", "Atanh"}) add({op, false, -0.99f, 0.99f, false});
  add({"Softplus", false, -30.0f, 30.0f});
  add({"LeakyRelu", false, -4.0f, 4.0f, true, {{}, {f("alpha", 0.3f)}}});
  add({"Elu", false, -4.0f, 4.0f, true, {{}, {f("alpha", 0.7f)}}});
  add({"Selu", false, -4.0f, 4.0f, true, {{}, {f("alpha", 2.0f), f("gamma", 0.5f)}}});
  add({"Celu", false, -4.0f, 4.0f, true, {{}, {f("alpha", 1.7f)}}});
  add({"HardSigmoid", false, -4.0f, 4.0f, true, {{}, {f("alpha", 0.5f), f("beta", 0.1f)}}});
  add({"ThresholdedRelu", false, -4.0f, 4.0f, true, {{}, {f("alpha", 0.4f)}}});
  add({"Gelu", false, -6.0f, 6.0f, true, {{}, {ir::string_attr("approximate", "tanh")}}});
  add({"Swish", false, -6.0f, 6.0f, true, {{}, {f("alpha", 1.5f)}}});
  add({"Shrink", true, -4.0f, 4.0f, true, {{}, {f("bias", 1.5f), f("lambd", 2.0f)}}});
  add({"IsNaN", false});
  out.push_back({"unary", "", "IsInf", isinf_cases, {10}});
  out.push_back({"unary", "", "Not", not_cases});
  out.push_back({"unary", "", "Clip", clip_cases, {11, 12}});
  out.push_back({"unary", "reforge", "Gelu", fused_gelu_cases});
  out.push_back({"unary", "reforge", "Silu", unary({"Silu", false, -6.0f, 6.0f})});
  out.push_back({"unary", "reforge", "SiluMul", silu_mul_cases});
}

}  // namespace reforge::cuda_sweep
