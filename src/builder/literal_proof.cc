#include "builder/literal_proof.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

namespace reforge::build {

namespace {

// ---- bounds (documented in the header) ----
constexpr double kTrigUlps = 4;    // cos/sin outputs: SVML's 4 ulp is the least accurate libm in use
constexpr double kAngleUlps = 2;   // inv_freq vectors and raw angle tables: pow is not correctly rounded
constexpr double kArangeUlps = 2;  // float aranges: PyTorch's vectorized arange adds k*step to a rounded base
constexpr int kFreqOffsets[] = {0, -1, 1, -2, 2};  // float32 frequency candidates, in ulps of the correctly rounded one
constexpr int64_t kMaxStart = 65536;               // largest first position a table may start at
const double kCommonBases[] = {10000,    500000,  1000000, 100000, 50000, 1000,   5000000,
                               10000000, 2000000, 25000,   40000,  75000, 160000, 250000};

// Element reader over any float dtype (no copy: a rejected weight usually costs a few reads).
struct Reader {
  const unsigned char* p;
  DType dt;
  size_t es;
  explicit Reader(const Tensor& t)
      : p(static_cast<const unsigned char*>(t.raw())), dt(t.dtype()), es(dtype_size(t.dtype())) {}
  double at(int64_t i) const {
    const unsigned char* q = p + size_t(i) * es;
    switch (dt) {
      case DType::Float32: {
        float f;
        std::memcpy(&f, q, 4);
        return f;
      }
      case DType::Float64: {
        double d;
        std::memcpy(&d, q, 8);
        return d;
      }
      case DType::Float16: {
        uint16_t b;
        std::memcpy(&b, q, 2);
        return float16::to_float(b);
      }
      case DType::BFloat16: {
        uint16_t b;
        std::memcpy(&b, q, 2);
        return bfloat16::to_float(b);
      }
      default:
        return std::numeric_limits<double>::quiet_NaN();
    }
  }
  float f(int64_t i) const { return float(at(i)); }
  bool same_bits(int64_t i, int64_t j) const { return std::memcmp(p + size_t(i) * es, p + size_t(j) * es, es) == 0; }
};

// The dtype's number format: mantissa bits and smallest normal exponent.
struct Num {
  int mant, min_exp;
};
Num num_of(DType dt) {
  switch (dt) {
    case DType::Float16:
      return {10, -14};
    case DType::BFloat16:
      return {7, -126};
    case DType::Float64:
      return {52, -1022};
    default:
      return {23, -126};
  }
}
double ulp(double x, Num n) {
  x = std::fabs(x);
  int e = x > 0 ? std::ilogb(x) : n.min_exp;
  return std::ldexp(1.0, std::max(e, n.min_exp) - n.mant);
}
// A float32 reference as the tensor's dtype stores it (PyTorch computes in float32, then .to(dtype)).
double round_to(float r, DType dt) {
  if (dt == DType::Float16) return float16::to_float(float16::from_float(r));
  if (dt == DType::BFloat16) return bfloat16::to_float(bfloat16::from_float(r));
  return r;
}
// |got - ref| in ulps of ref. A reference of exactly 0 (sin 0, angle 0, arange start 0) is exact
// in every implementation and must be matched exactly: no absolute floor.
double ulps(double got, double ref, Num n) {
  if (got == ref) return 0;
  if (!std::isfinite(got) || !std::isfinite(ref) || ref == 0) return std::numeric_limits<double>::infinity();
  return std::fabs(got - ref) / ulp(ref, n);
}
// Relative precision of parameter estimates read off a table of this dtype.
double est_tol(DType dt) { return dt == DType::Float32 ? 1e-3 : 3e-2; }
float step_ulps(float x, int k) {
  for (; k > 0; --k) x = std::nextafter(x, std::numeric_limits<float>::infinity());
  for (; k < 0; ++k) x = std::nextafter(x, -std::numeric_limits<float>::infinity());
  return x;
}

// Shortest text that reads back as v (as float32 when v is a float32 value); integers in full.
std::string fmt(double v) {
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char b[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(b, sizeof b, "%.0f", v);
    return b;
  }
  const bool f32 = double(float(v)) == v;
  for (int d = 1; d <= 17; ++d) {
    std::snprintf(b, sizeof b, "%.*g", d, v);
    double x = std::strtod(b, nullptr);
    if (f32 ? float(x) == float(v) : x == v) return b;
  }
  return b;
}
// Shortest decimal that rounds to the same float32 (the literal a user most likely wrote).
double shortest_f32(float v) {
  char b[64];
  for (int d = 1; d <= 9; ++d) {
    std::snprintf(b, sizeof b, "%.*g", d, double(v));
    double x = std::strtod(b, nullptr);
    if (float(x) == v) return x;
  }
  return v;
}

LiteralProof structural(std::string rule) { return {LiteralProof::Kind::Structural, std::move(rule), "", 0}; }
LiteralProof proven(std::string rule, std::string recipe, double mu) {
  return {LiteralProof::Kind::Proven, std::move(rule), std::move(recipe), mu};
}

// ---------------------------------------------------------------------------------------------
// Structural rules.

std::optional<LiteralProof> all_equal(const Tensor& t, const Reader& r) {
  const int64_t n = t.numel();
  if (n == 0) return structural("empty " + t.describe());
  if (std::isnan(r.at(0))) return std::nullopt;
  for (int64_t i = 1; i < n; ++i)
    if (!r.same_bits(i, 0)) return std::nullopt;
  return structural("all-equal (" + fmt(r.at(0)) + ") " + t.describe());
}

// Negative fills a mask may use, as rounded into `dt`.
std::vector<double> mask_fills(DType dt) {
  std::vector<double> base = {-std::numeric_limits<double>::infinity(),
                              -double(FLT_MAX),
                              -65504.0,
                              -double(bfloat16::to_float(0xff7f)),
                              -1e4,
                              -1e9};
  if (dt == DType::Float64) base.push_back(-DBL_MAX);
  std::vector<double> out;
  for (double v : base) {
    double r = dt == DType::Float64 ? v : round_to(float(v), dt);
    if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  }
  return out;
}

std::optional<LiteralProof> mask(const Tensor& t, const Reader& r) {
  const int64_t n = t.numel();
  if (n < 2) return std::nullopt;
  // Value classes: 0 (+0 or -0) and one other value x, which must be 1 or an allowed fill.
  double other = 0;
  bool have_other = false;
  for (int64_t i = 0; i < n; ++i) {  // values first: a weight fails here, usually at once
    double v = r.at(i);
    if (v == 0) continue;
    if (!have_other) {
      bool ok = v == 1;
      for (double f : mask_fills(t.dtype())) ok |= v == f;
      if (!ok) return std::nullopt;
      other = v, have_other = true;
    } else if (!(v == other)) {
      return std::nullopt;
    }
  }
  if (!have_other) return std::nullopt;
  std::vector<uint8_t> cls(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) cls[size_t(i)] = r.at(i) != 0;
  const int64_t C = t.rank() >= 1 ? t.dim(t.rank() - 1) : 1, R = t.rank() >= 2 ? t.dim(t.rank() - 2) : 1;
  const int64_t L = n / (R * C);
  // Every row a step row a^p b^(C-p); (a, b) from any row with an interior boundary.
  std::vector<int64_t> p(static_cast<size_t>(L * R));
  int a = -1;
  for (int64_t row = 0; row < L * R; ++row) {
    const uint8_t* c = &cls[size_t(row * C)];
    if (c[0] != c[C - 1]) {
      a = c[0];
      break;
    }
  }
  bool all_const_rows = a < 0;
  if (a < 0) a = cls[0];
  for (int64_t row = 0; row < L * R; ++row) {
    const uint8_t* c = &cls[size_t(row * C)];
    int64_t k = 0;
    while (k < C && c[k] == a) ++k;
    for (int64_t j = k; j < C; ++j)
      if (c[j] == a) return std::nullopt;
    p[size_t(row)] = k;
  }
  std::string values = other == 1 ? "0/1" : "0/" + fmt(other);
  std::string shape = shape_str(t.shape());
  // causal: slices identical, p_i = clamp(i + k + 1, 0, C) with one interior row.
  if (!all_const_rows && R >= 2) {
    bool same = true;
    for (int64_t l = 1; l < L && same; ++l) same = std::memcmp(&cls[0], &cls[size_t(l * R * C)], size_t(R * C)) == 0;
    int64_t i0 = -1;
    for (int64_t i = 0; i < R; ++i)
      if (p[size_t(i)] > 0 && p[size_t(i)] < C) {
        i0 = i;
        break;
      }
    if (same && i0 >= 0) {
      int64_t k = p[size_t(i0)] - i0 - 1;
      bool ok = true;
      for (int64_t i = 0; i < R && ok; ++i) ok = p[size_t(i)] == std::clamp<int64_t>(i + k + 1, 0, C);
      if (ok)
        return structural("causal mask " + values + " " + shape + " (" + (a == 0 ? "0" : values.substr(2)) +
                          " where j <= i + " + std::to_string(k) + ", broadcast over leading axes)");
    }
  }
  // padding along the last axis: each slice's rows identical.
  {
    bool ok = true;
    for (int64_t l = 0; l < L && ok; ++l)
      for (int64_t i = 1; i < R && ok; ++i) ok = p[size_t(l * R + i)] == p[size_t(l * R)];
    if (ok && C >= 2) return structural("padding mask " + values + " " + shape + " (a prefix run along the last axis)");
  }
  // padding along axis -2: rows constant, one run of a-rows then b-rows per slice.
  if (all_const_rows && R >= 2) {
    bool ok = true;
    for (int64_t l = 0; l < L && ok; ++l) {
      int changes = 0;
      for (int64_t i = 1; i < R; ++i) changes += cls[size_t((l * R + i) * C)] != cls[size_t((l * R + i - 1) * C)];
      ok = changes <= 1;
    }
    if (ok) return structural("padding mask " + values + " " + shape + " (a prefix run along axis -2)");
  }
  return std::nullopt;
}

// The tensor as a broadcast of a vector along one axis (bit-identical along all others), or -1.
int64_t varying_axis(const Tensor& t, const Reader& r) {
  for (int64_t ax = 0; ax < t.rank(); ++ax) {
    const int64_t d = t.dim(ax);
    if (d < 2) continue;
    int64_t inner = 1;
    for (int64_t k = ax + 1; k < t.rank(); ++k) inner *= t.dim(k);
    const int64_t outer = t.numel() / (d * inner);
    bool ok = true;
    for (int64_t o = 0; o < outer && ok; ++o)
      for (int64_t k = 0; k < d && ok; ++k)
        for (int64_t i = 0; i < inner && ok; ++i) ok = r.same_bits((o * d + k) * inner + i, k * inner);
    if (ok) return ax;
  }
  return -1;
}
std::vector<double> axis_vector(const Tensor& t, const Reader& r, int64_t ax) {
  int64_t inner = 1;
  for (int64_t k = ax + 1; k < t.rank(); ++k) inner *= t.dim(k);
  std::vector<double> v(size_t(t.dim(ax)));
  for (int64_t k = 0; k < t.dim(ax); ++k) v[size_t(k)] = r.at(k * inner);
  return v;
}

std::optional<LiteralProof> integer_arange(const Tensor& t, const std::vector<double>& v, int64_t ax) {
  const double lim = std::ldexp(1.0, num_of(t.dtype()).mant + 1);
  for (double x : v)
    if (!std::isfinite(x) || x != std::floor(x) || std::fabs(x) > lim) return std::nullopt;
  const double start = v[0], step = v[1] - v[0];
  if (step == 0) return std::nullopt;
  for (size_t k = 0; k < v.size(); ++k)
    if (v[k] != start + double(k) * step) return std::nullopt;
  return structural("integer arange " + fmt(start) + ".." + fmt(v.back()) + " step " + fmt(step) + " along axis " +
                    std::to_string(ax) + " of " + t.describe());
}

// ---------------------------------------------------------------------------------------------
// Proven rules: float aranges.

std::optional<LiteralProof> float_arange(const Tensor& t, const std::vector<double>& v, int64_t ax) {
  if (v.size() < 3 || t.dtype() == DType::Float64) return std::nullopt;
  for (double x : v)
    if (!std::isfinite(x)) return std::nullopt;
  const Num num = num_of(t.dtype());
  const double est = (v.back() - v[0]) / double(v.size() - 1);
  if (est == 0) return std::nullopt;
  // A nonzero start below half an ulp of the step leaves no trace in any later element: only
  // element 0 would witness it (a perturbed 0), so it is refused.
  if (v[0] != 0 && std::fabs(v[0]) < 0.5 * ulp(est, num)) return std::nullopt;
  std::vector<double> starts = {shortest_f32(float(v[0])), v[0]};
  for (int d = 1; d <= 9; ++d) {
    char b[64];
    std::snprintf(b, sizeof b, "%.*g", d, est);
    double step = std::strtod(b, nullptr);
    for (double start : starts) {
      double worst = 0;
      for (size_t k = 0; k < v.size() && worst <= kArangeUlps; ++k)
        worst = std::max(worst, ulps(v[k], round_to(float(start + double(k) * step), t.dtype()), num));
      if (worst <= kArangeUlps)
        return proven("float arange " + fmt(start) + " step " + fmt(step) + ", " + std::to_string(v.size()) +
                          " values along axis " + std::to_string(ax) + " of " + t.describe(),
                      "float32(start + k * step), start and step in double (PyTorch's CPU arange), k = 0.." +
                          std::to_string(v.size() - 1),
                      worst);
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Proven rules: position tables. A table is viewed as [S, D]; each column is fn(pos[p] * w[freq]).

enum class Fn { Sin, Cos, Angle };
const char* fn_name(Fn f) { return f == Fn::Sin ? "sin" : f == Fn::Cos ? "cos" : "angle"; }

struct Layout {
  std::string name;
  int nfreq = 0;
  std::vector<int> freq;  // per column
  std::vector<Fn> fn;     // per column
};

struct Table {
  const Tensor* t;
  Reader r;
  int64_t S, D;
  double at(int64_t p, int64_t c) const { return r.at(p * D + c); }
};

double apply(Fn f, float theta) {
  if (f == Fn::Angle) return theta;
  return float(f == Fn::Sin ? std::sin(double(theta)) : std::cos(double(theta)));
}

// Float32 recomputation: angle = pos[p] * w[i] (one float32 product), out = fn(angle) rounded to
// float32 then to the dtype. Each frequency may take one of kFreqOffsets around w[i] (libm pow/exp).
// Returns the largest ulps, or nullopt past `bound`. `rows` limits the rows checked (quick checks).
std::optional<double> verify_f32(const Table& tb, const Layout& lay, const std::vector<float>& w,
                                 const std::vector<float>& pos, double bound, const std::vector<int64_t>* rows,
                                 int* max_offset) {
  const Num num = num_of(tb.t->dtype());
  std::vector<std::vector<int64_t>> cols(size_t(lay.nfreq));
  for (int64_t c = 0; c < tb.D; ++c) cols[size_t(lay.freq[size_t(c)])].push_back(c);
  double worst = 0;
  for (int i = 0; i < lay.nfreq; ++i) {
    bool found = false;
    for (int off : kFreqOffsets) {
      const float wc = step_ulps(w[size_t(i)], off);
      double e = 0;
      auto check = [&](int64_t p) {
        for (int64_t c : cols[size_t(i)]) {
          double ref = round_to(float(apply(lay.fn[size_t(c)], pos[size_t(p)] * wc)), tb.t->dtype());
          e = std::max(e, ulps(tb.at(p, c), ref, num));
          if (e > bound) return false;
        }
        return true;
      };
      bool ok = true;
      if (rows) {
        for (int64_t p : *rows) ok = ok && check(p);
      } else {
        for (int64_t p = 0; p < tb.S && ok; ++p) ok = check(p);
      }
      if (ok) {
        worst = std::max(worst, e);
        if (max_offset) *max_offset = std::max(*max_offset, std::abs(off));
        found = true;
        break;
      }
    }
    if (!found) return std::nullopt;
  }
  return worst;
}

// Float64 recomputation (numpy implementations): out = float32(fn(angle(p, i))) in double.
std::optional<double> verify_f64(const Table& tb, const Layout& lay, const std::function<double(int64_t, int)>& angle,
                                 double bound) {
  const Num num = num_of(tb.t->dtype());
  double worst = 0;
  for (int64_t p = 0; p < tb.S; ++p)
    for (int64_t c = 0; c < tb.D; ++c) {
      double a = angle(p, lay.freq[size_t(c)]);
      Fn f = lay.fn[size_t(c)];
      double ref = round_to(float(f == Fn::Sin ? std::sin(a) : f == Fn::Cos ? std::cos(a) : a), tb.t->dtype());
      worst = std::max(worst, ulps(tb.at(p, c), ref, num));
      if (worst > bound) return std::nullopt;
    }
  return worst;
}

// Loose row check to prune parameter candidates before the strict pass: |diff| <= 64 ulps of the
// result + 8 ulps of the float32 angle.
bool quick_check(const Table& tb, const Layout& lay, const std::vector<float>& w, const std::vector<float>& pos) {
  const Num num = num_of(tb.t->dtype());
  for (int64_t p : {tb.S - 1, std::min<int64_t>(1, tb.S - 1)})
    for (int64_t c = 0; c < tb.D; ++c) {
      float th = pos[size_t(p)] * w[size_t(lay.freq[size_t(c)])];
      double ref = round_to(float(apply(lay.fn[size_t(c)], th)), tb.t->dtype());
      double tol = 64 * ulp(ref, num) + 8 * ulp(th, num_of(DType::Float32));
      if (!(std::fabs(tb.at(p, c) - ref) <= tol)) return false;
    }
  return true;
}

// quick_check for a float64 recomputation: rows S-1 and 1 within 64 ulps.
bool quick_check64(const Table& tb, const Layout& lay, const std::function<double(int64_t, int)>& angle) {
  const Num num = num_of(tb.t->dtype());
  for (int64_t p : {tb.S - 1, std::min<int64_t>(1, tb.S - 1)})
    for (int64_t c = 0; c < tb.D; ++c) {
      double a = angle(p, lay.freq[size_t(c)]);
      Fn f = lay.fn[size_t(c)];
      double ref = round_to(float(f == Fn::Sin ? std::sin(a) : f == Fn::Cos ? std::cos(a) : a), tb.t->dtype());
      if (!(ulps(tb.at(p, c), ref, num) <= 64)) return false;
    }
  return true;
}

// Per-row angle increment of the column(s) of frequency i, estimated from the table (double).
std::optional<double> estimate_w(const Table& tb, const Layout& lay, int i) {
  int64_t c = -1;
  for (int64_t k = 0; k < tb.D; ++k)
    if (lay.freq[size_t(k)] == i) {
      c = k;
      break;
    }
  if (c < 0) return std::nullopt;
  Fn f = lay.fn[size_t(c)];
  if (f == Fn::Angle) return tb.at(1, c) - tb.at(0, c);
  if (tb.S < 3) {  // two rows: position 0 then 1
    double v = tb.at(1, c);
    if (std::fabs(v) > 1) return std::nullopt;
    return f == Fn::Cos ? std::acos(v) : std::asin(v);
  }
  // v[p+1] + v[p-1] = 2 cos(w) v[p] for any phase.
  int64_t best = 1;
  for (int64_t p = 1; p + 1 < tb.S; ++p)
    if (std::fabs(tb.at(p, c)) > std::fabs(tb.at(best, c))) best = p;
  double vp = tb.at(best, c);
  if (std::fabs(vp) < 0.1) return std::nullopt;
  double cw = (tb.at(best + 1, c) + tb.at(best - 1, c)) / (2 * vp);
  if (!(std::fabs(cw) <= 1.0 + 1e-6)) return std::nullopt;
  return std::acos(std::clamp(cw, -1.0, 1.0));
}

// Candidate first positions, start 0 first, from column 0 (angle increment w0 per row).
std::vector<int64_t> start_candidates(const Table& tb, const Layout& lay, double w0) {
  std::vector<int64_t> out = {0};
  int64_t c = -1;
  for (int64_t k = 0; k < tb.D; ++k)
    if (lay.freq[size_t(k)] == 0) {
      c = k;
      break;
    }
  if (c < 0 || tb.S < 2 || !(w0 > 0)) return out;
  Fn f = lay.fn[size_t(c)];
  double v0 = tb.at(0, c), v1 = tb.at(1, c);
  double phase;
  if (f == Fn::Angle) {
    double a = v0 / w0;
    if (a > 0.5 && a < double(kMaxStart) + 0.5) out.push_back(std::llround(a));
    return out;
  }
  double s = std::sin(w0), co = std::cos(w0);
  if (std::fabs(s) < 1e-3) return out;
  if (f == Fn::Cos)
    phase = std::atan2((v0 * co - v1) / s, v0);
  else
    phase = std::atan2(v0, (v1 - v0 * co) / s);
  if (phase < 0) phase += 2 * M_PI;
  const double period = 2 * M_PI / w0;
  for (double a = phase / w0; a <= double(kMaxStart) + 0.5 && out.size() < 64; a += period) {
    double ra = std::round(a);
    if (ra >= 1 && std::fabs(a - ra) <= 1e-3 * (1 + ra * 1e-3)) out.push_back(int64_t(ra));
  }
  return out;
}

// Rotary inverse frequencies, float32 as PyTorch computes them (correctly rounded pow; the
// candidates of verify_f32 absorb pow's last-ulp differences).
std::vector<float> rope_inv_freq(double base, int nfreq, double factor, bool scale_inv) {
  const int dim = 2 * nfreq;
  std::vector<float> w(static_cast<size_t>(nfreq));
  for (int i = 0; i < nfreq; ++i) {
    float e = float(2 * i) / float(dim);
    float p = float(std::pow(double(float(base)), double(e)));
    float inv = 1.0f / p;
    if (scale_inv && factor != 1) inv = inv / float(factor);
    w[size_t(i)] = inv;
  }
  return w;
}

// Candidate linear-scaling factors for an estimated 1/w0: 1, or a multiple of 1/16 within 1e-3.
std::vector<double> factor_candidates(double f_est, double tol) {
  if (!(f_est > 1 - tol) || f_est > 4096) return {};
  if (std::fabs(f_est - 1) < tol) return {1.0};
  double s = std::round(f_est * 16) / 16;
  if (std::fabs(s - f_est) <= tol * f_est) return {s};
  return {};
}

// Bases to try for an estimate: the common ones within 1%, then integers nearest first.
std::vector<double> base_candidates(double est, double tol) {
  std::vector<double> out;
  if (!(est > 1.5) || est > 1e12) return out;
  for (double b : kCommonBases)
    if (std::fabs(b - est) <= 10 * tol * est) out.push_back(b);
  const double center = std::round(est);
  const int64_t half = std::min<int64_t>(2000, std::max<int64_t>(5, int64_t(est * 1e-3)));
  for (int64_t d = 0; d <= half; ++d)
    for (double b : {center - double(d), center + double(d)}) {
      if (b < 2 || (d == 0 && b != center)) continue;
      if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
      if (d == 0) break;
    }
  return out;
}

std::string positions_str(int64_t start, int64_t S) {
  return std::to_string(start) + ".." + std::to_string(start + S - 1);
}

std::vector<float> positions(int64_t start, int64_t S, double factor, bool scale_pos) {
  std::vector<float> pos(static_cast<size_t>(S));
  for (int64_t p = 0; p < S; ++p) {
    float x = float(start + p);
    pos[size_t(p)] = scale_pos && factor != 1 ? x / float(factor) : x;
  }
  return pos;
}

bool columns_equal(const Table& tb, int64_t a, int64_t b) {
  for (int64_t p = 0; p < tb.S; ++p)
    if (!tb.r.same_bits(p * tb.D + a, p * tb.D + b)) return false;
  return true;
}

// The [S, D] view of a tensor whose leading axes are all 1 (rank >= 2), or nullopt.
std::optional<std::pair<int64_t, int64_t>> view_2d(const Tensor& t) {
  if (t.rank() < 2) return std::nullopt;
  for (int64_t k = 0; k + 2 < t.rank(); ++k)
    if (t.dim(k) != 1) return std::nullopt;
  return std::make_pair(t.dim(t.rank() - 2), t.dim(t.rank() - 1));
}

bool bounded_by_one(const Table& tb) {
  for (int64_t i = 0; i < tb.S * tb.D; ++i)
    if (!(std::fabs(tb.r.at(i)) <= 1)) return false;
  return true;
}

std::optional<LiteralProof> rotary_table(const Tensor& t) {
  auto v2 = view_2d(t);
  if (!v2 || t.dtype() == DType::Float64) return std::nullopt;
  Table tb{&t, Reader(t), v2->first, v2->second};
  if (tb.S < 2 || tb.D < 4) return std::nullopt;
  std::vector<Layout> layouts;
  const int64_t D = tb.D;
  if (D % 2 == 0 && D / 2 >= 4) {
    bool cat = true, inter = true;
    for (int64_t j = 0; j < D / 2 && cat; ++j) cat = columns_equal(tb, j, j + D / 2);
    for (int64_t j = 0; j < D / 2 && inter; ++j) inter = columns_equal(tb, 2 * j, 2 * j + 1);
    for (Fn f : {Fn::Cos, Fn::Sin}) {
      if (cat) {
        Layout l{std::string(fn_name(f)) + " table, Llama layout cat(freqs, freqs)", int(D / 2), {}, {}};
        for (int64_t c = 0; c < D; ++c) l.freq.push_back(int(c % (D / 2))), l.fn.push_back(f);
        layouts.push_back(l);
      }
      if (inter) {
        Layout l{std::string(fn_name(f)) + " table, GPT-J layout repeat_interleave(freqs, 2)", int(D / 2), {}, {}};
        for (int64_t c = 0; c < D; ++c) l.freq.push_back(int(c / 2)), l.fn.push_back(f);
        layouts.push_back(l);
      }
    }
  }
  for (Fn f : {Fn::Cos, Fn::Sin, Fn::Angle}) {
    Layout l{std::string(fn_name(f)) + " half table [S, dim/2]", int(D), {}, {}};
    for (int64_t c = 0; c < D; ++c) l.freq.push_back(int(c)), l.fn.push_back(f);
    layouts.push_back(l);
  }
  int trig_ok = -1;  // every |value| <= 1; a full pass, so only once a layout's estimates fit
  for (const Layout& lay : layouts) {
    auto w0 = estimate_w(tb, lay, 0);
    if (!w0 || !(*w0 > 0) || factor_candidates(1.0 / *w0, est_tol(t.dtype())).empty()) continue;
    if (lay.fn[0] != Fn::Angle) {
      if (trig_ok < 0) trig_ok = bounded_by_one(tb);
      if (!trig_ok) continue;
    }
    // The base from the highest frequency index whose per-row increment is still well estimated.
    double base_est = 0;
    for (int k = lay.nfreq - 1; k >= 1; --k) {
      auto wk = estimate_w(tb, lay, k);
      if (wk && *wk >= (lay.fn[0] == Fn::Angle ? 0.0 : 0.05) && *wk > 0) {
        base_est = std::pow(*w0 / *wk, double(lay.nfreq) / k);
        break;
      }
    }
    for (double factor : factor_candidates(1.0 / *w0, est_tol(t.dtype()))) {
      std::vector<double> bases = base_candidates(base_est, est_tol(t.dtype()));
      for (bool scale_inv : factor == 1 ? std::vector<bool>{true} : std::vector<bool>{true, false}) {
        std::vector<int64_t> starts = start_candidates(tb, lay, 1.0 / factor);
        for (int64_t start : starts) {
          std::vector<float> pos = positions(start, tb.S, factor, !scale_inv);
          for (double base : bases) {
            std::vector<float> w = rope_inv_freq(base, lay.nfreq, factor, scale_inv);
            if (!quick_check(tb, lay, w, pos)) continue;
            int off = 0;
            auto mu = verify_f32(tb, lay, w, pos, lay.fn[0] == Fn::Angle ? kAngleUlps : kTrigUlps, nullptr, &off);
            if (!mu) continue;
            std::string scaling =
                factor == 1 ? "1" : fmt(factor) + (scale_inv ? " (inv_freq / factor)" : " (positions / factor)");
            return proven("rotary " + lay.name + ": base " + fmt(base) + ", dim " + std::to_string(2 * lay.nfreq) +
                              ", positions " + positions_str(start, tb.S) + ", linear scaling " + scaling + ", " +
                              t.describe(),
                          "float32: inv_freq = 1 / base ** (float(arange(0, dim, 2)) / dim)" +
                              std::string(factor != 1 && scale_inv ? " / factor" : "") + "; angle = float(position" +
                              (factor != 1 && !scale_inv ? " / factor" : "") + ") * inv_freq; " +
                              (lay.fn[0] == Fn::Angle ? std::string("the angle itself")
                                                      : std::string(fn_name(lay.fn[0])) + "(angle)") +
                              (t.dtype() != DType::Float32 ? ", cast to " + dtype_name(t.dtype()) : "") +
                              "; per-frequency float32 inv_freq within " + std::to_string(off) +
                              " ulp of the correctly rounded value",
                          *mu);
          }
        }
      }
    }
  }
  return std::nullopt;
}

std::optional<LiteralProof> rotary_inv_freq(const Tensor& t) {
  if (t.dtype() == DType::Float64) return std::nullopt;
  int64_t n = 0, non1 = 0;
  for (int64_t d : t.shape())
    if (d != 1) n = d, ++non1;
  if (non1 != 1 || n < 4) return std::nullopt;
  Reader r(t);
  const Num num = num_of(t.dtype());
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = r.at(i);
  for (double x : v)
    if (!(x > 0) || !std::isfinite(x)) return std::nullopt;
  for (double factor : factor_candidates(1.0 / v[0], est_tol(t.dtype()))) {
    double base_est = std::pow(v[0] / v[size_t(n - 1)], double(n) / double(n - 1));
    for (double base : base_candidates(base_est, est_tol(t.dtype()))) {
      std::vector<float> w = rope_inv_freq(base, int(n), factor, true);
      double worst = 0;
      for (int64_t i = 0; i < n && worst <= kAngleUlps; ++i)
        worst = std::max(worst, ulps(v[size_t(i)], round_to(w[size_t(i)], t.dtype()), num));
      if (worst <= kAngleUlps)
        return proven(
            "rotary inv_freq: base " + fmt(base) + ", dim " + std::to_string(2 * n) + ", linear scaling " +
                fmt(factor) + ", " + t.describe(),
            "float32: 1 / base ** (float(arange(0, dim, 2)) / dim)" + std::string(factor != 1 ? " / factor" : ""),
            worst);
    }
  }
  return std::nullopt;
}

std::optional<LiteralProof> sinusoidal(const Tensor& t) {
  auto v2 = view_2d(t);
  if (!v2 || t.dtype() == DType::Float64) return std::nullopt;
  Table tb{&t, Reader(t), v2->first, v2->second};
  const int64_t D = tb.D;
  if (tb.S < 2 || D < 4 || D % 2) return std::nullopt;
  int trig_ok = -1;  // every |value| <= 1, checked once a quick check passed
  const int h = int(D / 2);
  Layout inter{"interleaved pe[p, 2i] = sin, pe[p, 2i+1] = cos", h, {}, {}}, cat{"concatenated [sin | cos]", h, {}, {}};
  for (int64_t c = 0; c < D; ++c) {
    inter.freq.push_back(int(c / 2)), inter.fn.push_back(c % 2 ? Fn::Cos : Fn::Sin);
    cat.freq.push_back(int(c % h)), cat.fn.push_back(c < h ? Fn::Sin : Fn::Cos);
  }
  const double ln = std::log(10000.0);
  struct Formula {
    std::string recipe;
    std::vector<float> w;
    std::function<double(int64_t, int)> angle64;  // position offset added by the caller
  };
  std::vector<Formula> formulas;
  {
    Formula f{
        "float32: w_i = exp(float(2i) * float(-ln(10000) / D)) (PyTorch tutorial / Annotated Transformer)", {}, {}};
    const float c = float(-ln / double(D));
    for (int i = 0; i < h; ++i) f.w.push_back(float(std::exp(double(float(2 * i) * c))));
    formulas.push_back(f);
  }
  {
    Formula f{"float32: w_i = 1 / 10000 ** (float(2i) / D)", {}, {}};
    f.w = rope_inv_freq(10000, h, 1, true);
    formulas.push_back(f);
  }
  if (h >= 2) {
    Formula f{"float32: w_i = exp(float(i) * float(-ln(10000) / (D/2 - 1))) (fairseq, tensor2tensor)", {}, {}};
    const float c = float(-ln / double(h - 1));
    for (int i = 0; i < h; ++i) f.w.push_back(float(std::exp(double(float(i) * c))));
    formulas.push_back(f);
  }
  for (const Layout* lay : {&inter, &cat}) {
    std::vector<int64_t> starts = start_candidates(tb, *lay, 1.0);
    for (int64_t start : starts) {
      std::vector<float> pos = positions(start, tb.S, 1, false);
      for (const Formula& f : formulas) {
        if (!quick_check(tb, *lay, f.w, pos)) continue;
        if (trig_ok < 0) trig_ok = bounded_by_one(tb);
        if (!trig_ok) return std::nullopt;
        int off = 0;
        if (auto mu = verify_f32(tb, *lay, f.w, pos, kTrigUlps, nullptr, &off))
          return proven("sinusoidal position encoding (" + lay->name + "): base 10000, dim " + std::to_string(D) +
                            ", positions " + positions_str(start, tb.S) + ", " + t.describe(),
                        f.recipe + "; angle = float(position) * w_i; per-frequency w_i within " + std::to_string(off) +
                            " ulp of the correctly rounded value",
                        *mu);
      }
      // float64 implementations (numpy), rounded to float32 once.
      const bool is_cat = lay == &cat;
      auto angle = [&](int64_t p, int i) {
        double x = double(start + p);
        return is_cat ? x * std::exp(double(i) * -ln / double(h - 1))
                      : x / std::pow(10000.0, double(2 * i) / double(D));
      };
      if (is_cat && h < 2) continue;
      if (!quick_check64(tb, *lay, angle)) continue;
      if (auto mu = verify_f64(tb, *lay, angle, kTrigUlps))
        return proven("sinusoidal position encoding (" + lay->name + "): base 10000, dim " + std::to_string(D) +
                          ", positions " + positions_str(start, tb.S) + ", " + t.describe(),
                      std::string("float64 then float32: angle = position ") +
                          (is_cat ? "* exp(i * -ln(10000) / (D/2 - 1))" : "/ 10000 ** (2i / D)") +
                          ", sin/cos in float64",
                      *mu);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<LiteralProof> prove_literal(const Tensor& t) {
  if (!is_float(t.dtype()) || (t.numel() > 0 && !t.raw())) return std::nullopt;
  Reader r(t);
  if (auto p = all_equal(t, r)) return p;
  if (auto p = mask(t, r)) return p;
  int64_t ax = varying_axis(t, r);
  if (ax >= 0) {
    std::vector<double> v = axis_vector(t, r, ax);
    if (auto p = integer_arange(t, v, ax)) return p;
    if (auto p = float_arange(t, v, ax)) return p;
  }
  if (auto p = rotary_inv_freq(t)) return p;
  if (auto p = rotary_table(t)) return p;
  if (auto p = sinusoidal(t)) return p;
  return std::nullopt;
}

std::string describe(const LiteralProof& p) {
  if (p.kind == LiteralProof::Kind::Structural) return "structural: " + p.rule;
  char mu[32];
  std::snprintf(mu, sizeof mu, "%.3g", p.max_ulps);
  return "proven: " + p.rule + " (recipe: " + p.recipe + "; max " + mu + " ulp)";
}

}  // namespace reforge::build
