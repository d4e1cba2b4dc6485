// Sweep cases of the indexing and tensor-making ops (cuda_sweep/sweep.h): Gather, GatherElements,
// GatherND, ScatterND, ScatterElements, Scatter, Expand, ConstantOfShape, Range, OneHot and
// NonZero. Indices are valid (both signs, int32 and int64); scatters repeat indices, which the CPU
// applies in order and the CUDA kernels must too.
#include <algorithm>

#include "cuda_sweep/sweep.h"

namespace reforge::cuda_sweep {

namespace {

int64_t axis_in(Gen& g, int64_t rank) { return g.between(-rank, rank - 1); }
size_t norm(int64_t axis, size_t rank) { return static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(rank) : axis); }
DType index_type(Gen& g) { return g.coin() ? DType::Int64 : DType::Int32; }

void gather_cases(Gen& g) {
  for (DType t : all_types())
    for (int rank = 1; rank <= 4; ++rank) {
      if (t != DType::Float32 && g.between(0, 1) == 0) continue;
      const Shape s = g.shape(rank, 1, 7);
      const int64_t axis = axis_in(g, rank);
      const Shape is = g.pick(std::vector<Shape>{{}, {0}, g.shape(1, 1, 9), g.shape(2, 1, 5)});
      g.add({g.random(t, s), g.indices(index_type(g), is, s[norm(axis, s.size())])}, {ir::int_attr("axis", axis)});
    }
}

void gather_elements_cases(Gen& g) {
  for (DType t : all_types())
    for (int rank = 1; rank <= 4; ++rank) {
      if (t != DType::Float32 && g.coin()) continue;
      const Shape s = g.shape(rank, 1, 6);
      const int64_t axis = axis_in(g, rank);
      Shape is = s;  // no larger than data off the axis, any size along it
      for (size_t d = 0; d < is.size(); ++d) is[d] = d == norm(axis, s.size()) ? g.between(0, 7) : g.between(1, s[d]);
      g.add({g.random(t, s), g.indices(index_type(g), is, s[norm(axis, s.size())])}, {ir::int_attr("axis", axis)});
    }
}

// GatherND: index tuples of length k after b batch dimensions (batch_dims from opset 12).
void gather_nd_cases(Gen& g) {
  for (DType t : all_types())
    for (int rank = 1; rank <= 4; ++rank) {
      if (t != DType::Float32 && g.coin()) continue;
      const Shape s = g.shape(rank, 1, 6);
      const int64_t b = g.opset() >= 12 ? g.between(0, rank - 1) : 0;
      const int64_t k = g.between(1, rank - b);
      Shape is(s.begin(), s.begin() + b);
      is.push_back(g.between(1, 4));
      is.push_back(k);
      Tensor idx = Tensor::empty(DType::Int64, is);
      for (int64_t i = 0; i < idx.numel(); ++i) {
        const int64_t d = s[static_cast<size_t>(b + i % k)];
        idx.mutable_data<int64_t>()[i] = g.between(-d, d - 1);
      }
      g.add({g.random(t, s), cast_tensor(idx, index_type(g))}, {ir::int_attr("batch_dims", b)});
    }
}

std::vector<std::string> reductions(Gen& g) {
  std::vector<std::string> r = {"none"};
  if (g.opset() >= 16) r.insert(r.end(), {"add", "mul"});
  if (g.opset() >= 18) r.insert(r.end(), {"max", "min"});
  return r;
}

Attrs reduction_attr(Gen& g, const std::string& r) {
  return g.opset() >= 16 ? Attrs{ir::string_attr("reduction", r)} : Attrs{};
}

void scatter_nd_cases(Gen& g) {
  for (const std::string& r : reductions(g))
    for (DType t : all_types())
      for (int rank = 1; rank <= 3; ++rank) {
        if (t != DType::Float32 && g.between(0, 2) != 0) continue;
        const Shape s = g.shape(rank, 1, 6);
        const int64_t k = g.between(1, rank);
        const int64_t tuples = g.between(0, 6);  // more tuples than rows: repeats
        Tensor idx = Tensor::empty(DType::Int64, {tuples, k});
        for (int64_t i = 0; i < idx.numel(); ++i) {
          const int64_t d = s[static_cast<size_t>(i % k)];
          idx.mutable_data<int64_t>()[i] = g.between(-d, d - 1);
        }
        Shape us = {tuples};
        us.insert(us.end(), s.begin() + k, s.end());
        g.add({g.random(t, s), idx, g.random(t, us)}, reduction_attr(g, r));
      }
}

void scatter_elements_cases(Gen& g) {
  for (const std::string& r : reductions(g))
    for (DType t : all_types())
      for (int rank = 1; rank <= 3; ++rank) {
        if (t != DType::Float32 && g.between(0, 2) != 0) continue;
        const Shape s = g.shape(rank, 1, 6);
        const int64_t axis = axis_in(g, rank);
        Shape is = s;
        for (size_t d = 0; d < is.size(); ++d) is[d] = d == norm(axis, s.size()) ? g.between(0, 8) : g.between(1, s[d]);
        Attrs a = reduction_attr(g, r);
        a.push_back(ir::int_attr("axis", axis));
        g.add({g.random(t, s), g.indices(index_type(g), is, s[norm(axis, s.size())]), g.random(t, is)}, a);
      }
}

void scatter_cases(Gen& g) {
  for (DType t : all_types()) {
    const Shape s = g.shape(2, 1, 6);
    const int64_t axis = g.between(0, 1);
    Shape is = {g.between(1, s[0]), g.between(1, s[1])};
    is[static_cast<size_t>(axis)] = g.between(1, 5);
    g.add({g.random(t, s), g.indices(index_type(g), is, s[static_cast<size_t>(axis)]), g.random(t, is)},
          {ir::int_attr("axis", axis)});
  }
}

void expand_cases(Gen& g) {
  for (DType t : all_types()) {
    const Shape out = g.shape(static_cast<int>(g.between(1, 4)), 1, 5);
    Shape in = g.broadcast_of(out);
    Shape target = out;
    for (auto& d : target)
      if (g.between(0, 3) == 0) d = 1;  // a 1 in the shape keeps the input's dimension
    if (g.coin()) target.insert(target.begin(), g.between(0, 3));
    g.add({g.random(t, in), Gen::ints(target)});
  }
}

void constant_of_shape_cases(Gen& g) {
  for (DType t : all_types()) {
    const Shape s = g.shape(static_cast<int>(g.between(0, 3)), 0, 6);
    g.add({Gen::ints(s)}, {ir::tensor_attr("value", g.random(t, {1}, -3.0f, 3.0f))});
  }
  g.add({Gen::ints({4, 3})});  // no value: float32 zeros
}

void range_cases(Gen& g) {
  for (DType t : {DType::Int16, DType::Int32, DType::Int64, DType::Float32, DType::Float64, DType::Float16})
    for (int i = 0; i < 4; ++i) {
      const bool integer = t == DType::Int16 || t == DType::Int32 || t == DType::Int64;
      const double start = static_cast<double>(g.between(-20, 20)) / (integer ? 1 : 4);
      double delta = static_cast<double>(g.between(1, 12)) / (integer ? 1 : 3) * (g.coin() ? 1 : -1);
      const double limit = start + delta * static_cast<double>(g.between(-2, 40)) + (integer ? 0 : 0.1);
      g.add({Gen::scalar(t, start), Gen::scalar(t, limit), Gen::scalar(t, delta)});
    }
}

// OneHot: indices of any numeric type (in range, negative, out of range both ways; floats with
// fractions), values of any type, axis anywhere.
void one_hot_cases(Gen& g) {
  for (DType vt : all_types()) {
    const DType it = g.pick(numeric_types());
    const Shape is = g.shape(static_cast<int>(g.between(0, 3)), 1, 5);
    const int64_t depth = g.between(1, 6);
    Tensor idx = g.random(DType::Float32, is, -static_cast<float>(depth) - 2, static_cast<float>(depth) + 2);
    if (it != DType::Float32) idx = cast_tensor(idx, it);
    const int64_t rank = static_cast<int64_t>(is.size()) + 1;
    g.add({idx, Gen::ints({depth}, g.coin() ? DType::Int64 : DType::Float32), g.random(vt, {2}, -3.0f, 3.0f)},
          {ir::int_attr("axis", g.between(-rank, rank - 1))});
  }
}

void non_zero_cases(Gen& g) {
  for (DType t : all_types())
    for (const Shape& s : t == DType::Float32 ? g.shapes() : g.some(g.shapes(), 2))
      g.add({g.random(t, s, -1.0f, 1.0f)});  // integers: about half zero
  g.add({Tensor::empty(DType::Float32, {5, 5})});
}

}  // namespace

void add_tensor_cases(std::vector<OpCases>& out) {
  out.push_back({"tensor", "", "Gather", gather_cases});
  out.push_back({"tensor", "", "GatherElements", gather_elements_cases});
  out.push_back({"tensor", "", "GatherND", gather_nd_cases, {12}});
  out.push_back({"tensor", "", "ScatterND", scatter_nd_cases, {16, 18}});
  out.push_back({"tensor", "", "ScatterElements", scatter_elements_cases, {16, 18}});
  out.push_back({"tensor", "", "Scatter", scatter_cases});
  out.push_back({"tensor", "", "Expand", expand_cases});
  out.push_back({"tensor", "", "ConstantOfShape", constant_of_shape_cases});
  out.push_back({"tensor", "", "Range", range_cases});
  out.push_back({"tensor", "", "OneHot", one_hot_cases});
  out.push_back({"tensor", "", "NonZero", non_zero_cases});
}

}  // namespace reforge::cuda_sweep
