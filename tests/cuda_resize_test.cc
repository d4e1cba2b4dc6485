// The CUDA Resize, ConvTranspose and Einsum kernels against the CPU's on the same inputs: a
// one-node graph run on "cuda" and on "cpu", held to an NMSE of 1e-7 (float32/float64), 1e-4
// (16-bit floats) and equality for integer results. They skip where no GPU can run them.
//
// Resize: every mode (nearest with each nearest_mode, linear, cubic with two cubic_coeff_a and
// exclude_outside), every coordinate_transformation_mode, up/down/mixed scales and sizes, every
// numeric element type (integer saturation included), antialias, keep_aspect_ratio_policy, axes,
// tf_crop_and_resize with float32/float16 roi and extrapolation_value, opset 10, ranks 1 to 5,
// empty inputs and outputs, and a tensor large enough for grid-stride loops.
// ConvTranspose: 1-D to 3-D, every float type, bias, strides, dilations, groups (depthwise
// included), symmetric pads (cuDNN pads), asymmetric pads, output_padding, output_shape smaller
// and larger than the natural size, auto_pad SAME_UPPER/SAME_LOWER/VALID, and empty inputs.
// Einsum: matmul, batched and broadcast ellipsis products, diagonals, traces, transposes, sums,
// implicit outputs, three operands, size-1 broadcasting, empty contractions and outputs, every
// numeric type (integer wrap-around included).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "support/cuda_compare.h"
#include "support/make_tensor.h"

using namespace reforge;

namespace {

using test_support::expect_same_on_cuda;
using test_support::random_of;
using Attrs = std::map<std::string, ir::Attribute>;

ir::Node node(const std::string& op, std::vector<std::string> ins, Attrs attrs, int opset) {
  ir::Node n;
  n.name = "Y";
  n.op_type = op;
  n.opset = opset;
  n.inputs = std::move(ins);
  n.outputs = {"Y"};
  n.attrs = std::move(attrs);
  return n;
}

std::string floats_str(const std::vector<float>& v) {
  std::string s = "[";
  for (float f : v) s += std::to_string(f) + ",";
  return s + "]";
}

std::string attrs_str(const Attrs& attrs) {
  std::string s;
  for (const auto& [k, a] : attrs) {
    s += " " + k + "=";
    if (!a.s.empty())
      s += a.s;
    else if (!a.ints.empty())
      s += shape_str(a.ints);
    else
      s += std::to_string(a.i) + "/" + std::to_string(a.f);
  }
  return s;
}

// Resize of `x` by `scales` (or to `sizes` when scales is empty), with `roi` when non-empty.
void check_resize(const Tensor& x, const Attrs& attrs, int opset, const std::vector<float>& scales,
                  const std::vector<int64_t>& sizes, const std::vector<float>& roi = {},
                  DType roi_type = DType::Float32) {
  const std::string what = "Resize opset " + std::to_string(opset) + " " + x.describe() + attrs_str(attrs) +
                           " scales " + floats_str(scales) + " sizes " + shape_str(sizes) + " roi " + floats_str(roi);
  Tensor s = test_support::make<float>({static_cast<int64_t>(scales.size())}, scales);
  if (opset < 11) {
    expect_same_on_cuda(node("Resize", {"X", "scales"}, attrs, opset), {x, s}, what, {"scales"});
    return;
  }
  std::vector<std::string> ins = {"X", "", "", ""};
  std::vector<Tensor> vals = {x, Tensor(), Tensor(), Tensor()};
  if (!roi.empty()) {
    ins[1] = "roi";
    Tensor r = test_support::make<float>({static_cast<int64_t>(roi.size())}, roi);
    vals[1] = roi_type == DType::Float32 ? r : cast_tensor(r, roi_type);
  }
  if (!scales.empty()) {
    ins[2] = "scales";
    vals[2] = s;
  } else {
    ins[3] = "sizes";
    vals[3] = test_support::make<int64_t>({static_cast<int64_t>(sizes.size())}, sizes);
  }
  while (ins.back().empty()) ins.pop_back(), vals.pop_back();
  expect_same_on_cuda(node("Resize", ins, attrs, opset), vals, what, {"roi", "scales", "sizes"});
}

Attrs resize_attrs(const std::string& mode, const std::string& ctm) {
  return {{"mode", ir::string_attr("mode", mode)},
          {"coordinate_transformation_mode", ir::string_attr("coordinate_transformation_mode", ctm)}};
}

const std::vector<std::vector<float>> kScales = {
    {1, 1, 2, 3}, {1, 1, 0.6f, 0.45f}, {1, 1, 1.7f, 0.5f}, {1, 1, 3.3f, 1.25f}, {1, 1, 0.25f, 0.2f}};

TEST(CudaResize, EveryModeAndTransformMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 1;
  const Tensor x = random_of(DType::Float32, {2, 3, 5, 7}, 11);
  for (const char* ctm : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                          "half_pixel_symmetric"}) {
    const int opset = std::string(ctm) == "half_pixel_symmetric" ? 19 : 13;
    for (const auto& sc : kScales) {
      for (const char* nm : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}) {
        Attrs a = resize_attrs("nearest", ctm);
        a["nearest_mode"] = ir::string_attr("nearest_mode", nm);
        check_resize(x, a, opset, sc, {});
        if (::testing::Test::HasFatalFailure()) return;
      }
      check_resize(x, resize_attrs("linear", ctm), opset, sc, {});
      for (float ca : {-0.75f, -0.5f})
        for (int ex : {0, 1}) {
          Attrs a = resize_attrs("cubic", ctm);
          a["cubic_coeff_a"] = ir::float_attr("cubic_coeff_a", ca);
          a["exclude_outside"] = ir::int_attr("exclude_outside", ex);
          check_resize(x, a, opset, sc, {});
          if (::testing::Test::HasFatalFailure()) return;
        }
      ++seed;
    }
  }
}

TEST(CudaResize, EveryElementTypeMatchesTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 100;
  for (DType t : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int8, DType::Int16,
                  DType::Int32, DType::Int64, DType::UInt8, DType::UInt16, DType::UInt32, DType::UInt64}) {
    const Tensor x = random_of(t, {2, 3, 6, 5}, ++seed);
    check_resize(x, resize_attrs("nearest", "asymmetric"), 13, {1, 1, 2.5f, 1.5f}, {});
    check_resize(x, resize_attrs("linear", "half_pixel"), 13, {1, 1, 1.5f, 0.7f}, {});
    check_resize(x, resize_attrs("linear", "align_corners"), 13, {}, {2, 3, 11, 4});
    check_resize(x, resize_attrs("cubic", "half_pixel"), 13, {1, 1, 0.8f, 2.2f}, {});
    check_resize(x, resize_attrs("cubic", "pytorch_half_pixel"), 13, {}, {2, 3, 3, 9});
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Cubic overshoot beyond the type's range saturates; halves round to even; infinities clamp.
TEST(CudaResize, SaturationAndRoundingMatchTheCpu) {
  REQUIRE_GPU();
  Tensor u8 = Tensor::empty(DType::UInt8, {1, 1, 4, 6});
  for (int64_t i = 0; i < u8.numel(); ++i) u8.mutable_data<uint8_t>()[i] = (i * 7) % 3 == 0 ? 255 : 0;
  check_resize(u8, resize_attrs("cubic", "half_pixel"), 13, {1, 1, 2.3f, 1.9f}, {});
  check_resize(u8, resize_attrs("linear", "half_pixel"), 13, {1, 1, 2, 2}, {});
  Tensor i8 = Tensor::empty(DType::Int8, {1, 1, 4, 6});
  for (int64_t i = 0; i < i8.numel(); ++i) i8.mutable_data<int8_t>()[i] = i % 2 ? 127 : -128;
  check_resize(i8, resize_attrs("cubic", "align_corners"), 13, {1, 1, 1.75f, 2.5f}, {});
  Tensor odd = Tensor::empty(DType::Int32, {1, 1, 1, 8});
  for (int64_t i = 0; i < odd.numel(); ++i) odd.mutable_data<int32_t>()[i] = static_cast<int32_t>(i * 3 + 1);
  check_resize(odd, resize_attrs("linear", "asymmetric"), 13, {1, 1, 1, 2}, {});  // x.5 values round to even
  Tensor f = random_of(DType::Float32, {1, 2, 3, 4}, 5);
  f.mutable_data<float>()[1] = std::numeric_limits<float>::infinity();
  f.mutable_data<float>()[7] = -std::numeric_limits<float>::infinity();
  f.mutable_data<float>()[12] = std::nanf("");
  check_resize(f, resize_attrs("nearest", "asymmetric"), 13, {1, 1, 1, 1}, {});
  check_resize(f, resize_attrs("nearest", "asymmetric"), 13, {1, 1, 2, 2}, {});
  check_resize(f, resize_attrs("linear", "half_pixel"), 13, {1, 1, 2, 2}, {});
  Tensor h = cast_tensor(random_of(DType::Float32, {1, 2, 3, 4}, 6, -60000.f, 60000.f), DType::Float16);
  check_resize(h, resize_attrs("cubic", "half_pixel"), 13, {1, 1, 2.5f, 2.5f}, {});
}

TEST(CudaResize, AntialiasAxesAndAspectPolicyMatchTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 300;
  for (DType t : {DType::Float32, DType::Float16, DType::UInt8}) {
    const Tensor x = random_of(t, {2, 3, 17, 13}, ++seed, 0.0f, 2.0f);
    for (const char* mode : {"linear", "cubic"})
      for (const auto& sc :
           std::vector<std::vector<float>>{{1, 1, 0.5f, 0.3f}, {1, 1, 0.7f, 1.6f}, {1, 0.5f, 0.2f, 1}}) {
        Attrs a = resize_attrs(mode, "half_pixel");
        a["antialias"] = ir::int_attr("antialias", 1);
        check_resize(x, a, 18, sc, {});
        a["exclude_outside"] = ir::int_attr("exclude_outside", 1);
        check_resize(x, a, 18, sc, {});
        if (::testing::Test::HasFatalFailure()) return;
      }
    Attrs a = resize_attrs("linear", "align_corners");
    a["antialias"] = ir::int_attr("antialias", 1);
    check_resize(x, a, 18, {}, {2, 3, 5, 4});
    for (const char* policy : {"stretch", "not_larger", "not_smaller"})
      for (const char* mode : {"nearest", "linear", "cubic"}) {
        Attrs p = resize_attrs(mode, "half_pixel");
        p["keep_aspect_ratio_policy"] = ir::string_attr("keep_aspect_ratio_policy", policy);
        check_resize(x, p, 18, {}, {2, 3, 9, 20});
        p["axes"] = ir::ints_attr("axes", {3, 2});
        check_resize(x, p, 18, {}, {7, 30});
        p["axes"] = ir::ints_attr("axes", {-1});
        check_resize(x, p, 18, {}, {5});
        if (::testing::Test::HasFatalFailure()) return;
      }
    Attrs ax = resize_attrs("cubic", "asymmetric");
    ax["axes"] = ir::ints_attr("axes", {1, -2});
    check_resize(x, ax, 18, {2.0f, 0.4f}, {});
  }
}

TEST(CudaResize, CropAndResizeMatchesTheCpu) {
  REQUIRE_GPU();
  const Tensor x = random_of(DType::Float32, {2, 3, 9, 8}, 400);
  const std::vector<float> roi = {0, 0, 0.4f, 0.6f, 1, 1, 0.6f, 0.8f};
  const std::vector<float> wide = {0, 0, -0.2f, 0.1f, 1, 1, 1.3f, 1.2f};  // parts outside: extrapolated
  for (const char* mode : {"nearest", "linear", "cubic"})
    for (const auto& r : {roi, wide})
      for (DType rt : {DType::Float32, DType::Float16}) {
        Attrs a = resize_attrs(mode, "tf_crop_and_resize");
        check_resize(x, a, 13, {1, 1, 2.0f, 0.7f}, {}, r, rt);
        a["extrapolation_value"] = ir::float_attr("extrapolation_value", 10.0f);
        check_resize(x, a, 13, {}, {2, 3, 5, 11}, r, rt);
        check_resize(x, a, 13, {}, {2, 3, 1, 1}, r, rt);
        if (::testing::Test::HasFatalFailure()) return;
      }
  Attrs a = resize_attrs("linear", "tf_crop_and_resize");
  a["axes"] = ir::ints_attr("axes", {3, 2});
  a["extrapolation_value"] = ir::float_attr("extrapolation_value", -1.5f);
  check_resize(x, a, 18, {}, {7, 4}, {-0.1f, 0.2f, 1.1f, 0.9f});
  check_resize(cast_tensor(x, DType::Int32), a, 18, {}, {7, 4}, {-0.1f, 0.2f, 1.1f, 0.9f});
}

TEST(CudaResize, OpsetsRanksEmptyAndLargeTensorsMatchTheCpu) {
  REQUIRE_GPU();
  const Tensor x4 = random_of(DType::Float32, {2, 3, 5, 4}, 500);
  for (const char* mode : {"nearest", "linear"}) {
    Attrs a = {{"mode", ir::string_attr("mode", mode)}};
    check_resize(x4, a, 10, {1, 1, 2.0f, 1.5f}, {});
    check_resize(x4, a, 10, {1, 1, 0.5f, 0.75f}, {});
  }
  check_resize(random_of(DType::Float32, {13}, 501), resize_attrs("cubic", "half_pixel"), 13, {2.3f}, {});
  check_resize(random_of(DType::Int64, {13}, 502), resize_attrs("nearest", "half_pixel"), 13, {}, {5});
  check_resize(random_of(DType::Float32, {2, 3}, 503), resize_attrs("linear", "align_corners"), 13, {2, 1.5f}, {});
  const Tensor x5 = random_of(DType::Float32, {1, 2, 4, 5, 3}, 504);
  for (const char* mode : {"nearest", "linear", "cubic"})
    check_resize(x5, resize_attrs(mode, "half_pixel"), 13, {1, 1, 1.5f, 0.6f, 2.0f}, {});
  check_resize(random_of(DType::Float16, {2, 3, 5, 4}, 505), resize_attrs("linear", "half_pixel"), 13, {2, 1, 1, 1},
               {});
  // Empty input (batch 0), output dims of 0, and an identity resize.
  check_resize(random_of(DType::Float32, {0, 3, 5, 4}, 506), resize_attrs("linear", "half_pixel"), 13, {1, 1, 2, 2},
               {});
  check_resize(x4, resize_attrs("linear", "half_pixel"), 13, {}, {2, 3, 0, 4});
  check_resize(x4, resize_attrs("cubic", "half_pixel"), 13, {1, 1, 0.1f, 1}, {});
  check_resize(x4, resize_attrs("cubic", "half_pixel"), 13, {1, 1, 1, 1}, {});
  // Large enough for several grid strides in every pass.
  const Tensor big = random_of(DType::Float32, {2, 4, 301, 257}, 507);
  check_resize(big, resize_attrs("linear", "half_pixel"), 13, {1, 1, 2.0f, 2.0f}, {});
  check_resize(big, resize_attrs("cubic", "asymmetric"), 13, {1, 1, 1.5f, 0.5f}, {});
}

// ---- ConvTranspose ----

struct CtCase {
  Shape x, w;
  Attrs attrs;
  bool bias;
};

void check_conv_transpose(const CtCase& c, DType t, uint32_t seed) {
  const Tensor x = random_of(t, c.x, seed);
  const Tensor w = random_of(t, c.w, seed + 1);
  std::string what = "ConvTranspose " + x.describe() + " W " + w.describe() + attrs_str(c.attrs);
  if (c.bias) {
    const int64_t group = c.attrs.count("group") ? c.attrs.at("group").i : 1;
    const Tensor b = random_of(t, {c.w[1] * group}, seed + 2);
    expect_same_on_cuda(node("ConvTranspose", {"X", "W", "B"}, c.attrs, 11), {x, w, b}, what + " bias", {"W", "B"});
  } else {
    expect_same_on_cuda(node("ConvTranspose", {"X", "W"}, c.attrs, 11), {x, w}, what, {"W"});
  }
}

TEST(CudaConvTranspose, AttributeVariantsMatchTheCpu) {
  REQUIRE_GPU();
  auto ints = [](const char* n, std::vector<int64_t> v) { return ir::ints_attr(n, std::move(v)); };
  const std::vector<CtCase> cases = {
      {{1, 1, 3, 3}, {1, 2, 3, 3}, {}, false},
      {{1, 1, 3, 3}, {1, 2, 3, 3}, {}, true},
      {{1, 1, 5}, {1, 2, 3}, {}, true},
      {{2, 3, 7}, {3, 4, 4}, {{"strides", ints("strides", {3})}, {"pads", ints("pads", {1, 2})}}, true},
      {{1, 1, 3, 4, 5}, {1, 2, 3, 3, 3}, {}, true},
      {{1, 2, 3, 4, 3},
       {2, 2, 2, 3, 2},
       {{"strides", ints("strides", {2, 1, 2})}, {"pads", ints("pads", {1, 0, 0, 1, 1, 1})}},
       true},
      {{1, 1, 3, 3},
       {1, 2, 3, 3},
       {{"strides", ints("strides", {3, 2})}, {"output_padding", ints("output_padding", {1, 1})}},
       true},
      {{1, 1, 3, 3},
       {1, 2, 3, 3},
       {{"strides", ints("strides", {3, 2})}, {"output_shape", ints("output_shape", {10, 8})}},
       false},
      {{1, 1, 3, 3},
       {1, 2, 3, 3},
       {{"strides", ints("strides", {3, 2})},
        {"output_shape", ints("output_shape", {10, 8})},
        {"kernel_shape", ints("kernel_shape", {3, 3})},
        {"output_padding", ints("output_padding", {1, 1})}},
       true},
      {{1, 1, 3, 3}, {1, 2, 3, 3}, {{"strides", ints("strides", {3, 2})}, {"pads", ints("pads", {1, 2, 1, 2})}}, true},
      {{1, 1, 3, 3}, {1, 2, 3, 3}, {{"strides", ints("strides", {3, 2})}, {"pads", ints("pads", {0, 0, 1, 1})}}, true},
      {{1, 1, 3, 3}, {1, 1, 2, 2}, {{"dilations", ints("dilations", {2, 2})}}, false},
      {{1, 1, 3, 3},
       {1, 2, 3, 3},
       {{"auto_pad", ir::string_attr("auto_pad", "SAME_UPPER")}, {"strides", ints("strides", {2, 2})}},
       true},
      {{1, 1, 4, 3},
       {1, 2, 4, 2},
       {{"auto_pad", ir::string_attr("auto_pad", "SAME_LOWER")}, {"strides", ints("strides", {2, 3})}},
       true},
      {{1, 1, 4, 3},
       {1, 2, 4, 2},
       {{"auto_pad", ir::string_attr("auto_pad", "SAME_UPPER")}, {"strides", ints("strides", {2, 3})}},
       false},
      {{1, 1, 3, 3},
       {1, 2, 3, 3},
       {{"auto_pad", ir::string_attr("auto_pad", "VALID")}, {"strides", ints("strides", {2, 2})}},
       true},
      {{1, 1, 3, 3},  // SAME with an output_shape smaller than the natural size: negative and positive pads
       {1, 2, 5, 5},
       {{"auto_pad", ir::string_attr("auto_pad", "SAME_UPPER")}, {"output_shape", ints("output_shape", {9, 2})}},
       true},
      {{1, 1, 3, 3},  // output_shape beyond the natural size: zero-extended
       {1, 2, 3, 3},
       {{"pads", ints("pads", {1, 1, 0, 0})}, {"output_shape", ints("output_shape", {7, 6})}},
       true},
      {{1, 2, 3, 3}, {2, 2, 3, 3}, {{"group", ir::int_attr("group", 2)}}, true},
      {{2, 6, 5, 4}, {6, 2, 3, 3}, {{"group", ir::int_attr("group", 3)}, {"strides", ints("strides", {2, 1})}}, true},
      {{1, 4, 6, 5}, {4, 1, 3, 3}, {{"group", ir::int_attr("group", 4)}, {"pads", ints("pads", {1, 1, 1, 1})}}, true},
      {{2, 4, 7, 5},
       {4, 3, 3, 2},
       {{"group", ir::int_attr("group", 2)},
        {"strides", ints("strides", {2, 3})},
        {"pads", ints("pads", {1, 0, 2, 1})},
        {"output_padding", ints("output_padding", {1, 2})}},
       true},
      {{2, 8, 17, 19},
       {8, 5, 4, 3},
       {{"strides", ints("strides", {2, 2})}, {"dilations", ints("dilations", {1, 2})}},
       true},
      // Empty: no images, no input channels (the bias alone), an empty spatial input.
      {{0, 2, 3, 3}, {2, 3, 3, 3}, {}, true},
      {{1, 0, 3, 3}, {0, 3, 3, 3}, {}, true},
      {{1, 0, 3, 3}, {0, 3, 3, 3}, {}, false},
      {{1, 1, 0, 3}, {1, 2, 3, 3}, {}, true},
  };
  uint32_t seed = 700;
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
    for (const CtCase& c : cases) {
      check_conv_transpose(c, t, seed += 3);
      if (::testing::Test::HasFatalFailure()) return;
    }
}

// ---- Einsum ----

void check_einsum(const std::string& eq, const std::vector<Shape>& shapes, DType t, uint32_t seed) {
  std::vector<std::string> names;
  std::vector<Tensor> vals;
  std::string what = "Einsum '" + eq + "' " + dtype_name(t);
  for (size_t i = 0; i < shapes.size(); ++i) {
    names.push_back(std::string(1, static_cast<char>('A' + i)));
    vals.push_back(random_of(t, shapes[i], seed + static_cast<uint32_t>(i)));
    what.append(" ").append(shape_str(shapes[i]));
  }
  expect_same_on_cuda(node("Einsum", names, {{"equation", ir::string_attr("equation", eq)}}, 12), vals, what);
}

struct EinsumCase {
  std::string eq;
  std::vector<Shape> shapes;
};

const std::vector<EinsumCase> kEinsum = {
    {"ij,jk->ik", {{3, 5}, {5, 4}}},
    {"ij,jk", {{7, 1}, {1, 3}}},
    {"bij,bjk->bik", {{3, 2, 5}, {3, 5, 4}}},
    {"...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 6}}},
    {"...ii->...i", {{3, 5, 5}}},
    {"ii", {{4, 4}}},
    {"ii->i", {{6, 6}}},
    {"i,i", {{7}, {7}}},
    {"i,i->", {{0}, {0}}},
    {"ij->i", {{4, 9}}},
    {"ij->j", {{4, 9}}},
    {"ij->ji", {{5, 3}}},
    {"i->", {{11}}},
    {"ijk->kji", {{2, 3, 4}}},
    {"a,b,c->abc", {{2}, {3}, {4}}},
    {"abc,cd,de->abe", {{2, 3, 4}, {4, 5}, {5, 3}}},
    {"ij,ij->ij", {{3, 4}, {3, 4}}},
    {"ij,ij->i", {{3, 1}, {3, 4}}},
    {"bn,anm,bm->ba", {{2, 3}, {4, 3, 5}, {2, 5}}},
    {"ij,jk->ik", {{3, 0}, {0, 4}}},
    {"ij,jk->ik", {{0, 5}, {5, 4}}},
    {"iij->ji", {{3, 3, 2}}},
    {",ij->ij", {{}, {2, 3}}},
    {"ij,jk->ik", {{129, 257}, {257, 65}}},
};

TEST(CudaEinsum, EquationsMatchTheCpu) {
  REQUIRE_GPU();
  uint32_t seed = 900;
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64,
                  DType::Int8, DType::UInt8, DType::UInt16, DType::UInt64})
    for (const EinsumCase& c : kEinsum) {
      check_einsum(c.eq, c.shapes, t, seed += 5);
      if (::testing::Test::HasFatalFailure()) return;
    }
}

// Products and sums that wrap around in narrow integer types, and large int64 products.
TEST(CudaEinsum, IntegerWrapAroundMatchesTheCpu) {
  REQUIRE_GPU();
  Tensor a = Tensor::empty(DType::Int8, {4, 6});
  for (int64_t i = 0; i < a.numel(); ++i) a.mutable_data<int8_t>()[i] = static_cast<int8_t>(i % 2 ? 127 : -128 + i);
  expect_same_on_cuda(node("Einsum", {"A", "B"}, {{"equation", ir::string_attr("equation", "ij,jk->ik")}}, 12),
                      {a, a.reshaped({6, 4})}, "Einsum int8 wrap");
  Tensor b = Tensor::empty(DType::Int64, {3, 2});
  for (int64_t i = 0; i < b.numel(); ++i) b.mutable_data<int64_t>()[i] = (int64_t{1} << 40) + i * 977;
  expect_same_on_cuda(node("Einsum", {"A", "B"}, {{"equation", ir::string_attr("equation", "ij,kj->ik")}}, 12), {b, b},
                      "Einsum int64 wrap");
}

}  // namespace
