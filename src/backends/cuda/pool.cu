// MaxPool (with Indices, storage_order, dilations, ceil_mode), AveragePool (count_include_pad,
// ceil_mode, dilations), GlobalAveragePool and GlobalMaxPool on the GPU: one thread per output
// element walking its window, with the CPU reference's rules (ops/nn/pool.cc): window taps outside
// the input are skipped; MaxPool keeps the first maximum, a NaN is never greater, and an empty
// window gives 0 (Indices -1); AveragePool divides by the taps inside the input, or with
// count_include_pad by those inside the explicitly padded input, NaN when there are none;
// GlobalMaxPool propagates NaN. Sums are float32 (float64 for float64).
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "ops/nn/nn_common.h"

namespace reforge::cuda {

namespace {

struct PoolGeo {
  int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], out[3];
  int64_t mul[3];  // Indices: multipliers of (d, h, w) within a plane
};

template <typename T, bool kMax>
__global__ void pool_kernel(const T* x, T* y, int64_t* indices, int64_t planes, PoolGeo g, bool include_pad) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<std::is_integral_v<T>, T, float>>;
  const int64_t out_plane = g.out[0] * g.out[1] * g.out[2], in_plane = g.in[0] * g.in[1] * g.in[2];
  const int64_t total = planes * out_plane;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ow = i % g.out[2], oh = (i / g.out[2]) % g.out[1], od = (i / (g.out[2] * g.out[1])) % g.out[0];
    const int64_t nc = i / out_plane;
    const T* xp = x + nc * in_plane;
    const int64_t o[3] = {od, oh, ow};
    int64_t first[3], last[3], pfirst[3], plast[3];
    for (int a = 0; a < 3; ++a) {
      const int64_t start = o[a] * g.s[a] - g.pb[a];
      int64_t f = 0, l = g.k[a];
      while (f < g.k[a] && start + f * g.d[a] < 0) ++f;
      while (l > f && start + (l - 1) * g.d[a] >= g.in[a]) --l;
      first[a] = f, last[a] = l;
      int64_t pf = 0, pl = g.k[a];
      while (pf < g.k[a] && start + pf * g.d[a] < -g.pb[a]) ++pf;
      while (pl > pf && start + (pl - 1) * g.d[a] >= g.in[a] + g.pe[a]) --pl;
      pfirst[a] = pf, plast[a] = pl;
    }
    if constexpr (kMax) {
      bool found = false;
      A best = 0;
      int64_t at = -1;
      for (int64_t kd = first[0]; kd < last[0]; ++kd) {
        const int64_t id = od * g.s[0] - g.pb[0] + kd * g.d[0];
        for (int64_t kh = first[1]; kh < last[1]; ++kh) {
          const int64_t ih = oh * g.s[1] - g.pb[1] + kh * g.d[1];
          for (int64_t kw = first[2]; kw < last[2]; ++kw) {
            const int64_t iw = ow * g.s[2] - g.pb[2] + kw * g.d[2];
            const A v = static_cast<A>(load_c(xp, (id * g.in[1] + ih) * g.in[2] + iw));
            if (!found || v > best) {
              found = true, best = v;
              at = nc * in_plane + id * g.mul[0] + ih * g.mul[1] + iw * g.mul[2];
            }
          }
        }
      }
      y[i] = store_c<T>(found ? best : A(0));
      if (indices) indices[i] = found ? at : -1;
    } else {
      A sum = 0;
      for (int64_t kd = first[0]; kd < last[0]; ++kd) {
        const int64_t id = od * g.s[0] - g.pb[0] + kd * g.d[0];
        for (int64_t kh = first[1]; kh < last[1]; ++kh) {
          const int64_t ih = oh * g.s[1] - g.pb[1] + kh * g.d[1];
          for (int64_t kw = first[2]; kw < last[2]; ++kw)
            sum += static_cast<A>(load_c(xp, (id * g.in[1] + ih) * g.in[2] + ow * g.s[2] - g.pb[2] + kw * g.d[2]));
        }
      }
      const int64_t* f = include_pad ? pfirst : first;
      const int64_t* l = include_pad ? plast : last;
      const int64_t n = (l[0] - f[0]) * (l[1] - f[1]) * (l[2] - f[2]);
      y[i] = store_c<T>(n > 0 ? sum / static_cast<A>(n) : A(NAN));
    }
  }
}

template <bool kMax>
void pool(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& X = ctx.input(0);
  REFORGE_CHECK(X.rank() >= 3 && X.rank() <= 5, where, ": X must be [N, C, spatial...] with 1 to 3 spatial dims, got ",
                X.describe());
  const size_t nsp = static_cast<size_t>(X.rank() - 2);
  std::vector<int64_t> kernel = ops::nn::kernel_shape_attr(ctx, nsp);
  REFORGE_CHECK(!kernel.empty(), where, ": the kernel_shape attribute is required");
  const ops::nn::Window win = ops::nn::resolve_window(ctx, std::vector<int64_t>(X.shape().begin() + 2, X.shape().end()),
                                                      kernel, ctx.attr_int("ceil_mode", 0) != 0);
  const ops::nn::Geo3 g3 = ops::nn::to_geo3(win);
  PoolGeo g;
  const size_t lead = 3 - nsp;
  for (int a = 0; a < 3; ++a) {
    g.in[a] = g3.in[a], g.k[a] = g3.k[a], g.s[a] = g3.s[a], g.d[a] = g3.d[a], g.pb[a] = g3.pb[a], g.out[a] = g3.out[a];
    g.pe[a] = static_cast<size_t>(a) < lead ? 0 : win.pad_end[static_cast<size_t>(a) - lead];
  }
  const int64_t storage_order = kMax ? ctx.attr_int("storage_order", 0) : 0;
  REFORGE_CHECK(storage_order == 0 || storage_order == 1, where, ": storage_order must be 0 or 1, got ", storage_order);
  if (storage_order == 1) {
    int64_t m = 1;
    for (size_t a = lead; a < 3; ++a) g.mul[a] = m, m *= g.in[a];
    for (size_t a = 0; a < lead; ++a) g.mul[a] = 0;
  } else {
    g.mul[2] = 1, g.mul[1] = g.in[2], g.mul[0] = g.in[1] * g.in[2];
  }
  Shape out_shape = {X.dim(0), X.dim(1)};
  out_shape.insert(out_shape.end(), win.out.begin(), win.out.end());
  Tensor& Y = ctx.allocate_output_uninit(0, X.dtype(), out_shape);
  int64_t* indices = nullptr;
  if (kMax && ctx.num_outputs() > 1 && ctx.output_wanted(1))
    indices = ctx.allocate_output_uninit(1, DType::Int64, out_shape).mutable_data<int64_t>();
  if (Y.numel() == 0) return;
  const bool include_pad = !kMax && ctx.attr_int("count_include_pad", 0) != 0;
  dispatch_device(X.dtype(), where.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      fail(where, ": pooling of bool tensors is not defined");
    } else if constexpr (!kMax && !(std::is_floating_point_v<T> || std::is_same_v<T, __half> ||
                                    std::is_same_v<T, __nv_bfloat16>)) {
      fail(where, ": AveragePool of ", dtype_name(X.dtype()), " is not defined");
    } else {
      pool_kernel<T, kMax><<<blocks_for(Y.numel()), 256, 0, stream()>>>(X.data<T>(), Y.mutable_data<T>(), indices,
                                                                          X.dim(0) * X.dim(1), g, include_pad);
      check_launch(kMax ? "max_pool" : "average_pool");
    }
  });
}

// Global pools: one block per (n, c) plane, a tree over the plane.
template <typename T, bool kMax>
__global__ void global_pool_kernel(const T* x, T* y, int64_t plane) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  __shared__ A part[256];
  __shared__ bool nan_seen;
  const T* xp = x + blockIdx.x * plane;
  if (threadIdx.x == 0) nan_seen = false;
  __syncthreads();
  A acc = kMax ? static_cast<A>(load_c(xp, 0)) : A(0);
  bool nan = false;
  for (int64_t j = threadIdx.x; j < plane; j += blockDim.x) {
    const A v = static_cast<A>(load_c(xp, j));
    if constexpr (kMax) {
      nan |= v != v;
      acc = v > acc ? v : acc;
    } else {
      acc += v;
    }
  }
  if (nan) nan_seen = true;
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      if constexpr (kMax)
        part[threadIdx.x] = part[threadIdx.x + s] > part[threadIdx.x] ? part[threadIdx.x + s] : part[threadIdx.x];
      else
        part[threadIdx.x] += part[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    A r = kMax ? part[0] : part[0] / static_cast<A>(plane);
    if (kMax && nan_seen) r = A(NAN);
    y[blockIdx.x] = store_c<T>(r);
  }
}

template <bool kMax>
void global_pool(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& X = ctx.input(0);
  REFORGE_CHECK(X.rank() >= 3, where, ": X must be [N, C, spatial...], got ", X.describe());
  Shape out_shape(X.shape().begin(), X.shape().begin() + 2);
  out_shape.resize(X.shape().size(), 1);
  Tensor& Y = ctx.allocate_output_uninit(0, X.dtype(), out_shape);
  const int64_t planes = X.dim(0) * X.dim(1);
  if (planes == 0) return;
  const int64_t plane = X.numel() / planes;
  REFORGE_CHECK(plane > 0, where, ": cannot pool over an empty spatial extent in ", X.describe());
  REFORGE_CHECK(planes <= 2147483647, where, ": too many planes for one launch");
  dispatch_device(
      X.dtype(), where.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        global_pool_kernel<T, kMax>
            <<<static_cast<unsigned>(planes), 256, 0, stream()>>>(X.data<T>(), Y.mutable_data<T>(), plane);
        check_launch("global_pool");
      },
      true);
}

}  // namespace

void register_pool_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "MaxPool", pool<true>);
  add_kernel(r, "", "AveragePool", pool<false>);
  add_kernel(r, "", "GlobalMaxPool", global_pool<true>);
  add_kernel(r, "", "GlobalAveragePool", global_pool<false>);
}

}  // namespace reforge::cuda
