// SwiGLU (opset 28), TensorScatter (opset 24) and CausalConvWithState (opset 27), transformer
// building blocks.
//
// SwiGLU(a, b) = Swish(a) * b with Swish(x) = x * sigmoid(alpha * x) (alpha default 1), computed
// in double and rounded once; a and b have the same shape.
//
// TensorScatter writes `update` into a copy of `past_cache` (or into past_cache itself, in place)
// along the sequence axis (`axis`, default -2; never the batch axis 0): for each batch entry b,
// update's positions s go to cache position write_indices[b] + s (write_indices default 0). Mode
// 'linear' (default) requires every position to be inside the cache; 'circular' wraps them modulo
// the cache length. Other axes of update must equal the cache's.
//
// CausalConvWithState: a causal depthwise 1-D convolution of input [B, C, L] with weight
// [C, 1, K] and optional bias [C], left-padded by past_state [B, C, K - 1] (zeros when absent):
// output[b, c, t] = bias[c] + sum_k weight[c, 0, k] * padded[b, c, t + k], then SiLU
// (x * sigmoid(x)) when activation is 'silu' or 'swish'; present_state is the last K - 1
// positions of the padded input. Sums run in double; outputs are rounded once.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dispatch.h"
#include "ops/broadcast.h"
#include "ops/registry.h"

namespace reforge::ops {
namespace {

void swiglu_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  REFORGE_CHECK(a.dtype() == b.dtype() && a.shape() == b.shape(), label, ": a ", a.describe(), " and b ", b.describe(),
                " must have the same type and shape");
  const double alpha = ctx.attr_float("alpha", 1.0f);
  Tensor& y = ctx.allocate_output_uninit(0, a.dtype(), a.shape());
  dispatch_float(
      a.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* as = a.data<T>();
        const T* bs = b.data<T>();
        T* ys = y.mutable_data<T>();
        for (int64_t i = 0; i < a.numel(); ++i) {
          const double x = static_cast<double>(to_compute(as[i]));
          const double swish = x / (1.0 + std::exp(-alpha * x));
          ys[i] = from_compute<T>(static_cast<compute_t<T>>(swish * static_cast<double>(to_compute(bs[i]))));
        }
      },
      label.c_str());
}

std::string check_tensor_scatter(const ir::Node& node) {
  const std::string m = node.attr_string("mode", "linear");
  if (m != "linear" && m != "circular") return "mode must be 'linear' or 'circular', got '" + m + "'";
  return "";
}

void tensor_scatter_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& cache = ctx.input(0);
  const Tensor& update = ctx.input(1);
  const int64_t rank = cache.rank();
  REFORGE_CHECK(rank >= 2 && update.rank() == rank && update.dtype() == cache.dtype(), label, ": update ",
                update.describe(), " must have past_cache's type and rank (>= 2), got past_cache ", cache.describe());
  int64_t axis = ctx.attr_int("axis", -2);
  REFORGE_CHECK(axis >= -rank && axis < rank, label, ": axis ", axis, " is out of range for rank ", rank);
  if (axis < 0) axis += rank;
  REFORGE_CHECK(axis != 0, label, ": axis must not be the batch axis 0");
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis)
      REFORGE_CHECK(update.dim(d) == cache.dim(d), label, ": update ", update.describe(), " and past_cache ",
                    cache.describe(), " differ in dimension ", d);
  const bool circular = ctx.attr_string("mode", "linear") == "circular";
  const int64_t batch = cache.dim(0), max_seq = cache.dim(axis), seq = update.dim(axis);
  std::vector<int64_t> start(static_cast<size_t>(batch), 0);
  if (ctx.has_input(2)) {
    const Tensor& w = ctx.input(2);
    REFORGE_CHECK((w.dtype() == DType::Int64 || w.dtype() == DType::Int32) && w.rank() == 1 && w.dim(0) == batch, label,
                  ": write_indices must be an int64 [", batch, "] tensor, got ", w.describe());
    for (int64_t b = 0; b < batch; ++b) start[static_cast<size_t>(b)] = w.as_int64(b);
  }
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t s0 = start[static_cast<size_t>(b)];
    REFORGE_CHECK(s0 >= 0 && (circular ? (seq <= max_seq && (max_seq > 0 || seq == 0)) : s0 + seq <= max_seq), label,
                  ": write_indices[", b, "] = ", s0, " with ", seq, " updates does not fit a cache of ", max_seq,
                  circular ? " (circular)" : "");
  }
  Tensor& out = ctx.allocate_output_uninit(0, cache.dtype(), cache.shape());
  const size_t elem = dtype_size(cache.dtype());
  REFORGE_CHECK(elem > 0, label, ": element type ", dtype_name(cache.dtype()), " is not supported");
  // In place (Sharing::kInPlace: the output's memory is the cache's) only the update is written.
  if (cache.numel() > 0 && out.raw() != cache.raw())
    std::memcpy(out.mutable_data<uint8_t>(), cache.data<uint8_t>(), cache.numel() * elem);
  // View both as [batch, mid, seq-axis, inner].
  int64_t mid = 1, inner = 1;
  for (int64_t d = 1; d < axis; ++d) mid *= cache.dim(d);
  for (int64_t d = axis + 1; d < rank; ++d) inner *= cache.dim(d);
  const size_t row = static_cast<size_t>(inner) * elem;
  auto* dst = out.mutable_data<uint8_t>();
  const auto* src = update.data<uint8_t>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t m = 0; m < mid; ++m)
      for (int64_t s = 0; s < seq; ++s) {
        int64_t pos = start[static_cast<size_t>(b)] + s;
        if (circular) pos %= max_seq;
        std::memcpy(dst + static_cast<size_t>((b * mid + m) * max_seq + pos) * row,
                    src + static_cast<size_t>((b * mid + m) * seq + s) * row, row);
      }
}

std::string check_causal_conv(const ir::Node& node) {
  const std::string a = node.attr_string("activation", "none");
  if (a != "none" && a != "silu" && a != "swish")
    return "activation must be 'silu', 'swish' or 'none', got '" + a + "'";
  return "";
}

void causal_conv_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  REFORGE_CHECK(x.rank() == 3, label, ": input must be [batch, channels, length], got ", x.describe());
  const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2);
  REFORGE_CHECK(w.dtype() == x.dtype() && w.rank() == 3 && w.dim(0) == C && w.dim(1) == 1 && w.dim(2) >= 1, label,
                ": weight must be [", C, ", 1, k] of the input's type, got ", w.describe());
  const int64_t K = w.dim(2), P = K - 1;
  const Tensor* bias = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  if (bias)
    REFORGE_CHECK(bias->dtype() == x.dtype() && bias->shape() == (Shape{C}), label, ": bias must be [", C, "], got ",
                  bias->describe());
  const Tensor* past = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  if (past)
    REFORGE_CHECK(past->dtype() == x.dtype() && past->shape() == (Shape{B, C, P}), label, ": past_state must be [", B,
                  ", ", C, ", ", P, "], got ", past->describe());
  const std::string act = ctx.attr_string("activation", "none");
  REFORGE_CHECK(act == "none" || act == "silu" || act == "swish", label,
                ": activation must be 'silu', 'swish' or 'none', got '", act, "'");
  const bool silu = act != "none";
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  dispatch_float(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* xs = x.data<T>();
        const T* ws = w.data<T>();
        T* ys = y.mutable_data<T>();
        Tensor* state = ctx.output_wanted(1) ? &ctx.allocate_output_uninit(1, x.dtype(), Shape{B, C, P}) : nullptr;
        std::vector<double> padded(static_cast<size_t>(P + L));
        for (int64_t b = 0; b < B; ++b)
          for (int64_t c = 0; c < C; ++c) {
            for (int64_t t = 0; t < P; ++t)
              padded[static_cast<size_t>(t)] =
                  past ? static_cast<double>(to_compute(past->data<T>()[(b * C + c) * P + t])) : 0.0;
            for (int64_t t = 0; t < L; ++t)
              padded[static_cast<size_t>(P + t)] = static_cast<double>(to_compute(xs[(b * C + c) * L + t]));
            const double bc = bias ? static_cast<double>(to_compute(bias->data<T>()[c])) : 0.0;
            for (int64_t t = 0; t < L; ++t) {
              double acc = bc;
              for (int64_t k = 0; k < K; ++k)
                acc += static_cast<double>(to_compute(ws[c * K + k])) * padded[static_cast<size_t>(t + k)];
              if (silu) acc = acc / (1.0 + std::exp(-acc));
              ys[(b * C + c) * L + t] = from_compute<T>(static_cast<compute_t<T>>(acc));
            }
            if (state)
              for (int64_t t = 0; t < P; ++t)
                state->mutable_data<T>()[(b * C + c) * P + t] =
                    from_compute<T>(static_cast<compute_t<T>>(padded[static_cast<size_t>(L + t)]));
          }
      },
      label.c_str());
}

}  // namespace

void register_cache_ops(OpRegistry& r) {
  r.add({"",
         "CausalConvWithState",
         27,
         INT_MAX,
         causal_conv_kernel,
         check_causal_conv,
         nullptr,
         {InputRole::kData, InputRole::kWeight, InputRole::kWeight, InputRole::kData}});
  r.add({"", "SwiGLU", 28, INT_MAX, swiglu_kernel, nullptr});
  r.add(with_sharing({"", "TensorScatter", 24, INT_MAX, tensor_scatter_kernel, check_tensor_scatter},
                     {{0, 0, Sharing::kInPlace}}));
}

}  // namespace reforge::ops
