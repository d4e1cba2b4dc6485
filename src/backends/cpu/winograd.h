// Winograd F(4x4, 3x3) and F(2x2, 3x3) float32 convolution on channel-blocked activations
// (AVX2 + FMA).
//
// Why reforge has its own: a 3x3 stride-1 convolution is a third of ResNet-50's arithmetic, and
// oneDNN 2.6 has a Winograd kernel only for AVX-512 (jit_wino_4x3); on AVX2 its direct kernel
// runs these layers at ~80 GFLOPS, near the core's peak, so fewer multiplies is the only way to
// make them faster. F(4x4, 3x3) computes each 4 x 4 output tile from a 6 x 6 input tile with
// 36 multiplies per (input channel, output channel) instead of 144 (Lavin & Gray, 2016); F(2x2,
// 3x3), 16 instead of 36 from a 4 x 4 tile, serves layers whose F(4x4) weights would be too big:
//
//   Y = A^T [ (G g G^T) o (B^T d B) ] A        (o: elementwise, per channel pair summed over C)
//
// in three phases over a block of tiles, each split between the threads:
//   1. input transform: V[p][t][c] = (B^T d_t,c B)[p] for the 36 (16) positions p, 8 channels per
//      AVX2 vector (the activation's channel block);
//   2. 36 (16) products M[p] (tiles x K) = V[p] (tiles x C) x U[p] (C x K), U the transformed weights
//      packed in panels of 16 output channels, a 6-tile x 16-channel register tile;
//   3. output transform: Y = A^T M A per tile and 8 output channels, with the bias, the residual
//      (sum) and ReLU applied before the store, cropped at the image's edge.
//
// Activations are [N, C/8, H, W, 8] (cpu::ActLayout::Blocked with a block of 8, oneDNN's
// nChw8c, what AVX2 CPUs run the convolution chain in), weights ONNX's [K, C, 3, 3]. The
// transformed weights U are 36/9 = 4x the plain ones: the conv op makes them once per weight
// set, like oneDNN's packed weights (a refit re-prepares the op, so they are made again).
//
// Numerics: the transforms' constants (up to 8 in A, 5 in B, 1/24 in G) make the result differ
// from the direct sum by more rounding than the direct kernel's; on ResNet-50 the logits stay
// within ~1e-5 of PyTorch's (see docs/executor.md). Every element is computed in the same order
// whatever the thread count.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/cpu/dnnl_conv.h"
#include "core/tensor.h"

namespace reforge::cpu {

// Whether this kernel can run `d` on this CPU: group 1, a 3x3 kernel, unit strides and
// dilations, src / dst (and the residual, when there is one) in 8-channel blocks, C and K
// multiples of 8, and AVX2 + FMA. Says nothing about whether it is the faster choice.
bool winograd_supported(const ConvDims& d, bool has_sum);

// The output tile size m of F(m x m, 3x3) the conv op should run `d` with instead of oneDNN:
// 4, or 2 where F(4x4)'s transformed weights would be too large to keep (512 -> 512 channels);
// 0 where oneDNN should run it (not supported, too few channels or tiles, or switched off by
// REFORGE_CONV_WINOGRAD=0).
int winograd_tile(const ConvDims& d, bool has_sum);

// The transformed weights of one convolution for F(m x m, 3x3): U[p][K/16 panels][C][16] for the
// (m + 2)^2 positions p, 64-byte aligned, in engine storage (huge pages; a refit's new U reuses
// the pages the old one released).
class WinogradWeights {
 public:
  // Transforms `w` ([K, C, 3, 3], row-major) for output tiles of `tile` x `tile` (2 or 4), in
  // float64, rounded once to float32.
  WinogradWeights(const float* w, int64_t K, int64_t C, int tile = 4);
  int64_t K() const { return K_; }
  int64_t C() const { return C_; }
  int tile() const { return tile_; }
  const float* data() const { return u_.data<float>(); }
  int64_t floats() const { return u_.numel(); }

 private:
  int64_t K_, C_;
  int tile_;
  Tensor u_;
};

// dst = relu?(conv(src, w) + bias + sum) for `d` (winograd_supported(d, post.sum != nullptr)),
// in u's tile size.
// `bias` may be null; `post.sum` may be null or equal `dst` (written in place). Runs on up to
// `threads` OpenMP threads.
void winograd_conv(const ConvDims& d, const float* src, const WinogradWeights& u, const float* bias, float* dst,
                   const ConvPostOps& post, int threads);

}  // namespace reforge::cpu
