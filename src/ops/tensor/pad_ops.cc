// Pad on the CPU: the index maps of pad_setup.h, walked a row at a time (a row whose leading
// coordinates hit the constant is filled without reading the input).
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"
#include "ops/tensor/pad_setup.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::ops {
namespace {

template <typename T>
void pad_copy(T* dst, const T* src, T value, const Shape& out, const std::vector<int64_t>& xs,
              const std::vector<std::vector<int64_t>>& maps) {
  const size_t rank = out.size();
  if (rank == 0) {
    dst[0] = src[0];
    return;
  }
  const int64_t inner = out.back();
  const std::vector<int64_t>& last = maps.back();
  const int64_t last_stride = xs.back();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d) rows *= out[d];
  parallel_for(rows, rows * inner > (int64_t{1} << 16) ? omp_get_max_threads() : 1, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* o = dst + r * inner;
      int64_t base = 0, rr = r;
      bool constant_row = false;
      for (size_t d = rank - 1; d-- > 0;) {
        const int64_t i = maps[d][static_cast<size_t>(rr % out[d])];
        rr /= out[d];
        if (i < 0) constant_row = true;
        base += i * xs[d];
      }
      if (constant_row) {
        std::fill(o, o + inner, value);
        continue;
      }
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t m = last[static_cast<size_t>(i)];
        o[i] = m < 0 ? value : src[base + m * last_stride];
      }
    }
  });
}

void pad_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const PadSetup s = pad_setup(ctx);
  const Shape& out = s.out;
  const Tensor& value = s.value;
  const Tensor typed_value = cast_tensor(value.reshaped({}), x.dtype());
  Tensor& y = ctx.allocate_output(0, x.dtype(), out);
  if (y.numel() == 0) return;
  const std::vector<int64_t> xs = contiguous_strides(x.shape());
  dispatch_bytes(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        T v;
        std::memcpy(&v, typed_value.raw(), sizeof(T));
        pad_copy<T>(y.mutable_data<T>(), x.data<T>(), v, out, xs, s.maps);
      },
      where);
}

}  // namespace

void register_pad_ops(OpRegistry& r) {
  r.add({"",
         "Pad",
         1,
         INT_MAX,
         pad_kernel,
         pad_check,
         nullptr,
         {InputRole::kData, InputRole::kShape, InputRole::kData, InputRole::kShape}});
}

}  // namespace reforge::ops
