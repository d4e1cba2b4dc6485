// Sweep cases of the layout ops (cuda_sweep/sweep.h): Transpose, Concat, Split, Slice, Tile,
// DepthToSpace, SpaceToDepth, Trilu, Pad, the views (Identity, Reshape, Flatten, Squeeze,
// Unsqueeze), Shape, Size, Constant, and the transfers reforge::ToDevice / reforge::ToHost. Layout
// kernels move elements by size, so every type runs; structure inputs are valid for the shapes.
#include <algorithm>
#include <numeric>

#include "cuda_sweep/sweep.h"

namespace reforge::cuda_sweep {

namespace {

// Every type for the first shapes, then a few types per shape: layout kernels only see sizes.
template <typename F>
void for_types(Gen& g, const std::vector<Shape>& shapes, F&& f) {
  const std::vector<DType> types = all_types();
  for (size_t i = 0; i < shapes.size(); ++i)
    for (DType t : i == 0 ? types : g.some(types, 3)) f(t, shapes[i]);
}

std::vector<int64_t> permutation(Gen& g, size_t n) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  for (size_t i = n; i > 1; --i) std::swap(p[i - 1], p[static_cast<size_t>(g.between(0, static_cast<int64_t>(i) - 1))]);
  return p;
}

void transpose_cases(Gen& g) {
  std::vector<Shape> shapes = {g.shape(2, 1, 70), g.shape(3), g.shape(4), g.shape(5, 1, 4), {3, 0, 2}, {33, 47}};
  for_types(g, shapes, [&](DType t, const Shape& s) {
    g.add({g.random(t, s)}, {ir::ints_attr("perm", permutation(g, s.size()))});
    g.add({g.random(t, s)});  // no perm: reversed
  });
}

void concat_cases(Gen& g) {
  for (DType t : all_types())
    for (int rank : {1, 2, 3, 4}) {
      if (t != DType::Float32 && g.between(0, 2) != 0) continue;
      const Shape base = g.shape(rank, 1, 6);
      const int64_t axis = g.between(-rank, rank - 1);
      const size_t ax = static_cast<size_t>(axis < 0 ? axis + rank : axis);
      std::vector<Tensor> ins;
      for (int64_t k = g.between(1, 4); k > 0; --k) {
        Shape s = base;
        s[ax] = g.between(0, 5);  // an empty input adds nothing
        ins.push_back(g.random(t, s));
      }
      g.add(ins, {ir::int_attr("axis", axis)});
    }
}

// Split: the sizes as an attribute (before 13) or an input, equal parts, num_outputs (18).
void split_cases(Gen& g) {
  for (DType t : all_types()) {
    const int rank = static_cast<int>(g.between(1, 4));
    const Shape s = g.shape(rank, 1, 9);
    const int64_t axis = g.between(g.opset() >= 11 ? -rank : 0, rank - 1);
    const int64_t n = s[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
    const Tensor x = g.random(t, s);
    // Uneven sizes summing to n, one of them possibly empty.
    std::vector<int64_t> sizes;
    for (int64_t left = n; left > 0;) sizes.push_back(std::min(left, g.between(0, 4))), left -= sizes.back();
    sizes.push_back(0);
    ir::Attribute ax = ir::int_attr("axis", axis);
    if (g.opset() < 13) {
      g.add({x}, {ax, ir::ints_attr("split", sizes)}, sizes.size());
    } else {
      g.add({x, Gen::ints(sizes)}, {ax}, sizes.size());
    }
    if (n % 2 == 0) g.add({x}, {ax}, 2);
    if (g.opset() >= 18) g.add({x}, {ax, ir::int_attr("num_outputs", std::min<int64_t>(n, 3))}, std::min<int64_t>(n, 3));
  }
}

// Slice: starts/ends past either end, negative steps, int32 or int64 bounds (opset 10 inputs), or
// the opset-1 attributes.
void slice_cases(Gen& g) {
  for (int rank = 1; rank <= 4; ++rank)
    for (DType t : g.some(all_types(), 5)) {
      const Shape s = g.shape(rank, 1, 9);
      std::vector<int64_t> starts, ends, axes, steps;
      for (int64_t a : permutation(g, s.size())) {
        if (g.between(0, 3) == 0) continue;
        const int64_t d = s[static_cast<size_t>(a)];
        const int64_t step = g.opset() >= 10 ? g.pick(std::vector<int64_t>{1, 1, 2, 3, -1, -2}) : 1;
        starts.push_back(g.between(-d - 2, d + 2));
        ends.push_back(g.coin() ? g.between(-d - 2, d + 2) : (step > 0 ? 1000 : -1000));
        axes.push_back(g.coin() ? a : a - rank);
        steps.push_back(step);
      }
      if (starts.empty()) starts = {0}, ends = {1}, axes = {0}, steps = {1};
      const Tensor x = g.random(t, s);
      if (g.opset() < 10) {
        g.add({x}, {ir::ints_attr("starts", starts), ir::ints_attr("ends", ends), ir::ints_attr("axes", axes)});
        continue;
      }
      const DType it = g.coin() ? DType::Int64 : DType::Int32;
      g.add({x, Gen::ints(starts, it), Gen::ints(ends, it), Gen::ints(axes, it), Gen::ints(steps, it)});
      if (static_cast<int>(axes.size()) == rank) g.add({x, Gen::ints(starts, it), Gen::ints(ends, it)});
    }
}

void tile_cases(Gen& g) {
  std::vector<Shape> shapes = {g.shape(1), g.shape(2), g.shape(3, 1, 4), g.shape(4, 1, 3), {2, 0, 3}};
  for_types(g, shapes, [&](DType t, const Shape& s) {
    std::vector<int64_t> reps;
    for (size_t i = 0; i < s.size(); ++i) reps.push_back(g.between(0, 3));
    g.add({g.random(t, s), Gen::ints(reps)});
  });
}

void depth_space_cases(Gen& g, bool to_space) {
  std::vector<const char*> modes = {"DCR"};
  if (to_space && g.opset() >= 11) modes.push_back("CRD");
  for (DType t : all_types())
    for (const char* mode : modes) {
      const int64_t b = g.between(1, 3), n = g.between(1, 2), c = g.between(1, 3);
      const int64_t h = g.between(1, 4), w = g.between(1, 5);
      const Shape s = to_space ? Shape{n, c * b * b, h, w} : Shape{n, c, h * b, w * b};
      Attrs attrs = {ir::int_attr("blocksize", b)};
      if (to_space) attrs.push_back(ir::string_attr("mode", mode));
      g.add({g.random(t, s)}, attrs);
    }
}

void trilu_cases(Gen& g) {
  std::vector<Shape> shapes = {g.shape(2, 1, 9), g.shape(3, 1, 7), g.shape(4, 1, 5), {3, 0, 4}, {40, 1}};
  for_types(g, shapes, [&](DType t, const Shape& s) {
    const int64_t k = g.between(-s[0] - 2, s.back() + 2);
    const ir::Attribute upper = ir::int_attr("upper", g.between(0, 1));
    g.add({g.random(t, s), Gen::scalar(DType::Int64, static_cast<double>(k))}, {upper});
    g.add({g.random(t, s)}, {upper});
  });
}

// Pad: constant (with and without a value), reflect (pads below the dimension), edge, wrap (19),
// negative pads that crop; axes from 18; opset 2 attributes.
void pad_cases(Gen& g) {
  std::vector<std::string> modes = {"constant", "reflect", "edge"};
  if (g.opset() >= 19) modes.push_back("wrap");
  for (int rank = 1; rank <= 4; ++rank)
    for (const std::string& mode : modes)
      for (DType t : g.some(all_types(), 3)) {
        const Shape s = g.shape(rank, 2, 6);
        std::vector<int64_t> pads(2 * s.size());
        for (size_t i = 0; i < pads.size(); ++i) {
          const int64_t d = s[i % s.size()];
          pads[i] = mode == "reflect" ? g.between(-1, d - 1) : g.between(-1, 4);
        }
        const Tensor x = g.random(t, s);
        const Attrs m = {ir::string_attr("mode", mode)};
        if (g.opset() < 11) {
          Attrs a = m;
          a.push_back(ir::ints_attr(g.opset() < 2 ? "paddings" : "pads", pads));
          if (mode == "constant") a.push_back(ir::float_attr("value", -2.5f));
          if (t == DType::Float32 || t == DType::Float64 || t == DType::Float16) g.add({x}, a);
          continue;
        }
        if (mode == "constant") g.add({x, Gen::ints(pads), g.random(t, {})}, m);
        g.add({x, Gen::ints(pads)}, m);
        if (g.opset() >= 18 && rank >= 2) {
          const int64_t a0 = g.between(-rank, -1);
          const int64_t d = s[static_cast<size_t>(a0 + rank)];
          const int64_t lo = mode == "reflect" ? d - 1 : 3;
          g.add({x, Gen::ints({g.between(0, lo), g.between(0, lo)}), Tensor(), Gen::ints({a0})}, m);
        }
      }
}

void identity_cases(Gen& g) {
  for (DType t : all_types()) g.add({g.random(t, g.shape(static_cast<int>(g.between(0, 4))))});
  g.add({g.random(DType::Float32, {0, 3})});
}

// Reshape with 0 (copy the input's dimension), -1 (inferred), and allowzero (14) with an empty
// target; the shape an attribute before opset 5.
void reshape_cases(Gen& g) {
  for (DType t : all_types()) {
    const Shape s = g.shape(3, 1, 5);
    const int64_t n = s[0] * s[1] * s[2];
    for (const std::vector<int64_t>& target : {std::vector<int64_t>{0, -1}, {n}, {-1, s[2], 1}}) {
      if (g.opset() < 5) g.add({g.random(t, s)}, {ir::ints_attr("shape", target)});
      else g.add({g.random(t, s), Gen::ints(target)});
    }
  }
  if (g.opset() >= 14) g.add({g.random(DType::Float32, {0, 4}), Gen::ints({4, 0})}, {ir::int_attr("allowzero", 1)});
}

void flatten_cases(Gen& g) {
  for (DType t : all_types()) {
    const int rank = static_cast<int>(g.between(1, 4));
    g.add({g.random(t, g.shape(rank))}, {ir::int_attr("axis", g.between(g.opset() >= 11 ? -rank : 0, rank))});
  }
}

// Squeeze (size-1 axes, or all when none are given) and Unsqueeze (new axes, negative too); axes
// an attribute before 13, an input from 13.
void squeeze_cases(Gen& g, bool squeeze) {
  for (DType t : all_types()) {
    Shape s = g.shape(static_cast<int>(g.between(1, 3)), 2, 5);
    std::vector<int64_t> axes;
    if (squeeze) {
      const int64_t ones = g.between(1, 2);
      for (int64_t i = 0; i < ones; ++i) s.insert(s.begin() + g.between(0, static_cast<int64_t>(s.size())), 1);
      for (size_t i = 0; i < s.size(); ++i)
        if (s[i] == 1 && g.coin()) axes.push_back(g.coin() ? static_cast<int64_t>(i) : static_cast<int64_t>(i) - static_cast<int64_t>(s.size()));
    } else {
      const int64_t out_rank = static_cast<int64_t>(s.size()) + g.between(1, 2);
      for (int64_t a : permutation(g, static_cast<size_t>(out_rank)))
        if (static_cast<int64_t>(axes.size()) < out_rank - static_cast<int64_t>(s.size())) axes.push_back(g.coin() ? a : a - out_rank);
    }
    const Tensor x = g.random(t, s);
    if (squeeze && axes.empty()) g.add({x});
    else if (g.opset() < 13) g.add({x}, {ir::ints_attr("axes", axes)});
    else g.add({x, Gen::ints(axes)});
  }
}

void shape_cases(Gen& g) {
  for (DType t : g.some(all_types(), 5)) {
    const int rank = static_cast<int>(g.between(0, 4));
    const Tensor x = g.random(t, g.shape(rank));
    g.add({x});
    if (g.opset() >= 15) g.add({x}, {ir::int_attr("start", g.between(-rank - 1, rank)), ir::int_attr("end", g.between(-rank, rank + 1))});
  }
}

void size_cases(Gen& g) {
  for (DType t : g.some(all_types(), 5)) g.add({g.random(t, g.shape(static_cast<int>(g.between(0, 4)), 0, 5))});
}

void constant_cases(Gen& g) {
  for (DType t : all_types()) g.add({}, {ir::tensor_attr("value", g.random(t, g.shape(static_cast<int>(g.between(0, 3)))))});
  if (g.opset() >= 12) {
    g.add({}, {ir::float_attr("value_float", 2.5f)});
    g.add({}, {ir::ints_attr("value_ints", {3, -1, 7})});
  }
}

// The transfers run in every case; here they carry each type and an empty tensor both ways
// around an Identity node, which placement puts on the device.
void transfer_cases(Gen& g) {
  for (DType t : all_types())
    for (const Shape& s : {g.shape(static_cast<int>(g.between(0, 3))), Shape{0, 2}}) {
      Case& c = g.add({g.random(t, s)});
      c.node.domain = "";
      c.node.op_type = "Identity";
      c.node.opset = 16;
    }
}

}  // namespace

void add_layout_cases(std::vector<OpCases>& out) {
  out.push_back({"layout", "", "Transpose", transpose_cases});
  out.push_back({"layout", "", "Concat", concat_cases});
  out.push_back({"layout", "", "Split", split_cases, {11, 13, 18}});
  out.push_back({"layout", "", "Slice", slice_cases, {10}});
  out.push_back({"layout", "", "Tile", tile_cases});
  out.push_back({"layout", "", "DepthToSpace", [](Gen& g) { depth_space_cases(g, true); }, {11}});
  out.push_back({"layout", "", "SpaceToDepth", [](Gen& g) { depth_space_cases(g, false); }});
  out.push_back({"layout", "", "Trilu", trilu_cases});
  out.push_back({"layout", "", "Pad", pad_cases, {2, 11, 18, 19}});
  out.push_back({"layout", "", "Identity", identity_cases});
  out.push_back({"layout", "", "Reshape", reshape_cases, {5, 14}});
  out.push_back({"layout", "", "Flatten", flatten_cases, {11}});
  out.push_back({"layout", "", "Squeeze", [](Gen& g) { squeeze_cases(g, true); }, {13}});
  out.push_back({"layout", "", "Unsqueeze", [](Gen& g) { squeeze_cases(g, false); }, {13}});
  out.push_back({"layout", "", "Shape", shape_cases, {15}});
  out.push_back({"layout", "", "Size", size_cases});
  out.push_back({"layout", "", "Constant", constant_cases, {12}});
  out.push_back({"layout", "reforge", "ToDevice", transfer_cases});
  out.push_back({"layout", "reforge", "ToHost", transfer_cases});
}

}  // namespace reforge::cuda_sweep
