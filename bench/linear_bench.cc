// Linear-layer kernel benchmark: Y[M, N] = X[M, K] x W[K, N], the streaming kernel
// (cpu::gemv_rows), oneDNN on its packed weights (cpu::dnnl_matmul_packed; bfloat16 only where
// the CPU multiplies it natively), OpenBLAS (cpu::blas_linear; bfloat16: blas_linear_widened)
// and reforge's panels (cpu::sgemm_panels, float32 or bfloat16 panels), interleaved in one run,
// same threads. This is where gemv_max_rows() and prefer_blas_linear() come from.
//
//   build/reforge_linear_bench [--k 1024] [--n 2816] [--rows 1,2,4,8,16] [--threads 1]
//                              [--dtype f32|bf16] [--layers 24] [--repeat 7]
//
// `--layers` distinct weight matrices are cycled through, so W streams from memory as in a
// model (24 x 1024 x 2816 float32 = 277 MB), not from cache. Prints per M the median over
// --repeat passes (each: one product per layer) of each kernel, in ms per product and in GB/s
// of weights, and their ratio. `--clock cpu` times process CPU time instead of wall time: with
// --threads 1 that is the kernel's own time even while other work loads the machine. Not a test.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/blas_gemm.h"
#include "backends/cpu/dnnl_matmul.h"
#include "backends/cpu/gemv.h"
#include "backends/cpu/sgemm_panels.h"
#include "bench_util.h"
#include "core/half.h"
#include "core/tensor.h"

using namespace reforge;

namespace {

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
  return out;
}

bool g_cpu_clock = false;

double now_ms() { return bench::now_ms(g_cpu_clock); }
using bench::median;

}  // namespace

int main(int argc, char** argv) {
  int64_t K = 1024, N = 2816, layers = 24;
  int threads = 1, repeat = 7;
  std::string rows_s = "1,2,4,8,16", dtype_s = "f32";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--k")
      K = std::stoll(v);
    else if (a == "--n")
      N = std::stoll(v);
    else if (a == "--rows")
      rows_s = v;
    else if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--dtype")
      dtype_s = v;
    else if (a == "--layers")
      layers = std::stoll(v);
    else if (a == "--repeat")
      repeat = std::stoi(v);
    else if (a == "--clock")
      g_cpu_clock = v == "cpu";
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  const DType dt = dtype_s == "bf16" ? DType::BFloat16 : DType::Float32;
  omp_set_num_threads(threads);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<Tensor> ws;
  std::vector<std::shared_ptr<const cpu::PackedWeights>> packed;
  std::vector<void*> panels;  // float32, or bfloat16 panels (16-bit panels of sgemm_panels.h)
  for (int64_t l = 0; l < layers; ++l) {
    Tensor w = Tensor::uninitialized(dt, {K, N});
    for (int64_t i = 0; i < K * N; ++i) {
      float f = uni(rng);
      if (dt == DType::Float32)
        w.mutable_data<float>()[i] = f;
      else
        w.mutable_data<bfloat16>()[i] = bfloat16(f);
    }
    packed.push_back(cpu::pack_weights(K, N, false, dt, w.raw(), 256, std::make_shared<Tensor>(w)));
    panels.push_back(std::aligned_alloc(64, (cpu::panel_floats(K, N) * dtype_size(dt) + 63) / 64 * 64));
    if (dt == DType::Float32)
      cpu::pack_panels(w.data<float>(), K, N, false, static_cast<float*>(panels.back()));
    else
      cpu::pack_panels16(static_cast<const uint16_t*>(w.raw()), K, N, false, static_cast<uint16_t*>(panels.back()));
    ws.push_back(std::move(w));
  }
  const double wbytes = static_cast<double>(K * N * dtype_size(dt));
  std::printf("K=%lld N=%lld %s threads=%d layers=%lld (%.0f MB of weights)\n", static_cast<long long>(K),
              static_cast<long long>(N), dtype_s.c_str(), threads, static_cast<long long>(layers),
              wbytes * layers / 1e6);
  std::printf("%4s %12s %10s %12s %10s %12s %8s %8s\n", "M", "stream ms", "GB/s", "oneDNN ms", "GB/s", "OpenBLAS ms",
              "s/dnnl", "blas/dnnl");
  std::printf(
      "     (panels: prepacked sgemm_panels, ms and its ratio to OpenBLAS; oneDNN -: no product for this type)\n");
  for (int64_t M : parse_list(rows_s)) {
    std::vector<float> x(static_cast<size_t>(M * K)), y(static_cast<size_t>(M * N));
    for (auto& v : x) v = uni(rng);
    std::vector<double> ts, td, tb, tp;
    for (int r = 0; r < repeat + 1; ++r) {
      const double t0 = now_ms();
      for (int64_t l = 0; l < layers; ++l)
        cpu::gemv_rows(M, N, K, x.data(), K, ws[l].raw(), dt, nullptr, y.data(), N, threads);
      const double t1 = now_ms();
      for (int64_t l = 0; l < layers; ++l)
        if (packed[l] && !cpu::dnnl_matmul_packed(*packed[l], M, x.data(), nullptr, y.data())) std::abort();
      const double t2 = now_ms();
      for (int64_t l = 0; l < layers; ++l) {
        if (dt == DType::Float32)
          cpu::blas_linear(M, N, K, x.data(), ws[l].data<float>(), nullptr, y.data());
        else
          cpu::blas_linear_widened(M, N, K, x.data(), ws[l].raw(), dt, nullptr, y.data());
      }
      const double t3 = now_ms();
      for (int64_t l = 0; l < layers; ++l)
        cpu::sgemm_panels(M, N, K, x.data(), K, panels[l], dt, nullptr, y.data(), N, threads);
      const double t4 = now_ms();
      if (r == 0) continue;  // warm-up (primitive creation)
      ts.push_back((t1 - t0) / static_cast<double>(layers));
      td.push_back((t2 - t1) / static_cast<double>(layers));
      tb.push_back((t3 - t2) / static_cast<double>(layers));
      tp.push_back((t4 - t3) / static_cast<double>(layers));
    }
    const double s = median(ts), d = median(td), b = median(tb), pn = tp.empty() ? 0.0 : median(tp);
    if (packed[0])
      std::printf("%4lld %12.3f %10.1f %12.3f %10.1f %12.3f %8.2f %8.2f  panels %8.3f %6.2f\n",
                  static_cast<long long>(M), s, wbytes / s / 1e6, d, wbytes / d / 1e6, b, s / d, b / d, pn, pn / b);
    else  // no oneDNN product for this type here
      std::printf("%4lld %12.3f %10.1f %12s %10s %12.3f %8s %8s  panels %8.3f %6.2f\n", static_cast<long long>(M), s,
                  wbytes / s / 1e6, "-", "-", b, "-", "-", pn, pn / b);
  }
  return 0;
}
