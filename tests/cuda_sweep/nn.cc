// Sweep cases of the products, convolutions and pools (cuda_sweep/sweep.h): MatMul (1-D promotion,
// batch broadcasting, integers), Gemm (transposes, alpha/beta, every C broadcast), reforge::MatMulGroup, reforge::MatMulAdd
// (16-bit weights, bf16 activations), Conv and reforge::FusedConv (1-3 spatial dims, groups,
// strides, dilations, symmetric and asymmetric pads, auto_pad, residual and ReLU), ConvTranspose
// (output_padding, output_shape) and the pools (ceil_mode, dilations, count_include_pad, Indices).
#include <algorithm>

#include "cuda_sweep/sweep.h"

namespace reforge::cuda_sweep {

namespace {

void matmul_cases(Gen& g) {
  struct Dims {
    Shape a, b;
  };
  const int64_t m = g.between(1, 9), k = g.between(1, 70), n = g.between(1, 9), b = g.between(2, 3);
  const std::vector<Dims> forms = {{{m, k}, {k, n}},       {{k}, {k, n}},          {{m, k}, {k}},
                                   {{k}, {k}},             {{b, m, k}, {k, n}},    {{b, m, k}, {b, k, n}},
                                   {{2, 1, m, k}, {b, k, n}}, {{m, k}, {b, k, n}}, {{m, 0}, {0, n}},
                                   {{0, k}, {k, n}},       {{130, 257}, {257, 66}}};
  std::vector<DType> types = kFloats;
  if (g.opset() >= 9) types.insert(types.end(), {DType::Int32, DType::Int64, DType::UInt32, DType::UInt64});
  for (DType t : types)
    for (const Dims& d : t == DType::Float32 ? forms : g.some(forms, 4)) g.add({g.random(t, d.a), g.random(t, d.b)});
}

// Gemm: A [M, K] or transposed, B [K, N] or transposed, C absent, scalar, [N], [M, 1] or [M, N].
void gemm_cases(Gen& g) {
  std::vector<DType> types = kFloats;
  if (g.opset() >= 9) types.insert(types.end(), {DType::Int32, DType::Int64});
  for (DType t : types)
    for (int i = 0; i < (t == DType::Float32 ? 10 : 3); ++i) {
      const int64_t m = g.between(1, 9), k = g.between(0, 40), n = g.between(1, 9);
      const bool ta = g.coin(), tb = g.coin();
      const bool is_int = t == DType::Int32 || t == DType::Int64;
      Attrs a = {ir::int_attr("transA", ta), ir::int_attr("transB", tb)};
      if (is_int) {
        // Integers scale by a non-unit alpha or beta in float64 (numpy's promotion).
        a.push_back(ir::float_attr("alpha", g.pick(std::vector<float>{1.0f, 2.0f, 0.5f})));
        a.push_back(ir::float_attr("beta", g.pick(std::vector<float>{0.0f, 1.0f, -0.25f, 3.0f})));
      } else if (g.coin()) {
        a.push_back(ir::float_attr("alpha", 0.5f + static_cast<float>(g.between(0, 8)) / 4));
        a.push_back(ir::float_attr("beta", static_cast<float>(g.between(-4, 4)) / 4));
      }
      Tensor c;
      const int64_t form = g.between(g.opset() >= 11 ? 0 : 1, 4);
      if (form > 0) c = g.random(t, g.pick(std::vector<Shape>{{}, {n}, {m, 1}, {m, n}}));
      g.add({g.random(t, ta ? Shape{k, m} : Shape{m, k}), g.random(t, tb ? Shape{n, k} : Shape{k, n}), c}, a);
    }
}

void matmul_add_cases(Gen& g) {
  for (DType wt : {DType::Float32, DType::BFloat16, DType::Float16})
    for (int i = 0; i < 4; ++i) {
      const int64_t k = g.between(0, 90), n = g.between(1, 40);
      const Shape xs = g.pick(std::vector<Shape>{{g.between(1, 9), k}, {2, g.between(1, 5), k}, {k}});
      const Tensor bias = g.coin() ? g.random(DType::Float32, {n}) : Tensor();
      Attrs a;
      if (g.coin()) a.push_back(ir::int_attr("bf16_activations", 1));
      g.add({g.random(DType::Float32, xs), g.random(wt, {k, n}), bias}, a);
    }
}

// reforge::MatMulGroup: two to four products of one X; and a decoding step's shapes (a few rows,
// 2^22 weights or more: one launch of the gemv kernel).
void matmul_group_cases(Gen& g) {
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float16})
    for (int i = 0; i < 4; ++i) {
      const int64_t k = g.between(1, 90);
      const Shape xs = g.pick(std::vector<Shape>{{g.between(1, 9), k}, {2, g.between(1, 5), k}, {k}});
      std::vector<Tensor> in = {g.random(t, xs)};
      const int64_t n = g.between(2, 4);
      for (int64_t j = 0; j < n; ++j) in.push_back(g.random(t, {k, g.between(1, 40)}));
      g.add(in, {}, static_cast<size_t>(n));
    }
  for (DType t : {DType::BFloat16, DType::Float16})
    for (int64_t rows : {1, 3})
      g.add({g.random(t, {rows, 1024}, -1.0f, 1.0f), g.random(t, {1024, 2048}, -1.0f, 1.0f),
             g.random(t, {1024, 2048}, -1.0f, 1.0f), g.random(t, {1024, 512}, -1.0f, 1.0f)},
            {}, 3);
}

// The geometry of one convolution: shapes and attributes valid for every pool and conv op.
struct Geometry {
  Shape spatial, kernel;
  std::vector<int64_t> strides, dilations, pads;
  std::string auto_pad;  // "" for explicit pads
};

Geometry geometry(Gen& g, int nsp, bool dilate) {
  Geometry geo;
  for (int i = 0; i < nsp; ++i) {
    const int64_t k = g.between(1, 3), d = dilate ? g.between(1, 2) : 1;
    geo.kernel.push_back(k);
    geo.dilations.push_back(d);
    geo.strides.push_back(g.between(1, 3));
    geo.spatial.push_back(g.between(d * (k - 1) + 1, d * (k - 1) + 7));
  }
  geo.pads.resize(2 * static_cast<size_t>(nsp));
  for (int i = 0; i < 2 * nsp; ++i) geo.pads[static_cast<size_t>(i)] = g.between(0, geo.kernel[static_cast<size_t>(i % nsp)] - 1);
  const int64_t mode = g.between(0, 5);
  geo.auto_pad = mode == 0 ? "SAME_UPPER" : mode == 1 ? "SAME_LOWER" : mode == 2 ? "VALID" : "";
  return geo;
}

Attrs geometry_attrs(const Geometry& geo, bool dilations) {
  Attrs a = {ir::ints_attr("kernel_shape", geo.kernel), ir::ints_attr("strides", geo.strides)};
  if (dilations) a.push_back(ir::ints_attr("dilations", geo.dilations));
  if (geo.auto_pad.empty()) a.push_back(ir::ints_attr("pads", geo.pads));
  else a.push_back(ir::string_attr("auto_pad", geo.auto_pad));
  return a;
}

Shape conv_out(const Geometry& geo) {
  Shape o;
  const size_t n = geo.spatial.size();
  for (size_t i = 0; i < n; ++i) {
    const int64_t ext = geo.dilations[i] * (geo.kernel[i] - 1) + 1;
    if (geo.auto_pad == "SAME_UPPER" || geo.auto_pad == "SAME_LOWER")
      o.push_back((geo.spatial[i] + geo.strides[i] - 1) / geo.strides[i]);
    else if (geo.auto_pad == "VALID")
      o.push_back((geo.spatial[i] - ext) / geo.strides[i] + 1);
    else
      o.push_back((geo.spatial[i] + geo.pads[i] + geo.pads[i + n] - ext) / geo.strides[i] + 1);
  }
  return o;
}

// Conv and FusedConv (X, W, B?, Z?): Z of the output's shape or broadcast per channel.
void conv_cases(Gen& g) {
  const bool fused = g.op() == "FusedConv";
  for (DType t : fused ? std::vector<DType>{DType::Float32, DType::Float16, DType::BFloat16, DType::Float64} : kFloats)
    for (int i = 0; i < (t == DType::Float32 ? 12 : 4); ++i) {
      const int nsp = static_cast<int>(g.between(1, 3));
      const Geometry geo = geometry(g, nsp, true);
      const int64_t group = g.between(1, 3), n = g.between(1, 2);
      const int64_t c = group * g.between(1, 3), m = group * g.between(1, 3);
      Shape xs = {n, c}, ws = {m, c / group}, ys = {n, m};
      xs.insert(xs.end(), geo.spatial.begin(), geo.spatial.end());
      ws.insert(ws.end(), geo.kernel.begin(), geo.kernel.end());
      const Shape out = conv_out(geo);
      ys.insert(ys.end(), out.begin(), out.end());
      Attrs a = geometry_attrs(geo, true);
      a.push_back(ir::int_attr("group", group));
      std::vector<Tensor> ins = {g.random(t, xs), g.random(t, ws, -0.5f, 0.5f), g.coin() ? g.random(t, {m}) : Tensor()};
      if (fused) {
        if (g.coin()) a.push_back(ir::string_attr("activation", "Relu"));
        Shape zs = ys;
        if (g.coin()) std::fill(zs.begin() + 2, zs.end(), 1), zs[0] = 1;
        if (g.between(0, 2) != 0) ins.push_back(g.random(t, zs));
        if (ins.size() == 4 && zs == ys && g.coin()) a.push_back(ir::int_attr("z_inplace", 1));
      }
      g.add(ins, a);
    }
}

// ConvTranspose: X [N, C, ...], W [C, M / group, k...]; output_padding below the stride, or an
// explicit output_shape.
void conv_transpose_cases(Gen& g) {
  for (DType t : kFloats)
    for (int i = 0; i < (t == DType::Float32 ? 12 : 4); ++i) {
      const int nsp = static_cast<int>(g.between(1, 3));
      Geometry geo = geometry(g, nsp, true);
      const int64_t group = g.between(1, 2), n = g.between(1, 2);
      const int64_t c = group * g.between(1, 3), mg = g.between(1, 3);
      Shape xs = {n, c}, ws = {c, mg};
      for (int d = 0; d < nsp; ++d) xs.push_back(g.between(1, 5));
      ws.insert(ws.end(), geo.kernel.begin(), geo.kernel.end());
      Attrs a = {ir::ints_attr("kernel_shape", geo.kernel), ir::ints_attr("strides", geo.strides),
                 ir::ints_attr("dilations", geo.dilations), ir::int_attr("group", group)};
      std::vector<int64_t> out_pad;
      for (int d = 0; d < nsp; ++d) out_pad.push_back(g.between(0, std::max(geo.strides[static_cast<size_t>(d)], geo.dilations[static_cast<size_t>(d)]) - 1));
      const int64_t form = g.between(0, 3);
      if (form == 0) {
        std::vector<int64_t> shape;
        for (int d = 0; d < nsp; ++d) shape.push_back(xs[static_cast<size_t>(d) + 2] * geo.strides[static_cast<size_t>(d)] + g.between(0, 1));
        a.push_back(ir::ints_attr("output_shape", shape));
      } else if (form == 1 && !geo.auto_pad.empty() && geo.auto_pad != "VALID") {
        a.push_back(ir::string_attr("auto_pad", geo.auto_pad));
      } else {
        a.push_back(ir::ints_attr("pads", geo.pads));
        a.push_back(ir::ints_attr("output_padding", out_pad));
      }
      g.add({g.random(t, xs), g.random(t, ws, -0.5f, 0.5f), g.coin() ? g.random(t, {mg * group}) : Tensor()}, a);
    }
}

// MaxPool (Indices from 8, dilations and ceil_mode from 10, storage_order) and AveragePool
// (count_include_pad from 7, ceil_mode from 10, dilations from 19).
void pool_cases(Gen& g) {
  const bool max = g.op() == "MaxPool";
  const bool dilations = max ? g.opset() >= 10 : g.opset() >= 19;
  for (DType t : kFloats)
    for (int i = 0; i < (t == DType::Float32 ? 12 : 4); ++i) {
      const int nsp = static_cast<int>(g.between(1, 3));
      const Geometry geo = geometry(g, nsp, dilations);
      Shape xs = {g.between(1, 2), g.between(1, 4)};
      xs.insert(xs.end(), geo.spatial.begin(), geo.spatial.end());
      Attrs a = geometry_attrs(geo, dilations);
      if (g.opset() >= 10 && geo.auto_pad.empty()) a.push_back(ir::int_attr("ceil_mode", g.between(0, 1)));
      if (!max && g.opset() >= 7) a.push_back(ir::int_attr("count_include_pad", g.between(0, 1)));
      size_t outputs = 1;
      if (max && g.opset() >= 8 && g.coin()) {
        outputs = 2;
        a.push_back(ir::int_attr("storage_order", g.between(0, 1)));
      }
      Tensor x = g.random(t, xs);
      if (g.between(0, 3) == 0) x = Gen::with_specials(x);
      g.add({x}, a, outputs);
    }
}

void global_pool_cases(Gen& g) {
  const std::vector<Shape> shapes = {g.shape(3, 1, 9), g.shape(4, 1, 6), g.shape(5, 1, 4), {2, 3, 40, 40}, {0, 2, 3}};
  for (DType t : kFloats)
    for (const Shape& s : t == DType::Float32 ? shapes : g.some(shapes, 3)) {
      Tensor x = g.random(t, s);
      if (g.between(0, 3) == 0) x = Gen::with_specials(x);
      g.add({x});
    }
}

}  // namespace

void add_nn_cases(std::vector<OpCases>& out) {
  out.push_back({"nn", "", "MatMul", matmul_cases, {9}});
  out.push_back({"nn", "", "Gemm", gemm_cases, {9, 11}});
  out.push_back({"nn", "reforge", "MatMulAdd", matmul_add_cases});
  out.push_back({"nn", "reforge", "MatMulGroup", matmul_group_cases});
  out.push_back({"nn", "", "Conv", conv_cases});
  out.push_back({"nn", "reforge", "FusedConv", conv_cases});
  out.push_back({"nn", "", "ConvTranspose", conv_transpose_cases});
  out.push_back({"nn", "", "MaxPool", pool_cases, {8, 10}});
  out.push_back({"nn", "", "AveragePool", pool_cases, {7, 10, 19}});
  out.push_back({"nn", "", "GlobalMaxPool", global_pool_cases});
  out.push_back({"nn", "", "GlobalAveragePool", global_pool_cases});
}

}  // namespace reforge::cuda_sweep
