// Conv on the GPU through cuDNN (the legacy convolution API): float32 with FMA arithmetic only
// (CUDNN_FMA_MATH: no TF32, as float32 MatMul), float16 and bfloat16 with tensor cores and
// float32 accumulation, float64 in float64. 1-D convolutions run as 2-D with a height of 1.
// cuDNN pads symmetrically; asymmetric pads (auto_pad SAME_* with an even window) pad the input
// explicitly first. The geometry and every check are the Conv op's own (ops/nn/conv.h).
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cudnn_common.h"
#include "backends/cuda/device_types.cuh"
#include "ops/nn/conv.h"

namespace reforge::cuda {

namespace {

// X [N, C, in...] copied into a zero-padded [N, C, in + pb + pe...] (3 spatial dims, normalized).
template <typename T>
__global__ void pad_input(const T* x, T* y, int64_t total, int64_t id, int64_t ih, int64_t iw, int64_t od, int64_t oh,
                          int64_t ow, int64_t pd, int64_t ph, int64_t pw) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t w = i % ow, h = (i / ow) % oh, d = (i / (ow * oh)) % od, nc = i / (ow * oh * od);
    const int64_t sd = d - pd, sh = h - ph, sw = w - pw;
    const bool inside = sd >= 0 && sd < id && sh >= 0 && sh < ih && sw >= 0 && sw < iw;
    y[i] = inside ? x[((nc * id + sd) * ih + sh) * iw + sw] : T(0.0f);
  }
}

void conv_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const ops::nn::ConvSetup cs = ops::nn::conv_setup(ctx);
  const Tensor& X = ctx.input(0);
  const Tensor& W = ctx.input(1);
  Tensor& Y = ctx.allocate_output_uninit(0, X.dtype(), cs.out_shape);
  if (Y.numel() == 0) return;
  if (X.numel() == 0 || W.numel() == 0) {  // an empty sum: the bias, or zeros
    REFORGE_CUDA_CHECK(cudaMemsetAsync(Y.mutable_raw(), 0, Y.nbytes(), stream()));
    REFORGE_CHECK(!ctx.has_input(2) || ctx.input(2).numel() == 0, where, ": a bias over an empty input");
    return;
  }
  const cudnnDataType_t type = dnn_type(X.dtype());
  const size_t nsp = cs.nsp;
  // Asymmetric pads: pad the input explicitly and convolve without padding.
  bool symmetric = true;
  for (size_t i = 0; i < nsp; ++i) symmetric &= cs.win.pad_begin[i] == cs.win.pad_end[i];
  Tensor padded;
  const Tensor* input = &X;
  std::vector<int64_t> in = cs.win.in, pads = cs.win.pad_begin;
  if (!symmetric) {
    Shape ps = {cs.N, cs.C};
    for (size_t i = 0; i < nsp; ++i) ps.push_back(in[i] + cs.win.pad_begin[i] + cs.win.pad_end[i]);
    padded = device_tensor(X.dtype(), ps);
    int64_t i3[3] = {1, 1, 1}, o3[3] = {1, 1, 1}, p3[3] = {0, 0, 0};
    for (size_t i = 0; i < nsp; ++i) {
      i3[3 - nsp + i] = in[i];
      o3[3 - nsp + i] = ps[2 + i];
      p3[3 - nsp + i] = cs.win.pad_begin[i];
    }
    dispatch_device(X.dtype(), where.c_str(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
        pad_input<T><<<blocks_for(padded.numel()), 256, 0, stream()>>>(X.data<T>(), padded.mutable_data<T>(),
                                                                        padded.numel(), i3[0], i3[1], i3[2], o3[0],
                                                                        o3[1], o3[2], p3[0], p3[1], p3[2]);
        check_launch("pad_input");
      }
    }, true);
    input = &padded;
    for (size_t i = 0; i < nsp; ++i) {
      in[i] = ps[2 + i];
      pads[i] = 0;
    }
  }
  // cuDNN descriptors: at least 2 spatial dims.
  std::vector<int> xd = {narrow(cs.N, where), narrow(cs.C, where)}, wd = {narrow(cs.M, where), narrow(cs.C / cs.group, where)},
                   yd = {narrow(cs.N, where), narrow(cs.M, where)};
  std::vector<int> pad, stride, dil;
  if (nsp == 1) {
    xd.push_back(1), wd.push_back(1), yd.push_back(1);
    pad.push_back(0), stride.push_back(1), dil.push_back(1);
  }
  for (size_t i = 0; i < nsp; ++i) {
    xd.push_back(narrow(in[i], where));
    wd.push_back(narrow(cs.wk[i], where));
    yd.push_back(narrow(cs.out_shape[2 + i], where));
    pad.push_back(narrow(pads[i], where));
    stride.push_back(narrow(cs.win.strides[i], where));
    dil.push_back(narrow(cs.win.dilations[i], where));
  }
  Descriptors d;
  set_tensor(d.x, type, xd);
  set_tensor(d.y, type, yd);
  REFORGE_DNN_CHECK(cudnnSetFilterNdDescriptor(d.w, type, CUDNN_TENSOR_NCHW, static_cast<int>(wd.size()), wd.data()));
  const cudnnDataType_t compute = X.dtype() == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  REFORGE_DNN_CHECK(cudnnSetConvolutionNdDescriptor(d.conv, static_cast<int>(pad.size()), pad.data(), stride.data(),
                                                    dil.data(), CUDNN_CROSS_CORRELATION, compute));
  REFORGE_DNN_CHECK(cudnnSetConvolutionGroupCount(d.conv, narrow(cs.group, where)));
  REFORGE_DNN_CHECK(cudnnSetConvolutionMathType(
      d.conv, X.dtype() == DType::Float16 || X.dtype() == DType::BFloat16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  cudnnHandle_t h = dnn();
  cudnnConvolutionFwdAlgoPerf_t perf[8];
  int found = 0;
  REFORGE_DNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, 8, &found, perf));
  int pick = -1;
  for (int i = 0; i < found && pick < 0; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && (X.dtype() == DType::Float16 || X.dtype() == DType::BFloat16 ||
                                                   perf[i].mathType != CUDNN_TENSOR_OP_MATH))
      pick = i;
  if (pick < 0) fail(where, ": cuDNN has no algorithm for this convolution");
  size_t ws_bytes = 0;
  REFORGE_DNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, perf[pick].algo, &ws_bytes));
  Tensor ws = ws_bytes ? device_tensor(DType::UInt8, {static_cast<int64_t>(ws_bytes)}) : Tensor();
  const double one64 = 1.0, zero64 = 0.0;
  const float one32 = 1.0f, zero32 = 0.0f;
  const void* one = X.dtype() == DType::Float64 ? static_cast<const void*>(&one64) : &one32;
  const void* zero = X.dtype() == DType::Float64 ? static_cast<const void*>(&zero64) : &zero32;
  REFORGE_DNN_CHECK(cudnnConvolutionForward(h, one, d.x, input->raw(), d.w, W.raw(), d.conv, perf[pick].algo,
                                            ws_bytes ? ws.mutable_raw() : nullptr, ws_bytes, zero, d.y,
                                            Y.mutable_raw()));
  if (ctx.has_input(2)) {
    std::vector<int> bd(yd.size(), 1);
    bd[1] = yd[1];
    set_tensor(d.b, type, bd);
    REFORGE_DNN_CHECK(cudnnAddTensor(h, one, d.b, ctx.input(2).raw(), one, d.y, Y.mutable_raw()));
  }
}

}  // namespace

void register_conv_kernels(backends::KernelRegistry& r) { add_kernel(r, "", "Conv", conv_kernel); }

}  // namespace reforge::cuda
