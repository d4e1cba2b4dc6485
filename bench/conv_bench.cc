// 3x3 convolution kernel benchmark: Winograd F(4x4, 3x3) (cpu::winograd_conv) against oneDNN's
// direct kernel on packed weights (cpu::dnnl_conv_*), interleaved in one run, same threads, on
// channel-blocked activations as the conv chain stores them. This is where
// winograd_tile()'s rule and winograd_conv's block sizes come from.
//
//   build/reforge_conv_bench [--layers 64x56,128x28,256x14,512x7] [--batch 1] [--threads 1]
//                            [--copies 3] [--repeat 9] [--tile 4|2]
//
// Each layer is CxHW: C -> C channels on an HW x HW image, pad 1 (ResNet-50's 3x3 stride-1
// layers by default). `--copies` distinct weight sets are cycled through, so the weights come
// from memory as in a model, not from cache. Prints per layer the median over --repeat passes
// (each: one convolution per copy) in ms per convolution, the ratio, and the largest
// difference between the two results. Not a test.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/dnnl_conv.h"
#include "backends/cpu/winograd.h"
#include "bench_util.h"

using namespace reforge;

using bench::median;
using bench::now_ms;

int main(int argc, char** argv) {
  std::string layers_s = "64x56,128x28,256x14,512x7";
  int64_t batch = 1, copies = 3;
  int threads = 1, repeat = 9, tile = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--layers")
      layers_s = v;
    else if (a == "--batch")
      batch = std::stoll(v);
    else if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--copies")
      copies = std::stoll(v);
    else if (a == "--repeat")
      repeat = std::stoi(v);
    else if (a == "--tile")
      tile = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  omp_set_num_threads(threads);
  if (cpu::activation_block() != 8) {
    std::fprintf(stderr, "this CPU's convolutions do not run in 8-channel blocks (block %lld)\n",
                 static_cast<long long>(cpu::activation_block()));
    return 1;
  }
  std::printf("batch=%lld threads=%d copies=%lld tile=%d\n", static_cast<long long>(batch), threads,
              static_cast<long long>(copies), tile);
  std::printf("%-10s %12s %12s %8s %10s\n", "layer", "oneDNN ms", "winograd ms", "ratio", "max diff");
  std::stringstream ss(layers_s);
  std::string item;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  while (std::getline(ss, item, ',')) {
    const int64_t C = std::stoll(item.substr(0, item.find('x'))), HW = std::stoll(item.substr(item.find('x') + 1));
    cpu::ConvDims d;
    d.src = {batch, C, HW, HW}, d.weights = {C, C, 3, 3}, d.dst = {batch, C, HW, HW};
    d.strides = {1, 1}, d.dilations = {1, 1}, d.pad_begin = {1, 1}, d.pad_end = {1, 1};
    d.has_bias = true;
    d.src_layout = d.dst_layout = cpu::ActLayout::Blocked;
    std::vector<float> x(static_cast<size_t>(batch * C * HW * HW)), bias(static_cast<size_t>(C));
    for (auto& v : x) v = nd(rng);
    for (auto& v : bias) v = nd(rng);
    const float scale = 1.0f / std::sqrt(9.0f * static_cast<float>(C));
    std::vector<std::vector<float>> w(static_cast<size_t>(copies), std::vector<float>(static_cast<size_t>(C * C * 9)));
    std::vector<std::shared_ptr<cpu::ConvWeightCache>> packed;
    std::vector<std::unique_ptr<cpu::WinogradWeights>> wino;
    for (auto& wc : w) {
      for (auto& v : wc) v = nd(rng) * scale;
      packed.push_back(cpu::make_conv_weight_cache());
      wino.push_back(std::make_unique<cpu::WinogradWeights>(wc.data(), C, C, tile));
    }
    std::vector<float> y0(x.size()), y1(x.size());
    cpu::ConvPostOps post;
    post.relu = true;
    std::vector<cpu::ConvHandle> prims;
    for (int64_t c = 0; c < copies; ++c) prims.push_back(cpu::dnnl_conv_primitive(d, post, packed[c].get()));
    if (!prims[0]) {
      std::fprintf(stderr, "oneDNN has no primitive for %s\n", item.c_str());
      return 1;
    }
    auto direct = [&] {
      for (int64_t c = 0; c < copies; ++c)
        cpu::dnnl_conv_execute(*prims[c], d, x.data(), w[c].data(), bias.data(), y0.data(), post, packed[c].get());
    };
    auto winograd = [&] {
      for (int64_t c = 0; c < copies; ++c)
        cpu::winograd_conv(d, x.data(), *wino[c], bias.data(), y1.data(), post, threads);
    };
    direct();
    winograd();
    std::vector<double> t0, t1;
    for (int r = 0; r < repeat; ++r) {
      double s = now_ms();
      direct();
      t0.push_back((now_ms() - s) / static_cast<double>(copies));
      s = now_ms();
      winograd();
      t1.push_back((now_ms() - s) / static_cast<double>(copies));
    }
    double diff = 0;
    for (size_t i = 0; i < y0.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(y0[i] - y1[i])));
    const double a = median(t0), b = median(t1);
    std::printf("%-10s %12.3f %12.3f %8.2f %10.2e\n", item.c_str(), a, b, b / a, diff);
  }
  return 0;
}
