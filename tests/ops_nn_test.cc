// Edge cases of the nn family that the ONNX node suite does not cover: MatMul's general batch
// broadcast and integer wrap-around, Gemm on integers and with a column bias, the pointwise
// (1x1) Conv path, Conv/ConvTranspose/pools checked against naive loops written here from the
// definitions, MaxPool's column-major Indices, LayerNorm with a broadcast scale, the float32
// oneDNN paths against float64 reference results on sizes large enough to take the fast
// paths, concurrent runs sharing cached primitives, and the errors malformed nodes must raise.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/dispatch.h"
#include "ops/registry.h"
#include "support/make_tensor.h"
#include "support/run_op.h"

using namespace reforge;
using namespace reforge::ops;

namespace {

using test_support::make;

Tensor random(DType dt, Shape shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  Tensor t = Tensor::empty(dt, std::move(shape));
  dispatch_float(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<T>()[i] = from_compute<T>(static_cast<compute_t<T>>(d(rng)));
  });
  return t;
}

struct Attrs {
  std::map<std::string, int64_t> ints;
  std::map<std::string, float> floats;
  std::map<std::string, std::vector<int64_t>> lists;
  std::map<std::string, std::string> strings;
};

ir::Node node(const std::string& op, int opset, size_t ninputs, const Attrs& at, size_t noutputs) {
  ir::Node n;
  n.name = "t";
  n.op_type = op;
  n.opset = opset;
  for (size_t i = 0; i < ninputs; ++i) n.inputs.push_back("in" + std::to_string(i));
  for (size_t i = 0; i < noutputs; ++i) n.outputs.push_back("out" + std::to_string(i));
  for (const auto& [k, v] : at.ints) {
    ir::Attribute a;
    a.name = k, a.type = ir::AttrType::Int, a.i = v;
    n.attrs[k] = a;
  }
  for (const auto& [k, v] : at.floats) {
    ir::Attribute a;
    a.name = k, a.type = ir::AttrType::Float, a.f = v;
    n.attrs[k] = a;
  }
  for (const auto& [k, v] : at.lists) {
    ir::Attribute a;
    a.name = k, a.type = ir::AttrType::Ints, a.ints = v;
    n.attrs[k] = a;
  }
  for (const auto& [k, v] : at.strings) {
    ir::Attribute a;
    a.name = k, a.type = ir::AttrType::String, a.s = v;
    n.attrs[k] = a;
  }
  return n;
}

// Runs one op; absent optional inputs are passed as nullptr.
std::vector<Tensor> run(const std::string& op, std::vector<const Tensor*> inputs, const Attrs& at = {},
                        size_t noutputs = 1, int opset = 22) {
  return test_support::run_node(node(op, opset, inputs.size(), at, noutputs), inputs, 2);
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.as_double(i);
  return v;
}

void expect_near(const Tensor& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.as_double(static_cast<int64_t>(i)), want[i], tol * (1 + std::abs(want[i]))) << "element " << i;
}

// Naive N-d convolution from the definition (any group, pads begin only; output size given).
std::vector<double> naive_conv(const Tensor& X, const Tensor& W, const Tensor* B, const Shape& out, int64_t group,
                               const std::vector<int64_t>& s, const std::vector<int64_t>& d,
                               const std::vector<int64_t>& pb) {
  const int64_t N = X.dim(0), C = X.dim(1), M = W.dim(0), Cg = C / group, Mg = M / group;
  const size_t nsp = static_cast<size_t>(X.rank() - 2);
  std::vector<double> y(static_cast<size_t>(shape_numel(out)));
  std::vector<int64_t> o(nsp), k(nsp);
  int64_t plane = 1, kplane = 1, inplane = 1;
  for (size_t i = 0; i < nsp; ++i) plane *= out[i + 2], kplane *= W.dim(i + 2), inplane *= X.dim(i + 2);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t op = 0; op < plane; ++op) {
        for (size_t i = nsp, r = op; i-- > 0;) o[i] = r % out[i + 2], r /= out[i + 2];
        double acc = B ? B->as_double(m) : 0.0;
        for (int64_t c = 0; c < Cg; ++c)
          for (int64_t kp = 0; kp < kplane; ++kp) {
            for (size_t i = nsp, r = kp; i-- > 0;) k[i] = r % W.dim(i + 2), r /= W.dim(i + 2);
            int64_t xi = 0;
            bool inside = true;
            for (size_t i = 0; i < nsp; ++i) {
              int64_t p = o[i] * s[i] - pb[i] + k[i] * d[i];
              inside = inside && p >= 0 && p < X.dim(i + 2);
              xi = xi * X.dim(i + 2) + p;
            }
            if (!inside) continue;
            acc += X.as_double((n * C + (m / Mg) * Cg + c) * inplane + xi) * W.as_double((m * Cg + c) * kplane + kp);
          }
        y[(n * M + m) * plane + op] = acc;
      }
  return y;
}

}  // namespace

TEST(NnMatMul, GeneralBatchBroadcastInt) {
  // A [2,1,2,2] x B [3,2,1]: batch broadcasts to [2,3]; every product checked by hand.
  Tensor A = make<int32_t>({2, 1, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor B = make<int32_t>({3, 2, 1}, {1, 1, 2, 0, 0, 3});
  auto y = run("MatMul", {&A, &B});
  EXPECT_EQ(y[0].shape(), (Shape{2, 3, 2, 1}));
  EXPECT_EQ(values(y[0]), (std::vector<double>{3, 7, 2, 6, 6, 12, 11, 15, 10, 14, 18, 24}));
}

TEST(NnMatMul, IntegerWrapsLikeNumpy) {
  Tensor A = make<int8_t>({1, 2}, {100, 100});
  Tensor B = make<int8_t>({2, 1}, {2, 1});
  auto y = run("MatMul", {&A, &B});
  EXPECT_EQ(y[0].data<int8_t>()[0], static_cast<int8_t>(300 - 256));
}

TEST(NnMatMul, VectorTimesVectorIsScalar) {
  Tensor a = make<double>({3}, {1, 2, 3});
  Tensor b = make<double>({3}, {4, 5, 6});
  auto y = run("MatMul", {&a, &b});
  EXPECT_EQ(y[0].rank(), 0);
  EXPECT_EQ(y[0].as_double(), 32.0);
}

TEST(NnMatMul, Float32FastPathsMatchFloat64) {
  // Shapes that take the folded-rows, batched, broadcast-A and per-batch paths.
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 37, 65}, {65, 29}}, {{4, 17, 33}, {4, 33, 19}}, {{17, 33}, {5, 33, 9}}, {{2, 1, 9, 8}, {3, 8, 7}}};
  unsigned seed = 1;
  for (const auto& [sa, sb] : cases) {
    Tensor a64 = random(DType::Float64, sa, seed++), b64 = random(DType::Float64, sb, seed++);
    Tensor a32 = cast_tensor(a64, DType::Float32), b32 = cast_tensor(b64, DType::Float32);
    auto want = run("MatMul", {&a64, &b64});
    auto got = run("MatMul", {&a32, &b32});
    EXPECT_EQ(got[0].shape(), want[0].shape());
    expect_near(got[0], values(want[0]), 1e-4);
    Tensor a16 = cast_tensor(a64, DType::BFloat16), b16 = cast_tensor(b64, DType::BFloat16);
    auto got16 = run("MatMul", {&a16, &b16});
    expect_near(got16[0], values(want[0]), 5e-2);
  }
}

TEST(NnMatMul, ConcurrentCallsShareCachedPrimitives) {
  Tensor a = random(DType::Float32, {64, 48}, 7), b = random(DType::Float32, {48, 32}, 8);
  const std::vector<double> want = values(run("MatMul", {&a, &b})[0]);
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      bool all = true;
      for (int i = 0; i < 20; ++i) all = all && values(run("MatMul", {&a, &b})[0]) == want;
      ok[t] = all;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_TRUE(ok[t]) << "thread " << t;
}

TEST(NnMatMul, MismatchedInnerDimensionIsAnError) {
  Tensor a = random(DType::Float32, {2, 3}, 1), b = random(DType::Float32, {4, 2}, 2);
  EXPECT_THROW(run("MatMul", {&a, &b}), Error);
  Tensor c = random(DType::Float32, {2, 3, 4}, 1), d = random(DType::Float32, {3, 4, 2}, 2);
  EXPECT_THROW(run("MatMul", {&c, &d}), Error);  // batch 2 vs 3
}

TEST(NnGemm, IntegerWithColumnBias) {
  // Y = A^T x B + C, C [2,1] broadcast along rows.
  Tensor A = make<int64_t>({2, 2}, {1, 2, 3, 4});  // A^T = [[1,3],[2,4]]
  Tensor B = make<int64_t>({2, 2}, {1, 0, 0, 1});
  Tensor C = make<int64_t>({2, 1}, {10, 20});
  Attrs at;
  at.ints["transA"] = 1;
  auto y = run("Gemm", {&A, &B, &C}, at, 1, 13);
  EXPECT_EQ(values(y[0]), (std::vector<double>{11, 13, 22, 24}));
}

TEST(NnGemm, BadBiasShapeIsAnError) {
  Tensor A = random(DType::Float32, {2, 3}, 1), B = random(DType::Float32, {3, 4}, 2);
  Tensor C = random(DType::Float32, {3}, 3);
  EXPECT_THROW(run("Gemm", {&A, &B, &C}, {}, 1, 13), Error);
}

TEST(NnConv, PointwiseWithBiasMatchesNaive) {
  Tensor X = random(DType::Float32, {2, 5, 3, 4}, 11), W = random(DType::Float32, {7, 5, 1, 1}, 12);
  Tensor B = random(DType::Float32, {7}, 13);
  auto y = run("Conv", {&X, &W, &B});
  EXPECT_EQ(y[0].shape(), (Shape{2, 7, 3, 4}));
  expect_near(y[0], naive_conv(X, W, &B, y[0].shape(), 1, {1, 1}, {1, 1}, {0, 0}), 1e-5);
}

TEST(NnConv, GroupedDilatedAsymmetricMatchesNaiveInEveryType) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor X = random(dt, {2, 4, 9, 8}, 21), W = random(dt, {6, 2, 3, 2}, 22), B = random(dt, {6}, 23);
    Attrs at;
    at.ints["group"] = 2;
    at.lists["strides"] = {2, 1};
    at.lists["dilations"] = {2, 3};
    at.lists["pads"] = {1, 0, 2, 2};
    auto y = run("Conv", {&X, &W, &B}, at);
    // out = (9 + 3 - 5) / 2 + 1 = 4, (8 + 2 - 4) / 1 + 1 = 7
    EXPECT_EQ(y[0].shape(), (Shape{2, 6, 4, 7}));
    const double tol = dt == DType::Float32 || dt == DType::Float64 ? 1e-5 : 3e-2;
    expect_near(y[0], naive_conv(X, W, &B, y[0].shape(), 2, {2, 1}, {2, 3}, {1, 0}), tol);
  }
}

TEST(NnConv, LargeFloat32TakesFastPathAndMatchesFloat64) {
  Tensor X64 = random(DType::Float64, {2, 32, 20, 20}, 31), W64 = random(DType::Float64, {48, 32, 3, 3}, 32);
  Tensor X = cast_tensor(X64, DType::Float32), W = cast_tensor(W64, DType::Float32);
  Attrs at;
  at.lists["pads"] = {1, 1, 1, 1};
  auto want = run("Conv", {&X64, &W64}, at);
  auto got = run("Conv", {&X, &W}, at);
  expect_near(got[0], values(want[0]), 1e-4);
  Attrs dw;  // depthwise
  dw.ints["group"] = 32;
  dw.lists["pads"] = {1, 1, 1, 1};
  Tensor Wd64 = random(DType::Float64, {32, 1, 3, 3}, 33), Wd = cast_tensor(Wd64, DType::Float32);
  expect_near(run("Conv", {&X, &Wd}, dw)[0], values(run("Conv", {&X64, &Wd64}, dw)[0]), 1e-4);
}

TEST(NnConv, MalformedNodesAreErrors) {
  Tensor X = random(DType::Float32, {1, 4, 5, 5}, 1);
  Tensor W = random(DType::Float32, {2, 3, 3, 3}, 2);  // 3 channels, X has 4
  EXPECT_THROW(run("Conv", {&X, &W}), Error);
  Tensor W7 = random(DType::Float32, {2, 4, 7, 7}, 3);  // larger than the input, no pads
  EXPECT_THROW(run("Conv", {&X, &W7}), Error);
  Tensor W3 = random(DType::Float32, {2, 4, 3, 3}, 4);
  Attrs zero_stride;
  zero_stride.lists["strides"] = {0, 1};
  EXPECT_THROW(run("Conv", {&X, &W3}, zero_stride), Error);
  Attrs short_pads;
  short_pads.lists["pads"] = {1, 1};
  EXPECT_THROW(run("Conv", {&X, &W3}, short_pads), Error);
  Attrs bad_group;
  bad_group.ints["group"] = 0;
  EXPECT_THROW(run("Conv", {&X, &W3}, bad_group), Error);
}

TEST(NnConvTranspose, StridedMatchesScatterDefinition) {
  // y[o*s - pad + k*d] += x[o] * w[k], 1-D, one channel each way, checked by hand.
  Tensor X = make<float>({1, 1, 3}, {1, 2, 3});
  Tensor W = make<float>({1, 1, 2}, {1, 10});
  Attrs at;
  at.lists["strides"] = {2};
  auto y = run("ConvTranspose", {&X, &W}, at);
  EXPECT_EQ(y[0].shape(), (Shape{1, 1, 6}));
  EXPECT_EQ(values(y[0]), (std::vector<double>{1, 10, 2, 20, 3, 30}));
  Attrs padded = at;
  padded.lists["pads"] = {1, 0};
  padded.lists["output_padding"] = {1};
  auto z = run("ConvTranspose", {&X, &W}, padded);
  EXPECT_EQ(values(z[0]), (std::vector<double>{10, 2, 20, 3, 30, 0}));
}

TEST(NnMaxPool, ColumnMajorIndices3D) {
  // One 2x2x2 window over a 2x2x2 input; the maximum sits at (d=1, h=1, w=0).
  Tensor X = make<float>({1, 1, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 9, 7});
  Attrs at;
  at.lists["kernel_shape"] = {2, 2, 2};
  at.ints["storage_order"] = 1;
  auto y = run("MaxPool", {&X}, at, 2);
  EXPECT_EQ(values(y[0]), (std::vector<double>{9}));
  EXPECT_EQ(y[1].dtype(), DType::Int64);
  EXPECT_EQ(y[1].data<int64_t>()[0], 1 + 1 * 2 + 0 * 4);  // d + h*D + w*D*H
  at.ints["storage_order"] = 0;
  EXPECT_EQ(run("MaxPool", {&X}, at, 2)[1].data<int64_t>()[0], 6);  // (d*H + h)*W + w
}

TEST(NnAveragePool, CeilModeCountIncludePadExcludesOverhang) {
  // in 6, k 2, s 2, pads 1/0, ceil: windows [-1,0], [1,2], [3,4], [5,6]; the first counts its
  // pad position, the last does not count position 6, which lies past the end padding.
  Tensor X = make<float>({1, 1, 6}, {1, 2, 3, 4, 5, 6});
  Attrs at;
  at.lists["kernel_shape"] = {2};
  at.lists["strides"] = {2};
  at.lists["pads"] = {1, 0};
  at.ints["ceil_mode"] = 1;
  at.ints["count_include_pad"] = 1;
  EXPECT_EQ(values(run("AveragePool", {&X}, at)[0]), (std::vector<double>{0.5, 2.5, 4.5, 6}));
  at.ints["count_include_pad"] = 0;
  EXPECT_EQ(values(run("AveragePool", {&X}, at)[0]), (std::vector<double>{1, 2.5, 4.5, 6}));
}

TEST(NnPool, MissingKernelShapeIsAnError) {
  Tensor X = random(DType::Float32, {1, 1, 4, 4}, 1);
  EXPECT_THROW(run("MaxPool", {&X}), Error);
  Attrs at;
  at.lists["kernel_shape"] = {5, 5};  // larger than the input
  EXPECT_THROW(run("AveragePool", {&X}, at), Error);
}

TEST(NnLayerNorm, BroadcastScaleAndStatistics) {
  Tensor X = make<float>({2, 2}, {1, 3, 2, 6});
  Tensor S = make<float>({1}, {2});
  Attrs at;
  at.floats["epsilon"] = 0.0f;
  auto y = run("LayerNormalization", {&X, &S, nullptr}, at, 3, 17);
  // rows: mean 2 (std 1) and 4 (std 2): normalized to -1, 1 then scaled by 2
  expect_near(y[0], {-2, 2, -2, 2}, 1e-6);
  EXPECT_EQ(y[1].shape(), (Shape{2, 1}));
  expect_near(y[1], {2, 4}, 1e-6);
  expect_near(y[2], {1, 0.5}, 1e-6);
  Attrs bad;
  bad.ints["axis"] = 2;
  EXPECT_THROW(run("LayerNormalization", {&X, &S}, bad, 1, 17), Error);
}

TEST(NnBatchNorm, TrainingModeUpdatesRunningStatistics) {
  // One channel, values 1 and 3: batch mean 2, variance 1.
  Tensor X = make<float>({2, 1}, {1, 3});
  Tensor scale = make<float>({1}, {1}), bias = make<float>({1}, {0});
  Tensor mean = make<float>({1}, {0}), var = make<float>({1}, {1});
  Attrs at;
  at.ints["training_mode"] = 1;
  at.floats["epsilon"] = 0.0f;
  at.floats["momentum"] = 0.5f;
  auto y = run("BatchNormalization", {&X, &scale, &bias, &mean, &var}, at, 3, 15);
  expect_near(y[0], {-1, 1}, 1e-6);
  expect_near(y[1], {1}, 1e-6);  // 0 * 0.5 + 2 * 0.5
  expect_near(y[2], {1}, 1e-6);  // 1 * 0.5 + 1 * 0.5
}
