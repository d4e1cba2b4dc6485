// Gather, GatherElements, GatherND, ScatterND, ScatterElements (and its predecessor Scatter).
//
// Indices come from tensors and are untrusted: each kernel resolves every index (negative ones
// count from the end, where the spec allows) and range-checks it before touching data, so a bad
// index is an Error naming the node and never an out-of-bounds access. Gathers move elements
// by size (any dtype); scatters with a reduction dispatch on the real dtype.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/thread_pool.h"
#include "ops/tensor/gather_setup.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::ops {
namespace {

// Reads index tensor `t` (int32 or int64) as int64 values, each resolved against `dim_of(i)`:
// negative values count from the end; anything outside [0, dim) is an Error.
template <typename DimOf>
std::vector<int64_t> resolve_indices(const Tensor& t, DimOf dim_of, const std::string& where) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  auto run = [&](auto* p) {
    for (int64_t i = 0; i < t.numel(); ++i) {
      const int64_t dim = dim_of(i);
      int64_t x = static_cast<int64_t>(p[i]);
      const int64_t raw = x;
      if (x < 0) x += dim;
      if (x < 0 || x >= dim) fail(where, ": index ", raw, " is out of range for a dimension of size ", dim);
      v[static_cast<size_t>(i)] = x;
    }
  };
  if (t.dtype() == DType::Int64)
    run(t.data<int64_t>());
  else if (t.dtype() == DType::Int32)
    run(t.data<int32_t>());
  else
    fail(where, ": indices must be int32 or int64, got ", t.describe());
  return v;
}

void gather_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const GatherSetup g = gather_setup(ctx);
  const int64_t dim = g.dim, outer = g.outer, inner = g.inner;
  const std::vector<int64_t> ind = resolve_indices(
      idx, [dim](int64_t) { return dim; }, where);
  const int64_t n = static_cast<int64_t>(ind.size());
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), g.out);
  if (y.numel() == 0) return;
  dispatch_bytes(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* src = x.data<T>();
        T* dst = y.mutable_data<T>();
        const int threads = y.numel() > (int64_t{1} << 16) && outer * n > 1 ? omp_get_max_threads() : 1;
        parallel_for(outer * n, threads, 1, [&](int64_t on0, int64_t on1) {
          for (int64_t on = on0; on < on1; ++on) {
            const int64_t o = on / n, k = on % n;
            const T* s = src + (o * dim + ind[static_cast<size_t>(k)]) * inner;
            std::copy(s, s + inner, dst + on * inner);
          }
        });
      },
      where);
}

// Walks every position of `shape` (C order) and calls f(linear, offset) where `offset` is the
// position's offset under `strides` with dimension `skip` left out.
template <typename F>
void for_each_position(const Shape& shape, const std::vector<int64_t>& strides, int64_t skip, F&& f) {
  const int64_t n = shape_numel(shape);
  const size_t rank = shape.size();
  std::vector<int64_t> idx(rank, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, off, idx);
    for (size_t d = rank; d-- > 0;) {
      const int64_t st = static_cast<int64_t>(d) == skip ? 0 : strides[d];
      off += st;
      if (++idx[d] < shape[d]) break;
      off -= shape[d] * st;
      idx[d] = 0;
    }
  }
}

void gather_elements_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const int64_t axis = elements_axis(ctx);
  const int64_t dim = x.dim(axis);
  const std::vector<int64_t> ind = resolve_indices(
      idx, [dim](int64_t) { return dim; }, where);
  const std::vector<int64_t> xs = contiguous_strides(x.shape());
  const int64_t axis_stride = xs[static_cast<size_t>(axis)];
  Tensor& y = ctx.allocate_output(0, x.dtype(), idx.shape());
  dispatch_bytes(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* src = x.data<T>();
        T* dst = y.mutable_data<T>();
        for_each_position(idx.shape(), xs, axis, [&](int64_t i, int64_t off, const std::vector<int64_t>&) {
          dst[i] = src[off + ind[static_cast<size_t>(i)] * axis_stride];
        });
      },
      where);
}

// The index tuples of GatherND/ScatterND as element offsets into data. `tuples` is the number of
// tuples per batch, `k` their length; tuple components index data dims b..b+k-1.
std::vector<int64_t> nd_offsets(const Tensor& idx, const Shape& data, int64_t b, int64_t k, const std::string& where) {
  const std::vector<int64_t> ds = contiguous_strides(data);
  const std::vector<int64_t> comp = resolve_indices(
      idx, [&](int64_t i) { return data[static_cast<size_t>(b + i % k)]; }, where);
  const int64_t ntuples =
      k == 0 ? shape_numel(Shape(idx.shape().begin(), idx.shape().end() - 1)) : static_cast<int64_t>(comp.size()) / k;
  int64_t batches = 1;
  for (int64_t d = 0; d < b; ++d) batches *= data[static_cast<size_t>(d)];
  const int64_t per_batch = batches == 0 ? 0 : ntuples / batches;
  const int64_t batch_stride = b == 0 ? 0 : ds[static_cast<size_t>(b - 1)];
  std::vector<int64_t> offs(static_cast<size_t>(ntuples));
  for (int64_t t = 0; t < ntuples; ++t) {
    int64_t off = per_batch ? (t / per_batch) * batch_stride : 0;
    for (int64_t j = 0; j < k; ++j) off += comp[static_cast<size_t>(t * k + j)] * ds[static_cast<size_t>(b + j)];
    offs[static_cast<size_t>(t)] = off;
  }
  return offs;
}

void gather_nd_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const NdSetup nd = gather_nd_setup(ctx);
  const std::vector<int64_t> offs = nd_offsets(idx, x.shape(), nd.b, nd.k, where);
  const int64_t slice = nd.slice;
  Tensor& y = ctx.allocate_output(0, x.dtype(), nd.out);
  if (y.numel() == 0) return;
  dispatch_bytes(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* src = x.data<T>();
        T* dst = y.mutable_data<T>();
        for (size_t t = 0; t < offs.size(); ++t) std::copy(src + offs[t], src + offs[t] + slice, dst + t * slice);
      },
      where);
}

template <Reduction R, typename T>
inline T combine(T a, T b) {
  if constexpr (R == Reduction::None) {
    return b;
  } else if constexpr (std::is_same_v<T, bool>) {
    return (R == Reduction::Add || R == Reduction::Max) ? (a || b) : (a && b);
  } else {
    const auto x = to_compute(a), y = to_compute(b);
    if constexpr (R == Reduction::Add) return from_compute<T>(x + y);
    if constexpr (R == Reduction::Mul) return from_compute<T>(x * y);
    if constexpr (R == Reduction::Max) return from_compute<T>(x < y ? y : x);
    if constexpr (R == Reduction::Min) return from_compute<T>(y < x ? y : x);
  }
}

void scatter_nd_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  const Reduction red = scatter_reduction(ctx);
  const NdSetup nd = scatter_nd_setup(ctx);
  const std::vector<int64_t> offs = nd_offsets(idx, x.shape(), 0, nd.k, where);
  const int64_t slice = nd.slice;
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  if (x.nbytes()) std::memcpy(y.mutable_raw(), x.raw(), x.nbytes());
  dispatch_all(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* u = upd.data<T>();
        T* dst = y.mutable_data<T>();
        with_reduction(red, [&](auto rc) {
          constexpr Reduction R = decltype(rc)::value;
          for (size_t t = 0; t < offs.size(); ++t) {
            T* o = dst + offs[t];
            const T* s = u + static_cast<int64_t>(t) * slice;
            for (int64_t j = 0; j < slice; ++j) o[j] = combine<R, T>(o[j], s[j]);
          }
        });
      },
      "ScatterND");
}

// ScatterElements (11+) and Scatter (9-10, the same op without reductions).
void scatter_elements_kernel(KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  const Reduction red = scatter_reduction(ctx);
  const int64_t axis = scatter_elements_axis(ctx);
  const int64_t dim = x.dim(axis);
  const std::vector<int64_t> ind = resolve_indices(
      idx, [dim](int64_t) { return dim; }, where);
  const std::vector<int64_t> xs = contiguous_strides(x.shape());
  const int64_t axis_stride = xs[static_cast<size_t>(axis)];
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  if (x.nbytes()) std::memcpy(y.mutable_raw(), x.raw(), x.nbytes());
  dispatch_all(
      x.dtype(),
      [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* u = upd.data<T>();
        T* dst = y.mutable_data<T>();
        with_reduction(red, [&](auto rc) {
          constexpr Reduction R = decltype(rc)::value;
          for_each_position(idx.shape(), xs, axis, [&](int64_t i, int64_t off, const std::vector<int64_t>&) {
            T& o = dst[off + ind[static_cast<size_t>(i)] * axis_stride];
            o = combine<R, T>(o, u[i]);
          });
        });
      },
      "ScatterElements");
}

}  // namespace

void register_gather_scatter_ops(OpRegistry& r) {
  r.add({"", "Gather", 1, INT_MAX, gather_kernel, nullptr});
  r.add({"", "GatherElements", 11, INT_MAX, gather_elements_kernel, nullptr});
  r.add({"", "GatherND", 11, INT_MAX, gather_nd_kernel, nullptr});
  r.add({"", "ScatterND", 11, INT_MAX, scatter_nd_kernel, reduction_check});
  r.add({"", "ScatterElements", 11, INT_MAX, scatter_elements_kernel, reduction_check});
  r.add({"", "Scatter", 9, 10, scatter_elements_kernel, reduction_check});
}

}  // namespace reforge::ops
