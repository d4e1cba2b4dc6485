// MatMul and Gemm on the GPU. Float types go through cuBLASLt: float32 exact (CUBLAS_COMPUTE_32F,
// no TF32), float16 and bfloat16 with float32 accumulation, float64 in float64; integer types
// through a plain kernel. The shape logic (1-D promotion, batch broadcasting) is MatMul's own
// (ops/nn/matmul.h), which hands each product here with device pointers.
//
// Row-major C[M,N] = A[M,K] B[K,N] is column-major C^T = B^T A^T, so cuBLASLt sees (m, n, k) =
// (N, M, K) with our B as its A and our A as its B; transposes carry over operand by operand.
#include <cublasLt.h>

#include <cstring>
#include <map>
#include <mutex>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "ops/nn/matmul.h"

namespace reforge::cuda {

namespace {

void check_lt(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt error in ", what, ": ", cublasLtGetStatusString(status));
}
#define REFORGE_LT_CHECK(expr) check_lt((expr), #expr)

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// The calling thread's cuBLASLt handle and workspace.
struct Lt {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  Lt() {
    REFORGE_LT_CHECK(cublasLtCreate(&handle));
    REFORGE_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  }
  ~Lt() {
    if (workspace) (void)cudaFree(workspace);
    if (handle) (void)cublasLtDestroy(handle);
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
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

void layout(cublasLtMatrixLayout_t* l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
            int64_t stride) {
  REFORGE_LT_CHECK(cublasLtMatrixLayoutCreate(l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    REFORGE_LT_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    REFORGE_LT_CHECK(
        cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
}

uint32_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a) a /= 2;
  return a;
}

void lt_product(DType dtype, const ops::nn::MatmulDims& d, const void* a, const void* b, void* c) {
  cudaDataType_t type;
  cublasComputeType_t compute;
  cudaDataType_t scale;
  switch (dtype) {
    case DType::Float32:
      type = CUDA_R_32F, compute = CUBLAS_COMPUTE_32F, scale = CUDA_R_32F;
      break;
    case DType::Float16:
      type = CUDA_R_16F, compute = CUBLAS_COMPUTE_32F, scale = CUDA_R_32F;
      break;
    case DType::BFloat16:
      type = CUDA_R_16BF, compute = CUBLAS_COMPUTE_32F, scale = CUDA_R_32F;
      break;
    case DType::Float64:
      type = CUDA_R_64F, compute = CUBLAS_COMPUTE_64F, scale = CUDA_R_64F;
      break;
    default:
      fail("internal error: cuBLASLt product of ", dtype_name(dtype));
  }
  const int64_t M = d.M, N = d.N, K = d.K;
  LtCall call;
  REFORGE_LT_CHECK(cublasLtMatmulDescCreate(&call.op, compute, scale));
  // cuBLASLt's A is our B, its B our A.
  cublasOperation_t op_a = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_b = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  REFORGE_LT_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  REFORGE_LT_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (d.trans_b)
    layout(&call.a, type, K, N, K, d.batch, d.b_broadcast ? 0 : K * N);
  else
    layout(&call.a, type, N, K, N, d.batch, d.b_broadcast ? 0 : K * N);
  if (d.trans_a)
    layout(&call.b, type, M, K, M, d.batch, d.a_broadcast ? 0 : M * K);
  else
    layout(&call.b, type, K, M, K, d.batch, d.a_broadcast ? 0 : M * K);
  layout(&call.c, type, N, M, N, d.batch, M * N);

  REFORGE_LT_CHECK(cublasLtMatmulPreferenceCreate(&call.pref));
  uint64_t ws = kWorkspaceBytes;
  REFORGE_LT_CHECK(
      cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  uint32_t align_a = alignment_of(b), align_b = alignment_of(a), align_c = alignment_of(c);
  REFORGE_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                        sizeof(align_a)));
  REFORGE_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                        sizeof(align_b)));
  REFORGE_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                        sizeof(align_c)));
  REFORGE_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                        sizeof(align_c)));
  Lt& h = lt();
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  REFORGE_LT_CHECK(cublasLtMatmulAlgoGetHeuristic(h.handle, call.op, call.a, call.b, call.c, call.c, call.pref, 1,
                                                  &heuristic, &found));
  if (found == 0)
    fail("cuBLASLt has no algorithm for a ", dtype_name(dtype), " product of ", M, "x", K, " by ", K, "x", N,
         " (batch ", d.batch, ")");
  const double alpha64 = d.alpha, beta64 = d.beta;
  const float alpha32 = d.alpha, beta32 = d.beta;
  const void* alpha = scale == CUDA_R_64F ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = scale == CUDA_R_64F ? static_cast<const void*>(&beta64) : &beta32;
  REFORGE_LT_CHECK(cublasLtMatmul(h.handle, call.op, alpha, b, call.a, a, call.b, beta, c, call.c, c, call.c,
                                  &heuristic.algo, h.workspace, kWorkspaceBytes, stream()));
}

// Integer products (and any type cuBLASLt does not take): one thread per output element,
// accumulating in the element type (wrapping, as the reference).
template <typename T>
__global__ void plain_product(const T* a, const T* b, T* c, int64_t batch, int64_t M, int64_t N, int64_t K, bool ta,
                              bool tb, bool a_bc, bool b_bc, T alpha, T beta) {
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
    c[i] = static_cast<T>(static_cast<U>(alpha) * acc + static_cast<U>(beta) * static_cast<U>(c[i]));
  }
}

void product(DType dtype, const ops::nn::MatmulDims& d, const void* a, const void* b, void* c) {
  if (d.M == 0 || d.N == 0 || d.batch == 0) return;
  if (dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float64) {
    if (d.K == 0) {  // an empty sum: beta * C (C is zero-filled or the broadcast bias)
      REFORGE_CHECK(d.beta == 0.0f || d.beta == 1.0f, "internal error: empty product with beta ", d.beta);
      if (d.beta == 0.0f)
        REFORGE_CUDA_CHECK(
            cudaMemsetAsync(c, 0, static_cast<size_t>(d.batch * d.M * d.N) * dtype_size(dtype), stream()));
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
          d.trans_b, d.a_broadcast, d.b_broadcast, static_cast<T>(d.alpha), static_cast<T>(d.beta));
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

void gemm_kernel(ops::KernelContext& ctx) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  const std::string& label = ctx.node().label();
  REFORGE_CHECK(A.rank() == 2 && B.rank() == 2, label, ": A and B must be 2-D, got ", A.describe(), " and ",
                B.describe());
  REFORGE_CHECK(A.dtype() == B.dtype(), label, ": A and B have different element types ", dtype_name(A.dtype()),
                " and ", dtype_name(B.dtype()));
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const int64_t M = ta ? A.dim(1) : A.dim(0), K = ta ? A.dim(0) : A.dim(1);
  const int64_t KB = tb ? B.dim(1) : B.dim(0), N = tb ? B.dim(0) : B.dim(1);
  REFORGE_CHECK(K == KB, label, ": inner dimensions differ: op(A) is ", M, "x", K, ", op(B) is ", KB, "x", N,
                " (transA=", ta, ", transB=", tb, ")");
  const float alpha = ctx.attr_float("alpha", 1.0f), beta = ctx.attr_float("beta", 1.0f);
  const bool has_c = ctx.has_input(2) && beta != 0.0f;
  Tensor& Y = has_c ? ctx.allocate_output_uninit(0, A.dtype(), {M, N}) : ctx.allocate_output(0, A.dtype(), {M, N});
  if (Y.numel() == 0) return;
  if (has_c) {
    const Tensor& C = ctx.input(2);
    REFORGE_CHECK(C.dtype() == A.dtype(), label, ": C has element type ", dtype_name(C.dtype()), ", A has ",
                  dtype_name(A.dtype()));
    REFORGE_CHECK(C.rank() <= 2, label, ": C must have rank <= 2, got ", C.describe());
    const int64_t cr = C.rank() == 2 ? C.dim(0) : 1;
    const int64_t cc = C.rank() >= 1 ? C.dim(C.rank() - 1) : 1;
    REFORGE_CHECK((cr == M || cr == 1) && (cc == N || cc == 1), label, ": C ", C.describe(),
                  " cannot be broadcast to [", M, ",", N, "]");
    dispatch_device(A.dtype(), label.c_str(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      broadcast_rows<T><<<blocks_for(M * N), 256, 0, stream()>>>(Y.mutable_data<T>(), C.data<T>(), M, N, cr, cc);
      check_launch("broadcast_rows");
    });
  }
  ops::nn::MatmulDims d;
  d.M = M, d.N = N, d.K = K;
  d.trans_a = ta, d.trans_b = tb;
  d.alpha = alpha;
  d.beta = has_c ? beta : 0.0f;
  product(A.dtype(), d, A.raw(), B.raw(), Y.mutable_raw());
}

}  // namespace

void register_matmul_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "MatMul", matmul_kernel);
  add_kernel(r, "", "Gemm", gemm_kernel);
}

}  // namespace reforge::cuda
