// Shared pieces of the unary op family: float32 vector math, the op structs' driver that maps a
// per-element function over a tensor, and the hook through which a backend plugs in its own
// float32 loop.
//
// Why explicit vectors: libm's expf/tanhf/erff are opaque calls, and GCC (with its default
// -ftrapping-math) will not if-convert a select that guards floating-point arithmetic, so even
// `x < 0 ? a * x : x` stays a scalar branch. The float32 path is therefore written with GCC/Clang
// vector extensions (ops/vector_ext.h): straight-line arithmetic, bit operations and lane
// selects, no branches. The helpers are always-inline templates over the vector type and name no
// instruction set. The reference kernels run them on 4-lane vectors (ReferenceMap); the CPU
// backend (backends/cpu/unary.cc) compiles the same element loop once per instruction set, each
// on vectors one register of its own width, and picks one per call; its AVX variants contract
// a * b + c into FMAs, so they differ from the reference in the last bits. Accuracy is a few ulp
// against double-precision libm (tests/ops_unary_test.cc measures it); NaN, +-inf, overflow and
// gradual underflow behave like libm. double keeps libm; float16/bfloat16 are converted in blocks
// and use the float32 path.
#pragma once

#include <omp.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>

#include "core/dispatch.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/registry.h"
#include "ops/vector_ext.h"

namespace reforge::ops::unary {

// Every helper is a template over the vector type V: simdv::Vec4 in the reference kernels, one
// register of the variant that runs it in the CPU backend's (16 lanes for AVX-512, 8 for AVX2, 4
// for SSE2). A vector
// wider than the target's registers compiles, but GCC 12 lowers it lane by lane through the stack
// (the AVX2 and SSE2 variants on 16-lane vectors ran Tanh or Erf at 12-20 ns per element on
// Zen 3). Every function taking or returning a vector is always inlined (REFORGE_VINLINE, the ops'
// vec() members too), so no call passes one. Results do not depend on V: every operation is lane
// by lane.
#define REFORGE_VINLINE inline __attribute__((always_inline))
// The note stays off in the including files too: their ops' vec() members take and return V.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
using simdv::splat;
template <typename V>
using VI = simdv::IVec<V>;  // also the type of lane masks (-1 / 0)
template <typename V>
using VU = simdv::UVec<V>;

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <typename V>
REFORGE_VINLINE VI<V> as_int(const V& v) {
  return std::bit_cast<VI<V>>(v);
}
template <typename V>
REFORGE_VINLINE V as_float(const VI<V>& v) {
  return std::bit_cast<V>(v);
}
template <typename V>
REFORGE_VINLINE V vabs(const V& x) {
  return as_float<V>(as_int(x) & INT32_MAX);
}
// |mag| with the sign of `sign`.
template <typename V>
REFORGE_VINLINE V vcopysign(const V& mag, const V& sign) {
  return as_float<V>((as_int(mag) & INT32_MAX) | (as_int(sign) & INT32_MIN));
}
template <typename V>
REFORGE_VINLINE VI<V> visnan(const V& x) {
  return x != x;
}

// Lane by lane; the square root is correctly rounded, so every form of it (a vector instruction
// in the CPU backend's Sqrt) gives these bits.
template <typename V>
REFORGE_VINLINE V vsqrt(const V& x) {
  V r;
  for (int l = 0; l < simdv::lanes_of<V>; ++l) r[l] = std::sqrt(x[l]);
  return r;
}

// Round half to even for |x| < 2^23 by adding and subtracting 2^23 (the FPU rounds to nearest
// even); larger magnitudes, inf and NaN are already integers or pass through.
template <typename V>
REFORGE_VINLINE V vround_even(const V& x) {
  V ax = vabs(x);
  V r = vcopysign<V>((ax + 8388608.0f) - 8388608.0f, x);
  return ax < 8388608.0f ? r : x;
}
template <typename V>
REFORGE_VINLINE V vfloor(const V& x) {
  V r = vround_even(x);
  return r > x ? r - 1.0f : r;
}
template <typename V>
REFORGE_VINLINE V vceil(const V& x) {
  V r = vround_even(x);
  return r < x ? r + 1.0f : r;
}

// Polynomial part of exp on |r| <= ln2/2: returns exp(r) - 1 (Cephes expf coefficients).
template <typename V>
REFORGE_VINLINE V vexpm1_reduced(const V& r) {
  V p = splat<V>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * (r * r) + r;
}

// exp(x), ~1 ulp. Overflows to +inf, underflows gradually (subnormals) to 0, keeps NaN.
template <typename V>
REFORGE_VINLINE V vexp(const V& x_in) {
  V x = x_in;
  // Clamp so that 2^k below stays representable; NaN fails both compares and passes through.
  x = x > 88.8f ? splat<V>(88.8f) : x;
  x = x < -104.0f ? splat<V>(-104.0f) : x;
  // k = round(x / ln2) with the 1.5*2^23 trick: the integer lands in the low mantissa bits and is
  // read with a bit cast.
  constexpr float kMagic = 12582912.0f;
  V t = x * 1.44269504088896341f + kMagic;
  V n = t - kMagic;
  VI<V> k = as_int(t) - std::bit_cast<int32_t>(kMagic);
  // r = x - k*ln2 in two steps (ln2 split into an exact high part and a correction).
  V r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V y = vexpm1_reduced(r) + 1.0f;
  // Scale by 2^k as two factors so that k in [-150, 128] never leaves the normal exponent range
  // of either; the products overflow or go subnormal exactly where exp does.
  VI<V> k1 = k >> 1;
  VI<V> k2 = k - k1;
  V s1 = std::bit_cast<V>(std::bit_cast<VU<V>>(k1 + 127) << 23);
  V s2 = std::bit_cast<V>(std::bit_cast<VU<V>>(k2 + 127) << 23);
  return y * s1 * s2;
}

// exp(x) - 1 without cancellation near 0.
template <typename V>
REFORGE_VINLINE V vexpm1(const V& x) {
  V small = vexpm1_reduced(x);  // no range reduction needed: the polynomial is exp - 1 itself
  V big = vexp(x) - 1.0f;
  return vabs(x) < 0.34657359f ? small : big;
}

// log(x), ~1 ulp (Cephes logf). log(0) = -inf, log(<0) = NaN, log(inf) = inf.
template <typename V>
REFORGE_VINLINE V vlog(const V& x) {
  // Subnormals are scaled into the normal range first; the exponent is corrected below.
  VI<V> sub = x < 1.17549435e-38f;
  V xs = sub ? x * 8388608.0f : x;
  VI<V> bits = as_int(xs);
  VI<V> e = ((bits >> 23) & 0xff) - 126 - (sub & 23);
  V m = as_float<V>((bits & 0x007fffff) | 0x3f000000);  // mantissa in [0.5, 1)
  VI<V> low = m < 0.707106781186547524f;
  e = e + low;                            // low is -1 where true
  V f = low ? (m + m) - 1.0f : m - 1.0f;  // in [-0.29, 0.41]
  V z = f * f;
  V p = splat<V>(7.0376836292e-2f);
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  V fe = __builtin_convertvector(e, V);
  V y = p * f * z;
  y += fe * -2.12194440e-4f;
  y += -0.5f * z;
  V r = f + y + fe * 0.693359375f;
  r = x == 0.0f ? splat<V>(-kInf) : r;
  r = x < 0.0f ? splat<V>(kNaN) : r;
  r = x == kInf ? splat<V>(kInf) : r;
  return visnan(x) ? x : r;
}

// log(1 + u) without cancellation for small u: the rounding of 1 + u is undone by scaling with
// u / ((1 + u) - 1).
template <typename V>
REFORGE_VINLINE V vlog1p(const V& u) {
  V w = 1.0f + u;
  V d = w - 1.0f;
  V r = vlog(w) * (u / d);
  r = d == 0.0f ? u : r;
  return u == kInf ? splat<V>(kInf) : r;
}

// tanh(x) = e / (e + 2) with e = expm1(2|x|): full relative accuracy near 0, exactly 1 from
// |x| = 9 on (tanh rounds to 1 in float there).
template <typename V>
REFORGE_VINLINE V vtanh(const V& x) {
  V a = vabs(x);
  a = a > 9.0f ? splat<V>(9.0f) : a;
  V e = vexpm1(a + a);
  return vcopysign<V>(e / (e + 2.0f), x);
}

// 1 / (1 + exp(-x)) from exp(-|x|), which never overflows; the negative side is e / (1 + e)
// rather than 1 - something, so it keeps full relative accuracy.
template <typename V>
REFORGE_VINLINE V vsigmoid(const V& x) {
  V e = vexp<V>(-vabs(x));
  V s = 1.0f / (1.0f + e);
  return x < 0.0f ? e * s : s;
}

// a with the low 12 mantissa bits cleared: 12 significant bits, so a_hi * a_hi is exact.
template <typename V>
REFORGE_VINLINE V split_hi(const V& a) {
  return as_float<V>(as_int(a) & static_cast<int32_t>(0xfffff000u));
}

// erfc(z) for z >= 0 given z^2 as sq_hi + sq_rest with sq_hi exact (Numerical Recipes' erfcc:
// fractional error < 1.2e-7 everywhere). exp(-z^2) is taken as exp(-sq_hi) * exp(p - sq_rest) so
// that rounding z^2 (up to ~100) does not cost ~100 ulp in the tail.
template <typename V>
REFORGE_VINLINE V verfc_core(const V& z, const V& sq_hi, const V& sq_rest) {
  V t = 1.0f / (1.0f + 0.5f * z);
  V p = splat<V>(0.17087277f);
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  V r = t * vexp<V>(-sq_hi) * vexp<V>(p - sq_rest);
  return z == kInf ? V{} : r;
}

template <typename V>
REFORGE_VINLINE V verfc_nonneg(const V& z) {
  V zh = split_hi(z);
  return verfc_core<V>(z, zh * zh, (z - zh) * (z + zh));
}

// erf(x): Taylor series below 0.5 (where 1 - erfc would lose relative accuracy), 1 - erfc above.
template <typename V>
REFORGE_VINLINE V verf(const V& x) {
  V x2 = x * x;
  V s = splat<V>(-1.4925650358406251e-05f);
  s = s * x2 + 1.2055332981789664e-04f;
  s = s * x2 - 8.5483255082993370e-04f;
  s = s * x2 + 5.2239776254421878e-03f;
  s = s * x2 - 2.6866170645131252e-02f;
  s = s * x2 + 1.1283791670955126e-01f;
  s = s * x2 - 3.7612638903183754e-01f;
  s = s * x2 + 1.1283791670955126f;
  V big = vcopysign<V>(1.0f - verfc_nonneg(vabs(x)), x);
  return vabs(x) < 0.5f ? s * x : big;
}

// Standard normal CDF. The tail below 0 comes straight from erfc (relative accuracy kept), and
// z^2 = x^2 / 2 is split from x itself: rounding x / sqrt(2) first would cost ~x^2 ulp.
template <typename V>
REFORGE_VINLINE V vnormal_cdf(const V& x) {
  V a = vabs(x);
  V ah = split_hi(a);
  V c = 0.5f * verfc_core<V>(a * 0.70710678118654752f, 0.5f * (ah * ah), 0.5f * ((a - ah) * (a + ah)));
  return x < 0.0f ? c : 1.0f - c;
}

// Scalar entry points to the float32 functions (tests, odd call sites): the reference kernels'
// vector, so the same arithmetic as their element map.
#define REFORGE_UNARY_SCALAR(name, vname) \
  inline float name(float x) { return vname(splat<simdv::Vec4>(x))[0]; }
REFORGE_UNARY_SCALAR(fast_exp, vexp)
REFORGE_UNARY_SCALAR(fast_expm1, vexpm1)
REFORGE_UNARY_SCALAR(fast_log, vlog)
REFORGE_UNARY_SCALAR(fast_log1p, vlog1p)
REFORGE_UNARY_SCALAR(fast_tanh, vtanh)
REFORGE_UNARY_SCALAR(fast_sigmoid, vsigmoid)
REFORGE_UNARY_SCALAR(fast_erf, verf)
REFORGE_UNARY_SCALAR(fast_erfc_nonneg, verfc_nonneg)
REFORGE_UNARY_SCALAR(fast_normal_cdf, vnormal_cdf)
#undef REFORGE_UNARY_SCALAR

// The double-precision counterparts, on libm.
inline double normal_cdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }
inline double sigmoid(double x) {
  double e = std::exp(-std::fabs(x));
  double s = 1.0 / (1.0 + e);
  return x < 0.0 ? e * s : s;
}

// ---- the element-map driver ----------------------------------------------------------------
//
// An op is a small struct with
//   template <typename V> REFORGE_VINLINE V vec(const V& x) const
//                                   optional: the float32 vector form on any vector type of
//                                   ops/vector_ext.h, used for float, float16 and bfloat16 tensors;
//   R scalar(C x) const             the scalar form for every other element type it accepts
//                                   (C = compute_t of the input; overloads or a template).
//
// The driver is a template over a map policy `Map` with
//   template <typename Op> static void f32(const float* in, float* out, int64_t n, const Op& op)
// the loop that applies op.vec over a float32 buffer (in == out allowed). ReferenceMap is the
// reference kernels'; a backend passes its own (backends/cpu/unary.cc: one per instruction set).

template <typename Op>
concept HasVec = requires(const Op& op, simdv::Vec4 v) {
  { op.vec(v) } -> std::same_as<simdv::Vec4>;
};

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// Elements per task; also the conversion buffer size for 16-bit floats.
inline constexpr int64_t kBlock = 4096;
// Below this many elements one thread is faster than waking a team.
inline constexpr int64_t kParallelMin = 1 << 15;

// op.vec over in[0, n) on vectors of type V, the tail padded with zeros (which every op accepts).
template <typename V, typename Op>
REFORGE_VINLINE void map_f32_impl(const float* in, float* out, int64_t n, const Op& op) {
  constexpr int64_t kW = simdv::lanes_of<V>;
  int64_t i = 0;
  for (; i + kW <= n; i += kW) simdv::store<V>(out + i, op.vec(simdv::load<V>(in + i)));  // unaligned is fine
  if (i < n) {
    const size_t rest = static_cast<size_t>(n - i) * sizeof(float);
    V v{};
    std::memcpy(&v, in + i, rest);
    v = op.vec(v);
    std::memcpy(out + i, &v, rest);
  }
}

// The reference kernels' float32 loop: 4-lane vectors in the default target.
template <typename Op>
__attribute__((flatten)) void map_f32_reference(const float* in, float* out, int64_t n, const Op& op) {
  map_f32_impl<simdv::Vec4>(in, out, n, op);
}
struct ReferenceMap {
  template <typename Op>
  static void f32(const float* in, float* out, int64_t n, const Op& op) {
    map_f32_reference(in, out, n, op);
  }
};

// out[i] = op(in[i]) over elements [begin, end).
template <typename Map, typename In, typename Out, typename Op>
void map_range(const In* in, Out* out, int64_t begin, int64_t end, const Op& op) {
  const int64_t len = end - begin;
  const In* __restrict src = in + begin;
  Out* __restrict dst = out + begin;
  if constexpr (HasVec<Op> && std::is_same_v<In, float> && std::is_same_v<Out, float>) {
    Map::f32(src, dst, len, op);
  } else if constexpr (HasVec<Op> && is_half_v<In> && std::is_same_v<In, Out>) {
    float buf[kBlock];
    for (int64_t b = 0; b < len; b += kBlock) {
      const int64_t m = std::min(kBlock, len - b);
      for (int64_t i = 0; i < m; ++i) buf[i] = static_cast<float>(src[b + i]);
      Map::f32(buf, buf, m, op);
      for (int64_t i = 0; i < m; ++i) dst[b + i] = Out(buf[i]);
    }
  } else {
    for (int64_t i = 0; i < len; ++i) dst[i] = from_compute<Out>(op.scalar(to_compute(src[i])));
  }
}

// Runs map_range over n elements, in parallel blocks when n is large (block boundaries do not
// depend on the thread count). threads <= 0 means the executor's default, omp_get_max_threads().
template <typename Map, typename In, typename Out, typename Op>
void map_elements(const In* in, Out* out, int64_t n, int threads, const Op& op) {
  const int64_t nblocks = (n + kBlock - 1) / kBlock;
  int64_t team = threads > 0 ? threads : omp_get_max_threads();
  team = std::min(team, nblocks);
  if (n < kParallelMin || team <= 1) {
    map_range<Map>(in, out, 0, n, op);
    return;
  }
  parallel_for(nblocks, static_cast<int>(team), 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) map_range<Map>(in, out, b * kBlock, std::min(n, (b + 1) * kBlock), op);
  });
}

template <typename Map, typename In, typename Out, typename Op>
void map_tensor(const Tensor& x, Tensor& y, int threads, const Op& op) {
  map_elements<Map>(x.data<In>(), y.mutable_data<Out>(), x.numel(), threads, op);
}

// ---- kernels -------------------------------------------------------------------------------

// Y = op(X) with Y of X's type; `dispatch` is dispatch_float or dispatch_numeric and sets which
// element types the op accepts (anything else is an Error naming the node).
template <typename Map, typename Op, typename Dispatch>
void run_same_type(KernelContext& ctx, const Op& op, Dispatch dispatch) {
  const Tensor& x = ctx.input(0);
  const std::string who = ctx.node().label();
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  dispatch(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        map_tensor<Map, T, T>(x, y, ctx.threads(), op);
      },
      who.c_str());
}

// Kernel for a float-only op. `make` builds the op from the node (attributes).
template <typename Map, typename MakeOp>
KernelFn float_kernel(MakeOp make) {
  return [make](KernelContext& ctx) {
    run_same_type<Map>(ctx, make(ctx), [](DType t, auto&& f, const char* w) { return dispatch_float(t, f, w); });
  };
}
template <typename Map, typename Op>
KernelFn float_kernel() {
  return float_kernel<Map>([](const KernelContext&) { return Op{}; });
}

// Kernel for an op that also accepts integer types.
template <typename Map, typename MakeOp>
KernelFn numeric_kernel(MakeOp make) {
  return [make](KernelContext& ctx) {
    run_same_type<Map>(ctx, make(ctx), [](DType t, auto&& f, const char* w) { return dispatch_numeric(t, f, w); });
  };
}
template <typename Map, typename Op>
KernelFn numeric_kernel() {
  return numeric_kernel<Map>([](const KernelContext&) { return Op{}; });
}

// Receives one kernel of the family's lists (unary_math.h, activations.h, unary_clip.h): the op
// type, its first opset (every kernel covers it to the newest), the kernel built on the list's
// map policy, the op's checker (null: none), and whether the kernel runs its float32 elements
// through that policy (false: libm or scalar only, the same code under every policy).
using AddUnaryKernel =
    std::function<void(const char* op_type, int since, KernelFn kernel, CheckFn check, bool uses_map)>;

// Integer negation that wraps instead of overflowing (-INT_MIN == INT_MIN, as in numpy).
template <typename T>
T wrapping_neg(T v) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(U{0} - static_cast<U>(v)));
}

}  // namespace reforge::ops::unary
