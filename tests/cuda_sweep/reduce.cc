// Sweep cases of the reductions (cuda_sweep/sweep.h): the Reduce* ops (axes as attribute or
// input, keepdims, noop_with_empty_axes, rows past one block, strided rows), ArgMax/ArgMin
// (select_last_index, ties), Softmax/LogSoftmax (both axis semantics, the reference's 16-bit
// rounding), CumSum/CumProd, TopK (every path of the CUDA sort) and Einsum.
#include <algorithm>
#include <map>
#include <numeric>

#include "cuda_sweep/sweep.h"
#include "ops/numerics.h"

namespace reforge::cuda_sweep {

namespace {

// A shape to reduce: random ranks, a row past one block (2048), a zero-size kept dimension.
std::vector<Shape> reduce_shapes(Gen& g) {
  return {g.shape(1, 1, 40), g.shape(2, 1, 12), g.shape(3, 1, 7), g.shape(4, 1, 5), {3, 2500}, {2600, 3}, {0, 4}};
}

// Distinct axes of a rank-r shape, normalized or negative; never one of size 0 in `s`.
std::vector<int64_t> some_axes(Gen& g, const Shape& s) {
  std::vector<int64_t> axes;
  const int64_t r = static_cast<int64_t>(s.size());
  for (int64_t a = 0; a < r; ++a)
    if (s[static_cast<size_t>(a)] != 0 && g.coin()) axes.push_back(g.coin() ? a : a - r);
  return axes;
}

struct Reduce {
  const char* op;
  int axes_input_since;
  float lo, hi;      // value range: positive for LogSum, near 1 for Prod
  bool bool_minmax;  // bool from opset 20 (ReduceMax, ReduceMin)
};

Generator reduce(Reduce r) {
  return [r](Gen& g) {
    std::vector<DType> types = numeric_types();
    if (r.bool_minmax && g.opset() >= 20) types.push_back(DType::Bool);
    const auto shapes = reduce_shapes(g);
    for (DType t : types)
      for (const Shape& s : t == DType::Float32 ? shapes : g.some(shapes, 2)) {
        // Integers from [lo, hi] scaled by 4: keep products and exponentials in range.
        const float scale = is_float(t) ? 1.0f : 0.25f;
        const Tensor x = g.random(t, s, r.lo * scale, r.hi * scale);
        const std::vector<int64_t> axes = some_axes(g, s);
        const ir::Attribute keep = ir::int_attr("keepdims", g.between(0, 1));
        if (g.opset() < r.axes_input_since) {
          if (axes.empty()) g.add({x}, {keep});
          else g.add({x}, {keep, ir::ints_attr("axes", axes)});
          continue;
        }
        g.add({x, Gen::ints(axes)}, {keep});
        if (axes.empty()) g.add({x, Gen::ints({})}, {keep, ir::int_attr("noop_with_empty_axes", 1)});
        if (g.between(0, 3) == 0) g.add({x}, {keep});  // no axes input: every axis
      }
  };
}

// ArgMax/ArgMin: integer values tie often; select_last_index from opset 12.
void arg_cases(Gen& g) {
  for (DType t : numeric_types())
    for (const Shape& s : g.some(reduce_shapes(g), t == DType::Float32 ? 7 : 2)) {
      if (s[0] == 0) continue;
      const int64_t r = static_cast<int64_t>(s.size());
      Attrs a = {ir::int_attr("axis", g.between(-r, r - 1)), ir::int_attr("keepdims", g.between(0, 1))};
      if (g.opset() >= 12) a.push_back(ir::int_attr("select_last_index", g.between(0, 1)));
      Tensor x = g.random(t, s, -1.0f, 1.0f);
      if (is_float(t) && g.coin()) x = Gen::with_specials(x);
      g.add({x}, a);
    }
}

void softmax_cases(Gen& g) {
  std::vector<Shape> shapes = reduce_shapes(g);
  shapes.push_back({2, 3, 4, 5});
  for (DType t : kFloats)
    for (const Shape& s : t == DType::Float32 ? shapes : g.some(shapes, 4)) {
      const int64_t r = static_cast<int64_t>(s.size());
      Tensor x = g.random(t, s, -6.0f, 6.0f);
      if (g.between(0, 3) == 0) x = Gen::with_specials(x);
      Attrs a = {ir::int_attr("axis", g.between(-r, r - 1))};
      if ((t == DType::Float16 || t == DType::BFloat16) && g.coin())
        a.push_back(ir::int_attr(ops::kReferenceRoundingAttr, 1));
      g.add({x}, a);
    }
}

// CumSum (axis a scalar input) and CumProd, exclusive and reverse; rows past a warp along the last
// axis take the block scan.
void cumulate_cases(Gen& g) {
  const bool prod = g.op() == "CumProd";
  std::vector<Shape> shapes = {g.shape(1, 1, 30), g.shape(2, 1, 9), g.shape(3, 1, 6), {2, 700}, {700, 2}, {0, 3}};
  for (DType t : numeric_types())
    for (const Shape& s : t == DType::Float32 ? shapes : g.some(shapes, 2)) {
      const int64_t r = static_cast<int64_t>(s.size());
      const Tensor x = prod ? g.random(t, s, is_float(t) ? 0.9f : 0.0f, is_float(t) ? 1.1f : 0.5f) : g.random(t, s);
      const Tensor axis = Gen::scalar(g.coin() ? DType::Int64 : DType::Int32, static_cast<double>(g.between(-r, r - 1)));
      g.add({x, axis}, {ir::int_attr("exclusive", g.between(0, 1)), ir::int_attr("reverse", g.between(0, 1))});
    }
}

// TopK: k as attribute (before 10) or input; largest/smallest and sorted from 11; slices up to one
// block's sort, longer ones with a small k (rounds of selection) and a large k (global sort).
void topk_cases(Gen& g) {
  struct Form {
    Shape s;
    int64_t axis;
    int64_t k;
  };
  std::vector<Form> forms = {{g.shape(1, 1, 40), 0, 0},    {g.shape(2, 2, 12), 1, 0}, {g.shape(3, 2, 8), -2, 0},
                             {g.shape(4, 1, 5), 0, 0},     {{2, 5000}, 1, 17},        {{1, 5000}, -1, 3000},
                             {{9000, 2}, 0, 1000}};
  for (DType t : numeric_types())
    for (const Form& f : t == DType::Float32 ? forms : g.some(forms, 2)) {
      const size_t ax = static_cast<size_t>(f.axis < 0 ? f.axis + static_cast<int64_t>(f.s.size()) : f.axis);
      const int64_t k = f.k ? f.k : g.between(0, f.s[ax]);
      Tensor x = g.random(t, f.s, -1.0f, 1.0f);
      if (is_float(t) && g.coin()) x = Gen::with_specials(x);
      Attrs a = {ir::int_attr("axis", f.axis)};
      if (g.opset() >= 11) {
        a.push_back(ir::int_attr("largest", g.between(0, 1)));
        a.push_back(ir::int_attr("sorted", 1));
      }
      if (g.opset() < 10) {
        a.push_back(ir::int_attr("k", k));
        g.add({x}, a, 2);
      } else {
        g.add({x, Gen::ints({k})}, a, 2);
      }
    }
}

// Einsum: products, batched products, transposes, diagonals, traces, sums, outer products,
// broadcasting ellipses.
void einsum_cases(Gen& g) {
  const std::vector<std::string> equations = {"ij,jk->ik",   "bij,bjk->bik", "ij->ji",       "ii->i",
                                              "ii->",        "ij->",         "i,i->",        "i,j->ij",
                                              "bhqd,bhkd->bhqk", "...ij,...jk->...ik", "ijk->kj", "ij,ij->i"};
  std::vector<DType> types = kFloats;
  types.insert(types.end(), {DType::Int32, DType::Int64, DType::UInt8});
  for (const std::string& eq : equations)
    for (DType t : g.some(types, 3)) {
      std::map<char, int64_t> size;
      for (char c : eq)
        if (c >= 'a' && c <= 'z' && !size.count(c)) size[c] = g.between(1, 6);
      const Shape batch = g.shape(static_cast<int>(g.between(0, 2)), 1, 3);
      std::vector<Tensor> ins;
      const std::string lhs = eq.substr(0, eq.find("->"));
      for (size_t start = 0; start <= lhs.size();) {
        const size_t end = std::min(lhs.find(',', start), lhs.size());
        Shape s;
        for (size_t i = start; i < end; ++i) {
          if (lhs[i] == '.') {
            if (lhs.compare(i, 3, "...") == 0) s.insert(s.end(), batch.begin(), batch.end()), i += 2;
            continue;
          }
          s.push_back(size[lhs[i]]);
        }
        ins.push_back(g.random(t, s));
        start = end + 1;
      }
      g.add(ins, {ir::string_attr("equation", eq)});
    }
}

}  // namespace

void add_reduce_cases(std::vector<OpCases>& out) {
  const Reduce reductions[] = {{"ReduceSum", 13, -2, 2, false},      {"ReduceMean", 18, -2, 2, false},
                               {"ReduceSumSquare", 18, -2, 2, false}, {"ReduceL1", 18, -2, 2, false},
                               {"ReduceL2", 18, -2, 2, false},       {"ReduceLogSum", 18, 0.1f, 2, false},
                               {"ReduceLogSumExp", 18, -2, 2, false}, {"ReduceProd", 18, 0.8f, 1.25f, false},
                               {"ReduceMax", 18, -2, 2, true},       {"ReduceMin", 18, -2, 2, true}};
  for (const Reduce& r : reductions) out.push_back({"reduce", "", r.op, reduce(r), {13, 18, 20}});
  out.push_back({"reduce", "", "ArgMax", arg_cases, {12}});
  out.push_back({"reduce", "", "ArgMin", arg_cases, {12}});
  out.push_back({"reduce", "", "Softmax", softmax_cases, {13}});
  out.push_back({"reduce", "", "LogSoftmax", softmax_cases, {13}});
  out.push_back({"reduce", "", "CumSum", cumulate_cases});
  out.push_back({"reduce", "", "CumProd", cumulate_cases});
  out.push_back({"reduce", "", "TopK", topk_cases, {10, 11}});
  out.push_back({"reduce", "", "Einsum", einsum_cases});
}

}  // namespace reforge::cuda_sweep
