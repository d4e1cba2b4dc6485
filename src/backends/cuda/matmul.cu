// MatMul, Gemm, reforge::MatMulGroup and reforge::MatMulAdd (below) on the GPU. Float types go through cuBLASLt: float32 exact
// (CUBLAS_COMPUTE_32F, no TF32), float16 and bfloat16 with float32 accumulation, float64 in float64; a
// MatMulGroup's one-row 16-bit products and a MatMulAdd's few rows by a 16-bit weight through the
// memory-bound kernels of gemv.h; integer types
// through a plain kernel. The shape logic (1-D promotion, batch broadcasting) is MatMul's own
// (ops/nn/matmul.h), which hands each product here with device pointers.
//
// Row-major C[M,N] = A[M,K] B[K,N] is column-major C^T = B^T A^T, so cuBLASLt sees (m, n, k) =
// (N, M, K) with our B as its A and our A as its B; transposes carry over operand by operand.
#include <cublasLt.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "backends/cuda/cublaslt_api.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/gemv.h"
#include "backends/cuda/lt_gemm.h"
#include "ops/nn/matmul.h"
#include "ops/reforge/matmul_add_setup.h"
#include "ops/reforge/matmul_group_setup.h"

namespace reforge::cuda {

namespace {

void check_lt(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt error in ", what, ": ", cublaslt().GetStatusString(status));
}
#define REFORGE_LT_CHECK(expr) check_lt((expr), #expr)

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// The calling thread's cuBLASLt handle and workspace.
struct Lt {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  Lt() {
    REFORGE_LT_CHECK(cublaslt().Create(&handle));
    REFORGE_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
    note_workspace(static_cast<int64_t>(kWorkspaceBytes));
  }
  ~Lt() {
    if (workspace) {
      (void)cudaFree(workspace);
      note_workspace(-static_cast<int64_t>(kWorkspaceBytes));
    }
    if (handle) (void)cublaslt().Destroy(handle);
  }
};
Lt& lt() {
  thread_local Lt instance;
  return instance;
}

// Owns the descriptors of one cuBLASLt call.
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    if (pref) cublaslt().MatmulPreferenceDestroy(pref);
    if (c) cublaslt().MatrixLayoutDestroy(c);
    if (b) cublaslt().MatrixLayoutDestroy(b);
    if (a) cublaslt().MatrixLayoutDestroy(a);
    if (op) cublaslt().MatmulDescDestroy(op);
  }
};

void layout(cublasLtMatrixLayout_t* l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
            int64_t stride) {
  REFORGE_LT_CHECK(cublaslt().MatrixLayoutCreate(l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    REFORGE_LT_CHECK(cublaslt().MatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    REFORGE_LT_CHECK(
        cublaslt().MatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
}

uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a) a /= 2;
  return a;
}

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::Float32:
      return CUDA_R_32F;
    case DType::Float16:
      return CUDA_R_16F;
    case DType::BFloat16:
      return CUDA_R_16BF;
    case DType::Float64:
      return CUDA_R_64F;
    default:
      fail("internal error: cuBLASLt product of ", dtype_name(t));
  }
}

// The call's preference: the workspace, and the alignments in bytes of cuBLASLt's A, B and C/D
// (which it assumes to be 256 unless told).
void preference(LtCall& call, uint32_t align_a, uint32_t align_b, uint32_t align_c) {
  REFORGE_LT_CHECK(cublaslt().MatmulPreferenceCreate(&call.pref));
  uint64_t ws = kWorkspaceBytes;
  REFORGE_LT_CHECK(
      cublaslt().MatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  for (auto [attr, value] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}})
    REFORGE_LT_CHECK(cublaslt().MatmulPreferenceSetAttribute(call.pref, attr, &value, sizeof(value)));
}

// The workspace of a call: the thread's, or while recording one the recording owns (held by
// `hold`; backends/cuda/replay.cc: the thread's would tie every replay to this thread's
// concurrent eager products).
void* call_workspace(Tensor& hold) {
  if (!recording()) return lt().workspace;
  hold = device_tensor(DType::UInt8, {static_cast<int64_t>(kWorkspaceBytes)});
  return hold.mutable_raw();
}

// One product's cuBLASLt descriptors and the algorithm the heuristic chose for them, kept per
// thread by everything that decides them (dtype, shape, transposes, broadcasts, alignments, bias):
// a decoding step runs the same products every step, and asking the heuristic costs more host time
// than launching the product.
struct LtPlan {
  LtCall call;
  cublasLtMatmulHeuristicResult_t heuristic{};
  bool found = false;
  cudaDataType_t scale = CUDA_R_32F;
};

using LtKey = std::array<int64_t, 13>;

constexpr size_t kLtPlansKept = 512;

LtPlan& lt_plan(DType dtype, const ops::nn::MatmulDims& d, const void* a, const void* b, const void* c, bool bias) {
  const uint32_t align_a = alignment_of(b), align_b = alignment_of(a), align_c = alignment_of(c);
  const LtKey key{static_cast<int64_t>(dtype), d.M, d.N, d.K, d.batch, d.trans_a, d.trans_b, d.a_broadcast,
                  d.b_broadcast, bias, align_a, align_b, align_c};
  thread_local std::map<LtKey, std::unique_ptr<LtPlan>> plans;
  if (auto it = plans.find(key); it != plans.end()) return *it->second;
  if (plans.size() >= kLtPlansKept) plans.clear();  // prompts of ever new lengths: start over
  auto plan = std::make_unique<LtPlan>();
  // float64 in float64; every other type accumulates in float32.
  const cudaDataType_t type = lt_type(dtype);
  const cublasComputeType_t compute = dtype == DType::Float64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  plan->scale = dtype == DType::Float64 ? CUDA_R_64F : CUDA_R_32F;
  const int64_t M = d.M, N = d.N, K = d.K;
  LtCall& call = plan->call;
  REFORGE_LT_CHECK(cublaslt().MatmulDescCreate(&call.op, compute, plan->scale));
  // cuBLASLt's A is our B, its B our A.
  cublasOperation_t op_a = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_b = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  REFORGE_LT_CHECK(cublaslt().MatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  REFORGE_LT_CHECK(cublaslt().MatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (bias) {
    REFORGE_CHECK(dtype == DType::Float32 && d.batch <= 1, "internal error: a bias epilogue on a ", dtype_name(dtype),
                  " product of batch ", d.batch);
    // cuBLASLt's rows are our columns: one bias value per row of its column-major D.
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    REFORGE_LT_CHECK(
        cublaslt().MatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  }
  if (d.trans_b)
    layout(&call.a, type, K, N, K, d.batch, d.b_broadcast ? 0 : K * N);
  else
    layout(&call.a, type, N, K, N, d.batch, d.b_broadcast ? 0 : K * N);
  if (d.trans_a)
    layout(&call.b, type, M, K, M, d.batch, d.a_broadcast ? 0 : M * K);
  else
    layout(&call.b, type, K, M, K, d.batch, d.a_broadcast ? 0 : M * K);
  layout(&call.c, type, N, M, N, d.batch, M * N);

  preference(call, align_a, align_b, align_c);
  int found = 0;
  REFORGE_LT_CHECK(cublaslt().MatmulAlgoGetHeuristic(lt().handle, call.op, call.a, call.b, call.c, call.c, call.pref, 1,
                                                  &plan->heuristic, &found));
  plan->found = found > 0;
  return *plans.emplace(key, std::move(plan)).first->second;
}

// C = A B (with alpha, beta) by cuBLASLt; with `bias` (float32, one per column of C, float32
// products only), C = A B + bias by the bias epilogue. Returns false only when a bias was asked
// for and cuBLASLt has no algorithm with that epilogue (the caller then adds it).
bool lt_product(DType dtype, const ops::nn::MatmulDims& d, const void* a, const void* b, void* c,
                const float* bias = nullptr) {
  LtPlan& plan = lt_plan(dtype, d, a, b, c, bias != nullptr);
  if (!plan.found && bias) return false;
  if (!plan.found)
    fail("cuBLASLt has no algorithm for a ", dtype_name(dtype), " product of ", d.M, "x", d.K, " by ", d.K, "x", d.N,
         " (batch ", d.batch, ")");
  if (bias)
    REFORGE_LT_CHECK(
        cublaslt().MatmulDescSetAttribute(plan.call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const double alpha64 = d.alpha, beta64 = d.beta;
  const float alpha32 = d.alpha, beta32 = d.beta;
  const void* alpha = plan.scale == CUDA_R_64F ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = plan.scale == CUDA_R_64F ? static_cast<const void*>(&beta64) : &beta32;
  Tensor hold;
  void* workspace = call_workspace(hold);
  const LtCall& call = plan.call;
  REFORGE_LT_CHECK(cublaslt().Matmul(lt().handle, call.op, alpha, b, call.a, a, call.b, beta, c, call.c, c, call.c,
                                  &plan.heuristic.algo, workspace, kWorkspaceBytes, stream()));
  return true;
}

// lt_gemm's descriptors and algorithm, by everything that decides them.
struct GemmPlan {
  LtCall call;
  cublasLtMatmulHeuristicResult_t heuristic{};
};

GemmPlan& gemm_plan(const LtGemm& g) {
  const std::array<int64_t, 17> key{static_cast<int64_t>(g.in), static_cast<int64_t>(g.out), g.M, g.N, g.K, g.batch,
                                    g.trans_b, g.lda, g.stride_a, g.ldb, g.stride_b, g.ldc, g.stride_c,
                                    alignment_of(g.a), alignment_of(g.b), alignment_of(g.c), 0};
  thread_local std::map<std::array<int64_t, 17>, std::unique_ptr<GemmPlan>> plans;
  if (auto it = plans.find(key); it != plans.end()) return *it->second;
  if (plans.size() >= kLtPlansKept) plans.clear();
  auto plan = std::make_unique<GemmPlan>();
  LtCall& call = plan->call;
  REFORGE_LT_CHECK(cublaslt().MatmulDescCreate(&call.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major: C^T [N, M] = op(B^T) A^T, so cuBLASLt's A is our B, its B our A.
  cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  REFORGE_LT_CHECK(cublaslt().MatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  REFORGE_LT_CHECK(cublaslt().MatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const cudaDataType_t in = lt_type(g.in), out = lt_type(g.out);
  if (g.trans_b)
    layout(&call.a, in, g.K, g.N, g.ldb, g.batch, g.stride_b);  // B stored [N, K]: column-major [K, N]
  else
    layout(&call.a, in, g.N, g.K, g.ldb, g.batch, g.stride_b);
  layout(&call.b, in, g.K, g.M, g.lda, g.batch, g.stride_a);
  layout(&call.c, out, g.N, g.M, g.ldc, g.batch, g.stride_c);
  // A head's slice of Q starts wherever the head does: its alignment is whatever it is.
  preference(call, alignment_of(g.b), alignment_of(g.a), alignment_of(g.c));
  int found = 0;
  REFORGE_LT_CHECK(cublaslt().MatmulAlgoGetHeuristic(lt().handle, call.op, call.a, call.b, call.c, call.c, call.pref, 1,
                                                  &plan->heuristic, &found));
  if (found == 0)
    fail("cuBLASLt has no algorithm for a ", dtype_name(g.in), " product of ", g.M, "x", g.K, " by ", g.K, "x", g.N,
         " (batch ", g.batch, ") into ", dtype_name(g.out));
  return *plans.emplace(key, std::move(plan)).first->second;
}

// Integer products (and any type cuBLASLt does not take): one thread per output element,
// accumulating in the element type (wrapping, as the reference). Gemm's alpha and beta other
// than 1 and 0/1 scale in float64, as the reference (numpy) does.
template <typename T>
__global__ void plain_product(const T* a, const T* b, T* c, int64_t batch, int64_t M, int64_t N, int64_t K, bool ta,
                              bool tb, bool a_bc, bool b_bc, float alpha, float beta) {
  const bool plain_scale = alpha == 1.0f && (beta == 0.0f || beta == 1.0f);
  const int64_t total = batch * M * N;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i % N, m = (i / N) % M, p = i / (M * N);
    const T* ap = a + (a_bc ? 0 : p * M * K);
    const T* bp = b + (b_bc ? 0 : p * K * N);
    using U = std::conditional_t<std::is_integral_v<T>, std::make_unsigned_t<T>, T>;
    U acc = 0;
    for (int64_t k = 0; k < K; ++k) {
      const T x = ta ? ap[k * M + m] : ap[m * K + k];
      const T y = tb ? bp[n * K + k] : bp[k * N + n];
      acc += static_cast<U>(x) * static_cast<U>(y);
    }
    if (plain_scale) {
      c[i] = static_cast<T>(beta == 0.0f ? acc : acc + static_cast<U>(c[i]));
    } else {
      double v = static_cast<double>(static_cast<T>(acc)) * alpha;
      if (beta != 0.0f) v += static_cast<double>(beta) * static_cast<double>(c[i]);
      c[i] = static_cast<T>(v);
    }
  }
}

// c *= beta: a float product with an empty sum (Gemm's beta * C when K is 0), as the reference.
template <typename T>
__global__ void scale_kernel(T* c, int64_t n, float beta) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    c[i] = store_c<T>(load_c(c, i) * static_cast<compute_t<T>>(beta));
}

void product(DType dtype, const ops::nn::MatmulDims& d, const void* a, const void* b, void* c) {
  if (d.M == 0 || d.N == 0 || d.batch == 0) return;
  if (dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float64) {
    if (d.K == 0) {  // an empty sum: beta * C (C is zero-filled or the broadcast bias)
      const int64_t n = d.batch * d.M * d.N;
      if (d.beta == 0.0f) {
        REFORGE_CUDA_CHECK(cudaMemsetAsync(c, 0, static_cast<size_t>(n) * dtype_size(dtype), stream()));
      } else if (d.beta != 1.0f) {
        dispatch_device(
            dtype, "Gemm",
            [&](auto tag) {
              using T = typename decltype(tag)::type;
              scale_kernel<T><<<blocks_for(n), 256, 0, stream()>>>(static_cast<T*>(c), n, d.beta);
              check_launch("scale_kernel");
            },
            true);
      }
      return;
    }
    lt_product(dtype, d, a, b, c);
    return;
  }
  dispatch_device(dtype, "MatMul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool> || std::is_floating_point_v<T> || std::is_same_v<T, __half> ||
                  std::is_same_v<T, __nv_bfloat16>) {
      fail("MatMul of ", dtype_name(dtype), " tensors is not supported on the CUDA backend");
    } else {
      const int64_t total = d.batch * d.M * d.N;
      plain_product<T><<<blocks_for(total), 256, 0, stream()>>>(
          static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(c), d.batch, d.M, d.N, d.K, d.trans_a,
          d.trans_b, d.a_broadcast, d.b_broadcast, d.alpha, d.beta);
      check_launch("plain_product");
    }
  });
}

// Gemm's C, broadcast to [M, N] into Y (the product then accumulates with beta).
template <typename T>
__global__ void broadcast_rows(T* y, const T* c, int64_t M, int64_t N, int64_t cr, int64_t cc) {
  const int64_t total = M * N;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i % N, m = i / N;
    y[i] = c[(cr == 1 ? 0 : m) * cc + (cc == 1 ? 0 : n)];
  }
}

void matmul_kernel(ops::KernelContext& ctx) { ops::nn::matmul_run(ctx, product); }

// reforge::MatMulGroup(X, W1, ..., Wn): Yi = X Wi, X [..., K], Wi [K, Ni] of X's float type ([Ni, K]
// with transposed = 1). Weights stored transposed: one row of 16-bit operands through the gemv
// kernel of transposed weights, every product in one launch; otherwise cuBLASLt. Weights as given: a few
// rows of 16-bit operands, every product in one launch of the gemv kernel; otherwise one product
// after another, each as MatMul runs it.
void matmul_group_kernel(ops::KernelContext& ctx) {
  const std::vector<ops::nn::MatmulDims> dims = ops::matmul_group_setup(ctx);
  const Tensor& x = ctx.input(0);
  std::vector<GemvOutput> outs;
  for (size_t i = 0; i < dims.size(); ++i) outs.push_back({ctx.input(i + 1).raw(), ctx.outputs()[i].mutable_raw(), dims[i].N});
  const bool one_launch = dims[0].trans_b ? gemv_products_nt(x.dtype(), dims[0].M, dims[0].K, x.raw(), outs)
                                           : gemv_products(x.dtype(), dims[0].M, dims[0].K, x.raw(), outs);
  if (one_launch) return;
  for (size_t i = 0; i < dims.size(); ++i) product(x.dtype(), dims[i], x.raw(), outs[i].b, outs[i].c);
}

void gemm_kernel(ops::KernelContext& ctx) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  const std::string& label = ctx.node().label();
  const ops::nn::GemmSetup s = ops::nn::gemm_setup(ctx);
  const ops::nn::MatmulDims& d = s.dims;
  const int64_t M = d.M, N = d.N;
  Tensor& Y = s.has_c ? ctx.allocate_output_uninit(0, A.dtype(), {M, N}) : ctx.allocate_output(0, A.dtype(), {M, N});
  if (Y.numel() == 0) return;
  if (s.has_c) {
    const Tensor& C = ctx.input(2);
    const ops::nn::GemmBias cb = ops::nn::gemm_bias(ctx, d);
    const int64_t cr = cb.rows, cc = cb.cols;
    dispatch_device(A.dtype(), label.c_str(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      broadcast_rows<T><<<blocks_for(M * N), 256, 0, stream()>>>(Y.mutable_data<T>(), C.data<T>(), M, N, cr, cc);
      check_launch("broadcast_rows");
    });
  }
  product(A.dtype(), d, A.raw(), B.raw(), Y.mutable_raw());
}

// ---- reforge::MatMulAdd ------------------------------------------------------------------

__global__ void widen_kernel(const __half* w, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __half2float(w[i]);
}
__global__ void widen_kernel(const __nv_bfloat16* w, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __bfloat162float(w[i]);
}

// x rounded to bfloat16 values (round to nearest even), kept as float32.
__global__ void round_bf16_kernel(const float* x, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}

// y[r, j] += bias[j] (or = bias[j] with `assign`) over rows x N.
__global__ void add_bias_kernel(float* y, const float* bias, int64_t total, int64_t N, bool assign) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = assign ? bias[i % N] : y[i] + bias[i % N];
}

// Y = MatMul(X, W) + b, as the CPU's reforge::MatMulAdd (backends/cpu/matmul_add.cc): X float32
// [..., K], W [K, N] float32 or (16-bit Linear layers) bfloat16 / float16, widened exactly to
// float32 before an exact float32 product; b (optional) float32 [N], added to the finished sum by
// cuBLASLt's bias epilogue. With bf16_activations = 1, X is first rounded to bfloat16 values. A
// 16-bit weight times a few rows (gemv.h, gemv_matmul_add) is streamed as it is and widened in
// registers, instead of widened into a float32 copy for cuBLASLt.
void matmul_add_kernel(ops::KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const ops::MatMulAddSetup ms = ops::matmul_add_setup(ctx);
  const int64_t K = ms.K, N = ms.N;
  Tensor& y = ctx.allocate_output_uninit(0, DType::Float32, ms.out);
  const int64_t total = y.numel();
  if (total == 0) return;
  const int64_t rows = total / N;
  const float* bias = ms.bias ? ms.bias->data<float>() : nullptr;
  if (K == 0) {  // an empty sum: zeros plus the bias
    if (bias) {
      add_bias_kernel<<<blocks_for(total), 256, 0, stream()>>>(y.mutable_data<float>(), bias, total, N, true);
      check_launch("MatMulAdd bias");
    } else {
      REFORGE_CUDA_CHECK(cudaMemsetAsync(y.mutable_raw(), 0, y.nbytes(), stream()));
    }
    return;
  }
  Tensor w32, x_rounded;
  const void* xp = x.raw();
  if (ctx.node().attr_int("bf16_activations", 0) != 0) {
    x_rounded = device_tensor(DType::Float32, x.shape());
    round_bf16_kernel<<<blocks_for(x.numel()), 256, 0, stream()>>>(x.data<float>(), x_rounded.mutable_data<float>(),
                                                                   x.numel());
    check_launch("MatMulAdd activation rounding");
    xp = x_rounded.raw();
  }
  // A few rows (a decoding step): the 16-bit weight streamed as it is, not widened first.
  if (w.dtype() != DType::Float32 &&
      gemv_matmul_add(rows, K, N, static_cast<const float*>(xp), w.dtype(), w.raw(), bias, y.mutable_data<float>()))
    return;
  const void* wp = w.raw();
  if (w.dtype() != DType::Float32) {
    w32 = device_tensor(DType::Float32, w.shape());
    if (w.dtype() == DType::Float16)
      widen_kernel<<<blocks_for(K * N), 256, 0, stream()>>>(w.data<__half>(), w32.mutable_data<float>(), K * N);
    else
      widen_kernel<<<blocks_for(K * N), 256, 0, stream()>>>(w.data<__nv_bfloat16>(), w32.mutable_data<float>(), K * N);
    check_launch("MatMulAdd weight widening");
    wp = w32.raw();
  }
  ops::nn::MatmulDims d;
  d.M = rows, d.N = N, d.K = K;
  d.alpha = 1.0f, d.beta = 0.0f;
  // The epilogue takes a 16-byte aligned bias only (cuBLASLt may reject others; those are added after).
  if (bias && alignment_of(bias) >= 16 && lt_product(DType::Float32, d, xp, wp, y.mutable_raw(), bias)) return;
  // No bias, or no algorithm with the bias epilogue for these operands: the product, then the bias.
  lt_product(DType::Float32, d, xp, wp, y.mutable_raw());
  if (!bias) return;
  add_bias_kernel<<<blocks_for(total), 256, 0, stream()>>>(y.mutable_data<float>(), bias, total, N, false);
  check_launch("MatMulAdd bias");
}

}  // namespace

void lt_gemm(const LtGemm& g) {
  if (g.M == 0 || g.N == 0 || g.batch == 0) return;
  const GemmPlan& plan = gemm_plan(g);
  const float beta = 0;
  Tensor hold;
  void* workspace = call_workspace(hold);
  const LtCall& call = plan.call;
  REFORGE_LT_CHECK(cublaslt().Matmul(lt().handle, call.op, &g.alpha, g.b, call.a, g.a, call.b, &beta, g.c, call.c, g.c,
                                  call.c, &plan.heuristic.algo, workspace, kWorkspaceBytes, stream()));
}

void cublaslt_product(DType dtype, const ops::nn::MatmulDims& d, const void* a, const void* b, void* c) {
  lt_product(dtype, d, a, b, c);
}

void register_matmul_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "MatMul", matmul_kernel);
  add_kernel(r, "reforge", "MatMulGroup", matmul_group_kernel);
  add_kernel(r, "", "Gemm", gemm_kernel);
  add_kernel(r, "reforge", "MatMulAdd", matmul_add_kernel);
}

}  // namespace reforge::cuda
