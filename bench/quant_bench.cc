// Quantized Linear kernel benchmark: cpu::matmul_quant (int8 per channel, int4 in blocks, MatMulNBits'
// layout) on the shapes of a Llama-style decoder's Linear layers, Y[M, N] = X[M, K] x Wd[K, N].
//
//   build/reforge_quant_bench [--shapes 1024x32000,1024x2816,2816x1024,1024x1024] [--bits 8,4]
//                             [--block 32] [--rows 1] [--threads 1] [--mbytes 96] [--repeat 7]
//                             [--clock cpu] [--no-zp]
//
// Each shape is K x N (1024x32000: llama_s1's lm_head; 1024x2816 / 2816x1024: its MLP; 1024x1024:
// attention). Enough distinct weight matrices of a shape to hold --mbytes of quantized bytes (weights,
// scales, zero points) are cycled through, so the weights stream as in a model's single-token decoding
// rather than sit in the core's caches (--mbytes 0: one matrix, cache-resident: the kernel's work per
// weight alone). Prints per shape, width and M the median over --repeat passes of ms per product, the
// quantized bytes per second and the weights per nanosecond. The weights are random bytes and scales:
// the kernels' time does not depend on the values. `--clock cpu` times process CPU time (with
// --threads 1, the kernel's own time while other work loads the machine). Not a test.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/matmul_quant.h"
#include "bench_util.h"

using namespace reforge;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

bool g_cpu_clock = false;

// One quantized [K, N] weight with its own storage.
struct Weight {
  std::vector<uint8_t> q, zp;
  std::vector<float> scales;
  ops::quant::QuantMatrix m;
  double bytes = 0;
};

Weight make_weight(int bits, int64_t block, int64_t K, int64_t N, bool zp, std::mt19937& rng) {
  Weight w;
  w.m.shape = ops::quant::quant_shape(bits, bits == 8 ? 0 : block, K, N, "quant_bench");
  const auto& s = w.m.shape;
  w.q.resize(static_cast<size_t>(bits == 8 ? N * K : N * s.n_blocks * s.blob));
  for (auto& b : w.q) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> uni(0.001f, 0.01f);
  w.scales.resize(static_cast<size_t>(s.num_scales()));
  for (auto& f : w.scales) f = uni(rng);
  if (bits == 4 && zp) {
    w.zp.resize(static_cast<size_t>(s.num_zero_points()));
    for (auto& b : w.zp) b = static_cast<uint8_t>(rng());
    w.m.zero_points = w.zp.data();
  }
  w.m.q = w.q.data();
  w.m.scales = w.scales.data();
  w.bytes = static_cast<double>(w.q.size() + w.zp.size() + w.scales.size() * sizeof(float));
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shapes_s = "1024x32000,1024x2816,2816x1024,1024x1024", bits_s = "8,4", rows_s = "1";
  int64_t block = 32;
  int threads = 1, repeat = 7;
  double mbytes = 96;
  bool zp = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-zp") {
      zp = false;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "option %s needs a value\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--shapes")
      shapes_s = v;
    else if (a == "--bits")
      bits_s = v;
    else if (a == "--block")
      block = std::stoll(v);
    else if (a == "--rows")
      rows_s = v;
    else if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--mbytes")
      mbytes = std::stod(v);
    else if (a == "--repeat")
      repeat = std::stoi(v);
    else if (a == "--clock")
      g_cpu_clock = v == "cpu";
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  omp_set_num_threads(threads);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::printf("threads=%d block=%lld zero points %s, %.0f MB of weights per shape and width\n", threads,
              static_cast<long long>(block), zp ? "stored" : "absent (8)", mbytes);
  std::printf("%-12s %4s %4s %7s %10s %10s %12s\n", "K x N", "bits", "M", "copies", "ms", "GB/s", "weights/ns");
  for (const std::string& shape : split(shapes_s, ',')) {
    const auto kn = split(shape, 'x');
    if (kn.size() != 2) {
      std::fprintf(stderr, "shape %s is not KxN\n", shape.c_str());
      return 2;
    }
    const int64_t K = std::stoll(kn[0]), N = std::stoll(kn[1]);
    for (const std::string& bits_str : split(bits_s, ',')) {
      const int bits = std::stoi(bits_str);
      std::vector<Weight> ws;
      ws.push_back(make_weight(bits, block, K, N, zp, rng));
      while (static_cast<double>(ws.size()) * ws[0].bytes < mbytes * 1e6)
        ws.push_back(make_weight(bits, block, K, N, zp, rng));
      for (const std::string& m_str : split(rows_s, ',')) {
        const int64_t M = std::stoll(m_str);
        std::vector<float> x(static_cast<size_t>(M * K)), y(static_cast<size_t>(M * N));
        for (auto& v : x) v = uni(rng);
        std::vector<double> t;
        for (int r = 0; r < repeat + 1; ++r) {
          const double t0 = bench::now_ms(g_cpu_clock);
          for (const Weight& w : ws) cpu::matmul_quant(w.m, M, x.data(), K, nullptr, y.data(), N, threads);
          const double t1 = bench::now_ms(g_cpu_clock);
          if (r > 0) t.push_back((t1 - t0) / static_cast<double>(ws.size()));  // the first pass warms up
        }
        const double ms = bench::median(t);
        std::printf("%-12s %4d %4lld %7zu %10.4f %10.2f %12.3f\n", shape.c_str(), bits, static_cast<long long>(M),
                    ws.size(), ms, ws[0].bytes / ms / 1e6, static_cast<double>(K * N) / ms / 1e6);
      }
    }
  }
  return 0;
}
