// The fused transformer kernels (src/backends/cpu: rms_norm.cc, silu.cc, attention.cc, rotary.cc, gelu.cc,
// layer_normalization.cc) at every vector instruction set the CPU has (forced down with SimdOverride), each against a
// float64 reference computed here: each variant has its own vector width (16 lanes for AVX-512,
// 8 for AVX2, 4 for generic) and register blocking, so sizes straddle every width and tile
// (rows not a multiple of the 6-row tile, columns not a multiple of any vector), and the
// attention cases cover every mask mode, layout and a causal mask's skipped keys.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/simd.h"
#include "ops/registry.h"
#include "support/make_tensor.h"
#include "support/run_op.h"
#include "support/simd_levels.h"

using namespace reforge;
using namespace reforge::ops;
using test_support::simd_level_name;
using test_support::simd_levels;

namespace {

Tensor run(const std::string& domain, const std::string& op, int opset, std::vector<const Tensor*> inputs,
           std::vector<ir::Attribute> attrs = {}, int threads = 1) {
  return test_support::run_op(domain, op, opset, std::move(inputs), attrs, threads);
}

using test_support::random_floats;

Tensor scalar(float v) {
  Tensor t = Tensor::empty(DType::Float32, {});
  t.mutable_data<float>()[0] = v;
  return t;
}

const float* f(const Tensor& t) { return t.data<float>(); }

}  // namespace

// RmsNorm rows of every length around the vector widths, with a per-element, a scalar and no
// weight: within a few float32 roundings of the float64 result.
TEST(FusedSimd, RmsNormAgainstFloat64) {
  for (int64_t n : {1, 3, 4, 8, 15, 16, 33, 64, 100, 1024}) {
    const int64_t rows = 7;
    Tensor x = random_floats({rows, n}, 1, -3, 3), w = random_floats({n}, 2, -2, 2), ws = scalar(0.75f),
           eps = scalar(1e-6f);
    for (int wmode = 0; wmode < 3; ++wmode) {
      const Tensor* wp = wmode == 0 ? &w : wmode == 1 ? &ws : nullptr;
      for (SimdLevel l : simd_levels()) {
        SimdOverride cap(l);
        Tensor y = run("reforge", "RmsNorm", 1, {&x, wp, &eps});
        for (int64_t r = 0; r < rows; ++r) {
          double ss = 0;
          for (int64_t i = 0; i < n; ++i) ss += double(f(x)[r * n + i]) * f(x)[r * n + i];
          const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
          for (int64_t i = 0; i < n; ++i) {
            const double wv = wmode == 0 ? f(w)[i] : wmode == 1 ? 0.75 : 1.0;
            const double want = f(x)[r * n + i] * inv * wv;
            ASSERT_NEAR(f(y)[r * n + i], want, 2e-6 * std::fabs(want) + 1e-7)
                << "n " << n << " weight mode " << wmode << " at " << r << "," << i << " (" << simd_level_name(l)
                << ")";
          }
        }
      }
    }
  }
}

// Silu and SiluMul over lengths around the widths and the parallel split, deep into both tails.
TEST(FusedSimd, SiluAndSiluMulAgainstFloat64) {
  for (int64_t n : {0, 1, 5, 8, 17, 100, 40003}) {
    Tensor x = random_floats({n}, 3, -30, 30), u = random_floats({n}, 4, -2, 2);
    for (SimdLevel l : simd_levels()) {
      SimdOverride cap(l);
      for (int threads : {1, 2}) {
        Tensor s = run("reforge", "Silu", 1, {&x}, {}, threads);
        Tensor su = run("reforge", "SiluMul", 1, {&x, &u}, {}, threads);
        for (int64_t i = 0; i < n; ++i) {
          const double xv = f(x)[i], sig = xv / (1 + std::exp(-xv));
          ASSERT_NEAR(f(s)[i], sig, 1e-6 * std::fabs(sig) + 1e-30)
              << "Silu(" << xv << ") n " << n << " " << simd_level_name(l);
          const double want = sig * f(u)[i];
          ASSERT_NEAR(f(su)[i], want, 1e-6 * std::fabs(want) + 1e-30)
              << "SiluMul(" << xv << ") n " << n << " " << simd_level_name(l);
        }
      }
    }
  }
}

// reforge::Gelu, both forms: the erf form within 1e-6 |x| + 1e-7 absolute of float64 (the
// rational erf's own error), the tanh form within a few ulp relative.
TEST(FusedSimd, GeluAgainstFloat64) {
  for (int64_t n : {1, 7, 8, 16, 19, 20001}) {
    Tensor x = random_floats({n}, 5, -8, 8);
    for (SimdLevel l : simd_levels()) {
      SimdOverride cap(l);
      for (int threads : {1, 2}) {
        Tensor ye = run("reforge", "Gelu", 1, {&x}, {}, threads);
        Tensor yt = run("reforge", "Gelu", 1, {&x}, {ir::string_attr("approximate", "tanh")}, threads);
        for (int64_t i = 0; i < n; ++i) {
          const double v = f(x)[i];
          const double we = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
          const double wt = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
          ASSERT_NEAR(f(ye)[i], we, 1e-6 * std::fabs(v) + 1e-7)
              << "erf form at " << v << " (" << simd_level_name(l) << ")";
          ASSERT_NEAR(f(yt)[i], wt, 2e-6 * std::fabs(wt) + 1e-7)
              << "tanh form at " << v << " (" << simd_level_name(l) << ")";
        }
      }
    }
  }
}

// reforge::Gelu with its constants as inputs (refittable): the fast path only for the standard
// float32 constants bit for bit. One ulp off any constant, the kernel evaluates the formula as
// written with that constant (the fast path ignores the inputs, so taking it would give exactly
// the no-input result; the formula is checked against float64 with the perturbed constants).
TEST(FusedSimd, GeluConstantsOneUlpOffTakeTheGeneralPath) {
  const int64_t n = 4099;
  Tensor x = random_floats({n}, 11, -6, 6);
  const Tensor fast_erf = run("reforge", "Gelu", 1, {&x});
  const Tensor fast_tanh = run("reforge", "Gelu", 1, {&x}, {ir::string_attr("approximate", "tanh")});
  auto same_bits = [](const Tensor& a, const Tensor& b) { return std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0; };
  const float sqrt2 = static_cast<float>(std::sqrt(2.0)), sqrt_half = static_cast<float>(std::sqrt(0.5)),
              c1 = static_cast<float>(std::sqrt(2.0 / M_PI)), c2 = 0.044715f;
  struct Case {
    const char* what;
    bool tanh;
    std::vector<float> consts;  // erf: k, one, half; tanh: c1, c2, p, one, half
    std::string k_op;
  };
  std::vector<Case> standard = {{"erf div", false, {sqrt2, 1.0f, 0.5f}, "div"},
                                {"erf mul", false, {sqrt_half, 1.0f, 0.5f}, "mul"},
                                {"tanh", true, {c1, c2, 3.0f, 1.0f, 0.5f}, ""}};
  for (const Case& c : standard) {
    for (int which = -1; which < static_cast<int>(c.consts.size()); ++which) {
      for (float dir : {1.0f, -1.0f}) {
        if (which < 0 && dir < 0) continue;
        std::vector<float> k = c.consts;
        if (which >= 0) k[which] = std::nextafter(k[which], dir * INFINITY);
        SCOPED_TRACE(
            std::string(c.what) +
            (which < 0 ? ", standard" : ", constant " + std::to_string(which) + (dir > 0 ? " +1 ulp" : " -1 ulp")));
        std::vector<Tensor> ks;
        for (float v : k) ks.push_back(scalar(v));
        std::vector<const Tensor*> ins = {&x};
        for (const auto& t : ks) ins.push_back(&t);
        std::vector<ir::Attribute> attrs;
        if (c.tanh)
          attrs.push_back(ir::string_attr("approximate", "tanh"));
        else
          attrs.push_back(ir::string_attr("k_op", c.k_op));
        const Tensor y = run("reforge", "Gelu", 1, ins, attrs);
        const Tensor& fast = c.tanh ? fast_tanh : fast_erf;
        if (which < 0) {
          EXPECT_TRUE(same_bits(y, fast)) << "the standard constants should take the fast path";
          continue;
        }
        EXPECT_FALSE(same_bits(y, fast)) << "one ulp off the standard constants took the fast path";
        for (int64_t i = 0; i < n; ++i) {
          const double v = f(x)[i];
          double want;
          if (!c.tanh) {
            const double u = c.k_op == "div" ? v / k[0] : v * k[0];
            want = (v * k[2]) * (k[1] + std::erf(u));
          } else {
            want = (v * k[4]) * (k[3] + std::tanh(k[0] * (v + k[1] * std::pow(v, double(k[2])))));
          }
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(f(y)[i])) << "at " << v;  // x^p, x < 0, p not an integer: as written
          } else {
            ASSERT_NEAR(f(y)[i], want, 4e-7 * std::fabs(want) + 1e-7) << "at " << v;
          }
        }
      }
    }
  }
}

// LayerNormalization's float32 fast path (two passes: mean, then centred squares).
TEST(FusedSimd, LayerNormAgainstFloat64) {
  for (int64_t n : {1, 5, 8, 16, 31, 48, 768}) {
    const int64_t rows = 9;
    // An offset mean, so a one-pass variance would lose digits.
    Tensor x = random_floats({rows, n}, 6, 95, 105), s = random_floats({n}, 7, -2, 2), b = random_floats({n}, 8, -1, 1);
    for (bool bias : {true, false}) {
      for (SimdLevel l : simd_levels()) {
        SimdOverride cap(l);
        Tensor y = run("", "LayerNormalization", 17, {&x, &s, bias ? &b : nullptr}, {ir::float_attr("epsilon", 1e-5f)});
        for (int64_t r = 0; r < rows; ++r) {
          const float* xr = f(x) + r * n;
          double m = 0, q = 0;
          for (int64_t i = 0; i < n; ++i) m += xr[i];
          m /= n;
          for (int64_t i = 0; i < n; ++i) q += (xr[i] - m) * (xr[i] - m);
          const double inv = 1 / std::sqrt(q / n + 1e-5);
          for (int64_t i = 0; i < n; ++i) {
            const double want = (xr[i] - m) * inv * f(s)[i] + (bias ? f(b)[i] : 0.0);
            ASSERT_NEAR(f(y)[r * n + i], want, 2e-5 * (std::fabs((xr[i] - m) * inv * f(s)[i]) + 1))
                << "n " << n << " at " << r << "," << i << " (" << simd_level_name(l) << ")";
          }
        }
      }
    }
  }
}

// Rotary (rotate_half) in both input layouts, with head sizes whose half is below, at and above
// a vector.
TEST(FusedSimd, RotaryAgainstFloat64) {
  auto i64 = [](int64_t v) {
    Tensor t = Tensor::empty(DType::Int64, {1});
    t.mutable_data<int64_t>()[0] = v;
    return t;
  };
  for (int64_t D : {4, 8, 24, 40, 64}) {
    const int64_t B = 2, H = 3, S = 5, half = D / 2;
    Tensor cs = random_floats({1, 1, S, D}, 9, -1, 1), sn = random_floats({1, 1, S, D}, 10, -1, 1);
    Tensor hs = i64(half), he = i64(INT64_MAX), ls = i64(0), le = i64(half);
    for (bool bshd : {false, true}) {
      Tensor x = random_floats(bshd ? Shape{B, S, H, D} : Shape{B, H, S, D}, 11, -2, 2);
      for (SimdLevel l : simd_levels()) {
        SimdOverride cap(l);
        Tensor y = run("reforge", "Rotary", 1, {&x, &cs, &sn, &hs, &he, &ls, &le},
                       {ir::ints_attr("axes", {3, 3, -1}), ir::string_attr("layout", bshd ? "bshd" : "bhsd")});
        ASSERT_EQ(y.shape(), (Shape{B, H, S, D}));
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t s = 0; s < S; ++s) {
              const float* xr = f(x) + (bshd ? ((b * S + s) * H + h) * D : ((b * H + h) * S + s) * D);
              const float* yr = f(y) + ((b * H + h) * S + s) * D;
              for (int64_t i = 0; i < D; ++i) {
                const double rot = i < half ? -double(xr[i + half]) : double(xr[i - half]);
                const double want = double(xr[i]) * f(cs)[s * D + i] + rot * f(sn)[s * D + i];
                ASSERT_NEAR(yr[i], want, 1e-6)
                    << "D " << D << (bshd ? " bshd" : " bhsd") << " (" << simd_level_name(l) << ")";
              }
            }
      }
    }
  }
}

namespace {

struct AttnCase {
  int64_t B, H, Sq, Sk, D, Dv;
  std::string mask;  // "", "add" (random, some -inf-like), "causal" (additive), "where" (bool, causal)
  bool bshd;         // q, v and output as [B, S, H, D]; else [B, H, S, D]
  bool k_bhds;       // K given transposed, [B, H, D, Sk]
};

// softmax(Q K^T / sqrt(D) + mask) V in float64, output [B, H, Sq, Dv].
std::vector<double> attention_reference(const AttnCase& c, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor* mask) {
  std::vector<double> y(static_cast<size_t>(c.B * c.H * c.Sq * c.Dv));
  auto qa = [&](int64_t b, int64_t h, int64_t i, int64_t d) {
    return double(f(q)[c.bshd ? ((b * c.Sq + i) * c.H + h) * c.D + d : ((b * c.H + h) * c.Sq + i) * c.D + d]);
  };
  auto ka = [&](int64_t b, int64_t h, int64_t j, int64_t d) {
    return double(f(k)[c.k_bhds ? ((b * c.H + h) * c.D + d) * c.Sk + j : ((b * c.H + h) * c.Sk + j) * c.D + d]);
  };
  auto va = [&](int64_t b, int64_t h, int64_t j, int64_t d) {
    return double(f(v)[c.bshd ? ((b * c.Sk + j) * c.H + h) * c.Dv + d : ((b * c.H + h) * c.Sk + j) * c.Dv + d]);
  };
  std::vector<double> s(static_cast<size_t>(c.Sk));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.Sq; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.Sk; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < c.D; ++d) acc += qa(b, h, i, d) * ka(b, h, j, d);
          acc /= std::sqrt(double(c.D));
          if (c.mask == "add" || c.mask == "causal") acc += f(*mask)[(b * c.Sq + i) * c.Sk + j];
          if (c.mask == "where" && mask->data<bool>()[(b * c.Sq + i) * c.Sk + j]) acc = -3.4028234663852886e+38;
          s[j] = acc;
          mx = std::max(mx, acc);
        }
        double sum = 0;
        for (int64_t j = 0; j < c.Sk; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int64_t d = 0; d < c.Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < c.Sk; ++j) acc += s[j] * va(b, h, j, d);
          y[static_cast<size_t>(((b * c.H + h) * c.Sq + i) * c.Dv + d)] = acc / sum;
        }
      }
  return y;
}

}  // namespace

// reforge::Attention: head sizes below, at and between vector widths; query blocks that are not
// a multiple of the 6-row tile; key counts that are not a multiple of any width; each mask mode
// (the causal ones exercise the skipped keys past a block's last open one); both layouts.
TEST(FusedSimd, AttentionAgainstFloat64) {
  const std::vector<AttnCase> cases = {
      {1, 2, 1, 1, 8, 8, "", false, false},          {1, 2, 5, 7, 16, 16, "add", false, false},
      {2, 3, 37, 37, 64, 64, "causal", true, false}, {1, 2, 13, 70, 20, 12, "add", true, true},
      {1, 4, 33, 33, 64, 64, "where", true, false},  {1, 1, 70, 129, 40, 72, "causal", false, true},
      {2, 2, 6, 19, 3, 5, "where", false, false},    {1, 3, 64, 64, 64, 64, "", true, true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::Message() << "B" << c.B << " H" << c.H << " Sq" << c.Sq << " Sk" << c.Sk << " D" << c.D
                                    << " Dv" << c.Dv << " mask '" << c.mask << "'" << (c.bshd ? " bshd" : " bhsd")
                                    << (c.k_bhds ? " K bhds" : ""));
    Tensor q = random_floats(c.bshd ? Shape{c.B, c.Sq, c.H, c.D} : Shape{c.B, c.H, c.Sq, c.D}, 21, -2, 2);
    Tensor k = random_floats(c.k_bhds ? Shape{c.B, c.H, c.D, c.Sk} : Shape{c.B, c.H, c.Sk, c.D}, 22, -2, 2);
    Tensor v = random_floats(c.bshd ? Shape{c.B, c.Sk, c.H, c.Dv} : Shape{c.B, c.H, c.Sk, c.Dv}, 23, -1, 1);
    Tensor sc = scalar(std::sqrt(float(c.D)));
    Tensor fill = scalar(-3.4028234663852886e+38f);
    Tensor mask;
    if (c.mask == "add") {
      mask = random_floats({c.B, 1, c.Sq, c.Sk}, 24, -4, 0);
      for (int64_t i = 0; i < mask.numel(); i += 3) mask.mutable_data<float>()[i] = -3.4028234663852886e+38f;
      for (int64_t r = 0; r < c.B * c.Sq; ++r) mask.mutable_data<float>()[r * c.Sk + c.Sk - 1] = 0;  // an open key
    } else if (c.mask == "causal" || c.mask == "where") {
      const bool b = c.mask == "where";
      mask = Tensor::empty(b ? DType::Bool : DType::Float32, {c.B, 1, c.Sq, c.Sk});
      for (int64_t bb = 0; bb < c.B; ++bb)
        for (int64_t i = 0; i < c.Sq; ++i)
          for (int64_t j = 0; j < c.Sk; ++j) {
            const bool closed = j > i + (c.Sk - c.Sq);
            const int64_t at = (bb * c.Sq + i) * c.Sk + j;
            if (b)
              mask.mutable_data<bool>()[at] = closed;
            else
              mask.mutable_data<float>()[at] = closed ? -3.4028234663852886e+38f : 0.0f;
          }
    }
    const std::vector<double> want = attention_reference(c, q, k, v, c.mask.empty() ? nullptr : &mask);
    std::vector<ir::Attribute> attrs = {ir::string_attr("q_layout", c.bshd ? "bshd" : "bhsd"),
                                        ir::string_attr("k_layout", c.k_bhds ? "bhds" : "bhsd"),
                                        ir::string_attr("v_layout", c.bshd ? "bshd" : "bhsd"),
                                        ir::string_attr("out_layout", "bhsd"), ir::string_attr("scale_op", "div")};
    std::vector<const Tensor*> ins = {&q, &k, &v, &sc};
    if (!c.mask.empty()) {
      attrs.push_back(ir::string_attr("mask_mode", c.mask == "where" ? "where_fill_true" : "add"));
      ins.push_back(&mask);
      if (c.mask == "where") ins.push_back(&fill);
    }
    for (SimdLevel l : simd_levels()) {
      SimdOverride cap(l);
      for (int threads : {1, 2}) {
        Tensor y = run("reforge", "Attention", 1, ins, attrs, threads);
        ASSERT_EQ(y.shape(), (Shape{c.B, c.H, c.Sq, c.Dv}));
        for (int64_t i = 0; i < y.numel(); ++i)
          ASSERT_NEAR(f(y)[i], want[static_cast<size_t>(i)], 1e-5)
              << "at " << i << " (" << simd_level_name(l) << ", threads " << threads << ")";
      }
    }
  }
}
