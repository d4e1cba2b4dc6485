// The CUDA backend's products of a few rows on 16-bit operands (backends/cuda/gemv.h: a decoding
// step's MatMuls), against a float64 product of the same 16-bit values: every element within one
// unit in the last place of the output type plus the float32 accumulation's bound (K * 2^-24 times
// the sum of |a b| terms). Shapes: 1 to 8 rows (and a batch of rows sharing the weight), widths
// that fill a block's 256 columns, leave part of one, or are a single group of 8; depths below a
// block's eight warps, uneven, and long enough to be split across blocks (the last block adds the
// slices); every product runs twice (the split's counters are reset by the product that used
// them). The MatMul nodes of plans (cuBLASLt) agree with the same reference. DISABLED_CudaGemv.TimesAgainstCublasLt (run by name on the GPU machine)
// prints the kernel's bandwidth against cuBLASLt's on a decoding step's shapes.
#include <gtest/gtest.h>
#ifdef REFORGE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/gemv.h"
#include "builder/builder.h"
#include "core/half.h"
#include "runtime/plan_engine.h"
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

// Expects `got` to be A B ([..., K] x [K, N]) within the bound above, element by element.
void expect_product(const Tensor& got, const Tensor& a, const Tensor& b, const std::string& what) {
  const DType dtype = a.dtype();
  const int64_t K = b.dim(0), N = b.dim(1), rows = a.numel() / K;
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
  ASSERT_EQ(got.numel(), rows * N) << what;
  int64_t bad = 0;
  for (int64_t i = 0; i < rows * N; ++i) {
    const double w = want[static_cast<size_t>(i)];
    const double tol = ulp(dtype, w) + static_cast<double>(K) * 0x1.0p-24 * mass[static_cast<size_t>(i)];
    const double g_v = got.as_double(i);
    if (!(std::fabs(g_v - w) <= tol) && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " = " << g_v << ", want " << w << " (tolerance " << tol << ")";
  }
  EXPECT_EQ(bad, 0) << what;
}

// Checks C = A B for `a_shape` [..., K] x [K, N]: through the kernel itself at 1 and 4 blocks per
// multiprocessor (a split of few and of many slices) with 4 and 8 rows in flight, or (engine) as
// a MatMul node of a plan (cuBLASLt).
void check_product(DType dtype, const Shape& a_shape, int64_t K, int64_t N, uint32_t seed, bool engine = false) {
  const Tensor a = test_support::random_of(dtype, a_shape, seed, -1.0f, 1.0f);
  const Tensor b = test_support::random_of(dtype, {K, N}, seed + 1, -1.0f, 1.0f);
  const int64_t rows = a.numel() / K;
  const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(a_shape) + " x [" + std::to_string(K) +
                           ", " + std::to_string(N) + "]" + (engine ? " (MatMul node)" : "");
  if (engine) {
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
    for (int round = 0; round < 2; ++round) expect_product(e.run({{"A", a}})[0], a, b, what + " round " + std::to_string(round));
    return;
  }
  const Tensor da = to_memory(a, Memory::Device), db = to_memory(b, Memory::Device);
  Tensor dc = device_memory().allocate(dtype, {rows, N});
  ops::nn::MatmulDims d;
  d.M = rows;
  d.K = K;
  d.N = N;
  for (int unroll : {4, 8})
    for (int per_sm : {1, 4})
      for (int round = 0; round < 2; ++round) {  // the split's counters are reset by the product that used them
        ASSERT_TRUE(cuda::gemv_product(dtype, d, da.raw(), db.raw(), dc.mutable_raw(), per_sm, unroll)) << what;
        expect_product(to_host(dc), a, b,
                       what + " " + std::to_string(unroll) + " rows in flight, " + std::to_string(per_sm) +
                           " blocks per multiprocessor, round " + std::to_string(round));
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

// The kernel on B stored transposed (Bt [N, K]): every rows-per-warp and slice count, and the
// slices chosen from the shape, against the float64 product.
TEST(CudaGemv, TransposedWeightProductsEqualTheFloat64Product) {
  REQUIRE_GPU();
  uint32_t seed = 101;
  for (DType t : {DType::BFloat16, DType::Float16})
    for (int64_t rows : {1, 2, 3, 4, 8})
      for (auto [K, N] : {std::pair<int64_t, int64_t>{8, 1}, {40, 7}, {264, 13}, {2048, 512}, {8192, 130}, {1032, 2051}}) {
        const Tensor a = test_support::random_of(t, {rows, K}, seed += 2, -1.0f, 1.0f);
        const Tensor b = test_support::random_of(t, {K, N}, seed + 1, -1.0f, 1.0f);
        Tensor bt = Tensor::empty(t, {N, K});
        for (int64_t k = 0; k < K; ++k)
          for (int64_t n = 0; n < N; ++n)
            std::memcpy(static_cast<char*>(bt.mutable_raw()) + (n * K + k) * 2,
                        static_cast<const char*>(b.raw()) + (k * N + n) * 2, 2);
        const Tensor da = to_memory(a, Memory::Device), dbt = to_memory(bt, Memory::Device);
        const std::string what = std::string(dtype_name(t)) + " [" + std::to_string(rows) + ", " + std::to_string(K) +
                                 "] x [" + std::to_string(N) + ", " + std::to_string(K) + "]^T";
        for (int r : {1, 2, 4})
          for (int sl : {0, 1, 2, 4, 8}) {
            Tensor dc = device_memory().allocate(t, {rows, N});
            ASSERT_TRUE(cuda::gemv_product_nt(t, rows, K, N, da.raw(), dbt.raw(), dc.mutable_raw(), r, sl)) << what;
            expect_product(to_host(dc), a, b, what + " " + std::to_string(r) + " rows per warp, " + std::to_string(sl) + " slices");
          }
      }
  // Several products of one A in one launch.
  for (int64_t rows : {1, 3})
    for (int64_t K : {264, 2048}) {
      const DType t = DType::BFloat16;
      const Tensor a = test_support::random_of(t, {rows, K}, seed += 2, -1.0f, 1.0f);
      const Tensor da = to_memory(a, Memory::Device);
      std::vector<Tensor> bs, dbts, dcs;
      std::vector<cuda::GemvOutput> outs;
      for (int64_t N : {13, 512, 7, 2056}) {
        bs.push_back(test_support::random_of(t, {K, N}, seed += 2, -1.0f, 1.0f));
        Tensor bt = Tensor::empty(t, {N, K});
        for (int64_t k = 0; k < K; ++k)
          for (int64_t n = 0; n < N; ++n)
            std::memcpy(static_cast<char*>(bt.mutable_raw()) + (n * K + k) * 2,
                        static_cast<const char*>(bs.back().raw()) + (k * N + n) * 2, 2);
        dbts.push_back(to_memory(bt, Memory::Device));
        dcs.push_back(device_memory().allocate(t, {rows, N}));
        outs.push_back({dbts.back().raw(), dcs.back().mutable_raw(), N});
      }
      ASSERT_TRUE(cuda::gemv_products_nt(t, rows, K, da.raw(), outs));
      for (size_t i = 0; i < bs.size(); ++i)
        expect_product(to_host(dcs[i]), a, bs[i],
                       "group of four, rows " + std::to_string(rows) + " K " + std::to_string(K) + " product " + std::to_string(i));
    }
}

// As MatMul nodes of plans (cuBLASLt): a batch of rows sharing the weight, large and small
// weights, to the same bound.
TEST(CudaGemv, MatMulNodesAgree) {
  REQUIRE_GPU();
  check_product(DType::BFloat16, {2, 1, 2048}, 2048, 8192, 7, true);
  check_product(DType::Float16, {1, 4096}, 4096, 4104, 9, true);
  check_product(DType::BFloat16, {2, 3, 640}, 640, 1032, 11, true);
  check_product(DType::BFloat16, {3, 4, 512}, 512, 264, 13, true);
}

// group-matmuls (passes/matmul_group.cc) on a CUDA plan: the products of one input by constant
// matrices of its type become reforge::MatMulGroup nodes of at most four, in graph order (six
// products: a group of four and one of two); a product by a graph input and one of another
// input stay MatMuls. On the CPU the group's outputs are bit-equal to the MatMuls'. With a GPU: every output
// equals the float64 product within the bound above, for a decoding step's one row (one launch
// of the kernel: the query, key and value shapes of the 1.1B Llama) and for a prompt's rows
// (each product on its own), and the weights stay refittable sources.
TEST(CudaGemv, ProductsOfOneInputRunAsAGroup) {
  REQUIRE_CUDA_BUILD();
  for (const Shape& x_shape : {Shape{1, 1, 2048}, Shape{2, 9, 2048}}) {
    const DType t = DType::BFloat16;
    ir::Graph g;
    g.name = "group";
    g.ir_version = 10;
    g.opsets[""] = 17;
    g.inputs.push_back(test_support::value_info("X", t, x_shape));
    g.inputs.push_back(test_support::value_info("Z", t, {2048, 8}));
    g.inputs.push_back(test_support::value_info("U", t, x_shape));
    const std::vector<int64_t> widths = {2048, 512, 512, 64, 8, 256};
    std::vector<Tensor> weights;
    ir::ValueInfo out;
    for (size_t i = 0; i < widths.size(); ++i) {
      const std::string w = "W" + std::to_string(i), y = "Y" + std::to_string(i);
      weights.push_back(test_support::random_of(t, {2048, widths[i]}, 300 + static_cast<uint32_t>(i), -1.0f, 1.0f));
      g.initializers[w] = weights.back();
      g.nodes.push_back(test_support::node(y, "MatMul", {"X", w}));
      out.name = y;
      g.outputs.push_back(out);
    }
    g.initializers["V"] = test_support::random_of(t, {2048, 16}, 310, -1.0f, 1.0f);
    g.initializers["R"] = test_support::random_of(t, {16, 8}, 311, -1.0f, 1.0f);
    for (auto [y, a, b] : {std::tuple<const char*, const char*, const char*>{"YZ", "X", "Z"}, {"YU", "U", "V"}}) {
      g.nodes.push_back(test_support::node(y, "MatMul", {a, b}));
      out.name = y;
      g.outputs.push_back(out);
    }
    g.nodes.push_back(test_support::node("YR", "MatMul", {"YU", "R"}));
    out.name = "YR";
    g.outputs.push_back(out);
    build::BuildOptions o;
    o.mode = plan::BuildMode::Refit;
    o.backend = "cuda";
    plan::Plan p = build::build_plan(g, o);
    // transpose-linear-weights then stores every constant matrix transposed: the groups, and the
    // lone products by a constant as groups of one.
    std::vector<std::vector<std::string>> groups;
    int matmuls = 0, lone = 0;
    for (const ir::Node& n : p.graph.nodes) {
      if (n.domain == "reforge" && n.op_type == "MatMulGroup") {
        EXPECT_EQ(n.attrs.count("transposed") ? n.attrs.at("transposed").i : 0, 1) << n.label();
        if (n.outputs.size() > 1)
          groups.push_back(n.outputs);
        else
          ++lone;
      }
      matmuls += n.domain.empty() && n.op_type == "MatMul";
    }
    ASSERT_EQ(groups.size(), 2u);
    // (graph outputs made on the device carry placement's suffix until copied to the host)
    EXPECT_EQ(groups[0], (std::vector<std::string>{"Y0::device", "Y1::device", "Y2::device", "Y3::device"}));
    EXPECT_EQ(groups[1], (std::vector<std::string>{"Y4::device", "Y5::device"}));
    EXPECT_EQ(lone, 2);
    EXPECT_EQ(matmuls, 1);
    EXPECT_EQ(p.sources.size(), 8u);
    // The CPU runs the group's products one by one: bit-equal to the plan without the pass.
    const Tensor x = test_support::random_of(t, x_shape, 320, -1.0f, 1.0f);
    const Tensor z = test_support::random_of(t, {2048, 8}, 321, -1.0f, 1.0f);
    const std::map<std::string, Tensor> feeds = {{"X", x}, {"Z", z}, {"U", x}};
    o.backend = "cpu";
    const std::vector<Tensor> grouped = runtime::PlanEngine(build::build_plan(g, o)).run(feeds);
    o.skip_passes = {"group-matmuls"};
    const std::vector<Tensor> plain = runtime::PlanEngine(build::build_plan(g, o)).run(feeds);
    ASSERT_EQ(grouped.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i)
      EXPECT_EQ(0, std::memcmp(grouped[i].raw(), plain[i].raw(), plain[i].nbytes())) << "CPU output " << i;
    if (!test_support::no_gpu().empty()) continue;
    const std::vector<Tensor> got = runtime::PlanEngine(std::move(p)).run(feeds);
    for (size_t i = 0; i < widths.size(); ++i)
      expect_product(got[i], x, weights[i], "Y" + std::to_string(i) + " of X" + shape_str(x_shape));
  }
}

#ifdef REFORGE_HAVE_CUDA
// Not a test: bandwidth of the kernel (4 and 8 rows in flight, at 1, 2 and 4 blocks per multiprocessor) and of cuBLASLt
// on the products of a Llama decoding step (1.1B and 7B shapes), each timed with CUDA events over
// weights cycled through 512 MB of copies (as a step streams them from memory, not from L2).
TEST(CudaGemv, DISABLED_TimesAgainstCublasLt) {
  REQUIRE_GPU();
  struct Shape2 {
    int64_t M, K, N;
  };
  const std::vector<Shape2> shapes = {{1, 2048, 2048}, {1, 2048, 512},  {1, 2048, 8192}, {1, 8192, 2048},
                                      {1, 2048, 32000}, {1, 4096, 4096}, {1, 4096, 11008}, {1, 11008, 4096},
                                      {4, 2048, 8192}, {8, 2048, 8192}};
  printf("%-22s %9s %9s %9s %9s %9s %9s %9s   (GB/s of the weights; gemv rows in flight / blocks per SM)\n",
         "M x K x N", "4/1", "4/2", "4/4", "8/1", "8/2", "8/4", "cuBLASLt");
  printf("  | Bt (B stored [N, K]): cuBLASLt, then the transposed kernel at rows per warp / slices 2/auto 1/auto 4/auto 2/1 1/8\n");
  for (const Shape2& sh : shapes) {
    const size_t wbytes = static_cast<size_t>(sh.K * sh.N) * 2;
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t{512} << 20) / wbytes));
    std::vector<Tensor> w;
    for (int i = 0; i < copies; ++i) w.push_back(device_memory().allocate(DType::BFloat16, {sh.K, sh.N}));
    for (Tensor& t : w) cudaMemset(t.mutable_raw(), 0, wbytes);
    Tensor a = device_memory().allocate(DType::BFloat16, {sh.M, sh.K});
    Tensor c = device_memory().allocate(DType::BFloat16, {sh.M, sh.N});
    cudaMemset(a.mutable_raw(), 0, static_cast<size_t>(sh.M * sh.K) * 2);
    ops::nn::MatmulDims d;
    d.M = sh.M;
    d.K = sh.K;
    d.N = sh.N;
    auto time = [&](const std::function<void(const void*)>& product) {
      for (int i = 0; i < copies; ++i) product(w[static_cast<size_t>(i)].raw());
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      const int iters = std::max(copies, 200);
      cudaEventRecord(e0, cudaStreamPerThread);
      for (int i = 0; i < iters; ++i) product(w[static_cast<size_t>(i % copies)].raw());
      cudaEventRecord(e1, cudaStreamPerThread);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      return static_cast<double>(wbytes) * iters / (ms * 1e-3) / 1e9;
    };
    double g[6];
    const int per_sm[3] = {1, 2, 4};
    for (int v = 0; v < 6; ++v)
      g[v] = time([&](const void* b) {
        ASSERT_TRUE(cuda::gemv_product(DType::BFloat16, d, a.raw(), b, c.mutable_raw(), per_sm[v % 3], v < 3 ? 4 : 8));
      });
    const double lt = time([&](const void* b) { cuda::cublaslt_product(DType::BFloat16, d, a.raw(), b, c.mutable_raw()); });
    ops::nn::MatmulDims dt = d;
    dt.trans_b = true;
    const double lt_t = time([&](const void* b) { cuda::cublaslt_product(DType::BFloat16, dt, a.raw(), b, c.mutable_raw()); });
    const int nt_cfg[5][2] = {{2, 0}, {1, 0}, {4, 0}, {2, 1}, {1, 8}};
    double nt[5];
    for (int v = 0; v < 5; ++v)
      nt[v] = time([&](const void* b) {
        ASSERT_TRUE(cuda::gemv_product_nt(DType::BFloat16, sh.M, sh.K, sh.N, a.raw(), b, c.mutable_raw(), nt_cfg[v][0], nt_cfg[v][1]));
      });
    const std::string name = std::to_string(sh.M) + " x " + std::to_string(sh.K) + " x " + std::to_string(sh.N);
    printf("%-22s %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f | Bt: %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f\n", name.c_str(), g[0], g[1], g[2],
           g[3], g[4], g[5], lt, lt_t, nt[0], nt[1], nt[2], nt[3], nt[4]);
  }
}
#endif

}  // namespace
