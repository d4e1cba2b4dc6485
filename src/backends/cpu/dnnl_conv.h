// oneDNN float32 convolution: the fast path behind Conv.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/nn/activation_layout.h"

namespace reforge::cpu {

// Storage of a 4-D activation [N, C, H, W]:
//   Nchw     plain, as ONNX defines it;
//   Nhwc     channels-last [N, H, W, C];
//   Blocked  [N, C / b, H, W, b] with b = activation_block(): the channel-blocked layout
//            (oneDNN's nChw8c / nChw16c) its direct, 1x1 and Winograd kernels compute in, so
//            a chain of convolutions storing their activations this way runs with no reorders
//            at all (ONNX Runtime's NCHWc transformer does the same). C must be a multiple of b.
using ActLayout = ops::nn::ActLayout;  // the ops define the layouts (ops/nn/activation_layout.h)

// The layout oneDNN's float32 convolution computes in on this CPU, found once from what it picks
// for a typical layer (64 -> 64 channels, 3x3, 28x28): Blocked with AVX2 / AVX-512 direct
// kernels, Nhwc where its channels-last (brgemm) kernels win, Nchw otherwise. Plans store
// "NCHWc" for "the native layout", never b or the kind: producer and readers of a value run in
// the same process, so they always agree.
ActLayout native_layout();
// b of ActLayout::Blocked (16 with AVX-512, 8 with AVX2); 1 when the native layout is not Blocked.
int64_t activation_block();

// An N-d convolution in ONNX terms over dense row-major tensors: src [N, C, spatial...],
// weights [OC, C/group, kernel...], dst [N, OC, out...], optional bias [OC]. Dilations are
// ONNX's (1 = dense); pads are the begin/end padding per spatial dimension.
struct ConvDims {
  std::vector<int64_t> src, weights, dst;
  int64_t group = 1;
  std::vector<int64_t> strides, dilations, pad_begin, pad_end;
  bool has_bias = false;
  // How the user buffers of src / dst / the sum post-op's tensor are stored (2-D convolutions
  // only for the non-plain layouts) while the dims above stay in ONNX's [N, C, H, W] order.
  ActLayout src_layout = ActLayout::Nchw, dst_layout = ActLayout::Nchw, sum_layout = ActLayout::Nchw;

  bool operator==(const ConvDims&) const = default;
};

// What runs after the convolution inside the same primitive: dst = relu?(conv + bias + sum),
// with `sum` a dense tensor of dst's shape (a residual connection) or null.
struct ConvPostOps {
  const float* sum = nullptr;
  bool relu = false;
};

// Weights of one convolution node in the layouts its primitives want, reordered from the plain
// ONNX weights the first time a primitive needs them and kept for the lifetime of the cache.
// A Conv node's `prepare` step makes one per weight set, so a refit (which re-prepares) never
// sees packed data of other weights. Thread-safe.
class ConvWeightCache;
std::shared_ptr<ConvWeightCache> make_conv_weight_cache();

// A oneDNN convolution primitive with its layouts and reorders, built for one ConvDims and
// post-op set (opaque; shared, immutable, usable from several threads at once).
struct ConvPrimitive;
using ConvHandle = std::shared_ptr<const ConvPrimitive>;

// The primitive for `d` with the post-ops `post` asks for (`post.relu` and whether `post.sum` is
// null: the residual's address does not matter), from `packed`'s memo or the process-wide cache, built on first use.
// Null when oneDNN has no implementation. `packed` (may be null) is the node's weight cache.
ConvHandle dnnl_conv_primitive(const ConvDims& d, const ConvPostOps& post, ConvWeightCache* packed);

// Runs `p` (made by dnnl_conv_primitive for the same `d`, `post` and `packed`).
void dnnl_conv_execute(const ConvPrimitive& p, const ConvDims& d, const float* src, const float* weights,
                       const float* bias, float* dst, const ConvPostOps& post, ConvWeightCache* packed);

// Both in one: returns false (having written nothing) when oneDNN has no implementation; the
// caller then uses its reference loop. `packed` (may be null: reorder on every call) holds the
// packed forms of `weights`, which must be the weights the cache was made for.
bool dnnl_conv_f32(const ConvDims& d, const float* src, const float* weights, const float* bias, float* dst,
                   const ConvPostOps& post = {}, ConvWeightCache* packed = nullptr);

}  // namespace reforge::cpu
