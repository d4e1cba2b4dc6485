// oneDNN float32 convolution: the fast path behind Conv.
#pragma once

#include <cstdint>
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
};

// Runs the convolution with a cached oneDNN primitive. Returns false (having written nothing)
// when oneDNN has no implementation; the caller then uses its reference loop.
bool dnnl_conv_f32(const ConvDims& d, const float* src, const float* weights, const float* bias, float* dst);

}  // namespace reforge::cpu
