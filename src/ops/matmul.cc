// MatMul (numpy semantics: 1-D operands are promoted and the added dimension removed, batch
// dimensions broadcast) and the generic batched matrix product that Gemm shares.
//
// float32 products go to oneDNN; 16-bit floats are widened to float32 (numpy accumulates them
// in float32 too) and rounded once at the end; float64 and integers use a reference loop
// (integers wrap around like numpy's).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backends/cpu/dnnl_matmul.h"
#include "core/dispatch.h"
#include "ops/linear.h"
#include "ops/nn_common.h"

namespace reforge::ops::nn {

namespace {

// Accumulator: double for float64 (and float for float32), wrapping unsigned 64-bit for
// integers (signed overflow would be undefined; two's complement wraps the same way).
template <typename T>
struct Accum {
  using type = std::conditional_t<std::is_integral_v<T>, uint64_t, T>;
};

template <typename T>
void matmul_ref(const cpu::MatmulDims& d, const T* a, const T* b, T* c) {
  using Acc = typename Accum<T>::type;
  const int64_t M = d.M, N = d.N, K = d.K;
  // Element strides of A (row i, column k) and B (row k, column j).
  const int64_t a_rs = d.trans_a ? 1 : K, a_cs = d.trans_a ? M : 1;
  const int64_t b_rs = d.trans_b ? 1 : N, b_cs = d.trans_b ? K : 1;
  const bool plain_scale = d.alpha == 1.0f && (d.beta == 0.0f || d.beta == 1.0f);
  const int64_t rows = d.batch * M;
#pragma omp parallel if (rows * N * K > (1 << 16))
  {
    std::vector<Acc> acc(static_cast<size_t>(N));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t bi = r / M, i = r % M;
      const T* A = a + (d.a_broadcast ? 0 : bi * M * K);
      const T* B = b + (d.b_broadcast ? 0 : bi * K * N);
      T* C = c + bi * M * N + i * N;
      std::fill(acc.begin(), acc.end(), Acc(0));
      if (!d.trans_b) {
        for (int64_t k = 0; k < K; ++k) {
          const Acc av = static_cast<Acc>(A[i * a_rs + k * a_cs]);
          const T* Brow = B + k * b_rs;
          for (int64_t j = 0; j < N; ++j) acc[j] += av * static_cast<Acc>(Brow[j]);
        }
      } else {
        for (int64_t j = 0; j < N; ++j) {
          Acc s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += static_cast<Acc>(A[i * a_rs + k * a_cs]) * static_cast<Acc>(B[j * b_cs + k]);
          acc[j] = s;
        }
      }
      for (int64_t j = 0; j < N; ++j) {
        if constexpr (std::is_integral_v<T>) {
          if (plain_scale) {
            C[j] = static_cast<T>(d.beta == 0.0f ? acc[j] : acc[j] + static_cast<Acc>(C[j]));
          } else {
            // Gemm with non-unit alpha/beta on integers: numpy computes this in float64.
            double v = static_cast<double>(static_cast<T>(acc[j])) * d.alpha;
            if (d.beta != 0.0f) v += static_cast<double>(d.beta) * static_cast<double>(C[j]);
            C[j] = static_cast<T>(v);
          }
        } else {
          Acc v = plain_scale ? acc[j] : acc[j] * static_cast<Acc>(d.alpha);
          if (d.beta != 0.0f) v += static_cast<Acc>(d.beta) * C[j];
          C[j] = static_cast<T>(v);
        }
      }
    }
  }
}

void matmul_f32(const cpu::MatmulDims& d, const float* a, const float* b, float* c) {
  if (cpu::dnnl_matmul_f32(d, a, b, c)) return;
  matmul_ref<float>(d, a, b, c);
}

template <typename H>
std::vector<float> widen(const H* p, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(p[i]);
  return v;
}

}  // namespace

void run_matmul(DType dtype, const cpu::MatmulDims& d, const void* a, const void* b, void* c) {
  const int64_t c_n = d.batch * d.M * d.N;
  if (c_n == 0) return;
  if (d.K == 0) {
    // Empty sum: the product is zero, leaving beta * C.
    dispatch_numeric(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* C = static_cast<T*>(c);
      for (int64_t i = 0; i < c_n; ++i) C[i] = d.beta == 0.0f ? T{} : from_compute<T>(to_compute(C[i]) * d.beta);
    });
    return;
  }
  const int64_t a_n = (d.a_broadcast ? 1 : d.batch) * d.M * d.K;
  const int64_t b_n = (d.b_broadcast ? 1 : d.batch) * d.K * d.N;
  dispatch_numeric(
      dtype,
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, float>) {
          matmul_f32(d, static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(c));
        } else if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
          std::vector<float> fa = widen(static_cast<const T*>(a), a_n);
          std::vector<float> fb = widen(static_cast<const T*>(b), b_n);
          std::vector<float> fc = d.beta != 0.0f ? widen(static_cast<const T*>(c), c_n) : std::vector<float>(c_n);
          matmul_f32(d, fa.data(), fb.data(), fc.data());
          T* C = static_cast<T*>(c);
          for (int64_t i = 0; i < c_n; ++i) C[i] = T(fc[i]);
        } else {
          matmul_ref<T>(d, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(c));
        }
      },
      "MatMul");
}

namespace {

// A constant 2-D float B (a Linear layer's weight) is prepared for the Linear paths (ops/linear.h).
std::shared_ptr<const void> matmul_prepare(const ir::Node&, const std::vector<const Tensor*>& constants) {
  if (constants.size() < 2 || !constants[1] || constants[1]->dtype() != DType::Float32) return nullptr;
  return prepare_linear(*constants[1], false);
}

void matmul_kernel(KernelContext& ctx) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  if (const auto* lw = ctx.prepared<LinearWeights>(); lw && run_linear(ctx, A, *lw, nullptr)) return;
  const std::string& label = ctx.node().label();
  REFORGE_CHECK(A.dtype() == B.dtype(), label, ": operands have different element types ", dtype_name(A.dtype()),
                " and ", dtype_name(B.dtype()));
  REFORGE_CHECK(A.rank() >= 1 && B.rank() >= 1, label, ": operands must have rank >= 1, got ", A.describe(), " and ",
                B.describe());
  // Promote 1-D operands: A [K] -> [1, K], B [K] -> [K, 1]; the added dimension is dropped from
  // the result.
  Shape as = A.shape(), bs = B.shape();
  const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(as.begin(), 1);
  if (b_vec) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  REFORGE_CHECK(bs[bs.size() - 2] == K, label, ": inner dimensions differ: ", A.describe(), " x ", B.describe());

  // Broadcast the batch dimensions (all but the last two), numpy style.
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  const size_t nb = std::max(a_batch.size(), b_batch.size());
  Shape batch(nb), a_full(nb, 1), b_full(nb, 1);
  std::copy(a_batch.begin(), a_batch.end(), a_full.begin() + (nb - a_batch.size()));
  std::copy(b_batch.begin(), b_batch.end(), b_full.begin() + (nb - b_batch.size()));
  for (size_t i = 0; i < nb; ++i) {
    REFORGE_CHECK(a_full[i] == b_full[i] || a_full[i] == 1 || b_full[i] == 1, label,
                  ": batch dimensions are not broadcastable: ", A.describe(), " x ", B.describe());
    batch[i] = a_full[i] == 1 ? b_full[i] : a_full[i];
  }
  Shape out_shape = batch;
  if (!a_vec) out_shape.push_back(M);
  if (!b_vec) out_shape.push_back(N);
  // Every path below writes every element (beta = 0).
  Tensor& Y = ctx.allocate_output_uninit(0, A.dtype(), out_shape);
  if (Y.numel() == 0) return;

  const int64_t a_count = shape_numel(a_batch), b_count = shape_numel(b_batch), count = shape_numel(batch);
  const size_t es = dtype_size(A.dtype());
  const auto* a = static_cast<const uint8_t*>(A.raw());
  const auto* b = static_cast<const uint8_t*>(B.raw());
  auto* y = static_cast<uint8_t*>(Y.mutable_raw());
  cpu::MatmulDims d;
  d.M = M, d.N = N, d.K = K;
  if (b_count == 1) {
    // One right-hand matrix: fold every batch of A into the rows of a single product.
    d.M = a_count * M;
    run_matmul(A.dtype(), d, a, b, y);
  } else if (a_full == b_full || a_count == 1) {
    d.batch = count;
    d.a_broadcast = a_count == 1;
    run_matmul(A.dtype(), d, a, b, y);
  } else {
    // General broadcast: one product per output batch, each operand indexed through its own
    // (broadcast) batch strides.
    std::vector<int64_t> a_str(nb, 0), b_str(nb, 0);
    for (int64_t i = static_cast<int64_t>(nb) - 1, sa = 1, sb = 1; i >= 0; --i) {
      if (a_full[i] != 1) a_str[i] = sa;
      if (b_full[i] != 1) b_str[i] = sb;
      sa *= a_full[i];
      sb *= b_full[i];
    }
    for (int64_t o = 0; o < count; ++o) {
      int64_t rem = o, ai = 0, bi = 0;
      for (int64_t i = static_cast<int64_t>(nb) - 1; i >= 0; --i) {
        int64_t idx = rem % batch[i];
        rem /= batch[i];
        ai += idx * a_str[i];
        bi += idx * b_str[i];
      }
      run_matmul(A.dtype(), d, a + ai * M * K * es, b + bi * K * N * es, y + o * M * N * es);
    }
  }
}

}  // namespace

void register_matmul_ops(OpRegistry& r) {
  r.add({"", "MatMul", 1, INT_MAX, matmul_kernel, nullptr, matmul_prepare, {InputRole::kData, InputRole::kWeight}});
}

}  // namespace reforge::ops::nn
