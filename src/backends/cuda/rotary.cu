// Rotary position embeddings on the GPU, with the CPU's semantics: the ONNX RotaryEmbedding op
// (opset 23, ops/transformer/rotary.cc) and reforge::Rotary (backends/cpu/rotary.cc). One thread
// per output element.
//
// RotaryEmbedding: 3-D ([B, S, H * Dh], num_heads) or 4-D ([B, H, S, Dh]) input; the first
// rotary_embedding_dim features rotate in pairs (k, k + dim/2) or, interleaved, (2k, 2k + 1);
// cos/sin caches are indexed by position_ids (a structure input, read on the host) or per token.
// Each product rounds to the input type and the sum rounds once, as the ONNX reference does.
//
// reforge::Rotary: Y = X * cos + concat(-X[..., hi_start:hi_end], X[..., lo_start:lo_end]) * sin
// over the last axis, X 4-D in layout bhsd or bshd (1-D to 3-D in bhsd: the leading dimensions
// are 1), Y [B, H, S, D] (with the rank of X, cos and sin); X, cos and sin (X's type) broadcast
// together over [B, H, S], the tables' last dimension is D or 1, and the two slices together span
// D. Computed in float32 (float64 for float64) and rounded once. Other inputs run the unfused ops
// on the device (ops/reforge/unfused.h), as the CPU's kernel runs them on the host.
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_ops.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"
#include "core/error.h"
#include "ops/transformer/rotary_setup.h"

namespace reforge::cuda {

namespace {

template <typename T, typename C>
__device__ __forceinline__ C round_t(C v) {
  if constexpr (std::is_same_v<T, C>) {
    return v;
  } else {
    const T t = store_c<T>(v);
    return static_cast<C>(load_c(&t, 0));
  }
}

struct RotaryArgs {
  int64_t heads = 0, seq = 0, head_size = 0, rot = 0, half = 0;
  bool is_3d = false, interleaved = false;
  const int64_t* rows = nullptr;  // cache row offset per (b, s), or null: (b * seq + s) * half
};

template <typename T>
__global__ void rotary_embedding_kernel(const T* x, const T* cos, const T* sin, T* y, RotaryArgs a, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = i % a.head_size, r = i / a.head_size;
    if (e >= a.rot) {
      y[i] = x[i];
      continue;
    }
    int64_t s, b;
    if (a.is_3d) {  // r = (b * seq + s) * heads + h
      const int64_t bs = r / a.heads;
      s = bs % a.seq;
      b = bs / a.seq;
    } else {  // r = (b * heads + h) * seq + s
      s = r % a.seq;
      b = r / a.seq / a.heads;
    }
    const int64_t bs = b * a.seq + s;
    const int64_t row = a.rows ? a.rows[bs] : bs * a.half;
    const T* base = x + (i - e);
    int64_t k, i1, i2;
    bool first;
    if (a.interleaved) {
      k = e / 2;
      first = (e % 2) == 0;
      i1 = 2 * k;
      i2 = 2 * k + 1;
    } else {
      first = e < a.half;
      k = first ? e : e - a.half;
      i1 = k;
      i2 = k + a.half;
    }
    const C x1 = load_c(base, i1), x2 = load_c(base, i2);
    const C ck = load_c(cos, row + k), sk = load_c(sin, row + k);
    const C out = first ? round_t<T>(ck * x1) - round_t<T>(sk * x2) : round_t<T>(sk * x1) + round_t<T>(ck * x2);
    y[i] = store_c<T>(out);
  }
}

void rotary_embedding(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& cos = ctx.input(1);
  const Tensor& sin = ctx.input(2);
  const ops::RotarySetup rs = ops::rotary_setup(ctx);
  RotaryArgs a{rs.heads, rs.seq, rs.head_size, rs.rot, rs.half, rs.is_3d, rs.interleaved};
  Tensor rows;  // lives until the launch is queued
  if (rs.has_positions) {
    const Tensor& pos = ctx.input(3);
    const std::vector<int64_t> p = pos.on_host() ? pos.to_int64_vector() : download(pos).to_int64_vector();
    const std::vector<int64_t> r = ops::rotary_position_rows(ctx, rs, p);
    if (!r.empty()) {
      rows = to_device(Tensor::copy_of(DType::Int64, {static_cast<int64_t>(r.size())}, r.data()));
      a.rows = rows.data<int64_t>();
    }
  }
  Tensor& out = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_device(
      x.dtype(), where.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_floating_point_v<compute_t<T>>) {
          rotary_embedding_kernel<T><<<grid_for(n, kMaxWideGrid), 256, 0, stream()>>>(
              x.data<T>(), cos.data<T>(), sin.data<T>(), out.mutable_data<T>(), a, n);
          check_launch("RotaryEmbedding");
        }
      },
      true);
}

// ---------------------------------------------------------------------------------------------
// reforge::Rotary.

struct FusedRotaryArgs {
  int64_t H = 0, S = 0, D = 0;
  int64_t x_sb = 0, x_sh = 0, x_ss = 0;
  int64_t c_sb = 0, c_sh = 0, c_ss = 0, c_sd = 1, s_sb = 0, s_sh = 0, s_ss = 0, s_sd = 1;
  int64_t hi_start = 0, hi_len = 0, lo_start = 0;
};

template <typename T>
__global__ void fused_rotary_kernel(const T* x, const T* cos, const T* sin, T* y, FusedRotaryArgs a, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = i % a.D, r = i / a.D;  // r = (b * H + h) * S + s
    const int64_t s = r % a.S, bh = r / a.S, h = bh % a.H, b = bh / a.H;
    const T* xr = x + b * a.x_sb + h * a.x_sh + s * a.x_ss;
    const C c = load_c(cos, b * a.c_sb + h * a.c_sh + s * a.c_ss + e * a.c_sd);
    const C sn = load_c(sin, b * a.s_sb + h * a.s_sh + s * a.s_ss + e * a.s_sd);
    const C rot = e < a.hi_len ? -load_c(xr, a.hi_start + e) : load_c(xr, a.lo_start + e - a.hi_len);
    y[i] = store_c<T>(load_c(xr, e) * c + rot * sn);
  }
}

// A table (cos or sin) as [B, H, S, D]: rank 1 to 4, the missing leading dimensions 1.
struct Table4 {
  int64_t dims[4] = {1, 1, 1, 1};
};

// False unless `t` has 1 to 4 dimensions, the last 1 or D.
bool table_of(const Tensor& t, int64_t D, Table4& tb) {
  if (t.rank() < 1 || t.rank() > 4) return false;
  for (int64_t i = 0; i < t.rank(); ++i) tb.dims[4 - t.rank() + i] = t.dim(i);
  return tb.dims[3] == D || tb.dims[3] == 1;
}

// Strides of a [B, H, S, D] operand broadcast to the output (0 where its dimension is 1).
void broadcast_strides(const int64_t (&dims)[4], int64_t& sb, int64_t& sh, int64_t& ss, int64_t& sd) {
  sd = dims[3] == 1 ? 0 : 1;
  ss = dims[2] == 1 ? 0 : dims[3];
  sh = dims[1] == 1 ? 0 : dims[2] * dims[3];
  sb = dims[0] == 1 ? 0 : dims[1] * dims[2] * dims[3];
}

// One Slice bound (ONNX Slice, step 1) on an axis of size n.
int64_t clamp_bound(int64_t v, int64_t n) {
  if (v < 0) v += n;
  return std::clamp<int64_t>(v, 0, n);
}

// The fast path of reforge::Rotary: false, before any work, when the inputs are not of its form
// (then the unfused ops run instead, and compute or fail exactly as the graph before the fusion
// would). Its form: a float X, 4-D (1-D to 3-D in layout bhsd), cos and sin of X's type; the
// three axes X's last; the slice bounds splitting the head size D in two spans that together
// cover it; cos and sin of 1 to 4 dimensions, the last 1 or D, broadcasting with X over the
// others (numpy rules, as the unfused Mul/Add).
bool try_fused_rotary(ops::KernelContext& ctx, const std::string& where) {
  const Tensor& x = ctx.input(0);
  const Tensor& cos = ctx.input(1);
  const Tensor& sin = ctx.input(2);
  const bool bshd = ctx.attr_string("layout", "bhsd") == "bshd";
  const int64_t r = x.rank();
  if (!is_float(x.dtype()) || !(r == 4 || (!bshd && r >= 1 && r <= 3))) return false;
  if (cos.dtype() != x.dtype() || sin.dtype() != x.dtype()) return false;
  const std::vector<int64_t> axes = ctx.attr_ints("axes", {-1, -1, -1});
  if (axes.size() != 3) return false;
  for (int64_t ax : axes)
    if (ax != -1 && ax != r - 1) return false;
  FusedRotaryArgs a;
  // X as [B, H, S, D]; lower ranks have the leading dimensions 1.
  auto dim = [&](int64_t i) { return i - (4 - r) >= 0 ? x.dim(i - (4 - r)) : int64_t{1}; };
  const int64_t B = dim(0);
  a.H = bshd ? dim(2) : dim(1);
  a.S = bshd ? dim(1) : dim(2);
  a.D = dim(3);
  int64_t bounds[4];  // hi_start, hi_end, lo_start, lo_end
  for (int i = 0; i < 4; ++i) {
    const Tensor& t = ctx.input(3 + static_cast<size_t>(i));
    if (t.numel() != 1 || !is_integer(t.dtype())) return false;
    bounds[i] = (t.on_host() ? t.to_int64_vector() : download(t).to_int64_vector())[0];
  }
  a.hi_start = clamp_bound(bounds[0], a.D);
  a.hi_len = std::max<int64_t>(0, clamp_bound(bounds[1], a.D) - a.hi_start);
  a.lo_start = clamp_bound(bounds[2], a.D);
  const int64_t lo_len = std::max<int64_t>(0, clamp_bound(bounds[3], a.D) - a.lo_start);
  if (a.hi_len + lo_len != a.D) return false;
  // X, cos and sin broadcast together over [B, H, S].
  Table4 ct, st;
  if (!table_of(cos, a.D, ct) || !table_of(sin, a.D, st)) return false;
  const int64_t x_dims[4] = {B, a.H, a.S, a.D};
  int64_t out[3] = {B, a.H, a.S};
  for (int d = 0; d < 3; ++d)
    for (const int64_t n : {ct.dims[d], st.dims[d]}) {
      if (!(out[d] == 1 || n == 1 || out[d] == n)) return false;
      if (n != 1) out[d] = n;
    }
  broadcast_strides(ct.dims, a.c_sb, a.c_sh, a.c_ss, a.c_sd);
  broadcast_strides(st.dims, a.s_sb, a.s_sh, a.s_ss, a.s_sd);
  int64_t x_sd = 0;  // X's features are contiguous
  broadcast_strides(x_dims, a.x_sb, a.x_sh, a.x_ss, x_sd);
  if (bshd) {  // X is [B, S, H, D]
    a.x_ss = a.S == 1 ? 0 : a.H * a.D;
    a.x_sh = a.H == 1 ? 0 : a.D;
    a.x_sb = B == 1 ? 0 : a.S * a.H * a.D;
  }
  a.H = out[1];
  a.S = out[2];
  // The output has the rank of the broadcast of X, cos and sin (whose extra dimensions are 1).
  const int64_t out_rank = std::max({r, cos.rank(), sin.rank()});
  Shape y_shape{out[0], a.H, a.S, a.D};
  y_shape.erase(y_shape.begin(), y_shape.begin() + (4 - out_rank));
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), y_shape);
  const int64_t n = y.numel();
  if (n == 0) return true;
  dispatch_device(
      x.dtype(), where.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_floating_point_v<compute_t<T>>) {
          fused_rotary_kernel<T><<<grid_for(n, kMaxWideGrid), 256, 0, stream()>>>(
              x.data<T>(), cos.data<T>(), sin.data<T>(), y.mutable_data<T>(), a, n);
          check_launch("reforge::Rotary");
        }
      },
      true);
  return true;
}

void fused_rotary(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  if (!try_fused_rotary(ctx, where)) ctx.set_output(0, ops::rotary_unfused(ctx, device_ops(ctx)));
}

}  // namespace

void register_rotary_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "RotaryEmbedding", rotary_embedding);
  add_kernel(r, "reforge", "Rotary", fused_rotary);
}

}  // namespace reforge::cuda
