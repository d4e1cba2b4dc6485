// Normalizations on the GPU: LayerNormalization (opset 17), RMSNormalization (opset 23, below) with
// reforge::AddRmsNorm (a residual sum and the RMSNormalization of it), and the fused reforge::RmsNorm
// (last).
// LayerNormalization has the CPU's semantics (ops/nn/layer_normalization.cc): normalization over the dimensions from
// `axis` on, Scale and optional B broadcast unidirectionally to those dimensions (or to all of X when they have more
// dimensions), and the optional Mean and InvStdDev outputs in stash_type. One group of threads
// per row (a warp, or a block for long rows) computes the mean and then the variance (two passes,
// deterministic trees) in float32 (float64 for float64 X) and writes the row.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_ops.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/group_reduce.cuh"
#include "backends/cuda/launch.h"
#include "core/error.h"
#include "ops/nn/norm_setup.h"

namespace reforge::cuda {

namespace {

constexpr int64_t kBlockRow = 2048;

template <typename A, typename P>
__global__ void expand_kernel(A* out, const P* p, Strides<1> s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[1];
    s.offsets(i, off);
    out[i] = static_cast<A>(load_c(p, off[0]));
  }
}

template <typename U, typename A>
__global__ void convert_kernel(U* out, const A* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = store_c<U>(in[i]);
}

// Parameter `p` (any float type) broadcast unidirectionally to `target` (numpy rules, right-aligned),
// as a dense device tensor of `adt`.
Tensor expand_param(const Tensor& p, const Shape& target, DType adt, const std::string& label, const char* name) {
  ops::check_norm_param(p, target, label, name);
  Tensor out = device_tensor(adt, target);
  const int64_t n = out.numel();
  if (n == 0) return out;
  const Shape* shapes[1] = {&p.shape()};
  const Strides<1> st = make_strides<1>(target, shapes, label);
  dispatch_device(adt, label.c_str(), [&](auto at) {
    using A = typename decltype(at)::type;
    dispatch_device(
        p.dtype(), label.c_str(),
        [&](auto pt) {
          using P = typename decltype(pt)::type;
          if constexpr (std::is_floating_point_v<compute_t<P>> && std::is_floating_point_v<A>)
            expand_kernel<A, P><<<grid_for(n), 256, 0, stream()>>>(out.mutable_data<A>(), p.data<P>(), st, n);
        },
        true);
  });
  check_launch("LayerNormalization parameter broadcast");
  return out;
}

template <int G, typename T, typename A>
__global__ void layer_norm_rows(const T* x, T* y, const A* scale, const A* bias, bool full, A* mean, A* inv,
                                int64_t outer, int64_t inner, A eps) {
  constexpr int groups = kGroupThreads / G;
  const int lane = threadIdx.x % G;
  auto add = [](A a, A b) { return a + b; };
  for (int64_t first = int64_t{blockIdx.x} * groups; first < outer; first += int64_t{gridDim.x} * groups) {
    const int64_t row = first + threadIdx.x / G;
    const bool live = row < outer;
    const T* xp = x + (live ? row : 0) * inner;
    A s = 0;
    if (live)
      for (int64_t i = lane; i < inner; i += G) s += static_cast<A>(load_c(xp, i));
    const A m = group_combine<G>(s, add) / static_cast<A>(inner);
    A q = 0;
    if (live)
      for (int64_t i = lane; i < inner; i += G) {
        const A d = static_cast<A>(load_c(xp, i)) - m;
        q += d * d;
      }
    const A var = group_combine<G>(q, add) / static_cast<A>(inner);
    if (!live) continue;
    const A iv = A(1) / sqrt(var + eps);
    const A* sp = scale + (full ? row * inner : 0);
    const A* bp = bias ? bias + (full ? row * inner : 0) : nullptr;
    T* yp = y + row * inner;
    for (int64_t i = lane; i < inner; i += G)
      yp[i] = store_c<T>((static_cast<A>(load_c(xp, i)) - m) * iv * sp[i] + (bp ? bp[i] : A(0)));
    if (lane == 0) {
      if (mean) mean[row] = m;
      if (inv) inv[row] = iv;
    }
  }
}

void layer_norm_kernel(ops::KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const Tensor& S = ctx.input(1);
  const Tensor* B = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const std::string& label = ctx.node().label();
  const ops::LayerNormSetup s = ops::layer_norm_setup(ctx);
  const DType stash_dtype = s.stash_dtype;
  const int64_t outer = s.outer, inner = s.inner;
  Tensor& Y = ctx.allocate_output_uninit(0, X.dtype(), X.shape());
  const ops::LayerNormStats stats = ops::layer_norm_stat_outputs(ctx, s);
  Tensor* mean_t = stats.mean;
  Tensor* inv_t = stats.inv_std;
  if (X.numel() == 0) return;

  dispatch_device(
      X.dtype(), label.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_floating_point_v<compute_t<T>>) {
          using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
          const DType adt = std::is_same_v<A, double> ? DType::Float64 : DType::Float32;
          // Parameters cover the normalized dims, or all of X when they have more dims than that.
          const bool full = s.full;
          const Shape& pshape = s.param_shape;
          const Tensor scale = expand_param(S, pshape, adt, label, "Scale");
          const Tensor bias = B ? expand_param(*B, pshape, adt, label, "B") : Tensor();
          // Statistics in A, into the outputs or, where stash_type differs, buffers converted after.
          const bool convert = stash_dtype != adt;
          Tensor mean_a = mean_t && convert ? device_tensor(adt, s.stat_shape) : Tensor();
          Tensor inv_a = inv_t && convert ? device_tensor(adt, s.stat_shape) : Tensor();
          A* mp = !mean_t ? nullptr : convert ? mean_a.mutable_data<A>() : mean_t->mutable_data<A>();
          A* ip = !inv_t ? nullptr : convert ? inv_a.mutable_data<A>() : inv_t->mutable_data<A>();
          const A* bp = B ? bias.data<A>() : nullptr;
          if (inner >= kBlockRow)
            layer_norm_rows<kGroupThreads, T, A><<<row_grid(outer, 1), kGroupThreads, 0, stream()>>>(
                X.data<T>(), Y.mutable_data<T>(), scale.data<A>(), bp, full, mp, ip, outer, inner,
                static_cast<A>(s.eps));
          else
            layer_norm_rows<32, T, A><<<row_grid(outer, kGroupThreads / 32), kGroupThreads, 0, stream()>>>(
                X.data<T>(), Y.mutable_data<T>(), scale.data<A>(), bp, full, mp, ip, outer, inner,
                static_cast<A>(s.eps));
          check_launch("LayerNormalization");
          auto convert_stat = [&](Tensor* t, const Tensor& buf) {
            if (!t || !convert) return;
            dispatch_device(
                stash_dtype, label.c_str(),
                [&](auto st) {
                  using U = typename decltype(st)::type;
                  U* dst = static_cast<U*>(t->mutable_raw());
                  const A* src = static_cast<const A*>(buf.raw());
                  if constexpr (std::is_floating_point_v<compute_t<U>>)
                    convert_kernel<U, A><<<grid_for(outer), 256, 0, stream()>>>(dst, src, outer);
                },
                true);
            check_launch("LayerNormalization statistics");
          };
          convert_stat(mean_t, mean_a);
          convert_stat(inv_t, inv_a);
        }
      },
      true);
}

// RMSNormalization, as ops/transformer/rms_norm.cc: n = X / sqrt(mean(X^2 over [axis, rank)) +
// epsilon) in the stash type Acc, rounded to X's type; then n * scale in float64, rounded to the
// type of scale (Y's type). Scale broadcasts unidirectionally to X (`st` gives its offsets).
template <int G, typename X, typename S, typename Acc>
__global__ void rms_norm_rows(const X* x, const S* scale, S* y, Strides<1> st, int64_t outer, int64_t inner, Acc eps) {
  constexpr int groups = kGroupThreads / G;
  const int lane = threadIdx.x % G;
  for (int64_t first = int64_t{blockIdx.x} * groups; first < outer; first += int64_t{gridDim.x} * groups) {
    const int64_t row = first + threadIdx.x / G;
    const bool live = row < outer;
    const X* xp = x + (live ? row : 0) * inner;
    Acc s = 0;
    if (live)
      for (int64_t i = lane; i < inner; i += G) {
        const Acc v = static_cast<Acc>(load_c(xp, i));
        s += v * v;
      }
    s = group_combine<G>(s, [](Acc a, Acc b) { return a + b; });
    if (!live) continue;
    const Acc inv = Acc(1) / sqrt(s / static_cast<Acc>(inner) + eps);
    for (int64_t i = lane; i < inner; i += G) {
      const X r = store_c<X>(static_cast<Acc>(load_c(xp, i)) * inv);
      int64_t off[1];
      st.offsets(row * inner + i, off);
      const double v = static_cast<double>(load_c(&r, 0)) * static_cast<double>(load_c(scale, off[0]));
      y[row * inner + i] = store_c<S>(v);
    }
  }
}

// The same for the rows of 16-bit models (X and scale bfloat16 or float16, float32 stash, scale
// one value per element of a row, rows a multiple of 8 elements up to kRows16): one block per row,
// every thread's 16-byte pieces of the row loaded at once and kept in registers, the sum of
// squares reduced by shuffles and then across warps in warp order. The product n * scale of two
// 16-bit values is exact in float32, so computing it there gives rms_norm_rows's result.
constexpr int kVec16 = 8;                              // elements per 16-byte piece
constexpr int64_t kRows16 = int64_t{kVec16} * 256 * 4;  // the longest row: 256 threads, 4 pieces each

// With `res` (reforge::AddRmsNorm): the row is x + res, each sum rounded to X as Add rounds it,
// and written to `sum`.
template <typename X, typename S, int V>
__global__ void __launch_bounds__(256) rms_norm_rows16(const X* x, const X* res, X* sum, const S* scale, S* y,
                                                      int64_t outer, int64_t inner, float eps) {
  __shared__ float warp_sums[8];
  const int pieces = static_cast<int>(inner / kVec16);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const uint4* xp = reinterpret_cast<const uint4*>(x + row * inner);
    uint4 v[V];
    float s = 0.f;
#pragma unroll
    for (int u = 0; u < V; ++u) {
      const int i = threadIdx.x + u * blockDim.x;
      if (i < pieces) v[u] = xp[i];
    }
    if (res) {
      const uint4* rp = reinterpret_cast<const uint4*>(res + row * inner);
#pragma unroll
      for (int u = 0; u < V; ++u) {
        const int i = threadIdx.x + u * blockDim.x;
        if (i >= pieces) continue;
        float a[kVec16], b[kVec16];
        unpack8<X>(v[u], a);
        unpack8<X>(rp[i], b);
        X* h = reinterpret_cast<X*>(&v[u]);
#pragma unroll
        for (int j = 0; j < kVec16; ++j) h[j] = store_c<X>(a[j] + b[j]);
        reinterpret_cast<uint4*>(sum + row * inner)[i] = v[u];
      }
    }
#pragma unroll
    for (int u = 0; u < V; ++u) {
      if (threadIdx.x + u * blockDim.x >= pieces) continue;
      float f[kVec16];
      unpack8<X>(v[u], f);
#pragma unroll
      for (int j = 0; j < kVec16; ++j) s += f[j] * f[j];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) warp_sums[warp] = s;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < warps; ++w) total += warp_sums[w];
    __syncthreads();  // warp_sums is reused by the next row
    const float inv = 1.f / sqrtf(total / static_cast<float>(inner) + eps);
#pragma unroll
    for (int u = 0; u < V; ++u) {
      const int i = threadIdx.x + u * blockDim.x;
      if (i >= pieces) continue;
      float f[kVec16], w[kVec16];
      unpack8<X>(v[u], f);
      unpack8<S>(reinterpret_cast<const uint4*>(scale)[i], w);
      uint4 out;
      S* o = reinterpret_cast<S*>(&out);
#pragma unroll
      for (int j = 0; j < kVec16; ++j) {
        const X r = store_c<X>(f[j] * inv);
        o[j] = store_c<S>(load_c(&r, 0) * w[j]);
      }
      reinterpret_cast<uint4*>(y + row * inner)[i] = out;
    }
  }
}

// Whether scale (shape `scale`) gives one value per element of X's rows of `inner` elements:
// after its leading 1s, its dimensions are X's last ones and hold `inner` elements.
bool scale_per_row_element(const Shape& scale, const Shape& x, int64_t inner) {
  size_t lead = 0;
  while (lead < scale.size() && scale[lead] == 1) ++lead;
  const size_t k = scale.size() - lead;
  if (k > x.size()) return false;
  int64_t n = 1;
  for (size_t d = 0; d < k; ++d) {
    if (scale[lead + d] != x[x.size() - k + d]) return false;
    n *= scale[lead + d];
  }
  return n == inner;
}

bool is_16bit(DType t) { return t == DType::BFloat16 || t == DType::Float16; }

// rms_norm_rows16 when it applies (see there); false otherwise. With `res` and `sum`: of x + res.
bool rms_norm_16bit(const Tensor& x, const Tensor& scale, Tensor& out, const ops::RmsNormSetup& rs,
                    const Tensor* res = nullptr, Tensor* sum = nullptr) {
  const int64_t inner = rs.inner;
  if (rs.stash_double || !is_16bit(x.dtype()) || !is_16bit(scale.dtype()) || inner % kVec16 != 0 ||
      inner > kRows16 || !scale_per_row_element(scale.shape(), x.shape(), inner))
    return false;
  for (const void* p : {x.raw(), scale.raw(), static_cast<const void*>(out.raw()), res ? res->raw() : nullptr,
                        sum ? static_cast<const void*>(sum->raw()) : nullptr})
    if (!aligned16(p)) return false;
  const int64_t pieces = inner / kVec16;
  const int threads = static_cast<int>(std::min<int64_t>(256, (pieces + 31) / 32 * 32));
  const int64_t per_thread = (pieces + threads - 1) / threads;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(rs.outer, kMaxWideGrid));
  auto go = [&](auto xt, auto st) {
    using X = decltype(xt);
    using S = decltype(st);
    const X* xp = x.data<X>();
    const X* rp = res ? res->data<X>() : nullptr;
    X* sm = sum ? sum->mutable_data<X>() : nullptr;
    const S* sp = scale.data<S>();
    S* yp = out.mutable_data<S>();
    const float eps = static_cast<float>(rs.eps);
    if (per_thread == 1)
      rms_norm_rows16<X, S, 1><<<grid, threads, 0, stream()>>>(xp, rp, sm, sp, yp, rs.outer, inner, eps);
    else if (per_thread == 2)
      rms_norm_rows16<X, S, 2><<<grid, threads, 0, stream()>>>(xp, rp, sm, sp, yp, rs.outer, inner, eps);
    else
      rms_norm_rows16<X, S, 4><<<grid, threads, 0, stream()>>>(xp, rp, sm, sp, yp, rs.outer, inner, eps);
  };
  auto with_scale = [&](auto xt) {
    if (scale.dtype() == DType::BFloat16)
      go(xt, __nv_bfloat16{});
    else
      go(xt, __half{});
  };
  if (x.dtype() == DType::BFloat16)
    with_scale(__nv_bfloat16{});
  else
    with_scale(__half{});
  check_launch("RMSNormalization");
  return true;
}

// RMSNormalization of x by scale into `out` (allocated, x's shape, scale's type).
void rms_norm_run(const Tensor& x, const Tensor& scale, Tensor& out, const ops::RmsNormSetup& rs,
                  const std::string& where) {
  const int64_t outer = rs.outer, inner = rs.inner;
  if (out.numel() == 0) return;
  if (rms_norm_16bit(x, scale, out, rs)) return;
  const Shape* shapes[1] = {&scale.shape()};
  const Strides<1> st = make_strides<1>(x.shape(), shapes, where);
  const double eps = rs.eps;
  const bool stash_double = rs.stash_double;
  dispatch_device(
      x.dtype(), where.c_str(),
      [&](auto xt) {
        using X = typename decltype(xt)::type;
        dispatch_device(
            scale.dtype(), where.c_str(),
            [&](auto sc) {
              using S = typename decltype(sc)::type;
              if constexpr (std::is_floating_point_v<compute_t<X>> && std::is_floating_point_v<compute_t<S>>) {
                auto run = [&](auto acc) {
                  using Acc = decltype(acc);
                  if (inner >= kBlockRow)
                    rms_norm_rows<kGroupThreads, X, S, Acc><<<row_grid(outer, 1), kGroupThreads, 0, stream()>>>(
                        x.data<X>(), scale.data<S>(), out.mutable_data<S>(), st, outer, inner, static_cast<Acc>(eps));
                  else
                    rms_norm_rows<32, X, S, Acc><<<row_grid(outer, kGroupThreads / 32), kGroupThreads, 0, stream()>>>(
                        x.data<X>(), scale.data<S>(), out.mutable_data<S>(), st, outer, inner, static_cast<Acc>(eps));
                };
                if (stash_double)
                  run(double{});
                else
                  run(float{});
              }
            },
            true);
      },
      true);
  check_launch("RMSNormalization");
}

void rms_norm_kernel(ops::KernelContext& ctx) {
  const ops::RmsNormSetup rs = ops::rms_norm_setup(ctx);
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  rms_norm_run(x, scale, ctx.allocate_output_uninit(0, scale.dtype(), x.shape()), rs, ctx.node().label());
}

// reforge::AddRmsNorm(X, scale, R) -> (Y, S), as the CPU's (ops/transformer/rms_norm.cc): S = X + R
// rounded as Add rounds it, Y = RMSNormalization(S, scale). Rows of 16-bit models in one kernel
// (rms_norm_rows16); otherwise the device's Add kernel, then RMSNormalization of the sum.
void add_rms_norm_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const ops::RmsNormSetup rs = ops::rms_norm_setup(ctx);
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor& r = ctx.input(2);
  REFORGE_CHECK(r.dtype() == x.dtype() && r.shape() == x.shape(), where, ": the residual ", r.describe(),
                " is not of X's type and shape ", x.describe());
  Tensor& y = ctx.allocate_output_uninit(0, scale.dtype(), x.shape());
  Tensor& sum = ctx.allocate_output_uninit(1, x.dtype(), x.shape());
  if (x.numel() == 0 || rms_norm_16bit(x, scale, y, rs, &r, &sum)) return;
  ctx.set_output(1, device_ops(ctx).op("Add", 14, {&x, &r}, {}));
  rms_norm_run(ctx.outputs()[1], scale, y, rs, where);
}

// reforge::RmsNorm's scalar inputs (epsilon, exponent, numerator), read on the device: absent,
// or one float32, float64, int64 or int32 element (as the CPU's read_scalar).
struct ScalarIn {
  const void* p = nullptr;
  DType dtype = DType::Float32;
};

__device__ __forceinline__ double read_scalar(const ScalarIn& s, double def) {
  if (!s.p) return def;
  switch (s.dtype) {
    case DType::Float32:
      return *static_cast<const float*>(s.p);
    case DType::Float64:
      return *static_cast<const double*>(s.p);
    case DType::Int64:
      return static_cast<double>(*static_cast<const int64_t*>(s.p));
    default:
      return *static_cast<const int32_t*>(s.p);
  }
}

ScalarIn scalar_input(const ops::KernelContext& ctx, size_t i, const char* what) {
  if (!ctx.has_input(i)) return {};
  const Tensor& t = ctx.input(i);
  REFORGE_CHECK(t.numel() == 1, ctx.node().label(), ": ", what, " must have one element, got ", t.describe());
  switch (t.dtype()) {
    case DType::Float32:
    case DType::Float64:
    case DType::Int64:
    case DType::Int32:
      return {t.raw(), t.dtype()};
    default:
      fail(ctx.node().label(), ": ", what, " has unsupported type ", dtype_name(t.dtype()));
  }
}

// reforge::RmsNorm (float32), as backends/cpu/rms_norm.cc: per row of n, ss = sum x^2 in float32
// (exponent 2) or sum powf(x, p) in float64 rounded to float32 (other exponents); inv = numerator
// / sqrt(ss / n + eps); y = (x * inv) [* w], w of n elements or one.
template <int G>
__global__ void rms_fused_rows(const float* x, const float* w, bool w_scalar, float* y, int64_t rows, int64_t n,
                               ScalarIn eps_in, ScalarIn p_in, ScalarIn num_in) {
  constexpr int groups = kGroupThreads / G;
  const int lane = threadIdx.x % G;
  const float eps = static_cast<float>(read_scalar(eps_in, 0.0));
  const double p = read_scalar(p_in, 2.0);
  const float num = static_cast<float>(read_scalar(num_in, 1.0));
  for (int64_t first = int64_t{blockIdx.x} * groups; first < rows; first += int64_t{gridDim.x} * groups) {
    const int64_t row = first + threadIdx.x / G;
    const bool live = row < rows;
    const float* xp = x + (live ? row : 0) * n;
    float ss;
    if (p == 2.0) {
      float s = 0;
      if (live)
        for (int64_t i = lane; i < n; i += G) s += xp[i] * xp[i];
      ss = group_combine<G>(s, [](float a, float b) { return a + b; });
    } else {
      double s = 0;
      if (live)
        for (int64_t i = lane; i < n; i += G) s += static_cast<double>(powf(xp[i], static_cast<float>(p)));
      ss = static_cast<float>(group_combine<G>(s, [](double a, double b) { return a + b; }));
    }
    if (!live) continue;
    const float inv = num / sqrtf(ss / static_cast<float>(n) + eps);
    float* yp = y + row * n;
    for (int64_t i = lane; i < n; i += G) {
      const float v = xp[i] * inv;
      yp[i] = w ? v * w[w_scalar ? 0 : i] : v;
    }
  }
}

void rms_fused_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(x.dtype() == DType::Float32 && x.rank() >= 1, where, ": X must be a float32 tensor of rank >= 1, got ",
                x.describe());
  const int64_t n = x.dim(x.rank() - 1);
  const int64_t rows = n ? x.numel() / n : 0;
  const float* w = nullptr;
  bool w_scalar = false;
  if (ctx.has_input(1)) {
    const Tensor& wt = ctx.input(1);
    REFORGE_CHECK(wt.dtype() == DType::Float32 && (wt.numel() == n || wt.numel() == 1) && wt.rank() <= x.rank(), where,
                  ": weight ", wt.describe(), " does not broadcast along the last axis of X ", x.describe());
    w = wt.data<float>();
    w_scalar = wt.numel() == 1 && n != 1;
  }
  const ScalarIn eps = scalar_input(ctx, 2, "epsilon");
  const ScalarIn p = scalar_input(ctx, 3, "exponent");
  const ScalarIn num = scalar_input(ctx, 4, "numerator");
  Tensor& y = ctx.allocate_output_uninit(0, DType::Float32, x.shape());
  if (rows == 0) return;
  if (n >= kBlockRow)
    rms_fused_rows<kGroupThreads><<<row_grid(rows, 1), kGroupThreads, 0, stream()>>>(
        x.data<float>(), w, w_scalar, y.mutable_data<float>(), rows, n, eps, p, num);
  else
    rms_fused_rows<32><<<row_grid(rows, kGroupThreads / 32), kGroupThreads, 0, stream()>>>(
        x.data<float>(), w, w_scalar, y.mutable_data<float>(), rows, n, eps, p, num);
  check_launch("RmsNorm");
}

}  // namespace

void register_norm_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "LayerNormalization", layer_norm_kernel);
  add_kernel(r, "", "RMSNormalization", rms_norm_kernel, ops::rms_norm_check);
  add_kernel(r, "reforge", "AddRmsNorm", add_rms_norm_kernel, ops::rms_norm_check);
  add_kernel(r, "reforge", "RmsNorm", rms_fused_kernel);
}

}  // namespace reforge::cuda
