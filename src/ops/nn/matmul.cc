// MatMul's reference kernel and the shape logic every backend's MatMul shares (matmul.h).
#include "ops/nn/matmul.h"

#include <cstring>

namespace reforge::ops::nn {

void matmul_reference_product(DType dtype, const MatmulDims& d, const void* a, const void* b, void* c) {
  matmul_product(dtype, d, a, b, c, matmul_ref<float>);
}

void matmul_run(KernelContext& ctx, MatmulProduct product) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
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
  MatmulDims d;
  d.M = M, d.N = N, d.K = K;
  if (b_count == 1) {
    // One right-hand matrix: fold every batch of A into the rows of a single product.
    d.M = a_count * M;
    product(A.dtype(), d, a, b, y);
  } else if (a_full == b_full || a_count == 1) {
    d.batch = count;
    d.a_broadcast = a_count == 1;
    product(A.dtype(), d, a, b, y);
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
      product(A.dtype(), d, a + ai * M * K * es, b + bi * K * N * es, y + o * M * N * es);
    }
  }
}

namespace {

void matmul_kernel(KernelContext& ctx) { matmul_run(ctx, matmul_reference_product); }

}  // namespace

void register_matmul_ops(OpRegistry& r) {
  r.add({"", "MatMul", 1, INT_MAX, matmul_kernel, nullptr, nullptr, {InputRole::kData, InputRole::kWeight}});
}

}  // namespace reforge::ops::nn
