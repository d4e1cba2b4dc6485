// The CPU's Conv (1-D/2-D/3-D, groups including depthwise, pads/auto_pad, strides, dilations,
// bias) and reforge::FusedConv, the same convolution followed by an optional residual add and ReLU (made
// by the fuse-conv-activation pass, src/passes/conv_fusion.cc):
//
//   FusedConv(X, W, B?, Z?) = relu?(Conv(X, W, B) + Z)     attributes: Conv's + activation
//
// and, from the conv-channels-last pass, x_layout / y_layout / z_layout = "NCHWc" when that
// operand is stored channel-blocked ([N, C/b, H, W, b], the layout oneDNN's kernels compute in;
// see cpu::ActLayout) or "NHWC" (channels-last, from older plans), to spare the reorders
// between convolutions; z_inplace = 1 (conv-residual-inplace) lets the output take Z's buffer.
//
// float32 runs through oneDNN (a pointwise 1x1 convolution as a plain matrix product, which
// needs no layout reorders), with the residual add and ReLU as post-ops of the primitive;
// float16/bfloat16 are widened to float32 and rounded once at the end; float64 (and anything
// oneDNN declines) uses the direct reference loop (ops/nn/conv.h), the post-ops then run as a separate
// pass. The weights are packed into oneDNN's blocked layout once per weight set: the op's
// prepare step makes a ConvWeightCache that the kernel fills on first use and a refit replaces.
// On AVX2 CPUs (8-channel blocks) 3x3 stride-1 layers of a NCHWc chain run Winograd instead
// (cpu::winograd_conv), their weights transformed on first use into the same prepared state.
#include "ops/nn/conv.h"

#include <omp.h>

#include <algorithm>
#include <mutex>
#include <type_traits>

#include "backends/cpu/conv_layout.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_conv.h"
#include "backends/cpu/matmul.h"
#include "backends/cpu/winograd.h"
#include "core/dispatch.h"
#include "core/thread_pool.h"
#include "ops/broadcast.h"
#include "ops/nn/nn_common.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::ops::nn {

namespace {

// Residual and activation after the convolution (FusedConv); none for a plain Conv.
struct PostOps {
  const Tensor* sum = nullptr;
  bool relu = false;
};

using cpu::ActLayout;

// What a Conv / FusedConv node with constant float32 weights keeps between runs (its prepare
// step makes it; a refit makes a new one): the packed weights, the node's attributes parsed
// once, and per input shape the resolved convolution and its oneDNN primitive, so that a steady
// run of a small layer spends its time in the convolution rather than in attribute lookups,
// geometry and cache keys.
struct ConvState {
  struct Call {
    Shape x, z;  // physical input shapes (z empty: no residual)
    cpu::ConvDims d;
    Shape y;                                               // physical output shape
    cpu::ConvHandle prim;                                  // oneDNN's primitive, or
    std::shared_ptr<const cpu::WinogradWeights> winograd;  // the Winograd kernel's weights
  };
  explicit ConvState(const ir::Node& n)
      : relu(n.attr_string("activation", "") == "Relu"),
        z_inplace(n.attr_int("z_inplace", 0) == 1),
        xl(parse_layout(n.attr_string("x_layout", "NCHW"))),
        yl(parse_layout(n.attr_string("y_layout", "NCHW"))),
        zl(parse_layout(n.attr_string("z_layout", "NCHW"))) {}

  std::shared_ptr<const Call> find(const Tensor& x, const Tensor* z) const {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& c : calls)
      if (c->x == x.shape() && (z ? c->z == z->shape() : c->z.empty())) return c;
    return nullptr;
  }
  void remember(std::shared_ptr<const Call> c) const {
    std::lock_guard<std::mutex> lock(mu);
    if (calls.size() >= 8) calls.erase(calls.begin());
    calls.push_back(std::move(c));
  }

  // The Winograd-transformed weights (cpu::winograd_conv), made on the first run that wants them
  // (the tile size depends on the channel counts only, so a node keeps one set).
  std::shared_ptr<const cpu::WinogradWeights> winograd_weights(const Tensor& W, int tile) const {
    std::lock_guard<std::mutex> lock(mu);
    if (!winograd || winograd->tile() != tile)
      winograd = std::make_shared<const cpu::WinogradWeights>(W.data<float>(), W.dim(0), W.dim(1), tile);
    return winograd;
  }

  std::shared_ptr<cpu::ConvWeightCache> packed = cpu::make_conv_weight_cache();
  const bool relu, z_inplace;
  const ActLayout xl, yl, zl;

 private:
  mutable std::mutex mu;
  mutable std::vector<std::shared_ptr<const Call>> calls;
  mutable std::shared_ptr<const cpu::WinogradWeights> winograd;
};

cpu::ConvWeightCache* packed_weights(const KernelContext& ctx) {
  const ConvState* st = ctx.prepared<ConvState>();
  return st ? st->packed.get() : nullptr;
}

// y = relu?(y + sum) in place, y of the output's shape, `sum` broadcast to it. For the paths
// whose convolution could not take the post-ops.
template <typename T>
void apply_post_ops(Tensor& Y, const PostOps& post, const ir::Node& node) {
  T* y = Y.mutable_data<T>();
  if (post.sum) {
    REFORGE_CHECK(post.sum->dtype() == Y.dtype(), node.label(), ": residual ", post.sum->describe(), " does not match ",
                  Y.describe());
    broadcast_map(
        y, Y.shape(), [](T a, T b) { return from_compute<T>(to_compute(a) + to_compute(b)); },
        Operand{static_cast<const T*>(y), Y.shape()}, Operand{post.sum->data<T>(), post.sum->shape()});
  }
  if (post.relu) {
    const int64_t n = Y.numel();
    parallel_for(n, n > (1 << 16) ? omp_get_max_threads() : 1, 1 << 12, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const auto v = to_compute(y[i]);
        if (v < decltype(v)(0)) y[i] = from_compute<T>(decltype(v)(0));
      }
    });
  }
}

void conv_run(KernelContext& ctx, const PostOps& post) {
  const Tensor& X = ctx.input(0);
  const Tensor& W = ctx.input(1);
  const Tensor* B = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const ir::Node& node = ctx.node();  // its label only when a check fails
  const ops::nn::ConvSetup setup = ops::nn::conv_setup(ctx);
  const int64_t N = setup.N, C = setup.C, M = setup.M, group = setup.group;
  const size_t nsp = setup.nsp;
  const std::vector<int64_t>& wk = setup.wk;
  const Window& win = setup.win;
  const Shape& out_shape = setup.out_shape;
  Tensor& Y = ctx.allocate_output_uninit(0, X.dtype(), out_shape);
  if (Y.numel() == 0) return;
  // A residual of exactly the output's shape can be added inside the primitive.
  const bool dense_sum = post.sum && post.sum->dtype() == X.dtype() && post.sum->shape() == out_shape;
  cpu::ConvWeightCache* packed = packed_weights(ctx);
  bool post_done = false;
  const Geo3& g = setup.g;

  // A 1x1 convolution with unit strides and no padding is a product per image:
  // Y[n] ([M, pixels]) = W ([M, C]) x X[n] ([C, pixels]), with the bias broadcast in first.
  bool pointwise = group == 1;
  for (size_t i = 0; i < nsp; ++i)
    pointwise = pointwise && wk[i] == 1 && win.strides[i] == 1 && win.pad_begin[i] == 0 && win.pad_end[i] == 0;
  const int64_t pixels = Y.numel() / std::max<int64_t>(1, N * M);

  // Writes every element of y (float32, the output's shape); sets post_done when the post-ops
  // ran inside the convolution. `direct` says x, w are the node's own tensors (so the packed
  // weights apply and the residual can be read in place).
  auto run_f32 = [&](const float* x, const float* w, const float* b, float* y, bool direct) {
    if (pointwise) {
      cpu::MatmulDims d;
      d.batch = N, d.a_broadcast = true;
      d.M = M, d.K = C, d.N = pixels;
      // The bias (and a residual) go into Y first; the product adds onto them (beta = 1).
      const float* z = direct && dense_sum ? post.sum->data<float>() : nullptr;
      if (b || z) {
        parallel_tasks(N * M, N * M * pixels > (1 << 16) ? omp_get_max_threads() : 1, [&](int64_t nm) {
          float* row = y + nm * pixels;
          const float bias = b ? b[nm % M] : 0.0f;
          if (z) {
            const float* zr = z + nm * pixels;
            for (int64_t i = 0; i < pixels; ++i) row[i] = zr[i] + bias;
          } else {
            std::fill(row, row + pixels, bias);
          }
        });
        d.beta = 1.0f;
      }
      cpu::run_matmul(DType::Float32, d, w, x, y);
      if (z || !post.sum) {
        if (post.relu) {
          const int64_t n = N * M * pixels;
          parallel_for(n, n > (1 << 16) ? omp_get_max_threads() : 1, 1 << 12, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) y[i] = y[i] < 0.0f ? 0.0f : y[i];
          });
        }
        post_done = true;
      }
      return;
    }
    if (C > 0 && X.numel() > 0) {
      cpu::ConvDims d;
      d.src = X.shape(), d.weights = W.shape(), d.dst = out_shape;
      d.group = group;
      d.strides = win.strides, d.dilations = win.dilations, d.pad_begin = win.pad_begin, d.pad_end = win.pad_end;
      d.has_bias = b != nullptr;
      cpu::ConvPostOps po;
      if (direct && dense_sum) po.sum = post.sum->data<float>();
      po.relu = post.relu && (po.sum || !post.sum);
      if ((po.sum || po.relu) && cpu::dnnl_conv_f32(d, x, w, b, y, po, direct ? packed : nullptr)) {
        post_done = po.sum || !post.sum;
        return;
      }
      if (cpu::dnnl_conv_f32(d, x, w, b, y, {}, direct ? packed : nullptr)) return;
    }
    conv_ref<float>(x, w, b, y, N, C, M, group, g);
  };

  dispatch_float(
      X.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, float>) {
          run_f32(X.data<float>(), W.data<float>(), B ? B->data<float>() : nullptr, Y.mutable_data<float>(), true);
        } else if constexpr (std::is_same_v<T, double>) {
          conv_ref<double>(X.data<double>(), W.data<double>(), B ? B->data<double>() : nullptr,
                           Y.mutable_data<double>(), N, C, M, group, g);
        } else {
          std::vector<float> x = to_floats(X), w = to_floats(W), b = B ? to_floats(*B) : std::vector<float>();
          std::vector<float> y(static_cast<size_t>(Y.numel()));
          run_f32(x.data(), w.data(), B ? b.data() : nullptr, y.data(), false);
          store_floats(y, Y);
        }
        if (!post_done) apply_post_ops<T>(Y, post, node);
      },
      "Conv");
}

void conv_kernel(KernelContext& ctx) { conv_run(ctx, {}); }

bool overlaps(const Tensor& a, const Tensor& b) {
  auto pa = static_cast<const char*>(a.raw()), pb = static_cast<const char*>(b.raw());
  return a.nbytes() > 0 && b.nbytes() > 0 && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// The output: Z's buffer when the node may write over it, else a new one.
Tensor& conv_output(KernelContext& ctx, const PostOps& post, bool in_place, const Shape& y_phys) {
  if (!in_place) return ctx.allocate_output_uninit(0, DType::Float32, y_phys);
  ctx.set_output(0, *post.sum);  // shares Z's buffer
  return ctx.outputs()[0];
}

// Runs the kernel chosen for `d` (Winograd when `wino`, else oneDNN's `prim`) on float32 X, W,
// B? into Y, with the post-ops `po`.
void run_chosen(const cpu::ConvDims& d, const cpu::WinogradWeights* wino, const cpu::ConvPrimitive* prim,
                const Tensor& X, const Tensor& W, const Tensor* B, Tensor& Y, const cpu::ConvPostOps& po,
                cpu::ConvWeightCache* packed, int threads) {
  const float* bias = B ? B->data<float>() : nullptr;
  if (wino)
    cpu::winograd_conv(d, X.data<float>(), *wino, bias, Y.mutable_data<float>(), po, threads);
  else
    cpu::dnnl_conv_execute(*prim, d, X.data<float>(), W.data<float>(), bias, Y.mutable_data<float>(), po, packed);
}

bool may_overwrite_z(const KernelContext& ctx, const PostOps& post, bool z_inplace, ActLayout yl, ActLayout zl) {
  if (!post.sum || !z_inplace || yl != zl) return false;
  const Tensor& z = *post.sum;
  for (size_t i = 0; i < 3; ++i)
    if (ctx.has_input(i) && overlaps(z, ctx.input(i))) return false;
  return true;
}

// FusedConv with operands in other layouts than NCHW (attributes x_layout / y_layout / z_layout
// = "NHWC" or "NCHWc", set by the conv-channels-last pass on chains of convolutions): float32
// 2-D runs straight through oneDNN in those layouts; anything else converts to NCHW around the
// ordinary kernel. With z_inplace = 1 (the conv-residual-inplace pass: no later node reads Z and
// Z owns its buffer) the output is written over the residual, which the sum post-op reads in
// place: no copy of Z into a fresh output first.
void fused_conv_layouts(KernelContext& ctx, const PostOps& post, ActLayout xl, ActLayout yl, ActLayout zl) {
  const Tensor& X = ctx.input(0);
  const Tensor& W = ctx.input(1);
  const Tensor* B = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const ConvState* state = ctx.prepared<ConvState>();
  if (state && X.dtype() == DType::Float32 && W.dtype() == DType::Float32 &&
      (!post.sum || post.sum->dtype() == DType::Float32) &&
      (!B || (B->dtype() == DType::Float32 && B->numel() == W.dim(0)))) {
    // Steady state: this input shape ran before (and every check below passed then; the
    // weights are the constants the state was prepared for, a bias may be a runtime input).
    if (auto call = state->find(X, post.sum)) {
      cpu::ConvPostOps po;
      po.sum = post.sum ? post.sum->data<float>() : nullptr;
      po.relu = post.relu;
      const bool in_place = may_overwrite_z(ctx, post, state->z_inplace, yl, zl);
      Tensor& Y = conv_output(ctx, post, in_place, call->y);
      run_chosen(call->d, call->winograd.get(), call->prim.get(), X, W, B, Y, po, state->packed.get(), ctx.threads());
      return;
    }
  }
  const std::string label = ctx.node().label();
  REFORGE_CHECK(W.rank() == 4, label, ": layouts other than NCHW need a 2-D convolution, got W ", W.describe());
  const Shape xs = logical_shape(X, xl, ctx.node());
  const int64_t N = xs[0], C = xs[1], M = W.dim(0), group = ctx.attr_int("group", 1);
  const Window win = resolve_window(ctx, {xs[2], xs[3]}, {W.dim(2), W.dim(3)}, false);
  const Shape ys = {N, M, win.out[0], win.out[1]};
  const int64_t block = cpu::activation_block();
  const bool blocks_fit = (yl != ActLayout::Blocked && zl != ActLayout::Blocked) || M % block == 0;
  const Shape y_phys = blocks_fit ? physical_shape(ys, yl) : ys;
  const Shape z_phys = blocks_fit ? physical_shape(ys, zl) : ys;
  bool direct = blocks_fit && X.dtype() == DType::Float32 && W.dtype() == DType::Float32 && group >= 1 &&
                C == W.dim(1) * group && M % group == 0 && C > 0 && N > 0 &&
                (!B || (B->dtype() == DType::Float32 && B->numel() == M)) &&
                (!post.sum || (post.sum->dtype() == DType::Float32 && post.sum->shape() == z_phys));
  if (direct) {
    const std::vector<int64_t> k = kernel_shape_attr(ctx, 2);
    direct = k.empty() || (k[0] == W.dim(2) && k[1] == W.dim(3));
  }
  if (direct) {
    cpu::ConvDims d;
    d.src = xs, d.weights = W.shape(), d.dst = ys;
    d.group = group;
    d.strides = win.strides, d.dilations = win.dilations, d.pad_begin = win.pad_begin, d.pad_end = win.pad_end;
    d.has_bias = B != nullptr;
    d.src_layout = xl, d.dst_layout = yl, d.sum_layout = post.sum ? zl : ActLayout::Nchw;
    cpu::ConvPostOps po;
    po.sum = post.sum ? post.sum->data<float>() : nullptr;
    po.relu = post.relu;
    cpu::ConvWeightCache* packed = packed_weights(ctx);
    // Winograd F(4x4, 3x3) or F(2x2, 3x3) where it is faster (3x3 stride-1 layers of 16+
    // channels), with the weights transformed once per weight set like oneDNN's packed ones;
    // else oneDNN.
    std::shared_ptr<const cpu::WinogradWeights> wino;
    cpu::ConvHandle prim;
    const int tile = state ? cpu::winograd_tile(d, post.sum != nullptr) : 0;
    if (tile)
      wino = state->winograd_weights(W, tile);
    else
      prim = cpu::dnnl_conv_primitive(d, po, packed);
    if (wino || prim) {
      const bool in_place =
          may_overwrite_z(ctx, post, state ? state->z_inplace : ctx.attr_int("z_inplace", 0) == 1, yl, zl);
      Tensor& Y = conv_output(ctx, post, in_place, y_phys);
      run_chosen(d, wino.get(), prim.get(), X, W, B, Y, po, packed, ctx.threads());
      if (state && W.dtype() == DType::Float32) {
        auto call = std::make_shared<ConvState::Call>();
        call->x = X.shape();
        if (post.sum) call->z = post.sum->shape();
        call->d = std::move(d);
        call->y = y_phys;
        call->prim = std::move(prim);
        call->winograd = std::move(wino);
        state->remember(std::move(call));
      }
      return;
    }
  }
  // Fallback: the NCHW kernel on converted copies.
  ir::Node node = ctx.node();
  for (const char* a : {"x_layout", "y_layout", "z_layout", "z_inplace"}) node.attrs.erase(a);
  Tensor xc = to_nchw(X, xl, ctx.node());
  Tensor zc;
  if (post.sum) zc = post.sum->rank() == 4 || zl == ActLayout::Blocked ? to_nchw(*post.sum, zl, ctx.node()) : *post.sum;
  std::vector<const Tensor*> ins = {&xc, &W, B};
  if (post.sum) ins.push_back(&zc);
  KernelContext inner(node, ins, ctx.threads(), nullptr, ctx.prepared<void>());
  PostOps p2 = post;
  if (post.sum) p2.sum = &zc;
  conv_run(inner, p2);
  Tensor y = std::move(inner.outputs()[0]);
  REFORGE_CHECK(yl != ActLayout::Blocked || M % block == 0, label, ": layout NCHWc needs output channels (", M,
                ") in multiples of ", block);
  ctx.set_output(0, from_nchw(y, yl));
}

void fused_conv_kernel(KernelContext& ctx) {
  PostOps post;
  if (ctx.has_input(3)) post.sum = &ctx.input(3);
  const ConvState* state = ctx.prepared<ConvState>();
  post.relu = state ? state->relu : ctx.attr_string("activation", "") == "Relu";
  const ActLayout xl = state ? state->xl : parse_layout(ctx.attr_string("x_layout", "NCHW"));
  const ActLayout yl = state ? state->yl : parse_layout(ctx.attr_string("y_layout", "NCHW"));
  const ActLayout zl = state ? state->zl : parse_layout(ctx.attr_string("z_layout", "NCHW"));
  if (xl != ActLayout::Nchw || yl != ActLayout::Nchw || zl != ActLayout::Nchw)
    return fused_conv_layouts(ctx, post, xl, yl, zl);
  conv_run(ctx, post);
}

// The state of a float32 Conv with constant weights (see ConvState).
std::shared_ptr<const void> conv_prepare(const ir::Node& node, const std::vector<const Tensor*>& constants,
                                         ops::PrepareContext&) {
  if (constants.size() < 2 || !constants[1] || constants[1]->dtype() != DType::Float32) return nullptr;
  return std::make_shared<ConvState>(node);
}

}  // namespace
}  // namespace reforge::ops::nn

namespace reforge::cpu {

void register_conv_kernels(KernelRegistry& r) {
  r.add({"cpu", "", "Conv", 1, INT_MAX, ops::nn::conv_kernel, nullptr, ops::nn::conv_prepare});
  r.add({"cpu", "reforge", "FusedConv", 1, INT_MAX, ops::nn::fused_conv_kernel, nullptr, ops::nn::conv_prepare});
}

}  // namespace reforge::cpu
