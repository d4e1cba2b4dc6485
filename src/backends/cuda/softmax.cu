// Softmax and LogSoftmax on the GPU, with the CPU's shape logic (ops/reduce/softmax.cc): before
// opset 13 the input is coerced to 2-D at `axis` and normalized over the second dimension, from
// opset 13 along `axis` alone; both become blocks [outer, n, inner] normalized over n. Each of the
// outer * inner rows (n elements, stride inner) is handled by one group of threads (a warp, or a
// block for long rows): the max (NaN never adopted, as std::max on the CPU), then the sum of
// exp(x - max) by a deterministic tree, then the outputs. float32 and float64 compute in their
// own type; 16-bit Softmax rounds where the CPU rounds: x - max, exp, the sum (accumulated in
// float and rounded once, or, with the reference's rounding (ops/numerics.h), per addition in
// order, except float16 over a contiguous axis) and the quotient; 16-bit LogSoftmax computes in
// float32 and rounds once.
#include <algorithm>
#include <limits>
#include <type_traits>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/group_reduce.cuh"
#include "backends/cuda/launch.h"
#include "ops/numerics.h"
#include "ops/reduce/softmax.h"

namespace reforge::cuda {

namespace {

constexpr int64_t kBlockRow = 2048;

// v rounded to the 16-bit type T and back.
template <typename T>
__device__ __forceinline__ float round_to(float v) {
  const T t = store_c<T>(v);
  return load_c(&t, 0);
}

template <int G, typename T, bool Log>
__global__ void softmax_rows(const T* x, T* y, int64_t rows, int64_t n, int64_t inner, bool reference) {
  using C = compute_t<T>;
  constexpr bool narrow = !std::is_same_v<T, C>;
  constexpr int groups = kGroupThreads / G;
  const int lane = threadIdx.x % G;
  // With the reference's rounding, 16-bit sums round after each addition (but float16 over a
  // contiguous axis); otherwise they accumulate in float.
  const bool rounded_sum = reference && narrow && !Log && !(std::is_same_v<T, __half> && inner == 1);
  for (int64_t first = int64_t{blockIdx.x} * groups; first < rows; first += int64_t{gridDim.x} * groups) {
    const int64_t row = first + threadIdx.x / G;
    const bool live = row < rows;
    const int64_t base = live ? (row / inner) * n * inner + row % inner : 0;
    C m = -std::numeric_limits<C>::infinity();
    if (live)
      for (int64_t k = lane; k < n; k += G) {
        const C v = load_c(x, base + k * inner);
        m = m < v ? v : m;
      }
    m = group_combine<G>(m, [](C a, C b) { return a < b ? b : a; });
    C s = 0;
    if constexpr (narrow && !Log) {
      if (live && rounded_sum && lane == 0) {
        for (int64_t k = 0; k < n; ++k)
          s = round_to<T>(s + round_to<T>(expf(round_to<T>(load_c(x, base + k * inner) - m))));
      } else if (live && !rounded_sum) {
        for (int64_t k = lane; k < n; k += G) s += round_to<T>(expf(round_to<T>(load_c(x, base + k * inner) - m)));
      }
    } else {
      if (live)
        for (int64_t k = lane; k < n; k += G) s += exp(load_c(x, base + k * inner) - m);
    }
    s = group_combine<G>(s, [](C a, C b) { return a + b; });
    if (live) {
      if constexpr (Log) {
        const C shift = m + log(s);
        for (int64_t k = lane; k < n; k += G) y[base + k * inner] = store_c<T>(load_c(x, base + k * inner) - shift);
      } else if constexpr (narrow) {
        const float sum = round_to<T>(s);
        for (int64_t k = lane; k < n; k += G)
          y[base + k * inner] = store_c<T>(round_to<T>(expf(round_to<T>(load_c(x, base + k * inner) - m))) / sum);
      } else {
        for (int64_t k = lane; k < n; k += G) y[base + k * inner] = exp(load_c(x, base + k * inner) - m) / s;
      }
    }
  }
}

template <bool Log>
void softmax_kernel(ops::KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const ops::SoftmaxBlocks b = ops::softmax_blocks(ctx);
  const int64_t outer = b.outer, n = b.n, inner = b.inner;
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  if (y.numel() == 0) return;
  const int64_t rows = outer * inner;
  const bool reference = ops::reference_rounding(ctx.node());
  dispatch_device(
      x.dtype(), label.c_str(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_floating_point_v<compute_t<T>>) {
          if (n >= kBlockRow)
            softmax_rows<kGroupThreads, T, Log><<<row_grid(rows, 1), kGroupThreads, 0, stream()>>>(
                x.data<T>(), y.mutable_data<T>(), rows, n, inner, reference);
          else
            softmax_rows<32, T, Log><<<row_grid(rows, kGroupThreads / 32), kGroupThreads, 0, stream()>>>(
                x.data<T>(), y.mutable_data<T>(), rows, n, inner, reference);
          check_launch(Log ? "LogSoftmax" : "Softmax");
        }
      },
      true);
}

}  // namespace

void register_softmax_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "Softmax", softmax_kernel<false>);
  add_kernel(r, "", "LogSoftmax", softmax_kernel<true>);
}

}  // namespace reforge::cuda
