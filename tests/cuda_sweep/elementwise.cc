// Sweep cases of the broadcasting elementwise ops (cuda_sweep/sweep.h): arithmetic, Pow,
// comparisons, logic, Where, the variadic Min/Max/Sum/Mean, Mod, PRelu, Cast and CastLike. Float
// inputs carry NaN, infinities and signed zeros; integer divisors include zero.
#include <cmath>

#include "cuda_sweep/sweep.h"

namespace reforge::cuda_sweep {

namespace {

// Pairs of shapes that broadcast together: equal, one side broadcast (either side), a scalar.
std::vector<std::pair<Shape, Shape>> broadcast_pairs(Gen& g) {
  std::vector<std::pair<Shape, Shape>> v;
  for (const Shape& s : g.shapes()) {
    v.push_back({s, s});
    if (s.empty()) continue;
    v.push_back({s, g.broadcast_of(s)});
    v.push_back({g.broadcast_of(s), s});
  }
  v.push_back({g.shape(3), Shape{}});
  // Both sides broadcast: [a, 1, c] against [b, 1].
  v.push_back({{3, 1, 5}, {4, 1}});
  return v;
}

Tensor data(Gen& g, DType t, const Shape& s, bool specials, float lo = -2.0f, float hi = 2.0f) {
  Tensor x = g.random(t, s, lo, hi);
  return specials && is_float(t) ? Gen::with_specials(x) : x;
}

// Two-input ops of one dtype set; `specials`: the first input holds the special values.
Generator binary(std::vector<DType> types, bool specials = true) {
  return [types, specials](Gen& g) {
    const auto pairs = broadcast_pairs(g);
    for (DType t : types)
      for (const auto& [a, b] : t == types[0] ? pairs : g.some(pairs, 5))
        g.add({data(g, t, a, specials), data(g, t, b, false)});
  };
}

void pow_cases(Gen& g) {
  std::vector<std::pair<DType, DType>> types;
  for (DType t : kFloats) types.push_back({t, t});
  if (g.opset() >= 12) {
    for (DType t : kInts) types.push_back({t, t});
    types.insert(types.end(), {{DType::Float32, DType::Int64},
                               {DType::Float16, DType::Float32},
                               {DType::Int32, DType::Float32},
                               {DType::Int64, DType::Int32},
                               {DType::BFloat16, DType::Int8},
                               {DType::Float64, DType::UInt8}});
  }
  const auto pairs = broadcast_pairs(g);
  for (const auto& [bt, et] : types)
    for (const auto& [a, b] : bt == DType::Float32 && et == bt ? pairs : g.some(pairs, 4)) {
      // Bases of both signs, exponents small (integer ones in [-8, 8], negative ones too).
      g.add({data(g, bt, a, true, -3.0f, 3.0f), g.random(et, b, -2.0f, 2.0f)});
    }
}

void where_cases(Gen& g) {
  const auto pairs = broadcast_pairs(g);
  for (DType t : all_types())
    for (const auto& [a, b] : t == DType::Float32 ? pairs : g.some(pairs, 4)) {
      const Shape c = g.coin() ? g.broadcast_of(a) : b;
      g.add({g.random(DType::Bool, c), data(g, t, a, true), data(g, t, b, false)});
    }
}

Generator variadic(std::vector<DType> types) {
  return [types](Gen& g) {
    const auto shapes = g.shapes();
    for (DType t : types)
      for (const Shape& s : t == types[0] ? shapes : g.some(shapes, 2)) {
        g.add({data(g, t, s, true)});
        g.add({data(g, t, s, true), data(g, t, g.broadcast_of(s), false)});
        g.add({data(g, t, g.broadcast_of(s), false), data(g, t, s, false), data(g, t, g.broadcast_of(s), true)});
      }
  };
}

void mod_cases(Gen& g) {
  const auto pairs = broadcast_pairs(g);
  for (int64_t fmod : {0, 1})
    for (DType t : numeric_types())
      for (const auto& [a, b] : t == DType::Float32 ? pairs : g.some(pairs, 3)) {
        // Integer divisors include 0 and -1; float ones the special values (x mod 0, mod inf).
        g.add({data(g, t, a, false, -9.0f, 9.0f), data(g, t, b, true, -3.0f, 3.0f)},
              {ir::int_attr("fmod", fmod)});
      }
}

void prelu_cases(Gen& g) {
  const auto shapes = g.shapes(1, 4);
  for (DType t : numeric_types())
    for (const Shape& s : t == DType::Float32 ? shapes : g.some(shapes, 2)) {
      // The slope broadcasts unidirectionally to X: per channel [C, 1, ...], trailing dims, or one value.
      Shape per_channel(s.size() - 1, 1);
      if (s.size() >= 2) per_channel[0] = s[1];
      for (const Shape& slope : {g.broadcast_of(s), per_channel, Shape{1}})
        g.add({data(g, t, s, true), g.random(t, slope, -1.0f, 1.0f)});
    }
}

// Values of `from` that reach every conversion rule: fractions, large magnitudes (saturation),
// NaN and infinities, integers across the whole type (narrowing wraps).
Tensor cast_source(Gen& g, DType from, const Shape& s) {
  if (from == DType::Bool) return g.random(DType::Bool, s);
  Tensor wide = Tensor::empty(DType::Float64, s);
  for (int64_t i = 0; i < wide.numel(); ++i) {
    const int64_t kind = g.between(0, 3);
    const double small = static_cast<double>(g.between(-1000, 1000)) / 8.0;
    const double big = std::ldexp(static_cast<double>(g.between(-1000, 1000)), static_cast<int>(g.between(8, 60)));
    wide.mutable_data<double>()[i] = kind == 0 ? big : kind == 1 ? std::round(small) : small;
  }
  if (is_float(from)) return Gen::with_specials(cast_tensor(wide, from));
  // Integers: the wide values wrapped into the type (two's complement), as the host cast does.
  Tensor i64 = Tensor::empty(DType::Int64, s);
  for (int64_t i = 0; i < i64.numel(); ++i) {
    const double v = wide.data<double>()[i];
    i64.mutable_data<int64_t>()[i] = static_cast<int64_t>(std::fmod(v, 9.2e18));
  }
  return cast_tensor(i64, from);
}

void cast_cases(Gen& g) {
  for (DType from : all_types())
    for (DType to : all_types()) {
      const Shape s = g.pick(std::vector<Shape>{g.shape(2, 1, 40), g.shape(1, 1, 300), {0, 2}});
      g.add({cast_source(g, from, s)}, {ir::int_attr("to", static_cast<int64_t>(to))});
    }
}

void cast_like_cases(Gen& g) {
  for (DType from : all_types())
    for (DType to : all_types()) g.add({cast_source(g, from, g.shape(2, 1, 40)), g.random(to, {1})});
}

}  // namespace

void add_elementwise_cases(std::vector<OpCases>& out) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) out.push_back({"elementwise", "", op, binary(numeric_types())});
  out.push_back({"elementwise", "", "Pow", pow_cases, {12}});
  out.push_back({"elementwise", "", "Equal", binary(all_types())});
  for (const char* op : {"Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
    out.push_back({"elementwise", "", op, binary(numeric_types())});
  for (const char* op : {"And", "Or", "Xor"}) out.push_back({"elementwise", "", op, binary({DType::Bool})});
  out.push_back({"elementwise", "", "Where", where_cases});
  for (const char* op : {"Min", "Max", "Sum"}) out.push_back({"elementwise", "", op, variadic(numeric_types())});
  out.push_back({"elementwise", "", "Mean", variadic(kFloats)});
  out.push_back({"elementwise", "", "Mod", mod_cases});
  out.push_back({"elementwise", "", "PRelu", prelu_cases});
  out.push_back({"elementwise", "", "Cast", cast_cases});
  out.push_back({"elementwise", "", "CastLike", cast_like_cases});
}

}  // namespace reforge::cuda_sweep
