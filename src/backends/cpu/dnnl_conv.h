// oneDNN float32 convolution: the fast path behind Conv.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace reforge::cpu {

// An N-d convolution in ONNX terms over dense row-major tensors: src [N, C, spatial...],
// weights [OC, C/group, kernel...], dst [N, OC, out...], optional bias [OC]. Dilations are
// ONNX's (1 = dense); pads are the begin/end padding per spatial dimension.
struct ConvDims {
  std::vector<int64_t> src, weights, dst;
  int64_t group = 1;
  std::vector<int64_t> strides, dilations, pad_begin, pad_end;
  bool has_bias = false;
  // Channels-last user buffers (2-D convolutions only): src / dst / the sum post-op's tensor are
  // stored [N, H, W, C] while the dims above stay in ONNX's [N, C, H, W] order. oneDNN's fastest
  // float convolutions run channels-last, so a chain of such convolutions needs no reorders.
  bool src_nhwc = false, dst_nhwc = false, sum_nhwc = false;
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

// Runs the convolution with a cached oneDNN primitive. Returns false (having written nothing)
// when oneDNN has no implementation; the caller then uses its reference loop. `packed` (may be
// null: reorder on every call) holds the packed forms of `weights`, which must be the weights
// the cache was made for.
bool dnnl_conv_f32(const ConvDims& d, const float* src, const float* weights, const float* bias, float* dst,
                   const ConvPostOps& post = {}, ConvWeightCache* packed = nullptr);

}  // namespace reforge::cpu
