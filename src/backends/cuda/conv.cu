// Conv and reforge::FusedConv on the GPU through cuDNN (the legacy convolution API): float32 with
// FMA arithmetic only (CUDNN_FMA_MATH: no TF32, as float32 MatMul), float16 and bfloat16 with
// tensor cores and float32 accumulation, float64 in float64. 1-D convolutions run as 2-D with a
// height of 1. cuDNN pads symmetrically; asymmetric pads (auto_pad SAME_* with an even window) pad
// the input explicitly first. The geometry and every check are the Conv op's own (ops/nn/conv.h).
//
// FusedConv(X, W, B?, Z?) = relu?(Conv(X, W, B) + Z), made by the fuse-conv-activation pass, runs
// in float32 with a ReLU as one cudnnConvolutionBiasActivationForward call (Z, when it has the
// output's shape, read by the convolution's epilogue; with z_inplace = 1, from the
// conv-residual-inplace pass, the output is written over Z). Other forms run the convolution and
// then one epilogue kernel for the bias, the broadcast residual and the ReLU. The layouts of the
// CPU's conv-channels-last pass (x_layout, y_layout, z_layout) are declined.
//
// Each geometry's algorithm is chosen once per process and remembered (cached_algo): among
// cuDNN's heuristic candidates, the fastest when timed on the first call's operands (the best of
// three timings each; candidates within 5% of the fastest go by the heuristic's order). The
// choice may still differ between processes (timing), so float32 results may differ in their
// last bits between processes, as between two TensorRT builds; within a process every engine
// takes the same, and processes that load one timing cache (cudnn_common.h) take the same.
#include <algorithm>
#include <map>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cudnn_common.h"
#include "backends/cuda/device_types.cuh"
#include "ops/nn/conv.h"

namespace reforge::cuda {

namespace {

// The timed choice of an algorithm: cuDNN's timings of candidates a few per cent apart differ
// from one timing to the next, so taking the single fastest let two processes (a baked and a
// refittable plan of one model) run different algorithms. Each candidate is timed kRounds times
// and keeps its fastest; among those within kTie of the fastest, cuDNN's heuristic order decides.
constexpr int kRounds = 3;
constexpr float kTie = 1.05f;

int stable_choice(const cudnnConvolutionFwdAlgoPerf_t* ranked, int count, const std::map<int, float>& best_ms) {
  if (best_ms.empty()) return -1;
  int fastest = best_ms.begin()->first;
  for (const auto& [algo, ms] : best_ms)
    if (ms < best_ms.at(fastest)) fastest = algo;
  for (int i = 0; i < count; ++i) {
    auto it = best_ms.find(static_cast<int>(ranked[i].algo));
    if (it != best_ms.end() && it->second <= best_ms.at(fastest) * kTie) return it->first;
  }
  return fastest;
}

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

// y = relu?(y + bias[channel] + z), each part optional; z broadcast to y by `zs`.
template <typename T>
__global__ void epilogue(T* y, const T* bias, const T* z, Strides<1> zs, int64_t total, int64_t pixels, int64_t M,
                         bool relu) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    auto v = load_c(y, i);
    if (bias) v += load_c(bias, (i / pixels) % M);
    if (z) {
      int64_t off[1];
      zs.offsets(i, off);
      v += load_c(z, off[0]);
    }
    if (relu && v < decltype(v)(0)) v = decltype(v)(0);
    y[i] = store_c<T>(v);
  }
}

// What follows the convolution in a FusedConv: the residual Z and the ReLU.
struct Post {
  const Tensor* z = nullptr;
  bool relu = false;
  bool z_inplace = false;
};

bool overlaps(const Tensor& a, const Tensor& b) {
  auto pa = static_cast<const char*>(a.raw()), pb = static_cast<const char*>(b.raw());
  return a.nbytes() > 0 && b.nbytes() > 0 && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

void conv_run(ops::KernelContext& ctx, const Post& post) {
  const std::string where = ctx.node().label();
  const ops::nn::ConvSetup cs = ops::nn::conv_setup(ctx);
  const Tensor& X = ctx.input(0);
  const Tensor& W = ctx.input(1);
  const Tensor* B = ctx.has_input(2) && ctx.input(2).numel() > 0 ? &ctx.input(2) : nullptr;
  if (ctx.has_input(2) && !B) REFORGE_CHECK(cs.M == 0, where, ": the bias is empty");
  const Tensor* Z = post.z;
  if (Z)
    REFORGE_CHECK(Z->dtype() == X.dtype(), where, ": residual ", Z->describe(), " does not match the input's type ",
                  dtype_name(X.dtype()));
  const bool z_dense = Z && Z->shape() == cs.out_shape;
  // The output: Z's buffer when the pass allowed it and nothing else the node reads shares it.
  bool in_place = post.z_inplace && z_dense;
  for (size_t i = 0; i < 3 && in_place; ++i)
    if (ctx.has_input(i) && overlaps(*Z, ctx.input(i))) in_place = false;
  Tensor* Yp;
  if (in_place) {
    ctx.set_output(0, *Z);
    Yp = &ctx.outputs()[0];
  } else {
    Yp = &ctx.allocate_output_uninit(0, X.dtype(), cs.out_shape);
  }
  Tensor& Y = *Yp;
  if (Y.numel() == 0) return;
  const cudnnDataType_t type = dnn_type(X.dtype());
  const size_t nsp = cs.nsp;
  const bool empty_sum = X.numel() == 0 || W.numel() == 0;  // the sum has no terms: the bias, or zeros
  // Asymmetric pads: pad the input explicitly and convolve without padding.
  bool symmetric = true;
  for (size_t i = 0; i < nsp; ++i) symmetric &= cs.win.pad_begin[i] == cs.win.pad_end[i];
  Tensor padded;
  const Tensor* input = &X;
  std::vector<int64_t> in = cs.win.in, pads = cs.win.pad_begin;
  if (!symmetric && !empty_sum) {
    Shape ps = {cs.N, cs.C};
    for (size_t i = 0; i < nsp; ++i) ps.push_back(in[i] + cs.win.pad_begin[i] + cs.win.pad_end[i]);
    padded = device_tensor(X.dtype(), ps);
    int64_t i3[3] = {1, 1, 1}, o3[3] = {1, 1, 1}, p3[3] = {0, 0, 0};
    for (size_t i = 0; i < nsp; ++i) {
      i3[3 - nsp + i] = in[i];
      o3[3 - nsp + i] = ps[2 + i];
      p3[3 - nsp + i] = cs.win.pad_begin[i];
    }
    dispatch_device(
        X.dtype(), where.c_str(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
            pad_input<T><<<blocks_for(padded.numel()), 256, 0, stream()>>>(X.data<T>(), padded.mutable_data<T>(),
                                                                           padded.numel(), i3[0], i3[1], i3[2], o3[0],
                                                                           o3[1], o3[2], p3[0], p3[1], p3[2]);
            check_launch("pad_input");
          }
        },
        true);
    input = &padded;
    for (size_t i = 0; i < nsp; ++i) {
      in[i] = ps[2 + i];
      pads[i] = 0;
    }
  }
  // cuDNN descriptors: at least 2 spatial dims.
  std::vector<int> xd = {narrow(cs.N, where), narrow(cs.C, where)},
                   wd = {narrow(cs.M, where), narrow(cs.C / cs.group, where)},
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
  const bool fp64 = X.dtype() == DType::Float64, half = X.dtype() == DType::Float16 || X.dtype() == DType::BFloat16;
  const double one64 = 1.0, zero64 = 0.0;
  const float one32 = 1.0f, zero32 = 0.0f;
  const void* one = fp64 ? static_cast<const void*>(&one64) : &one32;
  const void* zero = fp64 ? static_cast<const void*>(&zero64) : &zero32;
  // float32 with a ReLU: the convolution, bias, residual and ReLU in one cuDNN call.
  const bool fused = !empty_sum && X.dtype() == DType::Float32 && post.relu && (!Z || z_dense);
  Descriptors d;
  cudnnHandle_t h = dnn();
  AlgoChoice choice;
  if (!empty_sum) {
    set_tensor(d.x, type, xd);
    set_tensor(d.y, type, yd);
    REFORGE_DNN_CHECK(cudnnSetFilterNdDescriptor(d.w, type, CUDNN_TENSOR_NCHW, static_cast<int>(wd.size()), wd.data()));
    REFORGE_DNN_CHECK(cudnnSetConvolutionNdDescriptor(d.conv, static_cast<int>(pad.size()), pad.data(), stride.data(),
                                                      dil.data(), CUDNN_CROSS_CORRELATION,
                                                      fp64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
    REFORGE_DNN_CHECK(cudnnSetConvolutionGroupCount(d.conv, narrow(cs.group, where)));
    REFORGE_DNN_CHECK(cudnnSetConvolutionMathType(d.conv, half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    // The choice without a timing cache: cuDNN's heuristic, then its candidates timed.
    auto timed_choice = [&] {
      cudnnConvolutionFwdAlgoPerf_t perf[8];
      int found = 0;
      REFORGE_DNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, 8, &found, perf));
      int algo = first_algo(perf, found, half);
      if (algo < 0) fail(where, ": cuDNN has no algorithm for this convolution");
      // Then each candidate is timed once on this convolution's own operands (into a scratch
      // output, so Z is untouched when the output overwrites it), as TensorRT times tactics: the
      // heuristic's first choice is often not the fastest. Without the memory for the timing
      // (its workspace, the scratch output), the heuristic's choice stands.
      try {
        constexpr size_t kFindWorkspace = size_t{256} << 20;
        Tensor scratch = device_tensor(X.dtype(), cs.out_shape);
        Tensor fws = device_tensor(DType::UInt8, {static_cast<int64_t>(kFindWorkspace)});
        std::map<int, float> best_ms;  // each candidate's fastest of kRounds timings
        for (int round = 0; round < kRounds; ++round) {
          cudnnConvolutionFwdAlgoPerf_t timed[8];
          int n = 0;
          REFORGE_DNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, d.x, input->raw(), d.w, W.raw(), d.conv, d.y,
                                                                   scratch.mutable_raw(), 8, &n, timed,
                                                                   fws.mutable_raw(), kFindWorkspace));
          for (int i = 0; i < n; ++i)
            if (timed[i].status == CUDNN_STATUS_SUCCESS && (half || timed[i].mathType != CUDNN_TENSOR_OP_MATH)) {
              auto [it, fresh] = best_ms.emplace(static_cast<int>(timed[i].algo), timed[i].time);
              if (!fresh) it->second = std::min(it->second, timed[i].time);
            }
        }
        if (const int chosen = stable_choice(perf, found, best_ms); chosen >= 0) algo = chosen;
      } catch (const Error&) {
        (void)cudaGetLastError();  // a failed allocation leaves no sticky error; clear it regardless
      }
      return algo;
    };
    choice = cached_algo(
        geometry_key(0, type, narrow(cs.group, where), {&xd, &wd, &yd, &pad, &stride, &dil}), [&](int loaded) {
          AlgoChoice c;
          c.algo = loaded >= 0 ? loaded : timed_choice();  // a timing cache's choice is sized, not timed
          REFORGE_DNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
              h, d.x, d.w, d.conv, d.y, static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), &c.workspace));
          return c;
        });
  }
  Tensor ws = choice.workspace ? device_tensor(DType::UInt8, {static_cast<int64_t>(choice.workspace)}) : Tensor();
  void* ws_ptr = choice.workspace ? ws.mutable_raw() : nullptr;
  const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo);
  if (fused) {
    Tensor zeros;
    const void* bias = B ? B->raw() : nullptr;
    if (!B) {
      zeros = device_tensor(X.dtype(), {cs.M});
      REFORGE_CUDA_CHECK(cudaMemsetAsync(zeros.mutable_raw(), 0, zeros.nbytes(), stream()));
      bias = zeros.raw();
    }
    std::vector<int> bd(yd.size(), 1);
    bd[1] = yd[1];
    set_tensor(d.b, type, bd);
    cudnnActivationDescriptor_t act = nullptr;
    REFORGE_DNN_CHECK(cudnnCreateActivationDescriptor(&act));
    struct Release {
      cudnnActivationDescriptor_t a;
      ~Release() { cudnnDestroyActivationDescriptor(a); }
    } release{act};
    REFORGE_DNN_CHECK(cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
    // Without a residual, z is the output itself with a zero factor (cuDNN does not read it then).
    REFORGE_DNN_CHECK(cudnnConvolutionBiasActivationForward(
        h, one, d.x, input->raw(), d.w, W.raw(), d.conv, algo, ws_ptr, choice.workspace, Z ? one : zero, d.y,
        Z ? Z->raw() : Y.raw(), d.b, bias, act, d.y, Y.mutable_raw()));
    return;
  }
  // Written over Z (in place), the output already holds the residual: the convolution adds to it
  // (beta = 1) and the epilogue must not add Z, which it would read back as the convolution's sum.
  if (in_place) Z = nullptr;
  const void* beta = in_place ? one : zero;
  if (empty_sum) {
    if (!in_place) REFORGE_CUDA_CHECK(cudaMemsetAsync(Y.mutable_raw(), 0, Y.nbytes(), stream()));
  } else {
    REFORGE_DNN_CHECK(cudnnConvolutionForward(h, one, d.x, input->raw(), d.w, W.raw(), d.conv, algo, ws_ptr,
                                              choice.workspace, beta, d.y, Y.mutable_raw()));
  }
  if (!B && !Z && !post.relu) return;
  Strides<1> zs;
  if (Z) {
    const Shape* ops[1] = {&Z->shape()};
    zs = make_strides<1>(Y.shape(), ops, where);
  }
  const int64_t pixels = Y.numel() / (cs.N * cs.M);
  dispatch_device(
      X.dtype(), where.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
          epilogue<T><<<blocks_for(Y.numel()), 256, 0, stream()>>>(Y.mutable_data<T>(), B ? B->data<T>() : nullptr,
                                                                   Z ? Z->data<T>() : nullptr, zs, Y.numel(), pixels,
                                                                   cs.M, post.relu);
          check_launch("conv epilogue");
        }
      },
      true);
}

void conv_kernel(ops::KernelContext& ctx) { conv_run(ctx, {}); }

void fused_conv_kernel(ops::KernelContext& ctx) {
  Post post;
  if (ctx.has_input(3) && ctx.input(3).numel() > 0) post.z = &ctx.input(3);
  post.relu = ctx.attr_string("activation", "") == "Relu";
  post.z_inplace = ctx.attr_int("z_inplace", 0) == 1;
  conv_run(ctx, post);
}

// The CPU's activation layouts (conv-channels-last) are not the GPU's.
std::string check_fused_conv(const ir::Node& node) {
  for (const char* a : {"x_layout", "y_layout", "z_layout"}) {
    const std::string l = node.attr_string(a, "NCHW");
    if (l != "NCHW") return std::string(a) + " '" + l + "' is a CPU layout; the CUDA kernel takes NCHW";
  }
  return "";
}

}  // namespace

void register_conv_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "Conv", conv_kernel);
  add_kernel(r, "reforge", "FusedConv", fused_conv_kernel, check_fused_conv);
}

}  // namespace reforge::cuda
