// MaxPool (with Indices, storage_order, dilations, ceil_mode), AveragePool (count_include_pad,
// ceil_mode, dilations), LpPool (the p-norm of each window: (sum |x|^p)^(1/p), padding
// contributing nothing), MaxUnpool, GlobalAveragePool and GlobalMaxPool; the schema of reforge::MaxPool, the
// blocked or channels-last form the CPU backend's conv-channels-last pass uses between
// convolutions in those layouts (its kernel: backends/cpu/max_pool.cc).
//
// Windows follow the ONNX reference: positions outside the input never contribute; for
// AveragePool with count_include_pad the divisor also counts positions inside the explicit
// pads, but not the positions a ceil_mode window hangs past the end padding. MaxPool takes the
// first maximum in window order (a NaN is never "greater"), and a window with no input
// position yields 0 with index -1, as in the reference.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/dispatch.h"
#include "core/thread_pool.h"
#include "ops/nn/nn_common.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::ops::nn {

// For every output index along one dimension, the kernel taps that land inside [lo, hi) of
// the input coordinates.
TapRange tap_range(int64_t out, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t lo, int64_t hi) {
  TapRange r;
  r.first.resize(out);
  r.last.resize(out);
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * s - pb;
    int64_t f = 0, l = k;
    while (f < k && start + f * d < lo) ++f;
    while (l > f && start + (l - 1) * d >= hi) --l;
    r.first[o] = f;
    r.last[o] = l;
  }
  return r;
}

namespace {

struct PoolSetup {
  int64_t N = 0, C = 0;
  Window win;
  Geo3 g;
  Shape out_shape;
};

PoolSetup setup_pool(const KernelContext& ctx, const Tensor& X) {
  const ir::Node& node = ctx.node();  // its label only when a check fails
  REFORGE_CHECK(X.rank() >= 3 && X.rank() <= 5, node.label(),
                ": X must be [N, C, spatial...] with 1 to 3 spatial dims, got ", X.describe());
  const size_t nsp = static_cast<size_t>(X.rank() - 2);
  std::vector<int64_t> kernel = kernel_shape_attr(ctx, nsp);
  REFORGE_CHECK(!kernel.empty(), node.label(), ": the kernel_shape attribute is required");
  PoolSetup p;
  p.N = X.dim(0), p.C = X.dim(1);
  p.win = resolve_window(ctx, std::vector<int64_t>(X.shape().begin() + 2, X.shape().end()), kernel,
                         ctx.attr_int("ceil_mode", 0) != 0);
  p.g = to_geo3(p.win);
  p.out_shape = {p.N, p.C};
  p.out_shape.insert(p.out_shape.end(), p.win.out.begin(), p.win.out.end());
  return p;
}

template <typename T>
void max_pool(const PoolSetup& p, const T* x, T* y, int64_t* indices, bool column_major) {
  const Geo3& g = p.g;
  TapRange r[3];
  for (int i = 0; i < 3; ++i) r[i] = tap_range(g.out[i], g.k[i], g.s[i], g.d[i], g.pb[i], 0, g.in[i]);
  const int64_t in_plane = g.in[0] * g.in[1] * g.in[2], out_plane = g.out[0] * g.out[1] * g.out[2];
  // Multipliers turning (d, h, w) into the flat index reported in Indices.
  const size_t lead = 3 - p.win.rank();
  int64_t mul[3];
  if (column_major) {
    int64_t m = 1;
    for (size_t i = lead; i < 3; ++i) mul[i] = m, m *= g.in[i];
    for (size_t i = 0; i < lead; ++i) mul[i] = 0;
  } else {
    mul[2] = 1, mul[1] = g.in[2], mul[0] = g.in[1] * g.in[2];
  }
  const int threads = p.N * p.C * out_plane > (1 << 14) ? omp_get_max_threads() : 1;
  parallel_for(p.N * p.C, threads, 1, [&](int64_t nc0, int64_t nc1) {
    for (int64_t nc = nc0; nc < nc1; ++nc) {
      const T* xp = x + nc * in_plane;
      T* yp = y + nc * out_plane;
      int64_t* ip = indices ? indices + nc * out_plane : nullptr;
      if (!ip) {
        // No Indices: a running max from the window's first tap, `v > best ? v : best` (one
        // maxss on x86; the first maximum wins and a NaN is never greater, as below).
        for (int64_t od = 0; od < g.out[0]; ++od)
          for (int64_t oh = 0; oh < g.out[1]; ++oh) {
            T* yrow = yp + (od * g.out[1] + oh) * g.out[2];
            const bool rows = r[0].first[od] < r[0].last[od] && r[1].first[oh] < r[1].last[oh];
            const int64_t id0 = od * g.s[0] - g.pb[0] + r[0].first[od] * g.d[0];
            const int64_t ih0 = oh * g.s[1] - g.pb[1] + r[1].first[oh] * g.d[1];
            for (int64_t ow = 0; ow < g.out[2]; ++ow) {
              if (!rows || r[2].first[ow] >= r[2].last[ow]) {
                yrow[ow] = T{};
                continue;
              }
              compute_t<T> best =
                  to_compute(xp[(id0 * g.in[1] + ih0) * g.in[2] + ow * g.s[2] - g.pb[2] + r[2].first[ow] * g.d[2]]);
              for (int64_t kd = r[0].first[od]; kd < r[0].last[od]; ++kd) {
                const int64_t id = od * g.s[0] - g.pb[0] + kd * g.d[0];
                for (int64_t kh = r[1].first[oh]; kh < r[1].last[oh]; ++kh) {
                  const int64_t ih = oh * g.s[1] - g.pb[1] + kh * g.d[1];
                  const T* row = xp + (id * g.in[1] + ih) * g.in[2] + ow * g.s[2] - g.pb[2];
                  for (int64_t kw = r[2].first[ow]; kw < r[2].last[ow]; ++kw) {
                    const compute_t<T> v = to_compute(row[kw * g.d[2]]);
                    best = v > best ? v : best;
                  }
                }
              }
              yrow[ow] = from_compute<T>(best);
            }
          }
        continue;
      }
      for (int64_t od = 0; od < g.out[0]; ++od)
        for (int64_t oh = 0; oh < g.out[1]; ++oh)
          for (int64_t ow = 0; ow < g.out[2]; ++ow) {
            bool found = false;
            compute_t<T> best{};
            int64_t bd = 0, bh = 0, bw = 0;
            for (int64_t kd = r[0].first[od]; kd < r[0].last[od]; ++kd) {
              const int64_t id = od * g.s[0] - g.pb[0] + kd * g.d[0];
              for (int64_t kh = r[1].first[oh]; kh < r[1].last[oh]; ++kh) {
                const int64_t ih = oh * g.s[1] - g.pb[1] + kh * g.d[1];
                const T* row = xp + (id * g.in[1] + ih) * g.in[2];
                for (int64_t kw = r[2].first[ow]; kw < r[2].last[ow]; ++kw) {
                  const int64_t iw = ow * g.s[2] - g.pb[2] + kw * g.d[2];
                  const compute_t<T> v = to_compute(row[iw]);
                  if (!found || v > best) found = true, best = v, bd = id, bh = ih, bw = iw;
                }
              }
            }
            const int64_t o = (od * g.out[1] + oh) * g.out[2] + ow;
            yp[o] = found ? from_compute<T>(best) : T{};
            if (ip) ip[o] = found ? nc * in_plane + bd * mul[0] + bh * mul[1] + bw * mul[2] : -1;
          }
    }
  });
}

template <typename T>
void avg_pool(const PoolSetup& p, const T* x, T* y, bool count_include_pad) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const Geo3& g = p.g;
  const size_t lead = 3 - p.win.rank();
  TapRange r[3], padded[3];
  for (size_t i = 0; i < 3; ++i) {
    r[i] = tap_range(g.out[i], g.k[i], g.s[i], g.d[i], g.pb[i], 0, g.in[i]);
    const int64_t pe = i < lead ? 0 : p.win.pad_end[i - lead];
    padded[i] = tap_range(g.out[i], g.k[i], g.s[i], g.d[i], g.pb[i], -g.pb[i], g.in[i] + pe);
  }
  const int64_t in_plane = g.in[0] * g.in[1] * g.in[2], out_plane = g.out[0] * g.out[1] * g.out[2];
  const int threads = p.N * p.C * out_plane > (1 << 14) ? omp_get_max_threads() : 1;
  parallel_for(p.N * p.C, threads, 1, [&](int64_t nc0, int64_t nc1) {
    for (int64_t nc = nc0; nc < nc1; ++nc) {
      const T* xp = x + nc * in_plane;
      T* yp = y + nc * out_plane;
      for (int64_t od = 0; od < g.out[0]; ++od)
        for (int64_t oh = 0; oh < g.out[1]; ++oh)
          for (int64_t ow = 0; ow < g.out[2]; ++ow) {
            A sum = 0;
            for (int64_t kd = r[0].first[od]; kd < r[0].last[od]; ++kd) {
              const int64_t id = od * g.s[0] - g.pb[0] + kd * g.d[0];
              for (int64_t kh = r[1].first[oh]; kh < r[1].last[oh]; ++kh) {
                const int64_t ih = oh * g.s[1] - g.pb[1] + kh * g.d[1];
                const T* row = xp + (id * g.in[1] + ih) * g.in[2];
                for (int64_t kw = r[2].first[ow]; kw < r[2].last[ow]; ++kw)
                  sum += static_cast<A>(to_compute(row[ow * g.s[2] - g.pb[2] + kw * g.d[2]]));
              }
            }
            const TapRange* cnt = count_include_pad ? padded : r;
            const int64_t n = (cnt[0].last[od] - cnt[0].first[od]) * (cnt[1].last[oh] - cnt[1].first[oh]) *
                              (cnt[2].last[ow] - cnt[2].first[ow]);
            // No position to average (a window wholly in padding): the reference yields NaN.
            yp[(od * g.out[1] + oh) * g.out[2] + ow] =
                from_compute<T>(n > 0 ? sum / static_cast<A>(n) : std::numeric_limits<A>::quiet_NaN());
          }
    }
  });
}

template <typename T>
void lp_pool(const PoolSetup& p, const T* x, T* y, double pw) {
  const Geo3& g = p.g;
  TapRange r[3];
  for (size_t i = 0; i < 3; ++i) r[i] = tap_range(g.out[i], g.k[i], g.s[i], g.d[i], g.pb[i], 0, g.in[i]);
  const int64_t in_plane = g.in[0] * g.in[1] * g.in[2], out_plane = g.out[0] * g.out[1] * g.out[2];
  const int threads = p.N * p.C * out_plane > (1 << 14) ? omp_get_max_threads() : 1;
  parallel_for(p.N * p.C, threads, 1, [&](int64_t nc0, int64_t nc1) {
    for (int64_t nc = nc0; nc < nc1; ++nc) {
      const T* xp = x + nc * in_plane;
      T* yp = y + nc * out_plane;
      for (int64_t od = 0; od < g.out[0]; ++od)
        for (int64_t oh = 0; oh < g.out[1]; ++oh)
          for (int64_t ow = 0; ow < g.out[2]; ++ow) {
            double sum = 0;
            for (int64_t kd = r[0].first[od]; kd < r[0].last[od]; ++kd) {
              const int64_t id = od * g.s[0] - g.pb[0] + kd * g.d[0];
              for (int64_t kh = r[1].first[oh]; kh < r[1].last[oh]; ++kh) {
                const int64_t ih = oh * g.s[1] - g.pb[1] + kh * g.d[1];
                const T* row = xp + (id * g.in[1] + ih) * g.in[2];
                for (int64_t kw = r[2].first[ow]; kw < r[2].last[ow]; ++kw)
                  sum +=
                      std::pow(std::abs(static_cast<double>(to_compute(row[ow * g.s[2] - g.pb[2] + kw * g.d[2]]))), pw);
              }
            }
            yp[(od * g.out[1] + oh) * g.out[2] + ow] =
                from_compute<T>(static_cast<compute_t<T>>(std::pow(sum, 1.0 / pw)));
          }
    }
  });
}

void lp_pool_kernel(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const PoolSetup p = setup_pool(ctx, X);
  const int64_t pw = ctx.attr_int("p", 2);
  REFORGE_CHECK(pw >= 1, ctx.node().label(), ": p must be >= 1, got ", pw);
  Tensor& Y = ctx.allocate_output(0, X.dtype(), p.out_shape);
  if (Y.numel() == 0) return;
  dispatch_float(
      X.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        lp_pool<T>(p, X.data<T>(), Y.mutable_data<T>(), static_cast<double>(pw));
      },
      "LpPool");
}

// MaxUnpool: scatters X into zeros of the unpooled shape [N, C] and (in - 1) * stride + kernel -
// pad_begin - pad_end per spatial axis, element k to flat position I[k] of it (the flat index
// over the whole tensor, as MaxPool's Indices give it). An output_shape input, when given, may
// only be larger per spatial axis: the unpooled tensor sits at its origin, zeros after it.
void max_unpool_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& X = ctx.input(0);
  const Tensor& I = ctx.input(1);
  REFORGE_CHECK(X.rank() >= 3, label, ": X must be [N, C, spatial...], got ", X.describe());
  REFORGE_CHECK(I.dtype() == DType::Int64 && I.shape() == X.shape(), label, ": I must be int64 of X's shape ",
                shape_str(X.shape()), ", got ", I.describe());
  const size_t nsp = static_cast<size_t>(X.rank() - 2);
  const std::vector<int64_t> k = ctx.attr_ints("kernel_shape");
  REFORGE_CHECK(k.size() == nsp, label, ": kernel_shape needs ", nsp, " values, got ", k.size());
  const std::vector<int64_t> s = ctx.attr_ints("strides", std::vector<int64_t>(nsp, 1));
  const std::vector<int64_t> pads = ctx.attr_ints("pads", std::vector<int64_t>(2 * nsp, 0));
  REFORGE_CHECK(s.size() == nsp && pads.size() == 2 * nsp, label, ": strides need ", nsp, " values and pads ", 2 * nsp);
  Shape unpooled{X.dim(0), X.dim(1)};
  for (size_t i = 0; i < nsp; ++i)
    unpooled.push_back((X.dim(static_cast<int64_t>(i) + 2) - 1) * s[i] + k[i] - pads[i] - pads[i + nsp]);
  for (int64_t d : unpooled) REFORGE_CHECK(d >= 0, label, ": unpooled shape ", shape_str(unpooled), " is negative");
  Shape out_shape = unpooled;
  if (ctx.has_input(2)) {
    const Tensor& os = ctx.input(2);
    REFORGE_CHECK(os.dtype() == DType::Int64 && os.rank() == 1 && os.numel() == X.rank(), label,
                  ": output_shape must be int64 [", X.rank(), "], got ", os.describe());
    for (int64_t i = 0; i < X.rank(); ++i) {
      out_shape[static_cast<size_t>(i)] = os.as_int64(i);
      REFORGE_CHECK(i < 2 ? out_shape[static_cast<size_t>(i)] == unpooled[static_cast<size_t>(i)]
                          : out_shape[static_cast<size_t>(i)] >= unpooled[static_cast<size_t>(i)],
                    label, ": output_shape ", shape_str(out_shape), " cannot hold the unpooled shape ",
                    shape_str(unpooled));
    }
  }
  Tensor& Y = ctx.allocate_output(0, X.dtype(), out_shape);
  const int64_t total = shape_numel(unpooled);
  const int64_t* idx = I.data<int64_t>();
  for (int64_t i = 0; i < X.numel(); ++i)
    REFORGE_CHECK(idx[i] >= 0 && idx[i] < total, label, ": index ", idx[i], " at position ", i,
                  " is outside the output of ", total, " elements");
  REFORGE_CHECK(dtype_size(X.dtype()) > 0, label, ": element type ", dtype_name(X.dtype()), " is not supported");
  const size_t elem = dtype_size(X.dtype());
  const auto* src = X.data<uint8_t>();
  auto* dst = Y.mutable_data<uint8_t>();
  for (int64_t i = 0; i < X.numel(); ++i) {
    // The flat index in the unpooled shape, re-addressed in the output shape.
    int64_t rest = idx[i], at = 0, stride = 1;
    for (size_t d = unpooled.size(); d-- > 0;) {
      at += (rest % unpooled[d]) * stride;
      rest /= unpooled[d];
      stride *= out_shape[d];
    }
    std::memcpy(dst + static_cast<size_t>(at) * elem, src + static_cast<size_t>(i) * elem, elem);
  }
}

void max_pool_kernel(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const PoolSetup p = setup_pool(ctx, X);
  const int64_t storage_order = ctx.attr_int("storage_order", 0);
  REFORGE_CHECK(storage_order == 0 || storage_order == 1, ctx.node().label(), ": storage_order must be 0 or 1, got ",
                storage_order);
  Tensor& Y = ctx.allocate_output_uninit(0, X.dtype(), p.out_shape);
  int64_t* indices = nullptr;
  if (ctx.num_outputs() > 1 && ctx.output_wanted(1))
    indices = ctx.allocate_output(1, DType::Int64, p.out_shape).mutable_data<int64_t>();
  if (Y.numel() == 0) return;
  dispatch_numeric(
      X.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        max_pool<T>(p, X.data<T>(), Y.mutable_data<T>(), indices, storage_order == 1);
      },
      "MaxPool");
}

void average_pool_kernel(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const PoolSetup p = setup_pool(ctx, X);
  Tensor& Y = ctx.allocate_output(0, X.dtype(), p.out_shape);
  if (Y.numel() == 0) return;
  const bool include_pad = ctx.attr_int("count_include_pad", 0) != 0;
  dispatch_float(
      X.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        avg_pool<T>(p, X.data<T>(), Y.mutable_data<T>(), include_pad);
      },
      "AveragePool");
}

template <bool kMax>
void global_pool_kernel(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  REFORGE_CHECK(X.rank() >= 3, ctx.node().label(), ": X must be [N, C, spatial...], got ", X.describe());
  Shape out_shape(X.shape().begin(), X.shape().begin() + 2);
  out_shape.resize(X.shape().size(), 1);
  Tensor& Y = ctx.allocate_output(0, X.dtype(), out_shape);
  const int64_t planes = X.dim(0) * X.dim(1);
  if (planes == 0) return;
  const int64_t plane = X.numel() / planes;
  REFORGE_CHECK(plane > 0, ctx.node().label(), ": cannot pool over an empty spatial extent in ", X.describe());
  dispatch_float(
      X.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
        const T* x = X.data<T>();
        T* y = Y.mutable_data<T>();
        parallel_for(planes, X.numel() > (1 << 16) ? omp_get_max_threads() : 1, 1, [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) {
            const T* xp = x + i * plane;
            A acc = static_cast<A>(to_compute(xp[0]));
            if constexpr (kMax) {
              for (int64_t j = 1; j < plane; ++j) {
                const A v = static_cast<A>(to_compute(xp[j]));
                if (v > acc || v != v) acc = v;  // NaN propagates, as numpy's max does
              }
              y[i] = from_compute<T>(acc);
            } else {
              for (int64_t j = 1; j < plane; ++j) acc += static_cast<A>(to_compute(xp[j]));
              y[i] = from_compute<T>(acc / static_cast<A>(plane));
            }
          }
        });
      },
      kMax ? "GlobalMaxPool" : "GlobalAveragePool");
}

}  // namespace

std::string check_pool(const ir::Node& node) {
  if (!node.has_attr("kernel_shape")) return "the kernel_shape attribute is required";
  std::string ap = node.attr_string("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID")
    return "auto_pad '" + ap + "' is not supported";
  size_t n = node.attr_ints("kernel_shape").size();
  if (n < 1 || n > 3) return "only 1-D, 2-D and 3-D pooling is supported";
  return "";
}

void register_pool_ops(OpRegistry& r) {
  r.add({"", "MaxPool", 1, INT_MAX, max_pool_kernel, check_pool});
  // No reference kernel: made only by a backend's layout pass where that backend has a kernel.
  r.add({"reforge", "MaxPool", 1, INT_MAX, nullptr, check_pool});
  r.add({"", "AveragePool", 1, INT_MAX, average_pool_kernel, check_pool});
  r.add({"", "LpPool", 2, INT_MAX, lp_pool_kernel, check_pool});
  r.add({"",
         "MaxUnpool",
         9,
         INT_MAX,
         max_unpool_kernel,
         nullptr,
         nullptr,
         {InputRole::kData, InputRole::kData, InputRole::kShape}});
  r.add({"", "GlobalAveragePool", 1, INT_MAX, global_pool_kernel<false>, nullptr});
  r.add({"", "GlobalMaxPool", 1, INT_MAX, global_pool_kernel<true>, nullptr});
}

}  // namespace reforge::ops::nn
