// Fast paths of the elementwise, unary, softmax and pooling kernels against the generic code or
// a naive reference: every vector instruction set the CPU has (core/simd.h, forced down with
// SimdOverride), odd sizes (0, 1, not a multiple of the vector width, above the parallel
// threshold), the broadcast layouts the binary fast path special-cases, and NaN/Inf behaviour.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/simd.h"
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/tensor/transpose2d.h"
#include "support/make_tensor.h"
#include "support/run_op.h"
#include "support/simd_levels.h"

using namespace reforge;
using namespace reforge::ops;
using test_support::simd_level_name;
using test_support::simd_levels;

namespace {

using test_support::random_floats;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor run(const std::string& op, std::vector<const Tensor*> inputs, std::vector<ir::Attribute> attrs = {},
           int opset = 17, int threads = 1, const std::string& domain = "", size_t output = 0) {
  return test_support::run_op(domain, op, opset, std::move(inputs), attrs, threads, 1, output);
}

// Same bits, NaNs equal to any NaN.
bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; }

// Element of `t` (of shape ts, broadcast to `out`) at flat output index i.
float bcast_at(const Tensor& t, const Shape& out, int64_t i) {
  const Shape& ts = t.shape();
  int64_t idx = 0, mul = 1;
  for (size_t j = 0; j < out.size(); ++j) {
    const size_t od = out.size() - 1 - j;
    const int64_t c = i % out[od];
    i /= out[od];
    if (j < ts.size()) {
      const size_t td = ts.size() - 1 - j;
      if (ts[td] != 1) idx += c * mul;
      mul *= ts[td];
    }
  }
  return t.data<float>()[idx];
}

}  // namespace

// Add/Sub/Mul/Div float32: each broadcast layout (same shape, scalar either side, trailing row,
// per-channel, both broadcast) and sizes around the vector width and the parallel threshold give
// exactly the IEEE result of the one operation, NaN and Inf included, at every SIMD level.
TEST(FastPaths, BinaryArithmeticMatchesNaiveBroadcast) {
  const std::vector<std::pair<Shape, Shape>> cases = {{{0}, {0}},
                                                      {{1}, {1}},
                                                      {{17}, {17}},
                                                      {{1000}, {1}},
                                                      {{1}, {33}},
                                                      {{}, {5, 7}},
                                                      {{3, 31}, {31}},
                                                      {{2, 5, 3, 3}, {1, 5, 1, 1}},
                                                      {{4, 1}, {1, 9}},
                                                      {{2, 3, 16}, {2, 3, 1}},
                                                      {{70001}, {70001}},
                                                      {{300, 257}, {257}},
                                                      {{1, 64, 40, 40}, {1, 64, 1, 1}},
                                                      {{0, 3}, {1, 3}}};
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    for (const auto& [sa, sb] : cases) {
      Tensor a = random_floats(sa, 1, -3, 3), b = random_floats(sb, 2, -3, 3);
      if (a.numel() > 2) a.mutable_data<float>()[1] = kNaN, a.mutable_data<float>()[2] = kInf;
      if (b.numel() > 3) b.mutable_data<float>()[3] = -kInf, b.mutable_data<float>()[0] = 0.0f;
      for (SimdLevel l : simd_levels()) {
        SimdOverride cap(l);
        for (int threads : {1, 3}) {
          Tensor y = run(op, {&a, &b}, {}, 17, threads);
          const Shape& so = y.shape();
          for (int64_t i = 0; i < y.numel(); ++i) {
            const float x = bcast_at(a, so, i), z = bcast_at(b, so, i);
            const float want = op[0] == 'A' ? x + z : op[0] == 'S' ? x - z : op[0] == 'M' ? x * z : x / z;
            ASSERT_TRUE(same_float(y.data<float>()[i], want))
                << op << " " << shape_str(sa) << " " << shape_str(sb) << " at " << i << " (" << simd_level_name(l)
                << ", threads " << threads << "): " << y.data<float>()[i] << " vs " << want;
          }
        }
      }
    }
  }
}

// Pow with a constant exponent of 0, 1, 2, 3, 0.5 or -1 takes the multiply / sqrt path; results stay
// within 2 ulp of powf, and pow's special values hold.
TEST(FastPaths, PowConstantExponents) {
  Tensor x = random_floats({1031}, 3, -10, 10);
  float* px = x.mutable_data<float>();
  const float specials[] = {0.0f, -0.0f, kInf, -kInf, kNaN, 1.0f, -1.0f, 1e-40f, 3e38f};
  for (size_t i = 0; i < std::size(specials); ++i) px[i] = specials[i];
  for (float e : {0.0f, 1.0f, 2.0f, 3.0f, 0.5f, -1.0f, 2.5f}) {
    for (DType et : {DType::Float32, DType::Float64}) {
      Tensor ex = et == DType::Float32 ? Tensor::copy_of(et, {}, &e) : [&] {
        double d = e;
        return Tensor::copy_of(et, {1}, &d);
      }();
      for (SimdLevel l : simd_levels()) {
        SimdOverride cap(l);
        Tensor y = run("Pow", {&x, &ex});
        ASSERT_EQ(y.shape(), x.shape());
        for (int64_t i = 0; i < x.numel(); ++i) {
          const float want = std::pow(px[i], e), got = y.data<float>()[i];
          if (std::isnan(want) || std::isinf(want) || want == 0.0f) {
            EXPECT_TRUE(same_float(got, want)) << px[i] << "^" << e << ": " << got << " vs " << want;
          } else {
            EXPECT_LE(std::fabs(got - want), 2.5f * (std::nextafter(std::fabs(want), kInf) - std::fabs(want)))
                << px[i] << "^" << e << ": " << got << " vs " << want;
          }
        }
      }
    }
  }
}

// The unary SIMD math at each instruction set: within a few ulp of libm (FMA contraction may move
// the last bit), identical special-value behaviour, any length.
TEST(FastPaths, UnaryAtEveryLevel) {
  struct Case {
    const char* op;
    double (*ref)(double);
    float lo, hi;
    double tol;  // relative
  };
  const Case cases[] = {
      {"Exp", [](double v) { return std::exp(v); }, -100, 88, 3e-7},
      {"Sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }, -80, 80, 5e-7},
      {"Tanh", [](double v) { return std::tanh(v); }, -10, 10, 5e-7},
      {"Erf", [](double v) { return std::erf(v); }, -5, 5, 6e-7},
      {"Log", [](double v) { return std::log(v); }, 1e-3f, 1e3f, 3e-7},
      {"Relu", [](double v) { return v < 0 ? 0.0 : v; }, -5, 5, 0},
      {"Sqrt", [](double v) { return std::sqrt(v); }, 0, 100, 1e-7},
  };
  for (const auto& c : cases) {
    for (int64_t n : {0, 1, 15, 17, 4099, 40000}) {
      Tensor x = random_floats({n}, 7, c.lo, c.hi);
      std::vector<float> first;
      for (SimdLevel l : simd_levels()) {
        SimdOverride cap(l);
        Tensor y = run(c.op, {&x}, {}, 17, 2);
        for (int64_t i = 0; i < n; ++i) {
          const double want = c.ref(x.data<float>()[i]);
          const double got = y.data<float>()[i];
          EXPECT_LE(std::fabs(got - want), c.tol * std::fabs(want) + 1e-37)
              << c.op << "(" << x.data<float>()[i] << ") at " << simd_level_name(l) << ": " << got << " vs " << want;
        }
      }
    }
    Tensor sp = Tensor::copy_of(DType::Float32, {5}, std::vector<float>{kNaN, kInf, -kInf, 0.0f, -0.0f}.data());
    std::vector<float> ref;
    for (SimdLevel l : simd_levels()) {
      SimdOverride cap(l);
      Tensor y = run(c.op, {&sp});
      for (int i = 0; i < 5; ++i) {
        if (ref.size() < 5) {
          ref.push_back(y.data<float>()[i]);
        } else {
          EXPECT_TRUE(same_float(y.data<float>()[i], ref[static_cast<size_t>(i)])) << c.op << " special " << i;
        }
      }
      EXPECT_TRUE(std::isnan(y.data<float>()[0])) << c.op << "(NaN)";
    }
  }
}

// Softmax / LogSoftmax rows of odd lengths against a double reference; masked (-inf) logits give
// exactly 0; a NaN poisons its row only.
TEST(FastPaths, SoftmaxRows) {
  for (int64_t n : {1, 3, 16, 17, 100, 1000}) {
    const int64_t rows = 37;
    Tensor x = random_floats({rows, n}, 11, -20, 20);
    float* px = x.mutable_data<float>();
    if (n > 2) px[1] = -kInf;  // row 0 masked position
    px[n] = kNaN;              // row 1 poisoned
    for (bool log : {false, true}) {
      for (SimdLevel l : simd_levels()) {
        SimdOverride cap(l);
        Tensor y = run(log ? "LogSoftmax" : "Softmax", {&x}, {}, 13, 2);
        for (int64_t r = 0; r < rows; ++r) {
          const float* xr = px + r * n;
          const float* yr = y.data<float>() + r * n;
          if (r == 1) {
            for (int64_t k = 0; k < n; ++k) EXPECT_TRUE(std::isnan(yr[k]));
            continue;
          }
          double m = -INFINITY, s = 0;
          for (int64_t k = 0; k < n; ++k) m = std::max(m, static_cast<double>(xr[k]));
          for (int64_t k = 0; k < n; ++k) s += std::exp(xr[k] - m);
          for (int64_t k = 0; k < n; ++k) {
            const double want = log ? xr[k] - m - std::log(s) : std::exp(xr[k] - m) / s;
            if (std::isinf(want)) {
              EXPECT_EQ(yr[k], want);
            } else {
              EXPECT_NEAR(yr[k], want, 2e-6 * std::max(1.0, std::fabs(want))) << n << " " << r << " " << k;
            }
          }
          if (r == 0 && n > 2 && !log) {
            EXPECT_EQ(yr[1], 0.0f);
          }
        }
      }
    }
  }
}

// Softmax / LogSoftmax over a middle axis ([2, n, inner]: rows when inner == 1, columns
// otherwise) with n and inner straddling every variant's 4, 8 or 16 lanes and the 16-float row
// step, masked (-inf) entries included, against a float64 reference at every SIMD level.
TEST(FastPaths, SoftmaxEveryWidth) {
  for (int64_t n : {1, 5, 8, 9, 15, 24, 31, 33, 47}) {
    for (int64_t inner : {1, 3, 8, 9, 17}) {
      Tensor x = random_floats({2, n, inner}, static_cast<uint32_t>(n * 100 + inner), -15, 15);
      float* px = x.mutable_data<float>();
      for (int64_t i = 0; i < x.numel(); i += 7)
        if ((i / inner) % n != 0) px[i] = -kInf;  // never a whole row or column (k = 0 stays finite)
      for (bool log : {false, true}) {
        for (SimdLevel l : simd_levels()) {
          SimdOverride cap(l);
          Tensor y = run(log ? "LogSoftmax" : "Softmax", {&x}, {ir::int_attr("axis", 1)}, 13);
          for (int64_t o = 0; o < 2; ++o) {
            for (int64_t j = 0; j < inner; ++j) {
              auto at = [&](int64_t k) { return (o * n + k) * inner + j; };
              double m = -INFINITY, s = 0;
              for (int64_t k = 0; k < n; ++k) m = std::max(m, static_cast<double>(px[at(k)]));
              for (int64_t k = 0; k < n; ++k) s += std::exp(px[at(k)] - m);
              for (int64_t k = 0; k < n; ++k) {
                const double want = log ? px[at(k)] - m - std::log(s) : std::exp(px[at(k)] - m) / s;
                const float got = y.data<float>()[at(k)];
                if (std::isinf(want)) {
                  EXPECT_EQ(got, want);
                } else {
                  ASSERT_NEAR(got, want, 2e-6 * std::max(1.0, std::fabs(want)))
                      << (log ? "LogSoftmax" : "Softmax") << " n " << n << " inner " << inner << " at "
                      << simd_level_name(l) << " (" << o << ", " << k << ", " << j << ")";
                }
              }
            }
          }
        }
      }
    }
  }
}

// MaxPool without Indices (the running-max path) gives the values of the path that tracks them,
// NaN windows included.
TEST(FastPaths, MaxPoolWithoutIndicesMatchesIndexedPath) {
  Tensor x = random_floats({2, 3, 13, 11}, 5, -3, 3);
  x.mutable_data<float>()[20] = kNaN;
  x.mutable_data<float>()[0] = kNaN;
  std::vector<std::vector<ir::Attribute>> configs = {
      {ir::ints_attr("kernel_shape", {3, 3}), ir::ints_attr("strides", {2, 2}), ir::ints_attr("pads", {1, 1, 1, 1})},
      {ir::ints_attr("kernel_shape", {2, 3}), ir::ints_attr("dilations", {2, 1})},
      {ir::ints_attr("kernel_shape", {3, 3}), ir::int_attr("ceil_mode", 1), ir::ints_attr("strides", {2, 2})},
  };
  for (const auto& at : configs) {
    Tensor fast = run("MaxPool", {&x}, at, 12);
    ir::Node node;
    node.name = "n", node.op_type = "MaxPool", node.opset = 12;
    node.inputs = {"x"}, node.outputs = {"y", "i"};
    for (auto& a : at) node.attrs[a.name] = a;
    KernelContext ctx(node, {&x}, 1);
    OpRegistry::global().find("", "MaxPool", 12)->kernel(ctx);
    const Tensor& slow = ctx.outputs()[0];
    ASSERT_EQ(fast.shape(), slow.shape());
    for (int64_t i = 0; i < fast.numel(); ++i)
      EXPECT_TRUE(same_float(fast.data<float>()[i], slow.data<float>()[i])) << i;
  }
}

// reforge::FusedConv = relu?(Conv + Z) for the conv shapes each path takes (pointwise product,
// blocked 3x3, strided, grouped, float64 reference), with and without packed weights.
TEST(FastPaths, FusedConvMatchesConvAddRelu) {
  struct Case {
    Shape x, w;
    std::vector<ir::Attribute> at;
  };
  const std::vector<Case> cases = {
      {{1, 16, 9, 9}, {32, 16, 1, 1}, {}},
      {{2, 8, 10, 7}, {16, 8, 3, 3}, {ir::ints_attr("pads", {1, 1, 1, 1})}},
      {{1, 3, 17, 17}, {8, 3, 7, 7}, {ir::ints_attr("pads", {3, 3, 3, 3}), ir::ints_attr("strides", {2, 2})}},
      {{1, 16, 8, 8}, {32, 16, 1, 1}, {ir::ints_attr("strides", {2, 2})}},
      {{1, 8, 6, 6}, {8, 2, 3, 3}, {ir::int_attr("group", 4), ir::ints_attr("pads", {1, 1, 1, 1})}},
  };
  for (const auto& c : cases) {
    Tensor x = random_floats(c.x, 1, -3, 3), w = random_floats(c.w, 2, -0.3f, 0.3f),
           b = random_floats({c.w[0]}, 3, -3, 3);
    Tensor conv = run("Conv", {&x, &w, &b}, c.at);
    Tensor z = random_floats(conv.shape(), 4, -3, 3);
    Tensor zc = random_floats({1, c.w[0], 1, 1}, 5, -3, 3);  // a broadcast residual takes the separate pass
    for (bool relu : {false, true}) {
      for (const Tensor* res : std::vector<const Tensor*>{nullptr, &z, &zc}) {
        std::vector<ir::Attribute> at = c.at;
        if (relu) at.push_back(ir::string_attr("activation", "Relu"));
        std::vector<const Tensor*> in = {&x, &w, &b};
        if (res) in.push_back(res);
        Tensor got = run("FusedConv", in, at, 1, 1, "reforge");
        ASSERT_EQ(got.shape(), conv.shape());
        for (int64_t i = 0; i < conv.numel(); ++i) {
          float want = conv.data<float>()[i] + (res ? bcast_at(*res, conv.shape(), i) : 0.0f);
          if (relu) want = want < 0 ? 0 : want;
          ASSERT_NEAR(got.data<float>()[i], want, 1e-4) << shape_str(c.x) << " relu " << relu << " at " << i;
        }
      }
    }
  }
}

namespace {
// [N, C, H, W] <-> [N, H, W, C] by explicit indexing (the test's own reference).
Tensor nchw_to_nhwc(const Tensor& t) {
  const Shape& s = t.shape();
  Tensor o = Tensor::empty(t.dtype(), {s[0], s[2], s[3], s[1]});
  const size_t e = dtype_size(t.dtype());
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t w = 0; w < s[3]; ++w)
          std::memcpy(static_cast<char*>(o.mutable_raw()) + e * (((n * s[2] + h) * s[3] + w) * s[1] + c),
                      static_cast<const char*>(t.raw()) + e * (((n * s[1] + c) * s[2] + h) * s[3] + w), e);
  return o;
}
}  // namespace

// FusedConv with channels-last operands (the conv-channels-last pass) equals the channels-first
// kernel on transposed data: float32 through oneDNN directly, float64 through the fallback.
TEST(FastPaths, FusedConvChannelsLast) {
  struct Case {
    Shape xs, ws;
    int64_t group;
  };
  const std::vector<Case> cases = {{{2, 16, 9, 7}, {32, 16, 3, 3}, 1},
                                   {{1, 32, 8, 8}, {16, 32, 1, 1}, 1},
                                   {{1, 16, 7, 7}, {16, 1, 3, 3}, 16},  // depthwise
                                   {{2, 8, 6, 5}, {12, 2, 3, 3}, 4}};
  for (const auto& [xs, ws, group] : cases) {
    for (DType dt : {DType::Float32, DType::Float64}) {
      Tensor x = random_floats(xs, 1, -3, 3), w = random_floats(ws, 2, -0.3f, 0.3f),
             b = random_floats({ws[0]}, 3, -3, 3);
      if (dt == DType::Float64) {
        auto widen = [](const Tensor& t) {
          Tensor o = Tensor::empty(DType::Float64, t.shape());
          for (int64_t i = 0; i < t.numel(); ++i) o.mutable_data<double>()[i] = t.data<float>()[i];
          return o;
        };
        x = widen(x), w = widen(w), b = widen(b);
      }
      const std::vector<ir::Attribute> base = {ir::ints_attr("pads", {ws[2] / 2, ws[3] / 2, ws[2] / 2, ws[3] / 2}),
                                               ir::string_attr("activation", "Relu"), ir::int_attr("group", group)};
      Tensor y0 = run("FusedConv", {&x, &w, &b}, base, 1, 1, "reforge");
      Tensor z = random_floats(y0.shape(), 9, -3, 3);
      if (dt == DType::Float64) {
        Tensor o = Tensor::empty(DType::Float64, z.shape());
        for (int64_t i = 0; i < z.numel(); ++i) o.mutable_data<double>()[i] = z.data<float>()[i];
        z = o;
      }
      Tensor want = run("FusedConv", {&x, &w, &b, &z}, base, 1, 1, "reforge");
      for (int mask = 1; mask < 8; ++mask) {
        const bool xl = mask & 1, yl = mask & 2, zl = mask & 4;
        std::vector<ir::Attribute> at = base;
        if (xl) at.push_back(ir::string_attr("x_layout", "NHWC"));
        if (yl) at.push_back(ir::string_attr("y_layout", "NHWC"));
        if (zl) at.push_back(ir::string_attr("z_layout", "NHWC"));
        Tensor xi = xl ? nchw_to_nhwc(x) : x, zi = zl ? nchw_to_nhwc(z) : z;
        Tensor got = run("FusedConv", {&xi, &w, &b, &zi}, at, 1, 1, "reforge");
        Tensor ref = yl ? nchw_to_nhwc(want) : want;
        ASSERT_EQ(got.shape(), ref.shape()) << mask;
        ASSERT_EQ(got.dtype(), dt);
        for (int64_t i = 0; i < ref.numel(); ++i)
          ASSERT_NEAR(got.as_double(i), ref.as_double(i), 1e-4) << shape_str(xs) << " layouts " << mask << " at " << i;
      }
    }
  }
}

// reforge::MaxPool (layout NHWC) equals the ONNX MaxPool on channels-first data, NaN included;
// float64 takes the converting fallback.
TEST(FastPaths, MaxPoolChannelsLast) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x = random_floats({2, 5, 11, 9}, 3, -3, 3);
    x.mutable_data<float>()[7] = kNaN;
    if (dt == DType::Float64) {
      Tensor o = Tensor::empty(DType::Float64, x.shape());
      for (int64_t i = 0; i < x.numel(); ++i) o.mutable_data<double>()[i] = x.data<float>()[i];
      x = o;
    }
    const std::vector<ir::Attribute> at = {ir::ints_attr("kernel_shape", {3, 3}), ir::ints_attr("strides", {2, 2}),
                                           ir::ints_attr("pads", {1, 1, 1, 1})};
    Tensor want = nchw_to_nhwc(run("MaxPool", {&x}, at, 12));
    Tensor xl = nchw_to_nhwc(x);
    std::vector<ir::Attribute> at2 = at;
    at2.push_back(ir::string_attr("layout", "NHWC"));
    Tensor got = run("MaxPool", {&xl}, at2, 1, 1, "reforge");
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < got.numel(); ++i) {
      const double a = got.as_double(i), b = want.as_double(i);
      EXPECT_TRUE((std::isnan(a) && std::isnan(b)) || a == b) << i << ": " << a << " vs " << b;
    }
  }
}

// reforge::MaxPool (layout NHWC, a running max over channel rows) at every SIMD level, channel
// counts straddling the vector widths: the values of the ONNX MaxPool on channels-first data.
TEST(FastPaths, MaxPoolChannelsLastEveryLevel) {
  for (int64_t c : {1, 3, 8, 13, 16, 37}) {
    Tensor x = random_floats({1, c, 7, 6}, static_cast<uint32_t>(c), -3, 3);
    x.mutable_data<float>()[c] = kNaN;
    const std::vector<ir::Attribute> at = {ir::ints_attr("kernel_shape", {3, 2}), ir::ints_attr("pads", {1, 0, 1, 1})};
    Tensor want = nchw_to_nhwc(run("MaxPool", {&x}, at, 12));
    Tensor xl = nchw_to_nhwc(x);
    std::vector<ir::Attribute> at2 = at;
    at2.push_back(ir::string_attr("layout", "NHWC"));
    for (SimdLevel l : simd_levels()) {
      SimdOverride cap(l);
      Tensor got = run("MaxPool", {&xl}, at2, 1, 1, "reforge");
      ASSERT_EQ(got.shape(), want.shape());
      for (int64_t i = 0; i < got.numel(); ++i)
        EXPECT_TRUE(same_float(got.data<float>()[i], want.data<float>()[i]))
            << c << " " << simd_level_name(l) << " at " << i;
    }
  }
}

// strided_copy's transpose-like copies (now transpose_2d's tile kernel) against a naive walk:
// every element size, odd extents, reversed and broadcast (0) strides.
TEST(FastPaths, StridedCopyTransposeTiles) {
  struct Case {
    Shape out;
    std::vector<int64_t> strides;
    int64_t offset;
  };
  // Source: a dense [5, 67, 45] buffer (15075 elements) read in various transposed orders.
  const std::vector<Case> cases = {
      {{5, 45, 67}, {3015, 1, 45}, 0},         // batched 2-D transpose
      {{45, 5, 67}, {1, 3015, 45}, 0},         // outer permutation
      {{5, 45, 67}, {3015, -1, 45}, 44},       // reversed along the unit-stride dim
      {{5, 45, 67}, {3015, 1, -45}, 66 * 45},  // reversed inner stride
      {{3, 45, 33}, {0, 1, 90}, 0},            // broadcast outer dim, strided inner
      {{1, 17, 16}, {0, 1, 45}, 3},            // smallest tiled case
  };
  for (size_t elem : {size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
    std::vector<unsigned char> src(15075 * elem);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + i / 251);
    for (const auto& c : cases) {
      const int64_t n = shape_numel(c.out);
      std::vector<unsigned char> got(static_cast<size_t>(n) * elem, 0), want(got.size(), 0);
      strided_copy(got.data(), src.data(), elem, c.out, c.strides, c.offset);
      for (int64_t i = 0; i < n; ++i) {
        int64_t rem = i, off = c.offset;
        for (size_t d = c.out.size(); d-- > 0;) {
          off += (rem % c.out[d]) * c.strides[d];
          rem /= c.out[d];
        }
        std::memcpy(want.data() + static_cast<size_t>(i) * elem, src.data() + static_cast<size_t>(off) * elem, elem);
      }
      EXPECT_EQ(got, want) << shape_str(c.out) << " elem " << elem;
    }
  }
  // transpose_block alone, pitches wider than the matrix.
  std::vector<uint32_t> a(37 * 50), b(29 * 40, 0);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint32_t>(i);
  transpose_block(b.data(), 40, a.data(), 50, 37, 29, 4);
  for (int64_t i = 0; i < 37; ++i)
    for (int64_t j = 0; j < 29; ++j) ASSERT_EQ(b[static_cast<size_t>(j * 40 + i)], a[static_cast<size_t>(i * 50 + j)]);
}
