// BatchNormalization, InstanceNormalization, GroupNormalization and Dropout on the GPU, with the
// CPU's semantics (ops/nn/norm_batch.cc, ops/nn/norm_local.cc, ops/tensor/tensor_misc.cc).
//
// BatchNormalization folds its parameters (each of any float type, per channel [C] or, before
// opset 9, per activation [C, spatial...]) into y = x * a + b with a = scale / sqrt(var + eps)
// and b = B - mean * a in float64; per-channel a and b are rounded to the compute type (float32,
// float64 for float64 X) and applied as one multiply-add, per-activation ones in float64. In
// training mode (opset >= 14, training_mode = 1) mean and var are the batch's (population
// variance over N and the spatial positions, two passes in float64, one block per channel), and
// the optional outputs running_mean / running_var are input * momentum + batch * (1 - momentum)
// in float64, in the types and shapes of input_mean / input_var.
//
// InstanceNormalization normalizes each (n, c) row with its float64 mean and variance (two passes,
// deterministic trees), folded with scale[c] and B[c] as BatchNormalization's per-channel case.
// GroupNormalization normalizes each (n, group) block of channels with float64 statistics and
// computes (x - mean) * inv * scale + bias in float64; scale and bias are per channel from opset
// 21 and per group before.
//
// Dropout is the identity unless training is on (opset >= 12, training_mode true, ratio != 0):
// then, with the `seed` attribute, the keep mask is drawn on the host exactly as the CPU draws
// it (MT19937, 53-bit uniforms) and applied on the device; without a seed the CPU's draw is
// random, so such a node is declined. The optional ratio and training_mode inputs are read on the
// host (they are one element each).
#include <cmath>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/group_reduce.cuh"
#include "backends/cuda/launch.h"
#include "core/error.h"
#include "ops/nn/group_norm_setup.h"
#include "ops/nn/norm_setup.h"
#include "ops/tensor/tensor_misc_setup.h"

namespace reforge::cuda {

namespace {

// Rows at least this long get a whole block; shorter ones a warp.
constexpr int64_t kBlockRow = 2048;

#define REFORGE_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)

template <typename P>
__global__ void to_double_kernel(double* out, const P* p, int64_t n) {
  REFORGE_GRID_LOOP(i, n) out[i] = static_cast<double>(load_c(p, i));
}

// Device tensor `t` (any float type) as a float64 device tensor of the same shape.
Tensor to_double(const Tensor& t, const std::string& label) {
  Tensor out = device_tensor(DType::Float64, t.shape());
  const int64_t n = t.numel();
  if (n == 0) return out;
  dispatch_device(
      t.dtype(), label.c_str(),
      [&](auto tag) {
        using P = typename decltype(tag)::type;
        to_double_kernel<P><<<grid_for(n), 256, 0, stream()>>>(out.mutable_data<double>(), t.data<P>(), n);
      },
      true);
  check_launch("normalization parameters to float64");
  return out;
}

template <typename U>
__global__ void from_double_kernel(U* out, const double* in, int64_t n) {
  REFORGE_GRID_LOOP(i, n) out[i] = store_c<U>(static_cast<compute_t<U>>(in[i]));
}

// Float64 device values `in` as a device tensor of float type `dtype` and `shape`.
Tensor from_double(const double* in, DType dtype, const Shape& shape, const std::string& label) {
  Tensor out = device_tensor(dtype, shape);
  const int64_t n = out.numel();
  if (n == 0) return out;
  dispatch_device(
      dtype, label.c_str(),
      [&](auto tag) {
        using U = typename decltype(tag)::type;
        from_double_kernel<U><<<grid_for(n), 256, 0, stream()>>>(out.mutable_data<U>(), in, n);
      },
      true);
  check_launch("normalization statistics from float64");
  return out;
}

// Mean and population variance of the row xp[0..n) in float64 by one group of G threads (two
// passes, deterministic trees). Every thread of the block calls it; `live` says whether this
// thread's group has a row.
template <int G, typename T>
__device__ __forceinline__ void row_moments(const T* xp, int64_t n, bool live, double& mean, double& var) {
  const int lane = threadIdx.x % G;
  auto add = [](double a, double b) { return a + b; };
  double s = 0;
  if (live)
    for (int64_t i = lane; i < n; i += G) s += static_cast<double>(load_c(xp, i));
  mean = group_combine<G>(s, add) / static_cast<double>(n);
  double q = 0;
  if (live)
    for (int64_t i = lane; i < n; i += G) {
      const double d = static_cast<double>(load_c(xp, i)) - mean;
      q += d * d;
    }
  var = group_combine<G>(q, add) / static_cast<double>(n);
}

// ---- BatchNormalization -------------------------------------------------------------------

// Per-channel batch statistics over [N, C, inner]: one block per channel.
template <typename T>
__global__ void channel_stats_kernel(const T* x, int64_t N, int64_t C, int64_t inner, double* mean, double* var) {
  const int64_t count = N * inner;
  auto add = [](double a, double b) { return a + b; };
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double s = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t n = j / inner, i = j - n * inner;
      s += static_cast<double>(load_c(x, (n * C + c) * inner + i));
    }
    const double total = group_combine<kGroupThreads>(s, add);
    const double m = count > 0 ? total / static_cast<double>(count) : 0.0;
    double q = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t n = j / inner, i = j - n * inner;
      const double d = static_cast<double>(load_c(x, (n * C + c) * inner + i)) - m;
      q += d * d;
    }
    const double v = group_combine<kGroupThreads>(q, add);
    if (threadIdx.x == 0) {
      mean[c] = m;
      var[c] = count > 0 ? v / static_cast<double>(count) : 0.0;
    }
  }
}

// a = scale / sqrt(var + eps), b = B - mean * a over the P parameter entries.
__global__ void bn_fold_kernel(const double* scale, const double* bias, const double* mean, const double* var,
                               double* a, double* b, int64_t P, double eps) {
  REFORGE_GRID_LOOP(i, P) {
    const double av = scale[i] / sqrt(var[i] + eps);
    a[i] = av;
    b[i] = bias[i] - mean[i] * av;
  }
}

// running = input * momentum + batch * (1 - momentum).
__global__ void bn_running_kernel(const double* input, const double* batch, double* out, int64_t C, double momentum) {
  REFORGE_GRID_LOOP(i, C) out[i] = input[i] * momentum + batch[i] * (1 - momentum);
}

// y = x * a + b over [N, C, inner]: per channel (rounded to A) or per activation (float64).
template <typename T>
__global__ void scale_shift_kernel(const T* x, T* y, int64_t total, int64_t C, int64_t inner, const double* a,
                                   const double* b, bool per_element) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  REFORGE_GRID_LOOP(i, total) {
    const int64_t nc = i / inner, c = nc % C;
    if (!per_element) {
      y[i] = store_c<T>(static_cast<A>(load_c(x, i)) * static_cast<A>(a[c]) + static_cast<A>(b[c]));
    } else {
      const int64_t p = c * inner + (i - nc * inner);
      y[i] = store_c<T>(static_cast<A>(load_c(x, i) * a[p] + b[p]));
    }
  }
}

void batch_norm_kernel(ops::KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const std::string& label = ctx.node().label();
  const std::string why = ops::batch_norm_check(ctx.node());
  REFORGE_CHECK(why.empty(), label, ": ", why);
  const ops::BatchNormSetup bn = ops::batch_norm_setup(ctx);
  REFORGE_CHECK(is_float(X.dtype()), label, ": element type ", dtype_name(X.dtype()), " is not supported");
  const int64_t N = bn.n, C = bn.c, inner = bn.inner;
  const double eps = bn.eps, momentum = bn.momentum;
  const bool training = bn.training;
  const int64_t P = ops::batch_norm_param_size(ctx, bn);
  Tensor p[4];  // scale, bias, mean, var in float64
  for (int i = 0; i < 4; ++i) p[i] = to_double(ctx.input(static_cast<size_t>(i + 1)), label);
  const double* mean = p[2].data<double>();
  const double* var = p[3].data<double>();
  Tensor batch_mean, batch_var;
  if (training) {
    batch_mean = device_tensor(DType::Float64, {C});
    batch_var = device_tensor(DType::Float64, {C});
    if (C > 0) {
      dispatch_device(
          X.dtype(), label.c_str(),
          [&](auto tag) {
            using T = typename decltype(tag)::type;
            const unsigned grid = static_cast<unsigned>(C < 65535 * 8 ? C : 65535 * 8);
            channel_stats_kernel<T><<<grid, kGroupThreads, 0, stream()>>>(
                X.data<T>(), N, C, inner, batch_mean.mutable_data<double>(), batch_var.mutable_data<double>());
          },
          true);
      check_launch("BatchNormalization statistics");
    }
    mean = batch_mean.data<double>();
    var = batch_var.data<double>();
  }
  Tensor a = device_tensor(DType::Float64, {P}), b = device_tensor(DType::Float64, {P});
  if (P > 0) {
    bn_fold_kernel<<<grid_for(P), 256, 0, stream()>>>(p[0].data<double>(), p[1].data<double>(), mean, var,
                                                      a.mutable_data<double>(), b.mutable_data<double>(), P, eps);
    check_launch("BatchNormalization fold");
  }
  Tensor& Y = ctx.allocate_output_uninit(0, X.dtype(), X.shape());
  const int64_t total = Y.numel();
  if (total > 0) {
    dispatch_device(
        X.dtype(), label.c_str(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          scale_shift_kernel<T><<<grid_for(total), 256, 0, stream()>>>(
              X.data<T>(), Y.mutable_data<T>(), total, C, inner, a.data<double>(), b.data<double>(), P != C);
        },
        true);
    check_launch("BatchNormalization");
  }
  if (training) {
    const Tensor* batch[2] = {&batch_mean, &batch_var};
    for (int k = 0; k < 2; ++k) {
      if (!ctx.output_wanted(static_cast<size_t>(k + 1))) continue;
      const Tensor& in = ctx.input(static_cast<size_t>(k + 3));
      Tensor run = device_tensor(DType::Float64, {C});
      if (C > 0) {
        bn_running_kernel<<<grid_for(C), 256, 0, stream()>>>(p[k + 2].data<double>(), batch[k]->data<double>(),
                                                             run.mutable_data<double>(), C, momentum);
        check_launch("BatchNormalization running statistics");
      }
      ctx.set_output(static_cast<size_t>(k + 1), from_double(run.data<double>(), in.dtype(), in.shape(), label));
    }
  }
}

// ---- InstanceNormalization ----------------------------------------------------------------

template <int G, typename T>
__global__ void instance_norm_rows(const T* x, T* y, const double* scale, const double* bias, int64_t rows, int64_t C,
                                   int64_t inner, double eps) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  constexpr int groups = kGroupThreads / G;
  const int lane = threadIdx.x % G;
  for (int64_t first = int64_t{blockIdx.x} * groups; first < rows; first += int64_t{gridDim.x} * groups) {
    const int64_t row = first + threadIdx.x / G;
    const bool live = row < rows;
    const T* xp = x + (live ? row : 0) * inner;
    double m, v;
    row_moments<G>(xp, inner, live, m, v);
    if (!live) continue;
    const int64_t c = row % C;
    const double a = scale[c] / sqrt(v + eps);
    const A av = static_cast<A>(a), bv = static_cast<A>(bias[c] - m * a);
    T* yp = y + row * inner;
    for (int64_t i = lane; i < inner; i += G) yp[i] = store_c<T>(static_cast<A>(load_c(xp, i)) * av + bv);
  }
}

void instance_norm_kernel(ops::KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const Tensor& S = ctx.input(1);
  const Tensor& B = ctx.input(2);
  const std::string& label = ctx.node().label();
  REFORGE_CHECK(X.rank() >= 3, label, ": X must be [N, C, spatial...], got ", X.describe());
  REFORGE_CHECK(is_float(X.dtype()), label, ": element type ", dtype_name(X.dtype()), " is not supported");
  const int64_t N = X.dim(0), C = X.dim(1), inner = N * C == 0 ? 0 : X.numel() / (N * C);
  REFORGE_CHECK(S.numel() == C && B.numel() == C, label, ": scale ", S.describe(), " and B ", B.describe(),
                " must have ", C, " elements");
  REFORGE_CHECK(is_float(S.dtype()) && is_float(B.dtype()), label, ": scale and B must be float tensors");
  const double eps = ctx.attr_float("epsilon", 1e-5f);
  Tensor& Y = ctx.allocate_output_uninit(0, X.dtype(), X.shape());
  if (Y.numel() == 0) return;
  const Tensor scale = to_double(S, label), bias = to_double(B, label);
  const int64_t rows = N * C;
  dispatch_device(
      X.dtype(), label.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (inner >= kBlockRow)
          instance_norm_rows<kGroupThreads, T><<<row_grid(rows, 1), kGroupThreads, 0, stream()>>>(
              X.data<T>(), Y.mutable_data<T>(), scale.data<double>(), bias.data<double>(), rows, C, inner, eps);
        else
          instance_norm_rows<32, T><<<row_grid(rows, kGroupThreads / 32), kGroupThreads, 0, stream()>>>(
              X.data<T>(), Y.mutable_data<T>(), scale.data<double>(), bias.data<double>(), rows, C, inner, eps);
      },
      true);
  check_launch("InstanceNormalization");
}

// ---- GroupNormalization -------------------------------------------------------------------

// One row per (n, group): cg channels of `spatial` positions each, contiguous.
template <int G, typename T>
__global__ void group_norm_rows(const T* x, T* y, const T* scale, const T* bias, int64_t rows, int64_t groups,
                                int64_t cg, int64_t spatial, bool per_channel, double eps) {
  constexpr int per_block = kGroupThreads / G;
  const int lane = threadIdx.x % G;
  const int64_t len = cg * spatial;
  for (int64_t first = int64_t{blockIdx.x} * per_block; first < rows; first += int64_t{gridDim.x} * per_block) {
    const int64_t row = first + threadIdx.x / G;
    const bool live = row < rows;
    const T* xp = x + (live ? row : 0) * len;
    double m, v;
    row_moments<G>(xp, len, live, m, v);
    if (!live) continue;
    const int64_t g = row % groups;
    const double inv = 1.0 / sqrt(v + eps);
    T* yp = y + row * len;
    for (int64_t i = lane; i < len; i += G) {
      const int64_t p = per_channel ? g * cg + i / spatial : g;
      const double s = static_cast<double>(load_c(scale, p)), b = static_cast<double>(load_c(bias, p));
      yp[i] = store_c<T>(static_cast<compute_t<T>>((static_cast<double>(load_c(xp, i)) - m) * inv * s + b));
    }
  }
}

void group_norm_kernel(ops::KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor& bias = ctx.input(2);
  const ops::GroupNormSetup gs = ops::group_norm_setup(ctx);
  const int64_t n = gs.n, groups = gs.groups, cg = gs.cg, spatial = gs.spatial;
  const double eps = gs.eps;
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  if (y.numel() == 0) return;
  const int64_t rows = n * groups, len = cg * spatial;
  const bool per_channel = gs.per_channel;
  dispatch_device(
      x.dtype(), label.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (len >= kBlockRow)
          group_norm_rows<kGroupThreads, T><<<row_grid(rows, 1), kGroupThreads, 0, stream()>>>(
              x.data<T>(), y.mutable_data<T>(), scale.data<T>(), bias.data<T>(), rows, groups, cg, spatial, per_channel,
              eps);
        else
          group_norm_rows<32, T><<<row_grid(rows, kGroupThreads / 32), kGroupThreads, 0, stream()>>>(
              x.data<T>(), y.mutable_data<T>(), scale.data<T>(), bias.data<T>(), rows, groups, cg, spatial, per_channel,
              eps);
      },
      true);
  check_launch("GroupNormalization");
}

// ---- Dropout ------------------------------------------------------------------------------

template <typename T>
__global__ void fill_one_kernel(T* out, int64_t n) {
  REFORGE_GRID_LOOP(i, n) out[i] = store_c<T>(compute_t<T>(1));
}

template <typename T>
__global__ void dropout_apply_kernel(const T* x, T* y, const bool* keep, int64_t n, compute_t<T> scale) {
  REFORGE_GRID_LOOP(i, n) y[i] = keep[i] ? store_c<T>(load_c(x, i) * scale) : store_c<T>(compute_t<T>(0));
}

// A training_mode input without a seed draws at random (ops::dropout_draws_random).
std::string dropout_check(const ir::Node& n) {
  if (ops::dropout_draws_random(n))
    return "a training_mode input without the seed attribute draws a random mask (not reproducible); "
           "only seeded or inference Dropout runs on the GPU";
  return "";
}

// Input `i` (one element) read on the host.
Tensor host_scalar(const ops::KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  REFORGE_CHECK(t.numel() == 1, ctx.node().label(), ": ", what, " must be a scalar, got ", t.describe());
  return t.on_host() ? t : download(t);
}

void dropout_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const ops::DropoutSetup s =
      ops::dropout_setup(ctx, [&](size_t i, const char* what) { return host_scalar(ctx, i, what); });
  const double ratio = s.ratio;
  const bool want_mask = s.want_mask;
  const DType mask_type = s.mask_type;
  if (!s.drop) {
    ctx.set_output(0, x);
    if (want_mask) {
      Tensor& m = ctx.allocate_output_uninit(1, mask_type, x.shape());
      const int64_t n = m.numel();
      if (n == 0) return;
      if (mask_type == DType::Bool) {
        REFORGE_CUDA_CHECK(cudaMemsetAsync(m.mutable_raw(), 1, static_cast<size_t>(n), stream()));
      } else {
        dispatch_device(
            mask_type, where.c_str(),
            [&](auto tag) {
              using T = typename decltype(tag)::type;
              fill_one_kernel<T><<<grid_for(n), 256, 0, stream()>>>(m.mutable_data<T>(), n);
            },
            true);
        check_launch("Dropout mask");
      }
    }
    return;
  }
  const std::string why = dropout_check(ctx.node());
  REFORGE_CHECK(why.empty(), where, ": ", why);
  REFORGE_CHECK(is_float(x.dtype()), where, ": element type ", dtype_name(x.dtype()), " is not supported");
  // The CPU's draws: numpy's RandomState(seed).uniform(0, 1, shape).
  const int64_t n = x.numel();
  Tensor keep_host = Tensor::empty(DType::Bool, x.shape());
  ops::dropout_keep_mask(static_cast<uint32_t>(ctx.attr_int("seed", 0)), ratio, n, keep_host.mutable_data<bool>());
  const Tensor keep = to_device(keep_host);
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  if (n > 0) {
    dispatch_device(
        x.dtype(), where.c_str(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          using Cp = compute_t<T>;
          const Cp scale = static_cast<Cp>(1) / (static_cast<Cp>(1) - static_cast<Cp>(ratio));
          dropout_apply_kernel<T>
              <<<grid_for(n), 256, 0, stream()>>>(x.data<T>(), y.mutable_data<T>(), keep.data<bool>(), n, scale);
        },
        true);
    check_launch("Dropout");
  }
  if (want_mask) ctx.set_output(1, keep);
}

}  // namespace

void register_batch_norm_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "BatchNormalization", batch_norm_kernel, ops::batch_norm_check);
  add_kernel(r, "", "InstanceNormalization", instance_norm_kernel);
  add_kernel(r, "", "GroupNormalization", group_norm_kernel, ops::group_norm_check);
  add_kernel(r, "", "Dropout", dropout_kernel, dropout_check);
}

}  // namespace reforge::cuda
