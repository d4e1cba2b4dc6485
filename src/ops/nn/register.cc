// The nn op family: MatMul, Gemm, Conv, ConvTranspose, DeformConv, the pools, the normalizations
// and the recurrent ops (RNN, GRU, LSTM).
// Each file registers its own ops; this file ties them together and holds the small helpers
// they share (declared in nn_common.h).
#include "core/dispatch.h"
#include "ops/nn/nn_common.h"
#include "ops/registry.h"

namespace reforge::ops {

namespace nn {

void register_matmul_ops(OpRegistry& r);            // matmul.cc
void register_gemm_ops(OpRegistry& r);              // gemm.cc
void register_conv_ops(OpRegistry& r);              // conv.cc
void register_conv_transpose_ops(OpRegistry& r);    // conv_transpose.cc
void register_pool_ops(OpRegistry& r);              // pool.cc
void register_batch_norm_ops(OpRegistry& r);        // norm_batch.cc
void register_layer_norm_ops(OpRegistry& r);        // layer_normalization.cc
void register_lp_normalization_ops(OpRegistry& r);  // lp_normalization.cc
void register_recurrent_ops(OpRegistry& r);         // recurrent.cc
void register_local_norm_ops(OpRegistry& r);        // norm_local.cc
void register_deform_conv_ops(OpRegistry& r);       // deform_conv.cc

std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  dispatch_float(
      t.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* p = t.data<T>();
        for (int64_t i = 0; i < t.numel(); ++i) v[i] = static_cast<double>(to_compute(p[i]));
      },
      "this parameter");
  return v;
}

std::vector<float> to_floats(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  dispatch_float(
      t.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* p = t.data<T>();
        for (int64_t i = 0; i < t.numel(); ++i) v[i] = static_cast<float>(to_compute(p[i]));
      },
      "this operator");
  return v;
}

void store_floats(const std::vector<float>& v, Tensor& out) {
  REFORGE_ASSERT(static_cast<int64_t>(v.size()) == out.numel());
  dispatch_float(
      out.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* p = out.mutable_data<T>();
        for (int64_t i = 0; i < out.numel(); ++i) p[i] = from_compute<T>(v[i]);
      },
      "this operator");
}

std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

}  // namespace nn

void register_nn_ops(OpRegistry& r) {
  nn::register_matmul_ops(r);
  nn::register_gemm_ops(r);
  nn::register_conv_ops(r);
  nn::register_conv_transpose_ops(r);
  nn::register_pool_ops(r);
  nn::register_batch_norm_ops(r);
  nn::register_layer_norm_ops(r);
  nn::register_lp_normalization_ops(r);
  nn::register_recurrent_ops(r);
  nn::register_local_norm_ops(r);
  nn::register_deform_conv_ops(r);
}

}  // namespace reforge::ops
