// Conv: the geometry and validation every Conv kernel shares, the reference loop, and the
// schema checkers of Conv / ConvTranspose and of reforge::FusedConv (the convolution followed by
// an optional residual add and ReLU that the CPU backend's fusion passes make; see
// backends/cpu/conv.cc for its attributes).
#pragma once

#include <omp.h>

#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/infer.h"
#include "ops/nn/nn_common.h"

namespace reforge::ops::nn {

// Direct convolution over the 3-D normalized geometry, accumulating in T (float or double).
template <typename T>
void conv_ref(const T* x, const T* w, const T* bias, T* y, int64_t N, int64_t C, int64_t M, int64_t group,
              const Geo3& g) {
  const int64_t Cg = C / group, Mg = M / group;
  const int64_t in_plane = g.in[0] * g.in[1] * g.in[2], out_plane = g.out[0] * g.out[1] * g.out[2];
  const int64_t k_plane = g.k[0] * g.k[1] * g.k[2];
  const int threads = N * M * out_plane * Cg * k_plane > (1 << 15) ? omp_get_max_threads() : 1;
  parallel_for(N * M, threads, 1, [&](int64_t nm0, int64_t nm1) {
    for (int64_t nm = nm0; nm < nm1; ++nm) {
      const int64_t n = nm / M, m = nm % M, grp = m / Mg;
      const T* wm = w + m * Cg * k_plane;
      T* yp = y + nm * out_plane;
      for (int64_t od = 0; od < g.out[0]; ++od)
        for (int64_t oh = 0; oh < g.out[1]; ++oh)
          for (int64_t ow = 0; ow < g.out[2]; ++ow) {
            T acc = bias ? bias[m] : T(0);
            for (int64_t c = 0; c < Cg; ++c) {
              const T* xp = x + (n * C + grp * Cg + c) * in_plane;
              const T* wc = wm + c * k_plane;
              for (int64_t kd = 0; kd < g.k[0]; ++kd) {
                const int64_t id = od * g.s[0] - g.pb[0] + kd * g.d[0];
                if (id < 0 || id >= g.in[0]) continue;
                for (int64_t kh = 0; kh < g.k[1]; ++kh) {
                  const int64_t ih = oh * g.s[1] - g.pb[1] + kh * g.d[1];
                  if (ih < 0 || ih >= g.in[1]) continue;
                  for (int64_t kw = 0; kw < g.k[2]; ++kw) {
                    const int64_t iw = ow * g.s[2] - g.pb[2] + kw * g.d[2];
                    if (iw < 0 || iw >= g.in[2]) continue;
                    acc += xp[(id * g.in[1] + ih) * g.in[2] + iw] * wc[(kd * g.k[1] + kh) * g.k[2] + kw];
                  }
                }
              }
            }
            yp[(od * g.out[1] + oh) * g.out[2] + ow] = acc;
          }
    }
  });
}

// A Conv node's inputs checked against each other and its attributes, resolved.
struct ConvSetup {
  int64_t N = 0, C = 0, M = 0, group = 1;
  size_t nsp = 0;           // spatial dims, 1 to 3
  std::vector<int64_t> wk;  // W's spatial dims
  Window win;
  Geo3 g;
  Shape out_shape;  // [N, M, spatial...]
};
// Validates X (input 0), W (input 1) and the bias (input 2, optional) of a Conv-like node and
// resolves its window; throws an Error naming the node.
ConvSetup conv_setup(const KernelContext& ctx);
// The same for explicit X, W and bias (the quantized convolutions, whose inputs sit elsewhere);
// `same_types` false lets W and the bias have other element types than X.
ConvSetup conv_setup(const KernelContext& ctx, const Tensor& X, const Tensor& W, const Tensor* B, bool same_types);

// ConvTranspose's inputs checked and its attributes resolved (conv_transpose.cc; throws an Error
// naming the node): the output shape and the window, whose pad_begin (pad_end repeats it; may be
// negative) places output index o at position o + pad_begin of the unpadded result, where input
// index i with kernel tap k lands at i * stride + k * dilation.
struct ConvTransposeSetup {
  int64_t N = 0, Cin = 0, M = 0, group = 1;
  size_t nsp = 0;  // spatial dims, 1 to 3
  Window win;      // in, kernel, strides, dilations, pad_begin, out
  Shape y_shape;   // [N, M, out...]
};
ConvTransposeSetup conv_transpose_setup(const KernelContext& ctx);

// Shape inference: the NCHW output shape of a convolution of X (shape `xs`) with W, checking
// the bias at input `bias_slot` (SIZE_MAX: none) against W's output channels.
SymShape conv_infer_shape(InferContext& ctx, const SymShape& xs, const ValueType& w, size_t bias_slot);

// reforge::FusedConv's attributes (activation, layouts) and inputs.
std::string check_fused_conv(const ir::Node& node);

}  // namespace reforge::ops::nn
