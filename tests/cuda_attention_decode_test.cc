// The CUDA decoding attention kernel (backends/cuda/attention_decode.h) called directly with each
// split of the keys a launch can take (the launch's own choice, 32, 64, 128 and 256 keys a block,
// all keys in one block): every output element against a float64 computation of the same bfloat16
// inputs, within one unit in the last place of bfloat16 plus 1e-5 of the largest |V|, for a
// Llama-1B decoding shape (32 query heads over 8 key-value heads, head size 64) at context
// lengths below one split, of one odd split, and of many. DISABLED_CudaDecodeAttention.TimesSplits
// (run by name on the GPU machine) prints each split's time per launch on the decoding step of
// the 1.1B and 7B Llama shapes, with the keys and values cycled through 256 MB (as a step reads
// its layers' caches from memory, not from L2), replayed as a CUDA graph.
#include <gtest/gtest.h>
#ifdef REFORGE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "support/cuda_compare.h"

#ifdef REFORGE_HAVE_CUDA
#include "backends/cuda/attention_decode.h"
#endif

using namespace reforge;
using test_support::random_of;

#ifdef REFORGE_HAVE_CUDA
namespace {

struct DecodeShape {
  int64_t Hq, Hkv, L, D;
};

// A launch of the kernel on device copies of q [Hq, D], k and v [Hkv, L, D] (batch 1), no mask or scale.
cuda::DecodeAttention decoding(const DecodeShape& s, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& y,
                               int64_t split_keys) {
  cuda::DecodeAttention a;
  a.dtype = DType::BFloat16;
  a.q = q.raw();
  a.q_sb = s.Hq * s.D;
  a.q_sh = s.D;
  a.k = k.raw();
  a.v = v.raw();
  a.k_sb = a.v_sb = s.Hkv * s.L * s.D;
  a.k_sh = a.v_sh = s.L * s.D;
  a.k_ss = a.v_ss = s.D;
  a.y = y.mutable_raw();
  a.y_sb = s.Hq * s.D;
  a.y_sh = s.D;
  a.B = 1;
  a.Hq = s.Hq;
  a.L = s.L;
  a.D = s.D;
  a.group = s.Hq / s.Hkv;
  a.split_keys = split_keys;
  return a;
}

}  // namespace
#endif

TEST(CudaDecodeAttention, EverySplitOfTheKeysAgreesWithFloat64) {
  REQUIRE_GPU();
#ifdef REFORGE_HAVE_CUDA
  for (int64_t L : {40, 513, 2000}) {
    const DecodeShape s{32, 8, L, 64};
    const Tensor q = random_of(DType::BFloat16, {s.Hq, s.D}, 11);
    const Tensor k = random_of(DType::BFloat16, {s.Hkv, L, s.D}, 12, -0.5f, 0.5f);
    const Tensor v = random_of(DType::BFloat16, {s.Hkv, L, s.D}, 13);
    const Tensor qd = to_memory(q, Memory::Device), kd = to_memory(k, Memory::Device), vd = to_memory(v, Memory::Device);
    const int64_t group = s.Hq / s.Hkv;
    // The float64 reference: softmax(q k^T) v per query head.
    std::vector<double> want(static_cast<size_t>(s.Hq * s.D));
    double vmax = 0;
    for (int64_t x = 0; x < v.numel(); ++x) vmax = std::max(vmax, std::fabs(v.as_double(x)));
    for (int64_t h = 0; h < s.Hq; ++h) {
      const int64_t kh = h / group;
      std::vector<double> w(static_cast<size_t>(L));
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < L; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < s.D; ++e) dot += q.as_double(h * s.D + e) * k.as_double((kh * L + j) * s.D + e);
        w[static_cast<size_t>(j)] = dot;
        mx = std::max(mx, dot);
      }
      for (double& x : w) sum += x = std::exp(x - mx);
      for (int64_t e = 0; e < s.D; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < L; ++j) acc += w[static_cast<size_t>(j)] / sum * v.as_double((kh * L + j) * s.D + e);
        want[static_cast<size_t>(h * s.D + e)] = acc;
      }
    }
    for (int64_t split : {int64_t{0}, int64_t{32}, int64_t{64}, int64_t{128}, int64_t{256}, L}) {
      const std::string what = "L " + std::to_string(L) + ", split " + std::to_string(split);
      Tensor y = to_memory(Tensor::empty(DType::BFloat16, {s.Hq, s.D}), Memory::Device);
      const cuda::DecodeAttention a = decoding(s, qd, kd, vd, y, split);
      ASSERT_TRUE(cuda::decode_attention_fits(a)) << what;
      for (int twice = 0; twice < 2; ++twice) {  // the split's counters are reset by the launch that used them
        cuda::decode_attention(a);
        const Tensor got = to_host(y);
        int64_t bad = 0;
        for (int64_t i = 0; i < got.numel(); ++i) {
          const double wv = want[static_cast<size_t>(i)], g = got.as_double(i);
          const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(wv), 1e-30)) - 7);
          if (!(std::fabs(g - wv) <= ulp + 1e-5 * vmax) && bad++ < 5)
            ADD_FAILURE() << what << ": element " << i << " = " << g << ", want " << wv;
        }
        EXPECT_EQ(bad, 0) << what;
      }
    }
  }
#endif
}

#ifdef REFORGE_HAVE_CUDA
// Not a test: microseconds per launch of each split of the keys on a decoding step's attention
// (the Llama 1.1B shape, 32 query heads over 8 key-value heads, and the 7B shape, 32 over 32;
// head size 64 and 128), CUDA events over launches cycling through copies of the keys and values
// that fill 256 MB, and the copy floor (the bytes of the keys and values at 3 TB/s).
TEST(CudaDecodeAttention, DISABLED_TimesSplits) {
  REQUIRE_GPU();
  const std::vector<int64_t> splits = {0, 32, 64, 128, 256, 512, 1024};
  printf("%-26s %8s", "Hq/Hkv x L x D", "floor");
  for (int64_t sp : splits) printf(" %8s", sp ? std::to_string(sp).c_str() : "auto");
  printf("   (us per launch; columns: keys a block takes)\n");
  for (const DecodeShape& s : {DecodeShape{32, 8, 128, 64}, DecodeShape{32, 8, 513, 64}, DecodeShape{32, 8, 1024, 64},
                               DecodeShape{32, 8, 4096, 64}, DecodeShape{32, 32, 513, 128},
                               DecodeShape{32, 32, 4096, 128}}) {
    const size_t kv_bytes = static_cast<size_t>(2 * s.Hkv * s.L * s.D) * 2;
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t{256} << 20) / kv_bytes));
    std::vector<Tensor> ks, vs;
    for (int i = 0; i < copies; ++i) {
      ks.push_back(to_memory(Tensor::empty(DType::BFloat16, {s.Hkv, s.L, s.D}), Memory::Device));
      vs.push_back(to_memory(Tensor::empty(DType::BFloat16, {s.Hkv, s.L, s.D}), Memory::Device));
    }
    const Tensor q = to_memory(Tensor::empty(DType::BFloat16, {s.Hq, s.D}), Memory::Device);
    Tensor y = to_memory(Tensor::empty(DType::BFloat16, {s.Hq, s.D}), Memory::Device);
    const std::string name = std::to_string(s.Hq) + "/" + std::to_string(s.Hkv) + " x " + std::to_string(s.L) +
                             " x " + std::to_string(s.D);
    printf("%-26s %8.2f", name.c_str(), static_cast<double>(kv_bytes) / 3e12 * 1e6);
    for (int64_t sp : splits) {
      if (sp > s.L) {
        printf(" %8s", "-");
        continue;
      }
      // One launch a copy, recorded as a CUDA graph (as a decoding step replays), so that the host's
      // launch cost is not what is timed.
      const cudaStream_t st = cudaStreamPerThread;
      ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      for (int i = 0; i < copies; ++i)
        cuda::decode_attention(decoding(s, q, ks[static_cast<size_t>(i)], vs[static_cast<size_t>(i)], y, sp));
      cudaGraph_t graph = nullptr;
      ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
      cudaGraphExec_t exec = nullptr;
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);  // warm-up
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      const int reps = std::max(1, 400 / copies);
      cudaEventRecord(e0, st);
      for (int r = 0; r < reps; ++r) cudaGraphLaunch(exec, st);
      cudaEventRecord(e1, st);
      ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      printf(" %8.2f", ms * 1e3 / (reps * copies));
    }
    printf("\n");
  }
}
#endif
