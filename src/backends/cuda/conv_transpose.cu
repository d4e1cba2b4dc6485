// ConvTranspose on the GPU through cuDNN's backward-data convolution (the legacy API, as Conv in
// conv.cu): float32 with FMA arithmetic only (no TF32), float16 and bfloat16 with tensor cores
// and float32 accumulation, float64 in float64. The shapes and every check are the CPU op's own
// (ops::nn::conv_transpose_setup). cuDNN pads symmetrically and cannot extend the output, so
// where the pads are not one symmetric crop of the natural result (asymmetric or negative pads,
// output_padding, output_shape), the unpadded result is computed and a copy kernel crops or
// zero-extends it into the output; the bias is added by cuDNN or by that copy. 1-D runs as 2-D
// with a height of 1.
#include <type_traits>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cudnn_common.h"
#include "backends/cuda/device_types.cuh"
#include "core/dispatch.h"
#include "ops/nn/conv.h"

namespace reforge::cuda {

namespace {

// Y [N, M, out (3 dims, normalized)] from the unpadded result F [N, M, full] (null: none, an
// empty sum): Y[o] = F[o + pb] where inside F, else 0; plus bias[m] when given.
template <typename T>
__global__ void crop_bias(const T* f, const T* bias, T* y, int64_t total, int64_t M, int64_t od, int64_t oh, int64_t ow,
                          int64_t fd, int64_t fh, int64_t fw, int64_t pd, int64_t ph, int64_t pw) {
  using C = compute_t<T>;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t w = i % ow, h = (i / ow) % oh, d = (i / (ow * oh)) % od, nm = i / (ow * oh * od);
    const int64_t sd = d + pd, sh = h + ph, sw = w + pw;
    const bool inside = f && sd >= 0 && sd < fd && sh >= 0 && sh < fh && sw >= 0 && sw < fw;
    C v = inside ? load_c(f, ((nm * fd + sd) * fh + sh) * fw + sw) : C(0);
    if (bias) v += load_c(bias, nm % M);
    y[i] = store_c<T>(v);
  }
}

template <typename T>
void launch_crop(const T* f, const T* bias, T* y, int64_t total, int64_t M, const int64_t (&o3)[3],
                 const int64_t (&f3)[3], const int64_t (&p3)[3]) {
  crop_bias<T><<<blocks_for(total), 256, 0, stream()>>>(f, bias, y, total, M, o3[0], o3[1], o3[2], f3[0], f3[1], f3[2],
                                                        p3[0], p3[1], p3[2]);
  check_launch("conv_transpose crop_bias");
}

void conv_transpose_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const ops::nn::ConvTransposeSetup cs = ops::nn::conv_transpose_setup(ctx);
  const Tensor& X = ctx.input(0);
  const Tensor& W = ctx.input(1);
  const Tensor* B = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  Tensor& Y = ctx.allocate_output_uninit(0, X.dtype(), cs.y_shape);
  if (Y.numel() == 0) return;
  dispatch_float(
      X.dtype(), [](auto) {}, "ConvTranspose");  // the CPU kernel's types and error
  const cudnnDataType_t type = dnn_type(X.dtype());
  const size_t nsp = cs.nsp;
  const ops::nn::Window& win = cs.win;

  // The unpadded result's size: input i, tap k at i * stride + k * dilation.
  std::vector<int64_t> full(nsp);
  bool direct = true;  // Y is the unpadded result cropped by pad_begin (less than the window) at both ends
  for (size_t i = 0; i < nsp; ++i) {
    full[i] = win.strides[i] * (win.in[i] - 1) + (win.kernel[i] - 1) * win.dilations[i] + 1;
    const int64_t span = (win.kernel[i] - 1) * win.dilations[i] + 1;
    direct &= win.pad_begin[i] >= 0 && win.pad_begin[i] < span && win.out[i] == full[i] - 2 * win.pad_begin[i];
  }
  const bool empty_sum = X.numel() == 0 || W.numel() == 0;
  int64_t o3[3] = {1, 1, 1}, f3[3] = {1, 1, 1}, p3[3] = {0, 0, 0};
  for (size_t i = 0; i < nsp; ++i) {
    o3[3 - nsp + i] = win.out[i];
    f3[3 - nsp + i] = full[i];
    p3[3 - nsp + i] = win.pad_begin[i];
  }
  const int64_t total = Y.numel();
  if (empty_sum) {  // the bias, or zeros
    dispatch_device(
        X.dtype(), where.c_str(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>)
            launch_crop<T>(nullptr, B ? B->data<T>() : nullptr, Y.mutable_data<T>(), total, cs.M, o3, f3, p3);
        },
        true);
    return;
  }

  Tensor F = direct ? Tensor() : device_tensor(X.dtype(), [&] {
    Shape s = {cs.N, cs.M};
    s.insert(s.end(), full.begin(), full.end());
    return s;
  }());
  Tensor& dst = direct ? Y : F;
  // cuDNN's view: a forward convolution of dx [N, M, dst...] with W [Cin, M/group, k...] gives
  // dy = X [N, Cin, in...]; its backward data is the transposed convolution.
  std::vector<int> xd = {narrow(cs.N, where), narrow(cs.Cin, where)},
                   wd = {narrow(cs.Cin, where), narrow(cs.M / cs.group, where)},
                   yd = {narrow(cs.N, where), narrow(cs.M, where)};
  std::vector<int> pad, stride, dil;
  if (nsp == 1) {
    xd.push_back(1), wd.push_back(1), yd.push_back(1);
    pad.push_back(0), stride.push_back(1), dil.push_back(1);
  }
  for (size_t i = 0; i < nsp; ++i) {
    xd.push_back(narrow(win.in[i], where));
    wd.push_back(narrow(win.kernel[i], where));
    yd.push_back(narrow(direct ? win.out[i] : full[i], where));
    pad.push_back(direct ? narrow(win.pad_begin[i], where) : 0);
    stride.push_back(narrow(win.strides[i], where));
    dil.push_back(narrow(win.dilations[i], where));
  }
  Descriptors d;
  set_tensor(d.x, type, xd);  // dy
  set_tensor(d.y, type, yd);  // dx
  REFORGE_DNN_CHECK(cudnnSetFilterNdDescriptor(d.w, type, CUDNN_TENSOR_NCHW, static_cast<int>(wd.size()), wd.data()));
  const bool half = X.dtype() == DType::Float16 || X.dtype() == DType::BFloat16;
  const cudnnDataType_t compute = X.dtype() == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  REFORGE_DNN_CHECK(cudnnSetConvolutionNdDescriptor(d.conv, static_cast<int>(pad.size()), pad.data(), stride.data(),
                                                    dil.data(), CUDNN_CROSS_CORRELATION, compute));
  REFORGE_DNN_CHECK(cudnnSetConvolutionGroupCount(d.conv, narrow(cs.group, where)));
  REFORGE_DNN_CHECK(cudnnSetConvolutionMathType(d.conv, half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  cudnnHandle_t h = dnn();
  const AlgoChoice choice = cached_algo(
      geometry_key(1, type, narrow(cs.group, where), {&xd, &wd, &yd, &pad, &stride, &dil}), [&](int loaded) {
        AlgoChoice c;
        c.algo = loaded;  // a timing cache's choice, else cuDNN's heuristic first
        if (c.algo < 0) {
          cudnnConvolutionBwdDataAlgoPerf_t perf[8];
          int found = 0;
          REFORGE_DNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.x, d.conv, d.y, 8, &found, perf));
          c.algo = first_algo(perf, found, half);
        }
        if (c.algo < 0) fail(where, ": cuDNN has no algorithm for this transposed convolution");
        REFORGE_DNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
            h, d.w, d.x, d.conv, d.y, static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), &c.workspace));
        return c;
      });
  const auto algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(choice.algo);
  const size_t ws_bytes = choice.workspace;
  Tensor ws = ws_bytes ? device_tensor(DType::UInt8, {static_cast<int64_t>(ws_bytes)}) : Tensor();
  const double one64 = 1.0, zero64 = 0.0;
  const float one32 = 1.0f, zero32 = 0.0f;
  const void* one = X.dtype() == DType::Float64 ? static_cast<const void*>(&one64) : &one32;
  const void* zero = X.dtype() == DType::Float64 ? static_cast<const void*>(&zero64) : &zero32;
  REFORGE_DNN_CHECK(cudnnConvolutionBackwardData(h, one, d.w, W.raw(), d.x, X.raw(), d.conv, algo,
                                                 ws_bytes ? ws.mutable_raw() : nullptr, ws_bytes, zero, d.y,
                                                 dst.mutable_raw()));
  if (direct) {
    if (B) {
      std::vector<int> bd(yd.size(), 1);
      bd[1] = yd[1];
      set_tensor(d.b, type, bd);
      REFORGE_DNN_CHECK(cudnnAddTensor(h, one, d.b, B->raw(), one, d.y, Y.mutable_raw()));
    }
    return;
  }
  dispatch_device(
      X.dtype(), where.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>)
          launch_crop<T>(F.data<T>(), B ? B->data<T>() : nullptr, Y.mutable_data<T>(), total, cs.M, o3, f3, p3);
      },
      true);
}

}  // namespace

void register_conv_transpose_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "ConvTranspose", conv_transpose_kernel);
}

}  // namespace reforge::cuda
