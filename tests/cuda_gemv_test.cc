// The CUDA backend's products of a few rows on 16-bit operands (backends/cuda/gemv.h: a decoding
// step's MatMuls), against a float64 product of the same 16-bit values: every element within one
// unit in the last place of the output type plus the float32 accumulation's bound (K * 2^-24 times
// the sum of |a b| terms). Shapes: 1 to 8 rows (and a batch of rows sharing the weight), widths
// that fill a block's 256 columns, leave part of one, or are a single group of 8; depths below a
// block's eight warps, uneven, and long enough to be split across blocks (the last block adds the
// slices); every product runs twice (the split's counters are reset by the product that used
// them).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/half.h"
#include "support/cuda_compare.h"
#include "support/engine_for.h"

using namespace reforge;

namespace {

// One unit in the last place of `v` in `dtype` (bfloat16: 8 significant bits, float16: 11).
double ulp(DType dtype, double v) {
  const int bits = dtype == DType::BFloat16 ? 8 : 11;
  const double a = std::max(std::fabs(v), dtype == DType::BFloat16 ? 1e-30 : 6.1e-5);
  return std::ldexp(1.0, std::ilogb(a) - (bits - 1));
}

void check_product(DType dtype, const Shape& a_shape, int64_t K, int64_t N, uint32_t seed) {
  const Tensor a = test_support::random_of(dtype, a_shape, seed, -1.0f, 1.0f);
  const Tensor b = test_support::random_of(dtype, {K, N}, seed + 1, -1.0f, 1.0f);
  ir::Graph g;
  g.name = "gemv";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs.push_back(test_support::value_info("A", dtype, a_shape));
  g.initializers["B"] = b;
  g.nodes.push_back(test_support::node("Y", "MatMul", {"A", "B"}));
  ir::ValueInfo y;
  y.name = "Y";
  g.outputs.push_back(y);
  const runtime::Engine e = test_support::engine_for(g, {}, "cuda");
  const int64_t rows = a.numel() / K;
  const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(a_shape) + " x [" + std::to_string(K) +
                           ", " + std::to_string(N) + "]";
  std::vector<double> av(static_cast<size_t>(a.numel())), bv(static_cast<size_t>(b.numel()));
  for (size_t i = 0; i < av.size(); ++i) av[i] = a.as_double(static_cast<int64_t>(i));
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = b.as_double(static_cast<int64_t>(i));
  std::vector<double> want(static_cast<size_t>(rows * N), 0.0), mass(want.size(), 0.0);
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t k = 0; k < K; ++k) {
      const double x = av[static_cast<size_t>(m * K + k)];
      for (int64_t n = 0; n < N; ++n) {
        const double t = x * bv[static_cast<size_t>(k * N + n)];
        want[static_cast<size_t>(m * N + n)] += t;
        mass[static_cast<size_t>(m * N + n)] += std::fabs(t);
      }
    }
  for (int round = 0; round < 2; ++round) {
    const Tensor got = e.run({{"A", a}})[0];
    ASSERT_EQ(got.numel(), rows * N) << what;
    int64_t bad = 0;
    for (int64_t i = 0; i < rows * N; ++i) {
      const double w = want[static_cast<size_t>(i)];
      const double tol = ulp(dtype, w) + static_cast<double>(K) * 0x1.0p-24 * mass[static_cast<size_t>(i)];
      const double g_v = got.as_double(i);
      if (!(std::fabs(g_v - w) <= tol) && bad++ < 5)
        ADD_FAILURE() << what << " round " << round << ": element " << i << " = " << g_v << ", want " << w
                      << " (tolerance " << tol << ")";
    }
    EXPECT_EQ(bad, 0) << what << " round " << round;
  }
}

TEST(CudaGemv, FewRowsOfSixteenBitProductsEqualTheFloat64Product) {
  REQUIRE_GPU();
  uint32_t seed = 1;
  for (DType t : {DType::BFloat16, DType::Float16})
    for (int64_t rows : {1, 2, 3, 5, 8})
      for (auto [K, N] : {std::pair<int64_t, int64_t>{1, 8}, {5, 264}, {33, 256}, {300, 520}, {2048, 2048},
                          {8192, 512}, {1024, 4104}})
        check_product(t, {rows, K}, K, N, seed += 2);
}

TEST(CudaGemv, BatchOfRowsSharingTheWeight) {
  REQUIRE_GPU();
  check_product(DType::BFloat16, {2, 3, 640}, 640, 1032, 7);
  check_product(DType::Float16, {4, 1, 2048}, 2048, 256, 9);
  // Past the kernel's rows: cuBLASLt, to the same bound.
  check_product(DType::BFloat16, {3, 4, 512}, 512, 264, 11);
}

}  // namespace
